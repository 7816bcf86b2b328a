// mHC in the conformance layer: schema, corpus rows, registry entry
// (binding: conformance/schemes/mhc.hpp).
#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/schemes/mhc_constants.hpp"  // declare_mhc_constants, the presets' defaults (MhcConfig)

namespace dmref::conf {

void declare_mhc_constants(SchemaBuilder& b, const std::string& layer_why) {
  b.choice("preset", {"paper", "deepseek-v4"}, "the constants: the paper's (Table 5) or DeepSeek-V4's (docs/mhc.md)");
  // The knobs production kernels expose; each defaults to the preset's value.
  const bool layer = layer_why.empty();
  if (layer) b.integer_or("t_max", MhcConfig<double>{}.t_max, "Sinkhorn rounds", 1, b.p.limits.max_iterations);
  const char* preset_default = "(default: the preset's, docs/mhc.md)";
  b.real("rms_eps", "", std::string("RMSNorm epsilon ") + preset_default, true);
  if (!layer) {
    for (const char* k : {"t_max", "pre_eps", "res_eps_add", "res_eps_den", "pre_scale", "post_scale"}) b.unread(k, layer_why);
    return;
  }
  b.real("pre_eps", "", std::string("added after the sigmoid of H_pre ") + preset_default, true);
  b.real("res_eps_add", "", std::string("added to every entry after the first column normalisation ") + preset_default, true);
  b.real("res_eps_den", "", std::string("added to every Sinkhorn denominator after the first ") + preset_default, true);
  b.real("pre_scale", "", std::string("H_pre = pre_scale sigmoid(Ht_pre) + pre_eps ") + preset_default);
  b.real("post_scale", "", std::string("H_post = post_scale sigmoid(Ht_post) ") + preset_default);
}

namespace {

Schema schema(const Problem& p, const json& opt) {
  SchemaBuilder b(p, opt);
  const Layers D = declare_layers(b);
  const Dim n{b.integer("n", "expansion rate: number of residual streams"), "n"}, C = D.d, nC = n * C;
  declare_mhc_constants(b);
  // Projections stored [nC, out] (x' phi, default "in_out") or [out, nC] (a torch.nn.Linear weight, "out_in").
  const bool out_in = b.choice("phi_layout", {"in_out", "out_in"},
                               "projections stored [L, nC, out] (in_out) or [L, out, nC] (out_in: torch.nn.Linear)") ==
                      "out_in";
  b.choice("res_layout", {"out_in", "in_out"},
           "residual matrices: entry (i, j) weighs stream j into stream i (out_in, paper) or the transpose (in_out, "
           "DeepSeek-V4's comb matrix); for param.phi_res, param.b_res, output.H_res, output.Ht_res");
  auto phi = [&](const Dim& out) { return out_in ? std::vector<Dim>{D.L, out, nC} : std::vector<Dim>{D.L, nC, out}; };
  const double s = 1.0 / std::sqrt(double(nC.n));  // x' is RMS-normalized: logits O(1)
  const double r = b.option("res_scale", 1.0);      // > 1: Sinkhorn far from uniform
  b.param("param.phi_pre", phi(n), "projection of x' to the pre logits", uniform(s, "uniform[-1, 1) / sqrt(nC)"));
  b.param("param.phi_post", phi(n), "projection of x' to the post logits", uniform(s, "uniform[-1, 1) / sqrt(nC)"));
  b.param("param.phi_res", phi(n * n), "projection of x' to the residual logits (column i*n + j: entry (i, j))",
          uniform(2 * s * r, "uniform[-1, 1) x 2 res_scale (1) / sqrt(nC)"));
  b.param("param.a", {D.L, {3, "3"}}, "gating factors alpha_pre, alpha_post, alpha_res", range(0.5, 1.5, "uniform on [0.5, 1.5)"));
  b.param("param.b_pre", {D.L, n}, "pre bias", uniform(0.5, "uniform[-1, 1) x 0.5"));
  b.param("param.b_post", {D.L, n}, "post bias", uniform(0.5, "uniform[-1, 1) x 0.5"));
  b.param("param.b_res", {D.L, n, n}, "residual bias (res_layout)", uniform(r, "uniform[-1, 1) x res_scale (1)"));
  declare_layer_outputs(b, D);
  b.output("output.X", {D.T, n, C}, "the final streams");
  b.output("output.H_pre", {D.T, D.L, n}, "H_pre of every layer");
  b.output("output.H_post", {D.T, D.L, n}, "H_post of every layer");
  b.output("output.H_res", {D.T, D.L, n, n}, "H_res (after Sinkhorn) of every layer (res_layout)");
  b.output("output.Ht_res", {D.T, D.L, n, n}, "the residual logits Ht_res of every layer (res_layout)");
  if (p.grad) {
    declare_layer_upstream(b, D);
    for (const char* o : {"X", "H_pre", "H_post", "H_res", "Ht_res"}) b.upstream(o);
  }
  return std::move(b.s);
}

void corpus(std::vector<CaseSpec>& v) {
  for (const char* dt : kCorpusDtypes) {
    const std::string s = std::string(".") + dt + ".s1";
    json mhc = {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"n", 4}, {"preset", "paper"}};
    v.push_back(forward_case("mhc.kernel.n4_d8.L6.paper" + s, "mhc", "paper", dt, mhc));
    mhc["preset"] = "deepseek-v4";
    v.push_back(forward_case("mhc.kernel.n4_d8.L6.deepseek-v4" + s, "mhc", "deepseek-v4", dt, mhc));
    mhc["level"] = "model";
    mhc["hidden"] = 8;
    v.push_back(forward_case("mhc.model.n4_d8_h8.L6.deepseek-v4" + s, "mhc", "deepseek-v4", dt, mhc));
    // Embeddings of RMS ~6e-4, so mean(h^2) ~ 3e-7 is comparable with the norm
    // epsilons (1e-6): paper vs deepseek-v4 constants.
    const json tiny = {{"e_scale", 1e-3}};
    const json paper = {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"n", 4}, {"preset", "paper"}};
    v.push_back(forward_case("mhc.kernel.n4_d8_e1e-3.L6.paper" + s, "mhc", "paper", dt, paper, true, true, tiny));
    // The production knobs away from their defaults, and residual logits 4x
    // wider (Sinkhorn far from uniform, 4 rounds: not yet converged).
    const json knobs = {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"n", 4}, {"preset", "deepseek-v4"}, {"t_max", 4},
                        {"res_eps_add", "0.05"}, {"res_eps_den", "0.05"}, {"pre_scale", 1.5}, {"post_scale", 1.5}};
    const json wide = {{"res_scale", 4.0}};
    v.push_back(forward_case("mhc_knobs.kernel.n4_d8_t4.L6.deepseek-v4" + s, "mhc", "deepseek-v4", dt, knobs, true, true, wide));
    // The paper preset (Sinkhorn eps 0) with residual logits 4x wider and 4
    // rounds: row-first vs column-first Sinkhorn differ by far more than
    // bf16/f16 resolution there (at unit-scale logits they pass each other).
    json paper4 = paper;
    paper4["t_max"] = 4;
    v.push_back(forward_case("mhc_knobs.kernel.n4_d8_t4.L6.paper" + s, "mhc", "paper", dt, paper4, true, true, wide));
    // Backward: the cases above, and DeepSeek-V4's file layouts (phi [out,
    // nC], H_res transposed: the gradients go back the same way).
    json g = paper;
    v.push_back(grad_case("mhc.kernel_grad.n4_d8.L6.paper", "mhc", "paper", dt, g));
    g["preset"] = "deepseek-v4";
    v.push_back(grad_case("mhc.kernel_grad.n4_d8.L6.deepseek-v4", "mhc", "deepseek-v4", dt, g));
    json layouts = g;
    layouts["phi_layout"] = "out_in";
    layouts["res_layout"] = "in_out";
    v.push_back(grad_case("mhc_layouts.kernel_grad.n4_d8.L6.deepseek-v4", "mhc", "deepseek-v4", dt, layouts));
    g["level"] = "model";
    g["hidden"] = 8;
    v.push_back(grad_case("mhc.model_grad.n4_d8_h8.L6.deepseek-v4", "mhc", "deepseek-v4", dt, g));
    v.push_back(grad_case("mhc.kernel_grad.n4_d8_e1e-3.L6.paper", "mhc", "paper", dt, paper, tiny));
    v.push_back(grad_case("mhc_knobs.kernel_grad.n4_d8_t4.L6.deepseek-v4", "mhc", "deepseek-v4", dt, knobs, wide));
    v.push_back(grad_case("mhc_knobs.kernel_grad.n4_d8_t4.L6.paper", "mhc", "paper", dt, paper4, wide));
  }
  v.push_back(forward_case("mhc.kernel.n4_d256.L48.paper.bf16.s1", "mhc", "paper", "bf16",
                           {{"tokens", 1}, {"layers", 48}, {"d", 256}, {"n", 4}, {"preset", "paper"}}, false, false));
}

}  // namespace

const SchemeInfo mhc_info{"mhc.md", "mHC: n residual streams mixed through a Sinkhorn-projected doubly stochastic matrix",
                          &schema, &corpus,
                          {{{"tokens", 2}, {"layers", 3}, {"d", 4}, {"n", 2}, {"preset", "paper"}},
                           {{"tokens", 2}, {"layers", 3}, {"d", 4}, {"n", 2}, {"preset", "deepseek-v4"}},
                           {{"tokens", 2}, {"layers", 3}, {"d", 4}, {"n", 2}, {"phi_layout", "out_in"}, {"res_layout", "in_out"}},
                           {{"tokens", 2}, {"layers", 3}, {"d", 4}, {"n", 2}, {"level", "model"}, {"hidden", 5}}}};

}  // namespace dmref::conf
