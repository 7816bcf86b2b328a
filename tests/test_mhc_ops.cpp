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
#include "dmref/oracles/central_difference.hpp"
#include "dmref/oracles/mhc_ops_fused.hpp"

#include <catch2/catch.hpp>

using namespace dmref;
using namespace dmref::conf;
using Hi = mp200;

namespace {

CaseSpec spec(const std::string& op, int n, int C, const std::string& preset, bool grad, std::uint64_t seed = 1) {
  json c = {{"op", op}, {"tokens", 2}, {"n", n}, {"d", C}};
  if (op != "post") c["preset"] = preset;
  CaseSpec s = forward_case("test.mhc_ops", "mhc_ops", preset, "f32", c);
  s.seed = seed;
  s.grad = grad;
  return s;
}

/// The preset's constants as docs/mhc.md states them (not mhc_config's code).
oracle::FusedMhc<Hi> oracle_layer(const Problem& p) {
  oracle::FusedMhc<Hi> m;
  m.n = p.config.at("n").get<int>();
  m.C = p.config.at("d").get<int>();
  const std::int64_t nC = std::int64_t(m.n) * m.C, n3 = 2 * m.n + m.n * m.n;
  m.fn = mat_at<Hi>(p.tensors.at("param.fn"), 0, n3, nC);
  for (int k = 0; k < 3; ++k) m.scale[k] = Hi(p.tensors.at("param.hc_scale").values[k]);
  m.base = vec_at<Hi>(p.tensors.at("param.hc_base"), 0, n3);
  const bool ds = p.config.at("preset") == "deepseek-v4";
  m.rms_eps = ds ? Hi("1e-6") : Hi("1e-20");
  m.pre_eps = m.sinkhorn_eps = ds ? Hi("1e-6") : Hi(0);
  return m;
}

/// Every output of the op by the oracle, in the binding's order and storage.
std::map<std::string, Vec<Hi>> oracle_outputs(const Problem& p) {
  const auto op = p.config.at("op").get<std::string>();
  const auto T = p.config.at("tokens").get<std::int64_t>(), n = p.config.at("n").get<std::int64_t>(),
             C = p.config.at("d").get<std::int64_t>();
  std::map<std::string, std::vector<Hi>> o;
  auto put = [&](const std::string& k, const Mat<Hi>& m) {
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      for (Eigen::Index j = 0; j < m.cols(); ++j) o["output." + k].push_back(m(i, j));
  };
  for (std::int64_t t = 0; t < T; ++t) {
    Mat<Hi> X = mat_at<Hi>(p.tensors.at("input.residual"), t * n * C, n, C);
    if (op != "pre") {
      X = oracle::fused_post<Hi>(vec_at<Hi>(p.tensors.at("input.x"), t * C, C), X,
                                 vec_at<Hi>(p.tensors.at("input.post_mix"), t * n, n),
                                 mat_at<Hi>(p.tensors.at("input.comb_mix"), t * n * n, n, n));
      put("residual", X);
    }
    if (op != "post") {
      const auto r = oracle::fused_pre<Hi>(oracle_layer(p), X);
      put("layer_input", r.layer_input.transpose());
      put("pre_mix", r.pre.transpose());
      put("post_mix", r.post.transpose());
      put("comb_mix", r.comb);
    }
  }
  std::map<std::string, Vec<Hi>> v;
  for (auto& [k, x] : o) v[k] = Eigen::Map<Vec<Hi>>(x.data(), Eigen::Index(x.size()));
  return v;
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

const char* kOps[] = {"pre", "post", "post_pre"};

}  // namespace

TEST_CASE("mhc_ops forward equals the kernels' computation (oracle) at 667 bits", "[mhc_ops]") {
  for (const char* op : kOps)
    for (const int n : {1, 2, 4, 8})
      for (const char* preset : {"paper", "deepseek-v4"})
        for (const std::uint64_t seed : {1, 2}) {
          if (std::string(op) == "post" && std::string(preset) == "paper") continue;  // post has no preset
          INFO(op << " n=" << n << " " << preset << " seed " << seed);
          const Problem p = make_problem(spec(op, n, 16 / n + 1, preset, false, seed));
          const Outputs<Hi> ref = reference(p);
          const auto orc = oracle_outputs(p);
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
        const Outputs<Hi> ref = reference(p);
        // Differentiated tensors: every input and parameter (not the upstreams).
        std::vector<std::string> names;
        Eigen::Index size = 0;
        for (const auto& [k, t] : p.tensors)
          if (k.rfind("input.grad.", 0) != 0) {
            names.push_back(k);
            size += Eigen::Index(t.values.size());
            REQUIRE(ref.t.count("grad." + k));
          }
        Vec<Hi> x0(size);
        Eigen::Index at = 0;
        for (const auto& k : names)
          for (double v : p.tensors.at(k).values) x0(at++) = Hi(v);
        auto f = [&](const Vec<Hi>& x) {  // the oracle's outputs, contracted with the upstream gradients
          // The problem's tensors hold doubles: the oracle runs on mp200 copies of the perturbed values.
          std::map<std::string, Vec<Hi>> hi;
          Eigen::Index k0 = 0;
          for (const auto& k : names) {
            const Eigen::Index m = Eigen::Index(p.tensors.at(k).values.size());
            hi[k] = x.segment(k0, m);
            k0 += m;
          }
          const auto T = p.config.at("tokens").get<std::int64_t>(), nn = p.config.at("n").get<std::int64_t>(),
                     C = p.config.at("d").get<std::int64_t>();
          const auto o = p.config.at("op").get<std::string>();
          auto M = [&](const std::string& k, std::int64_t off, std::int64_t r, std::int64_t c) {
            Mat<Hi> m(r, c);
            for (std::int64_t i = 0; i < r; ++i)
              for (std::int64_t j = 0; j < c; ++j) m(i, j) = hi.at(k)(off + i * c + j);
            return m;
          };
          Hi acc = 0;
          auto dot = [&](const std::string& out, std::int64_t t, const Mat<Hi>& y) {
            const auto& u = p.tensors.at("input.grad." + out).values;
            const std::int64_t per = y.size();
            for (Eigen::Index i = 0; i < y.rows(); ++i)
              for (Eigen::Index j = 0; j < y.cols(); ++j) acc += Hi(u[std::size_t(t * per + i * y.cols() + j)]) * y(i, j);
          };
          oracle::FusedMhc<Hi> layer;
          if (o != "post") {
            layer = oracle_layer(p);
            const std::int64_t n3 = 2 * nn + nn * nn;
            layer.fn = M("param.fn", 0, n3, nn * C);
            for (int k = 0; k < 3; ++k) layer.scale[k] = hi.at("param.hc_scale")(k);
            layer.base = hi.at("param.hc_base");
          }
          for (std::int64_t t = 0; t < T; ++t) {
            Mat<Hi> X = M("input.residual", t * nn * C, nn, C);
            if (o != "pre") {
              X = oracle::fused_post<Hi>(Vec<Hi>(M("input.x", t * C, C, 1)), X, Vec<Hi>(M("input.post_mix", t * nn, nn, 1)),
                                         M("input.comb_mix", t * nn * nn, nn, nn));
              dot("residual", t, X);
            }
            if (o != "post") {
              const auto r = oracle::fused_pre<Hi>(layer, X);
              dot("layer_input", t, r.layer_input.transpose());
              dot("pre_mix", t, r.pre.transpose());
              dot("post_mix", t, r.post.transpose());
              dot("comb_mix", t, r.comb);
            }
          }
          Vec<Hi> out(1);
          out(0) = acc;
          return out;
        };
        for (const std::uint64_t seed : {11, 12}) {
          const Vec<Hi> dir = oracle::random_direction<Hi>(size, seed);
          const Hi fd = oracle::central_difference<Hi>(f, x0, dir, pow(Hi(2), -200))(0);
          Hi adj = 0, scale = 0;
          Eigen::Index k0 = 0;
          for (const auto& k : names) {
            const auto& g = ref.t.at("grad." + k).values;
            for (std::size_t i = 0; i < g.size(); ++i) {
              adj += g[i] * dir(k0 + Eigen::Index(i));
              scale += abs(g[i] * dir(k0 + Eigen::Index(i)));
            }
            k0 += Eigen::Index(g.size());
          }
          INFO("fd " << to_double(fd) << " adjoint " << to_double(adj));
          CHECK(to_double(abs(fd - adj)) <= 1e-100 * to_double(scale));
          CHECK(to_double(scale) > 0);
        }
      }
}

TEST_CASE("mhc_ops: a key of another op is refused, naming it", "[mhc_ops]") {
  const Problem p = make_problem(spec("post", 2, 3, "paper", false));
  Problem q = p;
  q.config["preset"] = "paper";
  try {
    validate(q);
    FAIL("accepted config.preset for op post");
  } catch (const io::BadInput& e) {
    CHECK(std::string(e.what()).find("config.preset") != std::string::npos);
  }
}
