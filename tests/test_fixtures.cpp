// The conformance gate: verify must accept correct candidates (golden rounded
// to the candidate dtype; the dtype-emulated reference itself) and reject
// wrong ones (one element 10x off, NaN, known-wrong implementations).
#include "check.hpp"

#include "dmref/conformance/evaluate.hpp"
#include "dmref/conformance/generate.hpp"
#include "dmref/conformance/verify.hpp"
#include "dmref/oracles/ldm_rls_closed_form.hpp"
#include "dmref/mhc.hpp"
#include "dmref/oracles/mhc_sinkhorn.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace dmref;
using namespace dmref::conf;

namespace {

CaseSpec find_case(const std::string& id) {
  for (const auto& c : corpus())
    if (c.id == id) return c;
  throw std::runtime_error("no case " + id);
}

/// Candidate file from outputs computed in float (already rounded as the
/// candidate dtype would store them).
io::File candidate_from(const Outputs<float>& o, const FloatFormat& f) {
  io::File c;
  for (const auto& [name, t] : o.t) {
    io::Tensor x{"F64", t.shape, {}};
    for (float v : t.values) x.values.push_back(round_to(f, double(v)));
    c.tensors[name] = std::move(x);
  }
  return c;
}

io::File golden_rounded(const io::File& fx, const FloatFormat& f) {
  io::File c;
  for (const auto& [name, t] : fx.tensors) {
    if (name.rfind("output.", 0) != 0 || name.size() > 3 && name.compare(name.size() - 3, 3, ".lo") == 0) continue;
    io::Tensor x = t;
    for (auto& v : x.values) v = round_to(f, v);
    c.tensors[name] = std::move(x);
  }
  return c;
}

Problem rounded(Problem p, const FloatFormat& f) {
  for (auto& [n, t] : p.tensors)
    for (auto& x : t.values) x = round_to(f, x);
  return p;
}

VerifyOptions opts(const std::string& dtype) {
  VerifyOptions o;
  o.dtype = dtype;
  return o;
}

const char* kCases[] = {"preln.model.d8_h8.L6.bf16.s1", "ldm_rls.kernel.g2_dk4_d8.L8.f32.s1",
                        "ldm_rls.model.g2_dk4_d8_h8.L6.f16.s1", "ldm_delta.kernel.g2_dk4_d8.L8.bf16.s1",
                        "attnres_block.kernel.d8_S3.L8.f32.s1", "attnres_full.kernel.d8.L8.f16.s1",
                        "hc_dynamic.kernel.n4_d8.L6.bf16.s1",   "hc_static.kernel.n4_d8.L6.f32.s1",
                        "mhc.kernel.n4_d8.L6.paper.f32.s1",     "mhc.model.n4_d8_h8.L6.deepseek-v4.bf16.s1",
                        "denseformer.model.d8_h8.L6.f16.s1"};

}  // namespace

TEST_CASE("verify accepts the golden values rounded to each dtype and the dtype-emulated reference", "[fixtures]") {
  for (const char* id : kCases) {
    const CaseSpec c = find_case(id);
    const io::File fx = build_fixture(c, "test");
    for (const char* dt : {"f32", "bf16", "f16"}) {
      INFO(id << " as " << dt);
      const auto g = verify_case(fx, golden_rounded(fx, format_of(dt)), opts(dt), true, 5);
      CHECK(g.pass);
      CHECK(g.problem.empty());
      const Problem p = rounded(make_problem(c), format_of(dt));
      const auto r = verify_case(fx, candidate_from(evaluate<float>(p), format_of(dt)), opts(dt), true, 5);
      CHECK(r.pass);
      CHECK(r.worst_ratio <= 0.5 + 1e-12);  // its error is the baseline: err/tol <= b / (2 b) = 1/2
    }
  }
}

TEST_CASE("verify rejects one element off by 10x its tolerance, and a NaN", "[fixtures]") {
  const io::File fx = build_fixture(find_case("ldm_rls.kernel.g2_dk4_d8.L8.f32.s1"), "test");
  io::File cand = golden_rounded(fx, float32);
  const auto base = json::parse(fx.metadata.at("baselines"))["f32"]["output.h"]["max_abs"].get<double>();
  auto& h = cand.tensors.at("output.h").values;
  const std::size_t k = 37;
  const double tol = 2 * base + 4 * ulp_in("f32", fx.tensors.at("output.h").values[k]);
  h[k] += 10 * tol;
  auto v = verify_case(fx, cand, opts("f32"), true, 5);
  CHECK_FALSE(v.pass);
  CHECK(v.failed == 1);
  REQUIRE(v.failures.size() == 1);
  CHECK(v.failures[0].tensor == "output.h");
  CHECK(v.failures[0].err > 9 * v.failures[0].tol);
  h[k] = std::nan("");
  v = verify_case(fx, cand, opts("f32"), true, 5);
  CHECK_FALSE(v.pass);
  CHECK(v.failed == 1);
}

TEST_CASE("verify rejects RLS with an undecayed ridge", "[fixtures]") {
  // The wrong objective's memory, from the constant-ridge closed form, read
  // as the reference reads: h_{l+1} = x_l + M_l q_l, at 257 bits, then f32.
  const CaseSpec c = find_case("ldm_rls.kernel.g2_dk4_d8.L8.f32.s1");
  const io::File fx = build_fixture(c, "test");
  const Problem p = make_problem(c);
  const auto T = p.integer("tokens"), L = p.integer("layers"), d = p.integer("d"), G = p.integer("groups"),
             dk = p.integer("dk"), dv = d / G;
  const auto &E = p.tensors.at("input.e"), &V = p.tensors.at("input.v"), &Q = p.tensors.at("input.q"),
             &K = p.tensors.at("input.k"), &W = p.tensors.at("input.omega"), &Lam = p.tensors.at("param.lambda");
  io::File cand = golden_rounded(fx, float32);
  auto& h = cand.tensors.at("output.h").values;
  for (std::int64_t t = 0; t < T; ++t) {
    Vec<mp77> x = vec_at<mp77>(E, t * d, d);
    for (std::int64_t l = 0; l + 1 < L; ++l) {
      x += vec_at<mp77>(V, (t * L + l) * d, d);
      Vec<mp77> hl = x;
      for (std::int64_t g = 0; g < G; ++g) {
        oracle::DepthRegression<mp77> pr;
        pr.K.resize(dk, l + 1);
        pr.V.resize(dv, l + 1);
        pr.omega.resize(l + 1);
        pr.lambda.resize(l + 1);
        for (std::int64_t i = 0; i <= l; ++i) {
          pr.K.col(i) = vec_at<mp77>(K, (t * L + i) * G * dk + g * dk, dk);
          pr.V.col(i) = vec_at<mp77>(V, (t * L + i) * d + g * dv, dv);
          pr.omega(i) = mp77(W.values[(t * L + i) * G + g]);
          pr.lambda(i) = mp77(Lam.values[i * G + g]);
        }
        pr.alpha = 1;
        const auto cf = oracle::rls_closed_form(pr, oracle::Ridge::constant);
        hl.segment(g * dv, dv) += cf.M * vec_at<mp77>(Q, (t * L + l) * G * dk + g * dk, dk);
      }
      for (std::int64_t i = 0; i < d; ++i) h[(t * L + l + 1) * d + i] = round_to(float32, to_double(hl(i)));
    }
  }
  const auto v = verify_case(fx, cand, opts("f32"), true, 5);
  CHECK_FALSE(v.pass);
  WARN("undecayed ridge: " << v.failed << " of " << v.checked << " elements rejected, worst err/tol "
                           << v.worst_ratio);
}

TEST_CASE("verify rejects an AttnRes with a 1/sqrt(d) logit scale", "[fixtures]") {
  for (const char* id : {"attnres_full.kernel.d8.L8.f32.s1", "attnres_block.kernel.d8_S3.L8.f32.s1"}) {
    const CaseSpec c = find_case(id);
    const io::File fx = build_fixture(c, "test");
    Problem p = make_problem(c);
    // w^T RMSNorm(v) / sqrt(d) == (w / sqrt(d))^T RMSNorm(v): the wrong kernel.
    const double s = 1 / std::sqrt(double(p.integer("d")));
    for (auto& x : p.tensors.at("param.w").values) x *= s;
    const auto v = verify_case(fx, candidate_from(evaluate<float>(p), float32), opts("f32"), true, 5);
    INFO(id);
    CHECK_FALSE(v.pass);
  }
}

TEST_CASE("verify rejects a transposed H_res and a row-then-column Sinkhorn", "[fixtures]") {
  for (const char* id : {"mhc.kernel.n4_d8.L6.paper.f32.s1", "mhc.kernel.n4_d8.L6.deepseek-v4.f32.s1"}) {
    INFO(id);
    const CaseSpec c = find_case(id);
    const io::File fx = build_fixture(c, "test");
    const Problem p = make_problem(c);
    const auto T = p.integer("tokens"), L = p.integer("layers"), n = p.integer("n");
    const auto& logits = fx.tensors.at("output.Ht_res");
    io::File transposed = golden_rounded(fx, float32), row_first = transposed;
    auto& Ht = transposed.tensors.at("output.H_res").values;
    auto& Hr = row_first.tensors.at("output.H_res").values;
    const auto preset = mhc_config<double>(c.preset == "paper" ? MhcPreset::paper : MhcPreset::deepseek_v4, int(n), 8);
    for (std::int64_t b = 0; b < T * L; ++b) {
      const auto off = b * n * n;
      const Mat<double> H = mat_at<double>(fx.tensors.at("output.H_res"), off, n, n);
      oracle::SinkhornOptions<double> o;
      o.rounds = preset.t_max;
      o.eps_add = preset.res_eps_add;
      o.eps_den = preset.res_eps_den;
      o.order = oracle::SinkhornOrder::row_first;
      const Mat<double> R = oracle::sinkhorn<double>(mat_at<double>(logits, off, n, n), o).H;
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          Ht[off + i * n + j] = round_to(float32, H(j, i));
          Hr[off + i * n + j] = round_to(float32, R(i, j));
        }
    }
    const auto vt = verify_case(fx, transposed, opts("f32"), true, 5);
    const auto vr = verify_case(fx, row_first, opts("f32"), true, 5);
    CHECK_FALSE(vt.pass);
    CHECK_FALSE(vr.pass);
    WARN(id << ": transposed H_res: " << vt.failed << " of " << vt.checked << " rejected; row-then-column: " << vr.failed
            << " rejected, worst err/tol " << vr.worst_ratio);
  }
}

TEST_CASE("verify reports a missing or misshapen candidate tensor", "[fixtures]") {
  const io::File fx = build_fixture(find_case("preln.kernel.d8.L6.f32.s1"), "test");
  io::File cand = golden_rounded(fx, float32);
  cand.tensors.erase("output.out");
  auto v = verify_case(fx, cand, opts("f32"), true, 5);
  CHECK_FALSE(v.pass);
  CHECK_THAT(v.problem, Catch::Contains("output.out"));
  cand = golden_rounded(fx, float32);
  cand.tensors.at("output.h").shape = {6, 2, 8};
  v = verify_case(fx, cand, opts("f32"), true, 5);
  CHECK_FALSE(v.pass);
  CHECK_THAT(v.problem, Catch::Contains("wrong shape"));
}

TEST_CASE("fixture generation is deterministic", "[fixtures]") {
  const CaseSpec c = find_case("ldm_rls.kernel.g2_dk4_d8.L8.bf16.s1");
  CHECK(io::serialize(build_fixture(c, "x")) == io::serialize(build_fixture(c, "x")));
}

TEST_CASE("certification climbs Ziv's ladder token by token; the file takes the highest step", "[fixtures]") {
  // PreLN kernel, h_1 = e + v_0 (exact sums). Token 0's sums fit in 128 bits,
  // so its enclosures are points at the first step; token 1's h_1[0] =
  // 2^100 + 2^-100 needs 201 bits: at 128 bits its enclosure has two ends
  // whose remainders differ (0 and one ulp), at 512 bits (the second rung of
  // kZivBits) it is the point.
  Problem p;
  p.source = "test";
  p.scheme = "preln";
  p.config = {{"tokens", 2}, {"layers", 2}, {"d", 2}, {"level", "kernel"}};
  p.tensors["input.e"] = {"F64", {2, 2}, {1.5, -0.25, 0x1p100, 1.0}};
  p.tensors["input.v"] = {"F64", {2, 2, 2}, {0.5, 0.125, 3.0, 4.0, 0x1p-100, 2.0, 1.0, 1.0}};
  const auto tokens = certify_tokens(p, {0, 1}, 2);
  CHECK(tokens.at(0).c.bits == 128);
  CHECK(tokens.at(1).c.bits == 512);
  const Golden g = certified_outputs(p, 2);
  CHECK(g.bits == 512);
  const auto& h = g.tensors.at("output.h");
  CHECK(h.shape == std::vector<std::int64_t>{2, 2, 2});
  CHECK(h.values.at(6) == 0x1p100);  // [token 1, layer 1, 0]: hi, lo of 2^100 + 2^-100
  CHECK(g.tensors.at("output.h.lo").values.at(6) == 0x1p-100);
  CHECK(h.values.at(2) == 2.0);  // [token 0, layer 1, 0] = 1.5 + 0.5
  // The same file whatever the split: all tokens at once, one thread, or
  // certified separately and assembled (what MPI ranks do).
  const auto bytes = io::serialize(run_problem(p, "x", 1));
  CHECK(io::serialize(run_problem(p, "x", 3)) == bytes);
  std::vector<TokenGolden> split{certify_tokens(p, {0}, 1).at(0), certify_tokens(p, {1}, 1).at(0)};
  CHECK(io::serialize(run_file(p, split, "x")) == bytes);
}
