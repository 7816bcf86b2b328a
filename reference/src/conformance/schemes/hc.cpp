// Hyper-Connections in the conformance layer: schema, corpus rows, registry
// entry (binding: conformance/schemes/hc.hpp).
#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/schemes/hc_constants.hpp"

namespace dmref::conf {

/// Around the paper's init (A_m = e_{l mod n}, A_r = I, B = 1): `where(l, i)`
/// says which entries of layer l get the 1 added.
Draw around_init(std::int64_t L, std::int64_t per_layer, std::function<bool(std::int64_t, std::int64_t)> where,
                 std::string text) {
  Draw d = uniform(0.2, std::move(text));
  d.adjust = [L, per_layer, where](std::vector<double>& v, const std::function<double(double)>& round) {
    for (std::int64_t l = 0; l < L; ++l)
      for (std::int64_t i = 0; i < per_layer; ++i)
        if (where(l, i)) v[l * per_layer + i] = round(v[l * per_layer + i] + 1);
  };
  return d;
}

HcKeys declare_hc_keys(SchemaBuilder& b, const Problem& p, const std::string& bias,
                       const std::vector<std::string>& dynamic_tensors) {
  HcKeys k;
  k.dynamic = b.flag("dynamic", false, "dynamic HC (coefficients from the normalised streams); false: static");
  if (k.dynamic) {  // static HC has no norm and no activation: its coefficients are parameters
    b.flag("tanh", true, "tanh on the dynamic coefficients");
    b.real("ln_eps", "1e-5", "epsilon of the norm");
    k.layernorm = b.choice("norm", {"layernorm", "rmsnorm"}, "the norm of the dynamic coefficients") == "layernorm";
    if (!k.layernorm) b.unread_tensor(bias, "RMSNorm has no bias (config.norm is rmsnorm)");
  } else {
    const std::string why = std::string("read only by dynamic HC (config.dynamic is ") +
                            (p.contains("dynamic") ? "false" : "missing: static HC") + ")";
    for (const char* key : {"tanh", "ln_eps", "norm"}) b.unread(key, why);
    for (const auto& t : dynamic_tensors) b.unread_tensor(t, why);
  }
  return k;
}

namespace {

Schema schema(const Problem& p, const json& opt) {
  SchemaBuilder b(p, opt);
  const Layers D = declare_layers(b);
  const Dim n{b.integer("n", "expansion rate: number of residual streams"), "n"};
  const auto [dynamic, layernorm] = declare_hc_keys(
      b, p, "param.ln_bias", {"param.ln_gain", "param.ln_bias", "param.wm", "param.wr", "param.wb", "param.scale"});
  const std::int64_t L = D.L.n, nn = n.n;
  b.param("param.am", {D.L, n}, "static A_m (width connections in)",
          around_init(L, nn, [nn](std::int64_t l, std::int64_t i) { return i == l % nn; },
                      "e_{l mod n} + uniform[-1, 1) x 0.2"));
  b.param("param.ar", {D.L, n, n}, "static A_r (stream mixing)",
          around_init(L, nn * nn, [nn](std::int64_t, std::int64_t i) { return i / nn == i % nn; },
                      "I + uniform[-1, 1) x 0.2"));
  b.param("param.b", {D.L, n}, "static B (depth connections out)",
          around_init(L, nn, [](std::int64_t, std::int64_t) { return true; }, "1 + uniform[-1, 1) x 0.2"));
  if (dynamic) {
    b.param("param.ln_gain", {D.L, D.d}, "norm gain", range(0.5, 1.5, "uniform on [0.5, 1.5)"));
    if (layernorm) b.param("param.ln_bias", {D.L, D.d}, "LayerNorm bias", uniform(0.1, "uniform[-1, 1) x 0.1"));
    const double w = b.option("w_scale", 1.0) / std::sqrt(double(D.d.n));
    const std::string wt = "uniform[-1, 1) x w_scale (1) / sqrt(d)";
    b.param("param.wm", {D.L, D.d}, "dynamic W_m", uniform(w, wt));
    b.param("param.wr", {D.L, D.d, n}, "dynamic W_r", uniform(w, wt));
    b.param("param.wb", {D.L, D.d}, "dynamic W_b", uniform(w, wt));
    b.param("param.scale", {D.L, {2, "2"}}, "s_a, s_b: scales of the dynamic parts",
            range(b.option("scale_min", 0.01), b.option("scale_max", 0.1),
                  "uniform on [scale_min (0.01), scale_max (0.1))"));
  }
  declare_layer_outputs(b, D);
  b.output("output.H", {D.T, n, D.d}, "the final streams");
  if (p.grad) {
    declare_layer_upstream(b, D);
    b.upstream("H");
  }
  return std::move(b.s);
}

void corpus(std::vector<CaseSpec>& v) {
  for (const char* dt : kCorpusDtypes) {
    const std::string s = std::string(".") + dt + ".s1";
    const json hc = {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"n", 4}};
    json dyn = hc, notanh = hc, hcm = hc, rms = hc;
    dyn["dynamic"] = true;
    notanh["dynamic"] = true;
    notanh["tanh"] = false;
    hcm["dynamic"] = true;
    hcm["level"] = "model";
    hcm["hidden"] = 8;
    rms["dynamic"] = true;
    rms["norm"] = "rmsnorm";
    v.push_back(forward_case("hc_static.kernel.n4_d8.L6" + s, "hc", "default", dt, hc));
    v.push_back(forward_case("hc_dynamic.kernel.n4_d8.L6" + s, "hc", "default", dt, dyn));
    v.push_back(forward_case("hc_dynamic_notanh.kernel.n4_d8.L6" + s, "hc", "default", dt, notanh));
    v.push_back(forward_case("hc_dynamic.model.n4_d8_h8.L6" + s, "hc", "default", dt, hcm));
    v.push_back(forward_case("hc_dynamic_rmsnorm.kernel.n4_d8.L6" + s, "hc", "default", dt, rms));
    json rmsm = rms;
    rmsm["level"] = "model";
    rmsm["hidden"] = 8;
    v.push_back(grad_case("hc_dynamic_rmsnorm.kernel_grad.n4_d8.L6", "hc", "default", dt, rms));
    v.push_back(grad_case("hc_dynamic_rmsnorm.model_grad.n4_d8_h8.L6", "hc", "default", dt, rmsm));
    v.push_back(grad_case("hc_static.kernel_grad.n4_d8.L6", "hc", "default", dt, hc));
    v.push_back(grad_case("hc_dynamic.kernel_grad.n4_d8.L6", "hc", "default", dt, dyn));
    v.push_back(grad_case("hc_dynamic_notanh.kernel_grad.n4_d8.L6", "hc", "default", dt, notanh));
    v.push_back(grad_case("hc_dynamic.model_grad.n4_d8_h8.L6", "hc", "default", dt, hcm));
  }
  v.push_back(forward_case("hc_dynamic.kernel.n4_d256.L48.bf16.s1", "hc", "default", "bf16",
                           {{"tokens", 1}, {"layers", 48}, {"d", 256}, {"n", 4}, {"dynamic", true}}, true, false));
}

}  // namespace

const SchemeInfo hc_info{"hc.md", "Hyper-Connections: n residual streams mixed by small static or dynamic matrices",
                         &schema, &corpus,
                         {{{"tokens", 2}, {"layers", 3}, {"d", 4}, {"n", 2}},
                          {{"tokens", 2}, {"layers", 3}, {"d", 4}, {"n", 2}, {"dynamic", true}},
                          {{"tokens", 2}, {"layers", 3}, {"d", 4}, {"n", 2}, {"dynamic", true}, {"norm", "rmsnorm"}},
                          {{"tokens", 2}, {"layers", 3}, {"d", 4}, {"n", 2}, {"level", "model"}, {"hidden", 5}}}};

}  // namespace dmref::conf
