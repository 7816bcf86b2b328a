// PreLN in the conformance layer: schema, corpus rows, registry entry
// (binding: conformance/schemes/preln.hpp).
#include "dmref/conformance/registry.hpp"

namespace dmref::conf {
namespace {

Schema schema(const Problem& p, const json& opt) {
  SchemaBuilder b(p, opt);
  const Layers D = declare_layers(b);
  declare_layer_outputs(b, D);
  if (p.grad) declare_layer_upstream(b, D);
  return std::move(b.s);
}

void corpus(std::vector<CaseSpec>& v) {
  for (const char* dt : kCorpusDtypes) {
    const std::string s = std::string(".") + dt + ".s1";
    v.push_back(forward_case("preln.kernel.d8.L6" + s, "preln", "default", dt, {{"tokens", 2}, {"layers", 6}, {"d", 8}}));
    v.push_back(forward_case("preln.model.d8_h8.L6" + s, "preln", "default", dt,
                             {{"level", "model"}, {"tokens", 2}, {"layers", 6}, {"d", 8}, {"hidden", 8}}));
    // Embeddings of RMS ~6e-4, so mean(h^2) ~ 3e-7 is comparable with the norm
    // epsilons (1e-6): eps inside vs outside the square root.
    const json tiny = {{"e_scale", 1e-3}};
    v.push_back(forward_case("preln.model.d8_h8_e1e-3.L6" + s, "preln", "default", dt,
                             {{"level", "model"}, {"tokens", 2}, {"layers", 6}, {"d", 8}, {"hidden", 8}}, true, true, tiny));
    const json k = {{"tokens", 2}, {"layers", 6}, {"d", 8}};
    json m = k;
    m["level"] = "model";
    m["hidden"] = 8;
    v.push_back(grad_case("preln.kernel_grad.d8.L6", "preln", "default", dt, k));
    v.push_back(grad_case("preln.model_grad.d8_h8.L6", "preln", "default", dt, m));
    v.push_back(grad_case("preln.model_grad.d8_h8_e1e-3.L6", "preln", "default", dt,
                          {{"level", "model"}, {"tokens", 2}, {"layers", 6}, {"d", 8}, {"hidden", 8}}, tiny));
  }
}

}  // namespace

const SchemeInfo preln_info{"preln.md", "Pre-LayerNorm residual stream: the baseline h_l = h_{l-1} + F_l(h_{l-1})",
                            &schema, &corpus,
                            {{{"tokens", 2}, {"layers", 3}, {"d", 4}},
                             {{"tokens", 2}, {"layers", 3}, {"d", 4}, {"level", "model"}, {"hidden", 5}}}};

}  // namespace dmref::conf
