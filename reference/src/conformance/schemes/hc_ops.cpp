// Hyper-Connections at op level in the conformance layer: schema, corpus rows,
// registry entry (binding: conformance/schemes/hc_ops.hpp; docs/hc_ops.md).
#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/schemes/hc_ops.hpp"

namespace dmref::conf {
namespace {

const std::vector<std::string> kDynamicTensors = {"param.norm_gain",          "param.norm_bias",
                                                  "param.dynamic_alpha_fn",   "param.dynamic_alpha_scale",
                                                  "param.dynamic_beta_fn",    "param.dynamic_beta_scale"};

Schema schema(const Problem& p, const json& opt) {
  SchemaBuilder b(p, opt);
  const std::string o = b.choice("op", {"width", "depth", "depth_width"},
                                 "the op: width (lucidrains' width_connection), depth (depth_connection), depth_width "
                                 "(depth of layer l, then width of layer l+1)");
  const HcOp op = hc_op_named(o);
  const bool width = hc_op_has_width(op), depth = hc_op_has_depth(op);
  const Dim M{b.integer("tokens", "M: tokens, each an independent problem"), "M"};
  const Dim n{b.integer("n", "expansion rate: number of residual streams"), "n"};
  const Dim C{b.integer("d", "C: the model width"), "C"};
  const Dim n1 = n + 1;
  bool dynamic = false, layernorm = true;
  if (width) {
    const HcKeys k = declare_hc_keys(b, p, "param.norm_bias", kDynamicTensors);
    dynamic = k.dynamic;
    layernorm = k.layernorm;
  } else {
    const std::string why = "read only by an op with a width (config.op is depth: beta is an input)";
    for (const char* k : {"dynamic", "tanh", "ln_eps", "norm"}) b.unread(k, why);
    for (const auto& t : kDynamicTensors) b.unread_tensor(t, why);
    for (const char* t : {"param.static_alpha", "param.static_beta"}) b.unread_tensor(t, why);
  }
  if (width && !depth)
    b.input("input.residual", {M, n, C}, "the residual streams H (row j = stream j)", uniform(1.0, "uniform[-1, 1)"));
  else
    b.unread_tensor("input.residual", "read only by op width (config.op is " + o + ": the depth's result is the width's input)");
  if (depth) {
    b.input("input.branch_output", {M, C}, "the layer output x (depth_connection's branch_output)",
            uniform(1.0, "uniform[-1, 1)"));
    b.input("input.carried", {M, n, C}, "the carried streams H' (depth_connection's residuals)",
            uniform(1.0, "uniform[-1, 1)"));
    b.input("input.beta", {M, n}, "B of the layer (depth_connection's beta, [M, n, 1] squeezed)",
            range(0.8, 1.2, "uniform on [0.8, 1.2): 1 + O(0.2)"));
  } else {
    const std::string why = "read only by an op with a depth (config.op is width)";
    for (const char* t : {"input.branch_output", "input.carried", "input.beta"}) b.unread_tensor(t, why);
  }
  if (width) {
    const std::int64_t nn = n.n;
    b.param("param.static_alpha", {n, n1}, "[A_m^s | A_r^s]: row j stream j, column 0 its read weight, column 1+i its weight in stream i",
            around_init(1, nn * (nn + 1), [nn](std::int64_t, std::int64_t k) {
                          const std::int64_t row = k / (nn + 1), col = k % (nn + 1);
                          return (col == 0 && row == 0) || col == row + 1;
                        },
                        "[e_0 | I] + uniform[-1, 1) x 0.2"));
    b.param("param.static_beta", {n}, "B^s", around_init(1, nn, [](std::int64_t, std::int64_t) { return true; }, "1 + uniform[-1, 1) x 0.2"));
    if (dynamic) {
      b.param("param.norm_gain", {C}, "the norm's gain (lucidrains' RMSNorm: gamma + 1)", range(0.5, 1.5, "uniform on [0.5, 1.5)"));
      if (layernorm) b.param("param.norm_bias", {C}, "LayerNorm bias", uniform(0.1, "uniform[-1, 1) x 0.1"));
      const double w = b.option("w_scale", 1.0) / std::sqrt(double(C.n));
      const std::string wt = "uniform[-1, 1) x w_scale (1) / sqrt(C)";
      b.param("param.dynamic_alpha_fn", {C, n1}, "[W_m | W_r]: column 0 the read logits, column 1+i those of stream i", uniform(w, wt));
      b.param("param.dynamic_alpha_scale", std::vector<Dim>{Dim{1, "1"}}, "s_a (A_m and A_r)",
              range(b.option("scale_min", 0.01), b.option("scale_max", 0.1), "uniform on [scale_min (0.01), scale_max (0.1))"));
      b.param("param.dynamic_beta_fn", {C}, "W_b", uniform(w, wt));
      b.param("param.dynamic_beta_scale", std::vector<Dim>{Dim{1, "1"}}, "s_b (B)",
              range(b.option("scale_min", 0.01), b.option("scale_max", 0.1), "uniform on [scale_min (0.01), scale_max (0.1))"));
    }
  }
  if (depth) b.output("output.residual", {M, n, C}, "the next residual: row i = B_i x + H'_i (depth_connection's result)");
  if (width) {
    b.output("output.branch_input", {M, C}, "h = sum_j A_m[j] H_j (width_connection's branch_input)");
    b.output("output.carried", {M, n, C}, "H'_i = sum_j A_r[j,i] H_j (width_connection's residuals)");
    b.output("output.alpha", {M, n, n1}, "[A_m | A_r] of the streams (width_connection's alpha, lucidrains' layout)");
    b.output("output.beta", {M, n}, "B of the streams (width_connection's beta, [M, n, 1] squeezed)");
  }
  if (p.grad) {
    if (depth) b.upstream("residual");
    if (width)
      for (const char* k : {"branch_input", "carried", "alpha", "beta"}) b.upstream(k);
  }
  return std::move(b.s);
}

void corpus(std::vector<CaseSpec>& v) {
  // lucidrains' default: dynamic, RMSNorm, tanh; its RMSNorm has no epsilon
  // inside the root (F.normalize clamps the norm at 1e-12): ln_eps 1e-30
  // makes the two equal far below f64 resolution (docs/hc_ops.md).
  const json luc = {{"dynamic", true}, {"norm", "rmsnorm"}, {"ln_eps", "1e-30"}};
  json notanh = luc;
  notanh["tanh"] = false;
  const std::vector<std::pair<std::string, json>> widths = {
      {"rmsnorm_tanh", luc}, {"rmsnorm_notanh", notanh}, {"static", json::object()}, {"layernorm", {{"dynamic", true}}}};
  auto cfg = [](const std::string& op, int M, int C, const json& extra) {
    json c = {{"op", op}, {"tokens", M}, {"n", 4}, {"d", C}};
    c.update(extra);
    return c;
  };
  for (const char* dt : kCorpusDtypes) {
    const std::string s = std::string(".") + dt + ".s1";
    for (const auto& [name, extra] : widths) {
      const json c = cfg("width", 2, 16, extra);
      v.push_back(forward_case("hc_ops.width.n4_C16.M2." + name + s, "hc_ops", "default", dt, c));
      v.push_back(grad_case("hc_ops.width_grad.n4_C16.M2." + name, "hc_ops", "default", dt, c));
    }
    const json d = cfg("depth", 2, 16, json::object()), dw = cfg("depth_width", 2, 16, luc);
    v.push_back(forward_case("hc_ops.depth.n4_C16.M2.default" + s, "hc_ops", "default", dt, d));
    v.push_back(grad_case("hc_ops.depth_grad.n4_C16.M2.default", "hc_ops", "default", dt, d));
    v.push_back(forward_case("hc_ops.depth_width.n4_C16.M2.rmsnorm_tanh" + s, "hc_ops", "default", dt, dw));
    v.push_back(grad_case("hc_ops.depth_width_grad.n4_C16.M2.rmsnorm_tanh", "hc_ops", "default", dt, dw));
  }
  // Every op at a real width (C = 1024, one token), bf16 inputs, forward and backward.
  for (const auto& [op, name] : {std::pair{"width", "rmsnorm_tanh"}, {"depth", "default"}, {"depth_width", "rmsnorm_tanh"}}) {
    const json c = cfg(op, 1, 1024, std::string(op) == "depth" ? json::object() : luc);
    const std::string o = op;
    v.push_back(forward_case("hc_ops." + o + ".n4_C1024.M1." + name + ".bf16.s1", "hc_ops", "default", "bf16", c, true, false));
    v.push_back(grad_case("hc_ops." + o + "_grad.n4_C1024.M1." + name, "hc_ops", "default", "bf16", c));
  }
}

}  // namespace

const SchemeInfo hc_ops_info{
    "hc_ops.md", "Hyper-Connections at op level: lucidrains' width and depth connections and their fusion, in its storage",
    &schema, &corpus,
    {{{"op", "width"}, {"tokens", 2}, {"n", 2}, {"d", 4}, {"dynamic", true}, {"norm", "rmsnorm"}},
     {{"op", "width"}, {"tokens", 2}, {"n", 2}, {"d", 4}, {"dynamic", true}},
     {{"op", "width"}, {"tokens", 2}, {"n", 2}, {"d", 4}},
     {{"op", "depth"}, {"tokens", 2}, {"n", 2}, {"d", 4}},
     {{"op", "depth_width"}, {"tokens", 2}, {"n", 2}, {"d", 4}, {"dynamic", true}, {"norm", "rmsnorm"}}}};

}  // namespace dmref::conf
