// Unit tests of Linear Depth Memory at op level (docs/ldm_ops.md; binding
// conformance/schemes/ldm_ops.hpp) against the independent oracle
// (oracles/include/dmref/oracles/ldm_ops_information.hpp: the RLS step in
// information form with two explicit SPD inverses; outer and delta written
// from ldm-math.md's equations), on problems drawn as the corpus draws them,
// both at 667 bits (mp200, unit roundoff u = 2^-667 ~ 1e-201; no storage
// rounding at this scalar: framework.hpp's store_streams is a no-op).
//
// Tolerances, derived where they are used (each case's numbers measured on
// its own data, not assumed):
//   outer, delta (elementwise): both sides round each product and sum once;
//   per element of M' at most dk + 4 roundings of terms bounded by
//   E = |M| + beta (|v| + |M| |k|) |k|^T (outer: beta = 1, no |M||k| term),
//   so |ref - oracle| <= 2 (dk + 4) u E; the readout adds a dk-term dot
//   product on each side: |dr| <= (4 dk + 8) u E |q|.
//   rls (norms, Frobenius): the oracle inverts P and R' = lambda R + omega k
//   k^T by Cholesky (backward stable: relative error of an inverse <= c n u
//   cond); the error of R = P^-1 enters R' relatively undamped (R' >= lambda
//   R in the PSD order) and is amplified by cond(R') in P' = R'^-1, so
//   ||dP'|| <= C dk u cond(R') (1 + cond(P)) ||P'|| and ||dM'|| <= C dk u
//   cond(R') (1 + cond(P)) (lambda ||M|| ||R|| + omega ||v|| ||k||) ||P'||
//   (B' = lambda M R + omega v k^T times P'), the readout adding ||dM'|| ||q||
//   + C dk u ||M'|| ||q||. C = 64 covers the Cholesky constants (< 4 per
//   factor and solve) and the reference's own error, of the same form with
//   cond = 1 (one gain, one rank-one downdate: docs/ldm.md, "Accuracy").
//   The corpus's P is diagonally dominant (diagonal >= 1/2, off-diagonal row
//   sums < 1/2 - 1/(2 dk)), so cond_2(P) < 4 dk: the test requires the
//   measured cond(P) cond(R') < 1e4, which keeps every tolerance below 1e-190
//   relative: tight enough that any error a wrong formula makes (O(1)
//   relative), or a float64 evaluation (1e-16), fails.
// Backward: the reference's adjoints against central differences of the
// oracle's forward (tests/support/ops_check.hpp, step h = 2^-200): rounding
// 2^-667 / 2^-200 ~ 1e-141 times the same conditions (< 1e4); truncation
// h^2 |f'''| / 6 ~ 6e-122 |f'''|, and f''' of these rational maps is a sum of
// products of at most four inverses (d^3 A^-1 = -6 A^-1 E A^-1 E A^-1 E A^-1)
// with ||P||_2 < 2, ||R||_2 < 2 dk, ||P'||_2 < ||P||_2 / lambda <= 4 at
// lambda >= 0.5 (< 8 at the lambda_min 0.25 cases) and ||E|| <= dk: below 1e9
// per output at dk <= 5, so < 1e-110 x the number of outputs; checked at
// 1e-100 relative to the sum of |terms| (a wrong adjoint is off by O(1)).
// The oracle reads P through its symmetric part (P + P^T) / 2: that is the
// op's convention for grad.input.P (the gradient among symmetric matrices,
// docs/ldm_ops.md), which the central difference along an arbitrary
// direction then measures.
#include "dmref/conformance/corpus.hpp"
#include "dmref/conformance/generate.hpp"  // validate
#include "dmref/conformance/load_problem.hpp"
#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/schemes/ldm_ops.hpp"
#include "dmref/oracles/ldm_ops_information.hpp"

#include "dmref/io/safetensors.hpp"
#include "dmref/scalar.hpp"

#include "ops_check.hpp"

#include <catch2/catch.hpp>

using namespace dmref;
using namespace dmref::conf;
using namespace dmref::testing;

namespace {

struct Shape {
  int G, dk, dv, T;
};

CaseSpec spec(const std::string& op, const Shape& s, bool grad, std::uint64_t seed = 1,
              const std::string& p_update = "symmetric", double lambda_min = 0.5) {
  json c = {{"op", op}, {"tokens", s.T}, {"d", s.G * s.dv}, {"groups", s.G}, {"dk", s.dk}};
  if (op == "rls") c["p_update"] = p_update;
  CaseSpec r = forward_case("test.ldm_ops", "ldm_ops", "default", "f32", c, true, true,
                            op == "rls" ? json{{"lambda_min", lambda_min}} : json::object());
  r.seed = seed;
  r.grad = grad;
  return r;
}

struct Dims {
  std::int64_t T, G, dk, dv, d;
};
Dims dims_of(const Problem& p) {
  const std::int64_t G = p.config.at("groups"), d = p.config.at("d");
  return {p.config.at("tokens"), G, p.config.at("dk"), d / G, d};
}

/// What the oracle needs of one (token, group), from the tensor values v.
struct Group {
  Mat<Hi> M, P;
  Vec<Hi> q, k, v;
  Hi omega = 0, lambda = 1, beta = 1;
};
Group group(const Problem& p, const Values& x, std::int64_t t, std::int64_t g) {
  const auto D = dims_of(p);
  const auto op = p.config.at("op").get<std::string>();
  Group r;
  r.M = mat(x, "input.M", (t * D.G + g) * D.dv * D.dk, D.dv, D.dk);
  r.q = mat(x, "input.q", (t * D.G + g) * D.dk, D.dk, 1);
  r.k = mat(x, "input.k", (t * D.G + g) * D.dk, D.dk, 1);
  r.v = x.at("input.v").segment(t * D.d + g * D.dv, D.dv);
  if (op == "rls") {
    const Mat<Hi> P = mat(x, "input.P", (t * D.G + g) * D.dk * D.dk, D.dk, D.dk);
    r.P = (P + P.transpose()) / Hi(2);  // the symmetric part (the gradient convention; exact on the drawn P)
    r.omega = x.at("input.omega")(t * D.G + g);
    r.lambda = x.at("param.lambda")(g);
  }
  if (op == "delta") r.beta = x.at("param.beta")(g);
  return r;
}

/// Every output of the op by the oracle, in the binding's order.
Values oracle_outputs(const Problem& p, const Values& x) {
  const auto D = dims_of(p);
  const auto op = p.config.at("op").get<std::string>();
  std::map<std::string, std::vector<Hi>> o;
  auto put = [&](const std::string& k, const Mat<Hi>& m) {
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      for (Eigen::Index j = 0; j < m.cols(); ++j) o["output." + k].push_back(m(i, j));
  };
  for (std::int64_t t = 0; t < D.T; ++t) {
    Vec<Hi> r(D.d);
    for (std::int64_t g = 0; g < D.G; ++g) {
      const Group a = group(p, x, t, g);
      Mat<Hi> M2;
      if (op == "rls") {
        const auto s = oracle::rls_information_step<Hi>(a.M, a.P, a.k, a.v, a.omega, a.lambda);
        M2 = s.M;
        put("P", s.P);
      } else {
        M2 = op == "outer" ? oracle::outer_write<Hi>(a.M, a.k, a.v) : oracle::delta_write<Hi>(a.M, a.k, a.v, a.beta);
      }
      put("M", M2);
      r.segment(g * D.dv, D.dv) = oracle::memory_readout<Hi>(M2, a.q);
    }
    put("r", r.transpose());
  }
  Values out;
  for (auto& [k, y] : o) out[k] = Eigen::Map<Vec<Hi>>(y.data(), Eigen::Index(y.size()));
  return out;
}

Outputs<Hi> reference(const Problem& p) {
  Outputs<Hi> o;
  evaluate_ldm_ops<Hi>(p, schema_of(p), o);
  return o;
}

const Hi kU = pow(Hi(2), -667);

/// The forward comparison of the reference's outputs `ref` on problem p with
/// the oracle: the worst err/tol over every output element (or norm, for
/// rls), each tolerance the one derived above (> 1: rejected).
double worst_ratio(const Problem& p, const Outputs<Hi>& ref) {
  const auto D = dims_of(p);
  const auto op = p.config.at("op").get<std::string>();
  const Values x = values_of(p);
  const Values orc = oracle_outputs(p, x);
  REQUIRE(ref.t.size() == orc.size());
  double worst = 0;
  auto at = [&](const std::string& k, std::int64_t off, std::int64_t r, std::int64_t c) {
    Mat<Hi> a(r, c), b(r, c);
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t j = 0; j < c; ++j) {
        a(i, j) = ref.t.at("output." + k).values.at(std::size_t(off + i * c + j));
        b(i, j) = orc.at("output." + k)(off + i * c + j);
      }
    return std::pair{a, b};
  };
  auto ratio = [&](const Hi& err, const Hi& tol, const std::string& what) {
    INFO(what << ": err " << to_double(err) << " tol " << to_double(tol));
    REQUIRE(to_double(tol) > 0);
    worst = std::max(worst, to_double(err / tol));
  };
  for (std::int64_t t = 0; t < D.T; ++t)
    for (std::int64_t g = 0; g < D.G; ++g) {
      INFO("token " << t << " group " << g);
      const Group a = group(p, x, t, g);
      const auto [M1, M2] = at("M", (t * D.G + g) * D.dv * D.dk, D.dv, D.dk);
      const auto [r1, r2] = at("r", t * D.d + g * D.dv, D.dv, 1);
      if (op == "rls") {
        const auto s = oracle::rls_information_step<Hi>(a.M, a.P, a.k, a.v, a.omega, a.lambda);
        const Hi amp = s.cond_R2 * (1 + s.cond_P);
        REQUIRE(to_double(s.cond_P * s.cond_R2) < 1e4);  // the draw's conditioning (see the header)
        const Hi c = 64 * Hi(D.dk) * kU;
        const auto [P1, P2] = at("P", (t * D.G + g) * D.dk * D.dk, D.dk, D.dk);
        ratio((P1 - P2).norm(), c * amp * P2.norm(), "output.P");
        const Mat<Hi> R = oracle::spd_inverse<Hi>(a.P, "P");
        const Hi tM = c * amp * (a.lambda * a.M.norm() * R.norm() + a.omega * a.v.norm() * a.k.norm()) * s.P.norm();
        ratio((M1 - M2).norm(), tM, "output.M");
        ratio((r1 - r2).norm(), tM * a.q.norm() + c * M2.norm() * a.q.norm(), "output.r");
      } else {
        // E = |M| + beta (|v| + |M| |k|) |k|^T, the scale of every term of M' (outer: |M| + |v| |k|^T).
        const Mat<Hi> aM = a.M.cwiseAbs();
        const Vec<Hi> ak = a.k.cwiseAbs();
        const Vec<Hi> s = op == "outer" ? Vec<Hi>(a.v.cwiseAbs()) : Vec<Hi>(a.beta * (a.v.cwiseAbs() + aM * ak));
        const Mat<Hi> E = aM + s * ak.transpose();
        const Vec<Hi> Eq = E * a.q.cwiseAbs();
        for (std::int64_t i = 0; i < D.dv; ++i) {
          for (std::int64_t j = 0; j < D.dk; ++j) ratio(abs(M1(i, j) - M2(i, j)), 2 * (D.dk + 4) * kU * E(i, j), "output.M");
          ratio(abs(r1(i, 0) - r2(i, 0)), (4 * D.dk + 8) * kU * Eq(i), "output.r");
        }
      }
    }
  return worst;
}

const Shape kShapes[] = {{1, 1, 1, 1}, {2, 4, 4, 2}, {3, 2, 3, 3}, {2, 5, 2, 2}};
const char* kOps[] = {"rls", "outer", "delta"};

}  // namespace

TEST_CASE("ldm_ops forward equals the information-form / direct oracle at 667 bits", "[ldm_ops]") {
  double worst = 0;
  int checked = 0;
  for (const char* op : kOps)
    for (const Shape& sh : kShapes)
      for (const std::uint64_t seed : {1, 2})
        for (const char* pu : {"symmetric", "joseph", "naive"}) {
          if (std::string(op) != "rls" && std::string(pu) != "symmetric") continue;
          for (const double lmin : {0.5, 0.25}) {
            if (std::string(op) != "rls" && lmin != 0.5) continue;
            INFO(op << " " << pu << " G=" << sh.G << " dk=" << sh.dk << " dv=" << sh.dv << " M=" << sh.T << " seed " << seed
                    << " lambda_min " << lmin);
            const Problem p = make_problem(spec(op, sh, false, seed, pu, lmin));
            const double w = worst_ratio(p, reference(p));
            CHECK(w <= 1);
            worst = std::max(worst, w);
            ++checked;
          }
        }
  std::cout << "ldm_ops forward vs oracle: " << checked << " problems, worst err/tol " << worst << "\n";
  CHECK(checked == 3 * 4 * 2 * 2 + 2 * 4 * 2);
  CHECK(worst > 0);  // the two sides are different evaluations: they differ somewhere
}

TEST_CASE("ldm_ops forward: the comparison rejects an output off by a relative 1e-150", "[ldm_ops]") {
  // The tolerances are below 1e-190 relative (header): one element of each
  // output moved by a relative 1e-150 must be rejected, for every op.
  for (const char* op : kOps) {
    const Problem p = make_problem(spec(op, {2, 4, 4, 2}, false, 3));
    const Outputs<Hi> ref = reference(p);
    CHECK(worst_ratio(p, ref) <= 1);
    for (const auto& [name, o] : ref.t) {
      INFO(op << " " << name);
      Outputs<Hi> bad = ref;
      bad.t.at(name).values[5] *= 1 + Hi("1e-150");
      CHECK(worst_ratio(p, bad) > 1);
    }
  }
}

TEST_CASE("ldm_ops backward: the adjoints match central differences of the oracle", "[ldm_ops]") {
  for (const char* op : kOps)
    for (const Shape& sh : {Shape{1, 1, 1, 1}, Shape{2, 3, 2, 2}})
      for (const char* pu : {"symmetric", "joseph", "naive"}) {
        if (std::string(op) != "rls" && std::string(pu) != "symmetric") continue;
        INFO(op << " " << pu << " G=" << sh.G << " dk=" << sh.dk << " dv=" << sh.dv << " M=" << sh.T);
        const Problem p = make_problem(spec(op, sh, true, 1, pu));
        const Outputs<Hi> ref = reference(p);
        check_adjoints(p, ref, oracle_outputs);
        if (std::string(op) == "rls") {  // grad.input.P is symmetric (the gradient among symmetric matrices)
          const auto D = dims_of(p);
          const auto& g = ref.t.at("grad.input.P").values;
          for (std::int64_t b = 0; b < D.T * D.G; ++b)
            for (std::int64_t i = 0; i < D.dk; ++i)
              for (std::int64_t j = 0; j < D.dk; ++j)
                CHECK(g[std::size_t((b * D.dk + i) * D.dk + j)] == g[std::size_t((b * D.dk + j) * D.dk + i)]);
        }
      }
}

TEST_CASE("ldm_ops committed goldens (certified double-doubles) equal the oracle, outputs and gradients", "[ldm_ops]") {
  // Every committed ldm_ops fixture, on its own inputs. A golden hi + lo is
  // the exact value correctly rounded to a double-double (docs/fixtures.md,
  // "Golden values: certified double-doubles"): |hi + lo - y| <= 2^-106 |y|
  // (2^-1074 where lo underflows). The oracle at 667 bits errs by < 1e-190 of
  // its tensor's scale (header). Outputs: checked at 2^-104 |y| + 1e-180 x
  // max |y| of the tensor. Gradients, element by element on the d = 8
  // fixtures (the d = 1024 ones: outputs only, their 10^5 elements would cost
  // 2 x 10^5 oracle runs): the central difference of phi = sum_Y <u_Y, Y>
  // along the element's unit vector, step 2^-200, the oracle reading P
  // through (P + P^T) / 2 (so a single entry's step measures the symmetric
  // gradient, the convention); its error < 1e-100 x sum_Y |u_Y| |Y| (the
  // backward check's bound, header): checked at 2^-104 |g| + that.
  const Hi tiny = pow(Hi(2), -1074), rel = pow(Hi(2), -104);
  int fixtures = 0, outputs = 0, grads = 0;
  double worst = 0;
  for (const auto& c : corpus()) {
    if (c.scheme != "ldm_ops" || !c.committed) continue;
    INFO(c.id);
    const io::File fx = io::read(std::string(DMREF_SOURCE_DIR) + "/fixtures/golden/" + c.id + ".safetensors");
    const Problem p = problem_of(fx);
    const Values x = values_of(p);
    const Values orc = oracle_outputs(p, x);
    auto golden = [&](const std::string& name, std::size_t i) {
      return Hi(fx.tensors.at(name).values[i]) + Hi(fx.tensors.at(name + ".lo").values[i]);
    };
    for (const auto& [name, y] : orc) {
      INFO(name);
      REQUIRE(fx.tensors.count(name + ".lo"));
      const Hi scale = y.cwiseAbs().maxCoeff();
      for (Eigen::Index i = 0; i < y.size(); ++i) {
        const Hi tol = rel * abs(y(i)) + tiny + Hi("1e-180") * scale;
        const Hi err = abs(golden(name, std::size_t(i)) - y(i));
        CHECK(err <= tol);
        worst = std::max(worst, to_double(err / tol));
        ++outputs;
      }
    }
    ++fixtures;
    if (!p.grad || p.config.at("d").get<int>() != 8) continue;
    Hi S = 0;  // sum_Y |u_Y| |Y|
    for (const auto& [name, y] : orc)
      S += conf::vec_at<Hi>(p.tensors.at("input.grad." + name.substr(7)), 0, y.size()).cwiseAbs().dot(y.cwiseAbs());
    auto phi = [&](const Values& v) {
      Hi acc = 0;
      for (const auto& [name, y] : oracle_outputs(p, v))
        acc += conf::vec_at<Hi>(p.tensors.at("input.grad." + name.substr(7)), 0, y.size()).dot(y);
      return acc;
    };
    const Hi h = pow(Hi(2), -200);
    for (const auto& [name, v] : x) {
      INFO("grad." << name);
      REQUIRE(fx.tensors.count("grad." + name + ".lo"));
      for (Eigen::Index i = 0; i < v.size(); ++i) {
        Values xp = x, xm = x;
        xp[name](i) += h;
        xm[name](i) -= h;
        const Hi g = (phi(xp) - phi(xm)) / (2 * h);
        const Hi tol = rel * abs(g) + tiny + Hi("1e-100") * S;
        const Hi err = abs(golden("grad." + name, std::size_t(i)) - g);
        CHECK(err <= tol);
        worst = std::max(worst, to_double(err / tol));
        ++grads;
      }
    }
  }
  std::cout << "ldm_ops goldens vs oracle: " << fixtures << " fixtures, " << outputs << " output and " << grads
            << " gradient elements, worst err/tol " << worst << "\n";
  CHECK(fixtures == 36);
  CHECK(grads > 0);
}

TEST_CASE("ldm_ops: bad values are refused naming the field", "[ldm_ops]") {
  auto refused = [](Problem q, const std::string& field) {
    try {
      validate(q);
      (void)evaluate<double>(q);
      FAIL("accepted: " << field);
    } catch (const std::exception& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(field) != std::string::npos);
    }
  };
  const Shape sh{2, 2, 2, 2};
  {
    Problem q = make_problem(spec("rls", sh, false));
    q.tensors.at("input.P").values[1] += 0.25;  // P[0,1] != P[1,0] (dk = 2)
    refused(q, "input.P");
  }
  {
    Problem q = make_problem(spec("rls", sh, false));
    q.tensors.at("input.omega").values[1] = -0.5;
    refused(q, "input.omega");
  }
  {
    Problem q = make_problem(spec("rls", sh, false));
    q.tensors.at("param.lambda").values[0] = 1.5;
    refused(q, "lambda");
  }
  {
    Problem q = make_problem(spec("outer", sh, false));
    q.config["groups"] = 3;  // does not divide d = 4
    refused(q, "groups");
  }
  {
    Problem q = make_problem(spec("outer", sh, false));
    q.config["p_update"] = "joseph";  // read only by op rls
    refused(q, "config.p_update");
  }
}
