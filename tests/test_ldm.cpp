// Unit tests of the Linear Depth Memory reference (reference/include/dmref/ldm.hpp)
// against the independent oracles (oracles/include/dmref/oracles/ldm_*.hpp).
// Expected values are computed at 667 bits (mp200); tolerances: check.hpp.
#include "check.hpp"
#include "ldm_cases.hpp"

#include "dmref/ldm.hpp"
#include "dmref/oracles/ldm_outer_sum.hpp"
#include "dmref/oracles/ldm_rls_closed_form.hpp"
#include "dmref/preln.hpp"

#include <catch2/catch.hpp>

using namespace dmref;
using dmref::test::K;
using Hi = mp200;

namespace {

// Shapes checked at every scalar type: one group and several, moderate and
// strong forgetting, exact zero weights, nearly collinear keys.
std::vector<test::LdmShape> shapes() {
  std::vector<test::LdmShape> s;
  s.push_back({4, 2, 1, 24, 0, 0.5, 10, 0.1, 0, 11});
  s.push_back({3, 2, 4, 16, 1, 0.8, 2, 0.25, 0, 12});
  s.push_back({8, 3, 2, 40, -2, 0.9, 10, 0.0, 0, 13});
  s.push_back({4, 1, 1, 12, 0, 0.7, 1, 0.0, 1e-3, 14});
  return s;
}

template <class S>
void check_rls_against_closed_form(const test::LdmShape& shape, double* worst_ratio) {
  const auto c = test::make_ldm_case(shape);
  const auto t = ldm_kernel<S>(c.config<S>(), convert<S>(c.e), c.values<S>(), c.addresses<S>());
  const double eps = to_double(epsilon<S>());
  std::vector<test::RlsCondition> conds(shape.groups, test::RlsCondition(c.alpha));
  for (int l = 0; l < shape.layers; ++l) {
    for (int g = 0; g < shape.groups; ++g) {
      const auto cf = oracle::rls_closed_form(c.problem<Hi>(g, l));
      const auto& mem = t.states[l].mem[g];
      const double cond = conds[g].add(cf, c.lambda(l, g));
      const double tol = K::rls * eps * cond;
      INFO(test::describe(shape) << " layer " << l << " group " << g << " cond_rls=" << cond);
      REQUIRE(std::isfinite(tol));
      REQUIRE(tol < 1e-3);  // the check must mean something at this type
      const double eM = cf.M.norm() == 0 ? to_double(Hi(mem.M.template cast<Hi>().norm()))
                                         : test::rel_err<Hi>(mem.M, cf.M);
      const double eP = test::rel_err<Hi>(mem.P, cf.Rinv);
      INFO("M error " << test::in_eps<S>(eM) << ", P error " << test::in_eps<S>(eP) << ", tol "
                      << test::in_eps<S>(tol));
      CHECK(eM <= tol);
      CHECK(eP <= tol);
      *worst_ratio = std::max({*worst_ratio, eM / (eps * cond), eP / (eps * cond)});
    }
  }
}

}  // namespace

TEMPLATE_TEST_CASE("RLS-LDM equals the decayed-ridge closed form at every layer and group", "[ldm][rls]", double,
                   mp50, mp77, mp100) {
  double worst = 0;
  for (const auto& s : shapes()) check_rls_against_closed_form<TestType>(s, &worst);
  WARN(scalar_name<TestType>() << ": worst RLS error / (eps cond_rls) = " << worst << " (k = " << K::rls
                               << ")");
}

TEST_CASE("RLS-LDM on MPFI encloses the exact solution", "[ldm][rls][interval]") {
  // RLS equals the closed form exactly, so each interval must contain the
  // closed form; the 667-bit oracle is within dHi of it (K::solve eps cond).
  const auto c = test::make_ldm_case({4, 2, 2, 12, 0, 0.6, 5, 0.2, 0, 21});
  const auto t = ldm_kernel<mi77>(c.config<mi77>(), convert<mi77>(c.e), c.values<mi77>(), c.addresses<mi77>());
  double widest = 0;
  for (int l = 0; l < c.shape.layers; ++l) {
    for (int g = 0; g < c.shape.groups; ++g) {
      const auto cf = oracle::rls_closed_form(c.problem<Hi>(g, l));
      const Hi dHi = Hi(K::solve) * epsilon<Hi>() * cf.cond1 * (cf.M.norm() + cf.Rinv.norm());
      const auto& mem = t.states[l].mem[g];
      for (Eigen::Index i = 0; i < mem.M.size(); ++i) {
        INFO("layer " << l << " group " << g << " M[" << i << "] = " << mem.M(i) << " oracle " << cf.M(i));
        CHECK(Hi(lower(mem.M(i))) - dHi <= cf.M(i));
        CHECK(cf.M(i) <= Hi(upper(mem.M(i))) + dHi);
        widest = std::max(widest, to_double(width(mem.M(i))));
      }
      for (Eigen::Index i = 0; i < mem.P.size(); ++i) {
        CHECK(Hi(lower(mem.P(i))) - dHi <= cf.Rinv(i));
        CHECK(cf.Rinv(i) <= Hi(upper(mem.P(i))) + dHi);
      }
    }
  }
  WARN("widest enclosure of M after 12 layers at 257 bits: " << widest);
  CHECK(widest < 1e-60);  // the enclosure is tight enough to certify a double-double
}

TEST_CASE("The naive P update loses symmetry at 257 bits, the symmetric form does not", "[ldm][rls]") {
  // ldm-math.md: the naive update multiplies the skew part of each rounding
  // error by 1/lambda per step: with lambda = 0.1 it reaches O(1) after about
  // 257 ln2 / ln 10 ~ 77 steps. 160 layers leave a wide margin.
  test::LdmShape s{4, 2, 1, 160, 0, 0.1, 1, 0, 0, 31};
  auto c = test::make_ldm_case(s);
  c.lambda.setConstant(0.1);
  auto cfg = c.config<mp77>();
  const auto sym = ldm_kernel<mp77>(cfg, convert<mp77>(c.e), c.values<mp77>(), c.addresses<mp77>());
  cfg.p_update = PUpdate::naive;
  const auto naive = ldm_kernel<mp77>(cfg, convert<mp77>(c.e), c.values<mp77>(), c.addresses<mp77>());
  const auto& Pn = naive.states.back().mem[0].P;
  const auto& Ps = sym.states.back().mem[0].P;
  const double skew_naive = to_double(mp77((Pn - Pn.transpose()).norm() / Pn.norm()));
  const double skew_sym = to_double(mp77((Ps - Ps.transpose()).norm() / Ps.norm()));
  const auto cf = oracle::rls_closed_form(c.problem<Hi>(0, s.layers - 1));
  const double err_sym = test::rel_err<Hi>(Ps, cf.Rinv);
  WARN("naive asymmetry " << skew_naive << ", symmetric asymmetry " << skew_sym << ", symmetric P error "
                          << test::in_eps<mp77>(err_sym) << " cond1(R) " << to_double(cf.cond1));
  CHECK(skew_naive > 1e-3);
  CHECK(skew_sym == 0);
  CHECK(err_sym <= K::rls * to_double(epsilon<mp77>()) * test::rls_cond(c.problem<Hi>(0, s.layers - 1)));
}

TEST_CASE("Joseph-form P update agrees with the closed form", "[ldm][rls]") {
  test::LdmShape s{5, 2, 1, 30, 0, 0.5, 3, 0.1, 0, 41};
  const auto c = test::make_ldm_case(s);
  auto cfg = c.config<mp77>();
  cfg.p_update = PUpdate::joseph;
  const auto t = ldm_kernel<mp77>(cfg, convert<mp77>(c.e), c.values<mp77>(), c.addresses<mp77>());
  const auto cf = oracle::rls_closed_form(c.problem<Hi>(0, s.layers - 1));
  const double tol =
      K::rls * to_double(epsilon<mp77>()) * test::rls_cond(c.problem<Hi>(0, s.layers - 1));
  CHECK(test::rel_err<Hi>(t.states.back().mem[0].P, cf.Rinv) <= tol);
  CHECK(test::rel_err<Hi>(t.states.back().mem[0].M, cf.M) <= tol);
}

TEST_CASE("Wind-up: an unexcited key direction grows exactly like alpha / prod(lambda)", "[ldm][rls]") {
  // Keys confined to the first two coordinates of dk = 3: the third diagonal
  // entry of P is alpha / prod lambda exactly; the recursion computes it by
  // l+1 divisions, so its relative error is at most (l+1) eps (plus one for
  // the product in the expectation, computed at 667 bits).
  test::LdmShape s{3, 2, 1, 200, 0, 0.7, 2, 0, 0, 51};
  auto c = test::make_ldm_case(s);
  for (auto& a : c.a) a.k(2) = 0;
  const auto t = ldm_kernel<mp77>(c.config<mp77>(), convert<mp77>(c.e), c.values<mp77>(), c.addresses<mp77>());
  Hi prod = 1;
  for (int l = 0; l < s.layers; ++l) {
    prod *= Hi(c.lambda(l, 0));
    const Hi expected = Hi(c.alpha) / prod;
    const double err = to_double(Hi(abs(Hi(t.states[l].mem[0].P(2, 2)) - expected) / expected));
    INFO("layer " << l << " P22 " << t.states[l].mem[0].P(2, 2) << " expected " << expected);
    REQUIRE(err <= (l + 2) * to_double(epsilon<mp77>()));
  }
  WARN("after 200 layers P22 = " << to_double(Hi(Hi(c.alpha) / prod)) << " = alpha / prod(lambda)");
}

TEMPLATE_TEST_CASE("Outer-product LDM readout is linear attention over depth", "[ldm][outer]", double, mp77) {
  using S = TestType;
  test::LdmShape s{6, 3, 2, 20, 0, 1, 1, 0, 0, 61};
  const auto c = test::make_ldm_case(s);
  const auto t = ldm_kernel<S>(c.config<S>(MemoryWrite::outer_product), convert<S>(c.e), c.values<S>(),
                               c.addresses<S>());
  for (int l = 0; l < s.layers; ++l) {
    for (int g = 0; g < s.groups; ++g) {
      const auto p = c.problem<Hi>(g, l);
      const Vec<Hi> q = convert<Hi>(Vec<double>(c.a[l].q.segment(g * s.dk, s.dk)));
      const Vec<Hi> expected = oracle::outer_sum_readout<Hi>(p.K, p.V, q);
      // cond of a sum: sum |terms| / |sum|; n terms of dk-long dot products.
      Hi abs_sum = 0;
      for (int i = 0; i <= l; ++i) abs_sum += p.V.col(i).norm() * abs(p.K.col(i).dot(q));
      const Vec<S> got = t.states[l].mem[g].M * convert<S>(Vec<double>(c.a[l].q.segment(g * s.dk, s.dk)));
      const double err = to_double(Hi((got.template cast<Hi>() - expected).norm()));
      const double tol = K::sum * to_double(epsilon<S>()) * (l + 1 + s.dk) * to_double(abs_sum);
      INFO("layer " << l << " group " << g << " err " << err << " tol " << tol);
      CHECK(err <= tol);
    }
  }
}

TEST_CASE("Read is x + M q, ablations read M q alone or freeze x", "[ldm][framework]") {
  using S = mp77;
  const auto c = test::make_ldm_case({3, 2, 2, 6, 0, 0.5, 2, 0, 0, 71});
  auto cfg = c.config<S>();
  const auto v = c.values<S>();
  LdmKernel<S> full(cfg, GivenAddresses<S>{c.addresses<S>()});
  cfg.read_residual = false;
  LdmKernel<S> memonly(cfg, GivenAddresses<S>{c.addresses<S>()});
  cfg.read_residual = true;
  cfg.write_residual = false;
  LdmKernel<S> frozen(cfg, GivenAddresses<S>{c.addresses<S>()});
  const auto e = convert<S>(c.e);
  const auto tf = forward(full, e, 6, GivenOutputs<S>{&v});
  const auto tm = forward(memonly, e, 6, GivenOutputs<S>{&v});
  const auto tz = forward(frozen, e, 6, GivenOutputs<S>{&v});
  CHECK(tf.h[0] == e);  // M_{-1} = 0
  for (int l = 1; l < 6; ++l) {
    // Same operations on the same streams: these hold exactly.
    CHECK(tf.h[l] == tf.states[l - 1].x + full.readout(tf.states[l - 1]));
    CHECK(tm.h[l] == memonly.readout(tm.states[l - 1]));
    CHECK(tz.states[l].x == e);
  }
  CHECK(tf.out == tf.states.back().x + full.readout(tf.states.back()));
}

TEST_CASE("Model-level LDM equals kernel-level LDM fed with its own q, k, omega", "[ldm][model]") {
  // Keys/queries are computed after layer l writes, from the updated x_l.
  using S = mp50;
  const int d = 8, G = 2, dk = 3, hidden = 5, L = 10;
  std::mt19937_64 rng(81);
  std::normal_distribution<double> N(0, 0.5);
  auto rnd = [&](int r, int cc) {
    Mat<S> m(r, cc);
    for (Eigen::Index i = 0; i < m.size(); ++i) m(i) = S(N(rng));
    return m;
  };
  MlpAddresses<S> addr{{rnd(hidden, d), rnd(G * dk, hidden)}, {Mat<S>(), rnd(G * dk + G, d)}, G, dk};
  TanhMlpLayer<S> layer{rnd(hidden, d), rnd(d, hidden)};
  LdmConfig<S> cfg;
  cfg.d = d;
  cfg.groups = G;
  cfg.dk = dk;
  cfg.alpha = 1;
  cfg.lambda = Mat<S>::Constant(L, G, S(0.875));
  LdmModel<S> model(cfg, addr);
  Vec<S> e = rnd(d, 1);
  const auto t = forward(model, e, L, [&](int, const Vec<S>& h) { return layer(h); });
  std::vector<Address<S>> a;
  for (int l = 0; l < L; ++l) a.push_back(addr(l, t.states[l].x, t.states[l].x));
  const auto tk = ldm_kernel<S>(cfg, e, t.v, a);
  for (int l = 0; l < L; ++l) CHECK(tk.h[l] == t.h[l]);
  for (int l = 0; l < L; ++l) CHECK(t.v[l] == layer(t.h[l]));
  // Keys from the layer's input residual x_{l-1} (x_{-1} = e), queries still
  // from x_l: the same kernel fed with those addresses, bit for bit; and not
  // the default model (the option is not a no-op).
  LdmConfig<S> prev = cfg;
  prev.keys = KeySource::layer_input;
  const auto tp = forward(LdmModel<S>(prev, addr), e, L, [&](int, const Vec<S>& h) { return layer(h); });
  std::vector<Address<S>> ap;
  for (int l = 0; l < L; ++l) ap.push_back(addr(l, tp.states[l].x, l == 0 ? e : tp.states[l - 1].x));
  const auto tkp = ldm_kernel<S>(prev, e, tp.v, ap);
  for (int l = 0; l < L; ++l) CHECK(tkp.h[l] == tp.h[l]);
  CHECK(tkp.out == tp.out);
  CHECK(tp.out != t.out);
  // Keys are unit vectors per group; weights are positive.
  for (const auto& x : a)
    for (int g = 0; g < G; ++g) {
      CHECK(abs(x.k.segment(g * dk, dk).norm() - 1) <= 4 * epsilon<S>());
      CHECK(x.omega(g) > 0);
    }
}

TEST_CASE("PreLN is the running sum of the embedding and the layer outputs", "[preln]") {
  using S = mp77;
  const auto c = test::make_ldm_case({1, 4, 1, 30, 0, 1, 1, 0, 0, 91});
  const auto v = c.values<S>();
  const auto t = forward(PreLN<S>{}, convert<S>(c.e), 30, GivenOutputs<S>{&v});
  Vec<Hi> sum = convert<Hi>(c.e);
  Hi abs_sum = convert<Hi>(c.e).norm();
  for (int l = 0; l < 30; ++l) {
    const double err = to_double(Hi((t.h[l].template cast<Hi>() - sum).norm()));
    CHECK(err <= K::sum * to_double(epsilon<S>()) * (l + 1) * to_double(abs_sum));
    sum += convert<Hi>(c.v[l]);
    abs_sum += convert<Hi>(c.v[l]).norm();
  }
}

TEST_CASE("Bad LDM configurations are rejected with the field named", "[ldm][errors]") {
  const auto c = test::make_ldm_case({2, 2, 2, 3, 0, 0.5, 1, 0, 0, 99});
  auto expect = [&](LdmConfig<double> cfg, const std::string& field) {
    try {
      LdmKernel<double> m(cfg, GivenAddresses<double>{c.addresses<double>()});
      FAIL("no error for " << field);
    } catch (const std::invalid_argument& e) {
      CHECK_THAT(e.what(), Catch::Contains(field));
    }
  };
  auto cfg = c.config<double>();
  cfg.alpha = 0;
  expect(cfg, "alpha");
  cfg = c.config<double>();
  cfg.lambda(1, 1) = 1.5;
  expect(cfg, "lambda");
  cfg.lambda(1, 1) = 0;
  expect(cfg, "lambda");
  cfg.lambda(1, 1) = std::nan("");
  expect(cfg, "lambda");
  cfg = c.config<double>();
  cfg.groups = 3;
  expect(cfg, "groups");
  auto a = c.addresses<double>();
  a[1].omega(0) = -0.5;
  CHECK_THROWS_WITH(ldm_kernel<double>(c.config<double>(), c.e, c.values<double>(), a),
                    Catch::Contains("omega") && Catch::Contains("layer 1"));
}
