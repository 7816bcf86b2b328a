// Linear Depth Memory in the conformance layer: schema, corpus rows,
// registry entry (binding: conformance/schemes/ldm.hpp). The rules on the
// values (groups divides d, alpha > 0, lambda in (0, 1]) are the scheme's
// own (LinearDepthMemory::validate), reported as the config field or tensor
// they name.
#include "dmref/conformance/registry.hpp"

namespace dmref::conf {
namespace {

/// A linear map (config.<name>_hidden = 0: param.<name>.W) or an MLP (.W1, .W2).
void declare_mlp(SchemaBuilder& b, const std::string& name, const Dim& in, const Dim& out, const std::string& what) {
  // Required, no default: 0 (a linear map) and the paper's nonlinear MLP are
  // both common, so a config must say which (and the tensors it names must match).
  const Dim h{b.integer(name + "_hidden", "hidden width of the " + what + " (0: a linear map)", 0), name + "_hidden"};
  const std::string t = "param." + name;
  const std::string in_s = "uniform[-1, 1) / sqrt(d)";
  if (h.n == 0) {
    for (const char* w : {".W1", ".W2"})
      b.unread_tensor(t + w, "a linear map has one matrix " + t + ".W (config." + name + "_hidden is 0)");
    b.param(t + ".W", {out, in}, what + ": linear map", uniform(1.0 / std::sqrt(double(in.n)), in_s));
  } else {
    b.unread_tensor(t + ".W", "an MLP has " + t + ".W1 and .W2 (config." + name + "_hidden is " + std::to_string(h.n) + ")");
    b.param(t + ".W1", {h, in}, what + ": first matrix", uniform(1.0 / std::sqrt(double(in.n)), in_s));
    b.param(t + ".W2", {out, h}, what + ": second matrix",
            uniform(1.0 / std::sqrt(double(h.n)), "uniform[-1, 1) / sqrt(" + name + "_hidden)"));
  }
}

Schema schema(const Problem& p, const json& opt) {
  SchemaBuilder b(p, opt);
  const Layers D = declare_layers(b);
  const Dim G{b.integer("groups", "memory groups G (divides d)"), "G"};
  const Dim dk{b.integer("dk", "key width per group"), "dk"};
  const std::string w = b.choice("write", {"rls", "outer_product", "delta"},
                                 "the memory write: exact recursive least squares, outer products, or the delta rule");
  // Keys and tensors of the other writes: an error if given (strict configs).
  const std::string write_is = "(config.write is " + w + ")";
  if (w == "rls") {
    b.choice("p_update", {"symmetric", "joseph", "naive"}, "the update of P (docs/ldm.md)");
  } else {
    b.unread("p_update", "the update of P, which only the rls write keeps " + write_is);
    b.unread("alpha", "the ridge of P_0 = I / alpha, which only the rls write keeps " + write_is);
    b.unread_tensor("param.lambda", "the forgetting factors of the rls write " + write_is);
  }
  if (w != "delta") b.unread_tensor("param.beta", "the step sizes of the delta write " + write_is);
  const std::string kernel_level = "read only at level model (at level kernel q, k, omega are given)";
  const std::string model_level = "at level model the addresses come from the MLPs (param.mlp_q.*, param.mlp_k.*), not given";
  if (!D.model) {
    for (const char* k : {"keys_from", "mlp_q_hidden", "mlp_k_hidden"}) b.unread(k, kernel_level);
    for (const char* t : {"param.mlp_q.W", "param.mlp_q.W1", "param.mlp_q.W2", "param.mlp_k.W", "param.mlp_k.W1",
                          "param.mlp_k.W2"})
      b.unread_tensor(t, kernel_level);
  } else {
    for (const char* t : {"input.q", "input.k", "input.omega"}) b.unread_tensor(t, model_level);
  }
  b.flag("read_residual", true, "the read adds the residual: h_l = x_{l-1} + M q (false: M q alone)");
  b.flag("write_residual", true, "the written value is the layer's residual output (false: the layer output)");
  if (D.model)  // kernel level: q, k, omega are inputs, so there is no key source to choose
    b.choice("keys_from", {"x_l", "x_prev"}, "keys from the layer output x_l or its input x_{l-1}");
  if (w == "rls") b.number("alpha", "ridge: P_0 = I / alpha (> 0)", "finite, > 0");
  const Dim n = G * dk;
  if (D.model) {
    declare_mlp(b, "mlp_q", D.d, n, "query MLP");
    declare_mlp(b, "mlp_k", D.d, n + G, "key MLP (keys and importance weights)");
  } else {
    const std::string unit = "each group's dk entries uniform[-1, 1), scaled to unit L2 norm";
    b.input("input.q", {D.T, D.L, n}, "queries q_l, G groups of dk", unit_groups(G.n, unit));
    b.input("input.k", {D.T, D.L, n}, "keys k_l, G groups of dk", unit_groups(G.n, unit));
    b.input("input.omega", {D.T, D.L, G}, "importance weights omega_l (>= 0)", range(0.0, 2.0, "uniform on [0, 2)"));
  }
  if (w == "rls")
    b.param("param.lambda", {D.L, G}, "forgetting factors lambda_{l,g} in (0, 1]",
            range(b.option("lambda_min", 0.5), 1.0, "uniform on [lambda_min (0.5), 1)"));
  if (w == "delta") b.param("param.beta", {D.L, G}, "delta-rule step sizes", range(0.0, 1.0, "uniform on [0, 1)"));
  declare_layer_outputs(b, D);
  const Dim dv = D.d / G;
  b.output("output.M", {D.T, G, dv, dk}, "the memory after the last write, per group [d/G, dk]");
  if (w == "rls") b.output("output.P", {D.T, G, dk, dk}, "the inverse correlation P after the last write");
  if (p.grad) {
    declare_layer_upstream(b, D);
    b.upstream("M");
    if (w == "rls") b.upstream("P");
  }
  return std::move(b.s);
}

void corpus(std::vector<CaseSpec>& v) {
  for (const char* dt : kCorpusDtypes) {
    const std::string s = std::string(".") + dt + ".s1";
    // alpha only where the write reads it (rls): a config key no write reads is refused.
    json ldm = {{"tokens", 2}, {"layers", 8}, {"d", 8}, {"groups", 2}, {"dk", 4}};
    ldm["write"] = "outer_product";
    v.push_back(forward_case("ldm_outer.kernel.g2_dk4_d8.L8" + s, "ldm", "default", dt, ldm));
    ldm["write"] = "delta";
    v.push_back(forward_case("ldm_delta.kernel.g2_dk4_d8.L8" + s, "ldm", "default", dt, ldm));
    ldm["write"] = "rls";
    ldm["alpha"] = 1.0;
    v.push_back(forward_case("ldm_rls.kernel.g2_dk4_d8.L8" + s, "ldm", "default", dt, ldm));
    json model = ldm;
    model["level"] = "model";
    model["hidden"] = 8;
    model["mlp_q_hidden"] = 0;
    model["mlp_k_hidden"] = 6;
    v.push_back(forward_case("ldm_rls.model.g2_dk4_d8_h8.L8" + s, "ldm", "default", dt, model));
    // The paper's main-model form: 16 groups, nonlinear query and key MLPs.
    v.push_back(forward_case("ldm_rls.model.g16_dk4_d32_h16_mlp16.L6" + s, "ldm", "default", dt,
                             {{"level", "model"}, {"tokens", 2}, {"layers", 6}, {"d", 32}, {"hidden", 16}, {"groups", 16},
                              {"dk", 4}, {"alpha", 2.0}, {"write", "rls"}, {"mlp_q_hidden", 16}, {"mlp_k_hidden", 16}}));
  }
  // Realistic small shapes: the paper's 16 groups.
  v.push_back(forward_case("ldm_rls.kernel.g16_dk16_d256.L48.bf16.s1", "ldm", "default", "bf16",
                           {{"tokens", 1}, {"layers", 48}, {"d", 256}, {"groups", 16}, {"dk", 16}, {"alpha", 1.0},
                            {"write", "rls"}},
                           true, false, {{"lambda_min", 0.7}}));
  v.push_back(forward_case("ldm_rls.model.g16_dk16_d256_h64.L48.bf16.s1", "ldm", "default", "bf16",
                           {{"level", "model"}, {"tokens", 2}, {"layers", 48}, {"d", 256}, {"hidden", 64}, {"groups", 16},
                            {"dk", 16}, {"alpha", 1.0}, {"write", "rls"}, {"mlp_q_hidden", 0}, {"mlp_k_hidden", 0}},
                           false, false, {{"lambda_min", 0.7}}));
  for (const char* dt : kCorpusDtypes) {
    // Backward: keys from x_prev (model level: at kernel level the keys are
    // given) with nonlinear query and key MLPs, the naive P update.
    const json base = {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"groups", 2}, {"dk", 4}, {"alpha", 1.0}, {"write", "rls"}};
    json xprev = base, naive = base;
    xprev["level"] = "model";
    xprev["hidden"] = 8;
    xprev["keys_from"] = "x_prev";
    xprev["mlp_q_hidden"] = 6;
    xprev["mlp_k_hidden"] = 6;
    naive["p_update"] = "naive";
    v.push_back(grad_case("ldm_rls_xprev.model_grad.g2_dk4_d8_h8_mlp6.L6", "ldm", "default", dt, xprev));
    v.push_back(grad_case("ldm_rls_naive.kernel_grad.g2_dk4_d8.L6", "ldm", "default", dt, naive));
    json ldm = {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"groups", 2}, {"dk", 4}, {"alpha", 1.0}};
    for (const char* w : {"outer_product", "delta", "rls"}) {
      ldm["write"] = w;  // the last, rls, stays for the ablations below
      json c = ldm;
      if (c["write"] != "rls") c.erase("alpha");  // only the rls write reads alpha (strict configs)
      const std::string stem = std::string("ldm_") + (w == std::string("outer_product") ? "outer" : w);
      v.push_back(grad_case(stem + ".kernel_grad.g2_dk4_d8.L6", "ldm", "default", dt, c));
    }
    // RLS ablations: the Joseph P update, memory-only read, no residual write.
    json jos = ldm, mem = ldm, nores = ldm;
    jos["p_update"] = "joseph";
    mem["read_residual"] = false;
    nores["write_residual"] = false;
    v.push_back(grad_case("ldm_rls_joseph.kernel_grad.g2_dk4_d8.L6", "ldm", "default", dt, jos));
    v.push_back(grad_case("ldm_rls_memread.kernel_grad.g2_dk4_d8.L6", "ldm", "default", dt, mem));
    v.push_back(grad_case("ldm_rls_nores.kernel_grad.g2_dk4_d8.L6", "ldm", "default", dt, nores));
    json ldmm = ldm;
    ldmm["level"] = "model";
    ldmm["hidden"] = 8;
    ldmm["mlp_q_hidden"] = 0;
    ldmm["mlp_k_hidden"] = 6;
    v.push_back(grad_case("ldm_rls.model_grad.g2_dk4_d8_h8.L6", "ldm", "default", dt, ldmm));
  }
}

}  // namespace

const SchemeInfo ldm_info{
    "ldm.md", "Linear Depth Memory: a matrix memory over depth, written by RLS, outer products or the delta rule",
    &schema, &corpus,
    {{{"tokens", 2}, {"layers", 3}, {"d", 4}, {"groups", 2}, {"dk", 2}, {"write", "rls"}, {"alpha", 1.0}},
     {{"tokens", 2}, {"layers", 3}, {"d", 4}, {"groups", 2}, {"dk", 2}, {"write", "delta"}},
     {{"tokens", 2}, {"layers", 3}, {"d", 4}, {"groups", 2}, {"dk", 2}, {"write", "rls"}, {"alpha", 1.0},
      {"level", "model"}, {"hidden", 5}, {"mlp_q_hidden", 0}, {"mlp_k_hidden", 3}}}};

}  // namespace dmref::conf
