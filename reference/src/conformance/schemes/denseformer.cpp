// DenseFormer in the conformance layer: schema, corpus rows, registry entry
// (binding: conformance/schemes/denseformer.hpp).
#include "dmref/conformance/registry.hpp"

namespace dmref::conf {
namespace {

Schema schema(const Problem& p, const json& opt) {
  SchemaBuilder b(p, opt);
  const Layers D = declare_layers(b);
  const std::int64_t k = b.integer_or("dilation", 1, "dilation k: Y_i mixes X_j for j = i, i-k, i-2k, ...", 1);
  const std::int64_t per = b.integer_or("period", 1, "period p: a weighted average after every p-th layer", 1);
  Draw a = uniform(0.3, "uniform[-1, 1) x 0.3 inside the k x p pattern, 1 + x/3 on the diagonal of a DWA row, "
                        "1 on the other diagonals (no DWA: Y_i = X_i), 0 outside");
  const std::int64_t L = D.L.n;
  a.adjust = [L, k, per](std::vector<double>& v, const std::function<double(double)>& round) {
    for (std::int64_t i = 0; i <= L; ++i)
      for (std::int64_t j = 0; j <= L; ++j) {
        double& x = v[i * (L + 1) + j];
        if (j > i || (i - j) % k != 0 || (i % per != 0 && j != i)) x = 0;  // outside the k x p pattern
        else if (i == 0 || i % per != 0) x = 1;                          // Y_0 = X_0; no DWA: Y_i = X_i
        else if (j == i) x = round(1 + x / 3);
      }
  };
  b.param("param.a", {D.L + 1, D.L + 1}, "depth-weighted-average weights alpha_{i,j} (row i: after layer i)",
          std::move(a));
  declare_layer_outputs(b, D);
  if (p.grad) declare_layer_upstream(b, D);
  return std::move(b.s);
}

void corpus(std::vector<CaseSpec>& v) {
  for (const char* dt : kCorpusDtypes) {
    const std::string s = std::string(".") + dt + ".s1";
    v.push_back(forward_case("denseformer.kernel.d8.L6" + s, "denseformer", "default", dt,
                             {{"tokens", 2}, {"layers", 6}, {"d", 8}}));
    v.push_back(forward_case("denseformer.model.d8_h8.L6" + s, "denseformer", "default", dt,
                             {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"level", "model"}, {"hidden", 8}}));
    v.push_back(forward_case("denseformer.kernel.d8_k2_p3.L6" + s, "denseformer", "default", dt,
                             {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"dilation", 2}, {"period", 3}}));
    const json k = {{"tokens", 2}, {"layers", 6}, {"d", 8}};
    json m = k;
    m["level"] = "model";
    m["hidden"] = 8;
    v.push_back(grad_case("denseformer.kernel_grad.d8.L6", "denseformer", "default", dt, k));
    v.push_back(grad_case("denseformer.model_grad.d8_h8.L6", "denseformer", "default", dt, m));
    // k = p = 1 above: the dilation and period mutants need k, p > 1 (docs/fixtures.md).
    v.push_back(grad_case("denseformer.kernel_grad.d8_k2_p3.L6", "denseformer", "default", dt,
                          {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"dilation", 2}, {"period", 3}}));
  }
}

}  // namespace

const SchemeInfo denseformer_info{"denseformer.md", "DenseFormer: depth-weighted averages of every earlier layer's output",
                                  &schema, &corpus,
                                  {{{"tokens", 2}, {"layers", 3}, {"d", 4}, {"dilation", 2}, {"period", 2}},
                                   {{"tokens", 2}, {"layers", 3}, {"d", 4}, {"level", "model"}, {"hidden", 5}}}};

}  // namespace dmref::conf
