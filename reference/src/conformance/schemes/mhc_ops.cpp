// mHC at op level in the conformance layer: schema, corpus rows, registry
// entry (binding: conformance/schemes/mhc_ops.hpp; docs/mhc_ops.md).
#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/schemes/mhc_ops.hpp"

namespace dmref::conf {
namespace {

Schema schema(const Problem& p, const json& opt) {
  SchemaBuilder b(p, opt);
  const std::string o = b.choice("op", {"pre", "post", "post_pre", "head"},
                                 "the fused op: pre (mhc_pre), post (mhc_post), post_pre (post of layer l, then pre of "
                                 "layer l+1), head (DeepSeek-V4's hc_head: the n streams reduced to one)");
  const MhcOp op = mhc_op_named(o);
  const bool pre = mhc_op_has_pre(op), post = mhc_op_has_post(op), head = op == MhcOp::head;
  const Dim M{b.integer("tokens", "M: tokens, each an independent problem"), "M"};
  const Dim n{b.integer("n", "expansion rate: number of residual streams"), "n"};
  const Dim C{b.integer("d", "C: the model width (the kernels' hidden size)"), "C"}, nC = n * C;
  const Dim n3 = n + n + n * n;
  const std::string no_pre =
      "read only by an op with a pre (config.op is " + o + (head ? ": no layer" : ": its mixes are inputs") + ")";
  if (pre) {
    declare_mhc_constants(b);
  } else if (head) {
    declare_mhc_constants(b, no_pre);
    b.real("head_eps", "", "added after the sigmoid of the head's weights (hc_eps) (default: the preset's, docs/mhc.md)", true);
  } else {
    for (const char* k : {"preset", "t_max", "rms_eps", "pre_eps", "res_eps_add", "res_eps_den", "pre_scale", "post_scale"})
      b.unread(k, no_pre);
  }
  if (!pre)
    for (const char* t : {"param.fn", "param.hc_scale", "param.hc_base"}) b.unread_tensor(t, no_pre);
  if (!head) {
    const std::string why = "read only by op head (config.op is " + o + ")";
    b.unread("head_eps", why);
    for (const char* t : {"param.hc_head_fn", "param.hc_head_scale", "param.hc_head_base"}) b.unread_tensor(t, why);
  }
  b.input("input.residual", {M, n, C}, "the residual streams X (row j = stream j)", uniform(1.0, "uniform[-1, 1)"));
  if (post) {
    b.input("input.x", {M, C}, "the layer output (mhc_post's x)", uniform(1.0, "uniform[-1, 1)"));
    b.input("input.post_mix", {M, n}, "H_post of the layer (mhc_post's post_layer_mix, [M, n, 1] squeezed)",
            range(0.0, 2.0, "uniform on [0, 2): post_scale sigmoid(.)"));
    b.input("input.comb_mix", {M, n, n}, "H_res of the layer, stored [in, out] (mhc_post's comb_res_mix)",
            range(0.0, 2.0 / double(n.n), "uniform on [0, 2/n): entries of a near doubly stochastic matrix"));
  } else {
    const std::string why = "read only by an op with a post (config.op is " + o + ")";
    for (const char* t : {"input.x", "input.post_mix", "input.comb_mix"}) b.unread_tensor(t, why);
  }
  const double s = 2.0 / std::sqrt(double(nC.n));  // x' is RMS-normalized: logits O(1)
  if (pre) {
    // res_scale (a corpus input option, > 1): the comb logits wider, Sinkhorn far from uniform
    // (a power of two: the scaled values stay exact in the dtype).
    const double r = b.option("res_scale", 1.0);
    auto comb_scaled = [r](Draw d, std::int64_t first) {
      d.adjust = [r, first](std::vector<double>& v, const std::function<double(double)>& round) {
        for (std::size_t k = std::size_t(first); k < v.size(); ++k) v[k] = round(v[k] * r);
      };
      return d;
    };
    b.param("param.fn", {n3, nC}, "the projections, rows [pre | post | comb (in*n + out)], column j*C + c on X(j, c)",
            comb_scaled(uniform(s, "uniform[-1, 1) x 2 / sqrt(nC), the comb rows x res_scale (1)"), 2 * n.n * nC.n));
    b.param("param.hc_scale", std::vector<Dim>{Dim{3, "3"}}, "alpha_pre, alpha_post, alpha_res", range(0.5, 1.5, "uniform on [0.5, 1.5)"));
    b.param("param.hc_base", {n3}, "b_pre | b_post | b_res stored [in, out]",
            comb_scaled(uniform(0.5, "uniform[-1, 1) x 0.5, b_res x res_scale (1)"), 2 * n.n));
  }
  if (head) {  // DeepSeek-V4's storage (its ParallelHead.hc_head: f32 parameters)
    b.param("param.hc_head_fn", {n, nC}, "the head's projection phi^T (row j: the logit of stream j's weight), column j*C + c on X(j, c)",
            uniform(s, "uniform[-1, 1) x 2 / sqrt(nC)"));
    b.param("param.hc_head_scale", std::vector<Dim>{Dim{1, "1"}}, "the head's scale a", range(0.5, 1.5, "uniform on [0.5, 1.5)"));
    b.param("param.hc_head_base", {n}, "the head's bias b", uniform(0.5, "uniform[-1, 1) x 0.5"));
    b.output("output.hidden", {M, C}, "y = sum_j w_j X_j, w = sigmoid(a (x' phi) + b) + head_eps (hc_head's result)");
  }
  if (post) b.output("output.residual", {M, n, C}, "the next residual: X_i <- sum_j H_res[i,j] X_j + H_post[i] x");
  if (pre) {
    b.output("output.layer_input", {M, C}, "h = sum_j H_pre[j] X_j (mhc_pre's layer_input)");
    b.output("output.pre_mix", {M, n}, "H_pre (not returned by flag-gems' mhc_pre)");
    b.output("output.post_mix", {M, n}, "H_post (mhc_pre's post_mix, [M, n, 1] squeezed)");
    b.output("output.comb_mix", {M, n, n}, "H_res after Sinkhorn, stored [in, out] (mhc_pre's comb_mix)");
  }
  if (p.grad) {
    if (post) b.upstream("residual");
    if (pre)
      for (const char* k : {"layer_input", "pre_mix", "post_mix", "comb_mix"}) b.upstream(k);
    if (head) b.upstream("hidden");
  }
  return std::move(b.s);
}

void corpus(std::vector<CaseSpec>& v) {
  for (const char* dt : kCorpusDtypes) {
    const std::string s = std::string(".") + dt + ".s1";
    for (const char* op : {"pre", "post", "post_pre", "head"}) {
      const std::string o = op;
      json c = {{"op", o}, {"tokens", 2}, {"n", 4}, {"d", 16}};
      const std::string pr = o == "post" ? "default" : "deepseek-v4";
      if (o != "post") c["preset"] = "deepseek-v4";
      v.push_back(forward_case("mhc_ops." + o + ".n4_C16.M2." + pr + s, "mhc_ops", pr, dt, c));
      v.push_back(grad_case("mhc_ops." + o + "_grad.n4_C16.M2." + pr, "mhc_ops", pr, dt, c));
      if (o == "post") continue;
      c["preset"] = "paper";
      v.push_back(forward_case("mhc_ops." + o + ".n4_C16.M2.paper" + s, "mhc_ops", "paper", dt, c));
      v.push_back(grad_case("mhc_ops." + o + "_grad.n4_C16.M2.paper", "mhc_ops", "paper", dt, c));
    }
    // The head's epsilons far from their defaults: rms_eps comparable with
    // mean(x^2) = 1/3, head_eps a twentieth of a weight (at 1e-6 neither is
    // visible beyond f32 resolution).
    const json head_knobs = {{"op", "head"}, {"tokens", 2}, {"n", 4}, {"d", 16}, {"preset", "deepseek-v4"},
                             {"rms_eps", "0.25"}, {"head_eps", "0.05"}};
    v.push_back(forward_case("mhc_ops_knobs.head.n4_C16.M2.deepseek-v4" + s, "mhc_ops", "deepseek-v4", dt, head_knobs));
    v.push_back(grad_case("mhc_ops_knobs.head_grad.n4_C16.M2.deepseek-v4", "mhc_ops", "deepseek-v4", dt, head_knobs));
    // Residual logits 4x wider and 4 Sinkhorn rounds (not converged): row-first
    // and column-first Sinkhorn differ beyond bf16 resolution there (as for
    // mhc_knobs, docs/mhc.md).
    const json wide = {{"res_scale", 4.0}};
    for (const char* pr : {"paper", "deepseek-v4"}) {
      const json c = {{"op", "pre"}, {"tokens", 2}, {"n", 4}, {"d", 16}, {"preset", pr}, {"t_max", 4}};
      v.push_back(forward_case(std::string("mhc_ops_wide.pre.n4_C16_t4.M2.") + pr + s, "mhc_ops", pr, dt, c, true, true, wide));
      // The backward at bf16 and f16 (where the row-first mutant's gradient hides in
      // the unit-scale cases); not at f32, where tests/mutants' central differences of
      // the reference at double are too coarse at these logits (measured err/tol 3).
      if (std::string(dt) != "f32")
        v.push_back(grad_case(std::string("mhc_ops_wide.pre_grad.n4_C16_t4.M2.") + pr, "mhc_ops", pr, dt, c, wide));
    }
  }
  // n = 8 and 16 (the public kernels' generic paths), and every op at a
  // width of the public tests (C = 1024, one token: the kernels' shapes at
  // small M), bf16 storage as those kernels take it.
  for (const auto& [n, C] : {std::pair{8, 8}, std::pair{16, 4}})  // fn has (2 + n) n rows of nC: kept small
    for (const char* op : {"pre", "post", "post_pre", "head"}) {
      const std::string o = op, sh = "n" + std::to_string(n) + "_C" + std::to_string(C) + ".M2";
      const std::string pr = o == "post" ? "default" : "deepseek-v4";
      json c = {{"op", o}, {"tokens", 2}, {"n", n}, {"d", C}};
      if (o != "post") c["preset"] = pr;
      v.push_back(forward_case("mhc_ops." + o + "." + sh + "." + pr + ".bf16.s1", "mhc_ops", pr, "bf16", c));
      v.push_back(grad_case("mhc_ops." + o + "_grad." + sh + "." + pr, "mhc_ops", pr, "bf16", c));
    }
  for (const char* op : {"pre", "post", "post_pre", "head"}) {
    const std::string o = op;
    json c = {{"op", o}, {"tokens", 1}, {"n", 4}, {"d", 1024}};
    const std::string pr = o == "post" ? "default" : "deepseek-v4";
    if (o != "post") c["preset"] = "deepseek-v4";
    v.push_back(forward_case("mhc_ops." + o + ".n4_C1024.M1." + pr + ".bf16.s1", "mhc_ops", pr, "bf16", c, true, false));
  }
  // The head's backward at that width too (its adjoint is one mix and one norm: cheap).
  v.push_back(grad_case("mhc_ops.head_grad.n4_C1024.M1.deepseek-v4", "mhc_ops", "deepseek-v4", "bf16",
                        {{"op", "head"}, {"tokens", 1}, {"n", 4}, {"d", 1024}, {"preset", "deepseek-v4"}}));
}

}  // namespace

const SchemeInfo mhc_ops_info{
    "mhc_ops.md", "mHC at op level: the fused pre, post, post_pre and head ops of public kernels, in their storage", &schema,
    &corpus,
    {{{"op", "pre"}, {"tokens", 2}, {"n", 2}, {"d", 4}, {"preset", "deepseek-v4"}},
     {{"op", "post"}, {"tokens", 2}, {"n", 2}, {"d", 4}},
     {{"op", "post_pre"}, {"tokens", 2}, {"n", 2}, {"d", 4}, {"preset", "paper"}},
     {{"op", "head"}, {"tokens", 2}, {"n", 2}, {"d", 4}, {"preset", "deepseek-v4"}}}};

}  // namespace dmref::conf
