// Properties of mHC at op level (docs/mhc_ops.md): the ops compose to the
// scheme. Cases: n = 1..6 streams, C = 1..8, M = 1..3 tokens, both presets,
// inputs drawn as the corpus draws them (seeded). The reference runs in
// double; every relation below is the same operations in the same order on
// the same doubles, so each is checked for exact equality (any difference is
// a wrong permutation, orientation or order, never rounding).
//   - pre then post == one layer of the mHC scheme (Mhc::read, Mhc::write)
//     with the parameters converted by the mhc binding (phi_layout out_in,
//     res_layout in_out: tests/kernels' route), not by mhc_ops';
//   - post_pre == post, then pre on its output, forward and backward
//     (the backward of post_pre is pre's, then post's with the upstream of
//     output.residual added).
#include "harness.hpp"
#include "ops_harness.hpp"

#include "dmref/conformance/corpus.hpp"
#include "dmref/conformance/evaluate.hpp"
#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/schemes/mhc.hpp"

#include <sstream>

using namespace dmref;
using namespace dmref::conf;

namespace {

struct OpCase {
  int n = 4, C = 4, M = 2;
  bool deepseek = true;
  std::uint64_t seed = 1;
  std::string str() const {
    std::ostringstream o;
    o << "n=" << n << " C=" << C << " M=" << M << " preset=" << (deepseek ? "deepseek-v4" : "paper") << " seed=" << seed;
    return o.str();
  }
};

rc::Gen<OpCase> gen_case() {
  return rc::gen::apply(
      [](int n, int C, int M, bool ds, int seed) { return OpCase{n, C, M, ds, std::uint64_t(seed)}; },
      rc::gen::inRange(1, 7), rc::gen::inRange(1, 9), rc::gen::inRange(1, 4), rc::gen::arbitrary<bool>(),
      rc::gen::inRange(1, 1 << 30));
}

Problem draw(const OpCase& c, const std::string& op, bool grad) {
  json cfg = {{"op", op}, {"tokens", c.M}, {"n", c.n}, {"d", c.C}};
  if (op != "post") cfg["preset"] = c.deepseek ? "deepseek-v4" : "paper";
  CaseSpec s = forward_case("prop.mhc_ops", "mhc_ops", "default", "f32", cfg);
  s.seed = c.seed;
  s.grad = grad;
  return make_problem(s);
}

using prop::from;
using prop::tensor;
std::vector<double> slice(const io::Tensor& t, std::int64_t from, std::int64_t n) {
  return {t.values.begin() + from, t.values.begin() + from + n};
}

inline void showValue(const OpCase& c, std::ostream& os) { os << c.str(); }

}  // namespace

TEST_CASE("pre then post == one layer of the mHC scheme (Mhc::read, Mhc::write)", "[property][mhc_ops]") {
  prop::check("pre then post == one layer of the mHC scheme", 100, [] {
    const OpCase c = *gen_case();
    const std::string where = c.str();
    const Problem pre = draw(c, "pre", false);
    const Outputs<double> a = evaluate<double>(pre);
    // The same layer as an mhc problem in DeepSeek's storage: fn's rows are
    // phi_pre | phi_post | phi_res (phi_layout out_in), comb [in, out] (res_layout in_out).
    const std::int64_t n = c.n, nC = n * c.C;
    Problem q;
    q.source = "property";
    q.scheme = "mhc";
    q.config = {{"tokens", 1}, {"layers", 1}, {"d", c.C}, {"n", c.n}, {"preset", pre.config.at("preset")},
                {"phi_layout", "out_in"}, {"res_layout", "in_out"}};
    const io::Tensor &fn = pre.tensors.at("param.fn"), &base = pre.tensors.at("param.hc_base");
    q.tensors["param.phi_pre"] = tensor({1, n, nC}, slice(fn, 0, n * nC));
    q.tensors["param.phi_post"] = tensor({1, n, nC}, slice(fn, n * nC, n * nC));
    q.tensors["param.phi_res"] = tensor({1, n * n, nC}, slice(fn, 2 * n * nC, n * n * nC));
    q.tensors["param.a"] = tensor({1, 3}, pre.tensors.at("param.hc_scale").values);
    q.tensors["param.b_pre"] = tensor({1, n}, slice(base, 0, n));
    q.tensors["param.b_post"] = tensor({1, n}, slice(base, n, n));
    q.tensors["param.b_res"] = tensor({1, n, n}, slice(base, 2 * n, n * n));
    const Schema s = schema_of(q);
    const Mhc<double> m(mhc_config_of<double>(q, dims(s)));
    // post with the mixes pre computed, and a layer output x.
    Problem post = draw(c, "post", false);
    post.tensors["input.residual"] = pre.tensors.at("input.residual");
    post.tensors["input.post_mix"] = from(a, "output.post_mix");
    post.tensors["input.comb_mix"] = from(a, "output.comb_mix");
    const Outputs<double> b = evaluate<double>(post);
    for (std::int64_t t = 0; t < c.M; ++t) {
      Mhc<double>::State st;
      st.X = mat_at<double>(pre.tensors.at("input.residual"), t * nC, n, c.C);
      const Vec<double> h = m.read(st, 0);
      for (Eigen::Index k = 0; k < h.size(); ++k)
        DMREF_PROP_TRUE("layer_input == Mhc::read", a.t.at("output.layer_input").values[t * c.C + k] == h(k), where);
      for (std::int64_t i = 0; i < n; ++i) {
        DMREF_PROP_TRUE("pre_mix == H_pre", a.t.at("output.pre_mix").values[t * n + i] == st.coef.pre(i), where);
        DMREF_PROP_TRUE("post_mix == H_post", a.t.at("output.post_mix").values[t * n + i] == st.coef.post(i), where);
        for (std::int64_t j = 0; j < n; ++j)
          DMREF_PROP_TRUE("comb_mix[in, out] == H_res[out, in]",
                          a.t.at("output.comb_mix").values[(t * n + j) * n + i] == st.coef.res(i, j), where);
      }
      m.write(st, 0, vec_at<double>(post.tensors.at("input.x"), t * c.C, c.C));
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t k = 0; k < c.C; ++k)
          DMREF_PROP_TRUE("post's residual == Mhc::write", b.t.at("output.residual").values[t * nC + i * c.C + k] == st.X(i, k),
                          where);
    }
  });
}

TEST_CASE("post_pre == post, then pre on its output (forward and backward)", "[property][mhc_ops]") {
  prop::check("post_pre == post then pre", 100, [] {
    const OpCase c = *gen_case();
    const std::string where = c.str();
    const Problem pp = draw(c, "post_pre", true);
    const Outputs<double> o = evaluate<double>(pp);
    Problem post = draw(c, "post", true), pre = draw(c, "pre", true);
    for (const char* k : {"input.residual", "input.x", "input.post_mix", "input.comb_mix"}) post.tensors[k] = pp.tensors.at(k);
    for (const char* k : {"param.fn", "param.hc_scale", "param.hc_base", "input.grad.layer_input", "input.grad.pre_mix",
                          "input.grad.post_mix", "input.grad.comb_mix"})
      pre.tensors[k] = pp.tensors.at(k);
    pre.config["preset"] = pp.config.at("preset");
    pre.tensors["input.residual"] = from(o, "output.residual");
    const Outputs<double> b = evaluate<double>(pre);
    // post's upstream: what pre sends back to its residual, plus post_pre's own upstream of output.residual.
    io::Tensor up = from(b, "grad.input.residual");
    for (std::size_t i = 0; i < up.values.size(); ++i) up.values[i] += pp.tensors.at("input.grad.residual").values[i];
    post.tensors["input.grad.residual"] = up;
    const Outputs<double> a = evaluate<double>(post);
    auto same = [&](const std::string& name, const Outputs<double>& x, const std::string& as) {
      DMREF_PROP_TRUE(name + " of post_pre == " + as, o.t.at(name).values == x.t.at(as).values, where);
    };
    same("output.residual", a, "output.residual");
    for (const char* k : {"output.layer_input", "output.pre_mix", "output.post_mix", "output.comb_mix", "grad.param.fn",
                          "grad.param.hc_scale", "grad.param.hc_base"})
      same(k, b, k);
    for (const char* k : {"grad.input.residual", "grad.input.x", "grad.input.post_mix", "grad.input.comb_mix"}) same(k, a, k);
  });
}
