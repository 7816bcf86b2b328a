// Unit tests of mHC at op level (docs/mhc_ops.md; binding
// conformance/schemes/mhc_ops.hpp) against the independent transcription of
// the kernels' computation (oracles/include/dmref/oracles/mhc_ops_fused.hpp),
// on problems drawn as the corpus draws them, both at 667 bits (mp200).
//
// Tolerances. Forward: reference and oracle are two evaluations of the same
// real function at unit roundoff u = 2^-667 ~ 1e-201; each output is a
// composition of at most ~ nC (GEMM) + 4 n t_max (Sinkhorn) + n (mix) < 10^4
// roundings here (nC <= 128, t_max = 20), each amplified by at most the
// condition of that map: the Sinkhorn round divides by line sums >= e^-3
// (logits |z| <= 3 at these draws: |fn x'| <= 2 |x'|_1 / sqrt(nC) <= 2, |b| <=
// 0.5, alpha < 1.5), 40 divisions: < e^120 ~ 1e52. So |ref - oracle| < 1e4 x
// 1e52 x 1e-201 (x the output's scale, <= n) ~ 1e-144: checked at 1e-140.
// The head (op head) is a sub-composition: the GEMM, one sigmoid (condition
// <= |z| < 3) and the mix, no Sinkhorn: far inside that bound.
// Backward: the reference's adjoints (mhc_backward.hpp) against central
// differences of the oracle's forward (h = 2^-200): truncation h^2 |f'''| ~
// 2^-400 x (the same 1e52 amplification, to the third power at worst 1e156)
// ~ 1e-120 x 1e156 is useless as a bound, so the step is chosen where both
// terms are measured small: rounding 2^-667 / 2^-200 = 2^-467 ~ 1e-141 and
// truncation ~ 1e-120 |f'''|; |f'''| of these O(1)-logit maps is O(10^2)
// (sigmoid''' <= 1/8, the Sinkhorn's at unit-scale logits O(n^2)): checked at
// 1e-100 relative to the sum of |terms| (a wrong adjoint is off by O(1)).
#include "dmref/conformance/corpus.hpp"
#include "dmref/conformance/generate.hpp"  // validate
#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/schemes/mhc_ops.hpp"
#include "dmref/oracles/mhc_ops_fused.hpp"
#include "dmref/scalar.hpp"

#include "ops_check.hpp"

#include <catch2/catch.hpp>

using namespace dmref;
using namespace dmref::conf;
using namespace dmref::testing;

namespace {

CaseSpec spec(const std::string& op, int n, int C, const std::string& preset, bool grad, std::uint64_t seed = 1,
              const json& knobs = json::object()) {
  json c = {{"op", op}, {"tokens", 2}, {"n", n}, {"d", C}};
  if (op != "post") c["preset"] = preset;
  c.update(knobs);
  CaseSpec s = forward_case("test.mhc_ops", "mhc_ops", preset, "f32", c);
  s.seed = seed;
  s.grad = grad;
  return s;
}

/// The layer in the oracle's terms; the preset's constants as docs/mhc.md states them (not mhc_config's code).
oracle::FusedMhc<Hi> oracle_layer(const Problem& p, const Values& v) {
  oracle::FusedMhc<Hi> m;
  m.n = p.config.at("n").get<int>();
  m.C = p.config.at("d").get<int>();
  const std::int64_t nC = std::int64_t(m.n) * m.C, n3 = 2 * m.n + m.n * m.n;
  m.fn = mat(v, "param.fn", 0, n3, nC);
  for (int k = 0; k < 3; ++k) m.scale[k] = v.at("param.hc_scale")(k);
  m.base = v.at("param.hc_base");
  const bool ds = p.config.at("preset") == "deepseek-v4";
  m.rms_eps = ds ? Hi("1e-6") : Hi("1e-20");
  m.pre_eps = m.sinkhorn_eps = ds ? Hi("1e-6") : Hi(0);
  return m;
}

/// The head in the oracle's terms: the preset's constants as docs/mhc.md states
/// them, or the config's knobs (decimal strings).
oracle::FusedHead<Hi> oracle_head(const Problem& p, const Values& v) {
  oracle::FusedHead<Hi> m;
  const int n = p.config.at("n").get<int>(), C = p.config.at("d").get<int>();
  m.fn = mat(v, "param.hc_head_fn", 0, n, std::int64_t(n) * C);
  m.scale = v.at("param.hc_head_scale")(0);
  m.base = v.at("param.hc_head_base");
  const bool ds = p.config.at("preset") == "deepseek-v4";
  m.rms_eps = p.config.contains("rms_eps") ? Hi(p.config["rms_eps"].get<std::string>()) : ds ? Hi("1e-6") : Hi("1e-20");
  m.hc_eps = p.config.contains("head_eps") ? Hi(p.config["head_eps"].get<std::string>()) : ds ? Hi("1e-6") : Hi(0);
  return m;
}

/// Every output of the op by the oracle on the tensor values v, in the binding's order and storage.
Values oracle_outputs(const Problem& p, const Values& v) {
  const auto op = p.config.at("op").get<std::string>();
  const auto T = p.config.at("tokens").get<std::int64_t>(), n = p.config.at("n").get<std::int64_t>(),
             C = p.config.at("d").get<std::int64_t>();
  std::map<std::string, std::vector<Hi>> o;
  auto put = [&](const std::string& k, const Mat<Hi>& m) {
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      for (Eigen::Index j = 0; j < m.cols(); ++j) o["output." + k].push_back(m(i, j));
  };
  if (op == "head") {
    const auto head = oracle_head(p, v);
    for (std::int64_t t = 0; t < T; ++t)
      put("hidden", oracle::fused_head<Hi>(head, mat(v, "input.residual", t * n * C, n, C)).transpose());
  }
  const bool pre = op == "pre" || op == "post_pre", post = op == "post" || op == "post_pre";
  const auto layer = pre ? oracle_layer(p, v) : oracle::FusedMhc<Hi>{};
  for (std::int64_t t = 0; t < T && (pre || post); ++t) {
    Mat<Hi> X = mat(v, "input.residual", t * n * C, n, C);
    if (post) {
      X = oracle::fused_post<Hi>(Vec<Hi>(mat(v, "input.x", t * C, C, 1)), X, Vec<Hi>(mat(v, "input.post_mix", t * n, n, 1)),
                                 mat(v, "input.comb_mix", t * n * n, n, n));
      put("residual", X);
    }
    if (pre) {
      const auto r = oracle::fused_pre<Hi>(layer, X);
      put("layer_input", r.layer_input.transpose());
      put("pre_mix", r.pre.transpose());
      put("post_mix", r.post.transpose());
      put("comb_mix", r.comb);
    }
  }
  Values out;
  for (auto& [k, x] : o) out[k] = Eigen::Map<Vec<Hi>>(x.data(), Eigen::Index(x.size()));
  return out;
}

Outputs<Hi> reference(const Problem& p) {
  Outputs<Hi> o;
  evaluate_mhc_ops<Hi>(p, schema_of(p), o);
  return o;
}

double max_abs_diff(const std::vector<Hi>& a, const Vec<Hi>& b) {
  REQUIRE(Eigen::Index(a.size()) == b.size());
  double m = 0;
  for (Eigen::Index i = 0; i < b.size(); ++i) m = std::max(m, to_double(abs(a[std::size_t(i)] - b(i))));
  return m;
}

const char* kOps[] = {"pre", "post", "post_pre", "head"};
/// The head's epsilons away from their defaults (the corpus's mhc_ops_knobs case).
const json kHeadKnobs = {{"rms_eps", "0.25"}, {"head_eps", "0.05"}};

}  // namespace

TEST_CASE("mhc_ops forward equals the kernels' computation (oracle) at 667 bits", "[mhc_ops]") {
  for (const char* op : kOps)
    for (const int n : {1, 2, 4, 8})
      for (const char* preset : {"paper", "deepseek-v4"})
        for (const std::uint64_t seed : {1, 2, 3}) {
          if (std::string(op) == "post" && std::string(preset) == "paper") continue;  // post has no preset
          if (seed == 3 && std::string(op) != "head") continue;  // seed 3: the head with its knobs
          INFO(op << " n=" << n << " " << preset << " seed " << seed);
          const Problem p = make_problem(spec(op, n, 16 / n + 1, preset, false, seed, seed == 3 ? kHeadKnobs : json::object()));
          const Outputs<Hi> ref = reference(p);
          const auto orc = oracle_outputs(p, values_of(p));
          REQUIRE(ref.t.size() == orc.size());
          for (const auto& [k, y] : orc) {
            INFO(k);
            CHECK(max_abs_diff(ref.t.at(k).values, y) < 1e-140);
          }
        }
}

TEST_CASE("mhc_ops backward: the adjoints match central differences of the oracle", "[mhc_ops]") {
  for (const char* op : kOps)
    for (const int n : {2, 4})
      for (const char* preset : {"paper", "deepseek-v4"}) {
        if (std::string(op) == "post" && std::string(preset) == "paper") continue;
        INFO(op << " n=" << n << " " << preset);
        const Problem p = make_problem(spec(op, n, 3, preset, true));
        check_adjoints(p, reference(p), oracle_outputs);
      }
}

TEST_CASE("mhc_ops: a key of another op is refused, naming it", "[mhc_ops]") {
  for (const auto& [op, key] : {std::pair{"post", "preset"}, std::pair{"pre", "head_eps"}, std::pair{"head", "t_max"},
                                std::pair{"head", "pre_eps"}}) {
    INFO(op << " given " << key);
    Problem q = make_problem(spec(op, 2, 3, "paper", false));
    q.config[key] = std::string(key) == "preset" ? json("paper") : std::string(key) == "t_max" ? json(3) : json("0.5");
    try {
      validate(q);
      FAIL("accepted config." << key << " for op " << op);
    } catch (const io::BadInput& e) {
      CHECK(std::string(e.what()).find(std::string("config.") + key) != std::string::npos);
      CHECK(std::string(e.what()).find("has no effect") != std::string::npos);
    }
  }
}
