// Attention Residuals in the conformance layer: schema, corpus rows,
// registry entry (binding: conformance/schemes/attnres.hpp).
#include "dmref/conformance/registry.hpp"

namespace dmref::conf {
namespace {

Schema schema(const Problem& p, const json& opt) {
  SchemaBuilder b(p, opt);
  const Layers D = declare_layers(b);
  const bool block = b.choice("variant", {"full", "block"}, "full: softmax over every earlier layer; block: over block summaries") == "block";
  if (block) {  // exactly one layout: the scheme's rule (AttentionResiduals::validate)
    b.integer_or("block_size", 0, "fixed block size S (exactly one of block_size and blocks)", 1);
    b.integer_or("blocks", 0, "number of blocks N (exactly one of block_size and blocks)", 1);
  } else {
    const std::string why = std::string("read only by the block variant (config.variant is ") +
                            (p.contains("variant") ? "full" : "missing: full") + ")";
    b.unread("block_size", why);
    b.unread("blocks", why);
  }
  b.real("eps", "1e-6", "RMSNorm epsilon of the keys (> 0)");
  b.param("param.w", {D.L + 1, D.d}, "pseudo-queries w_l (readout l = 0..L)",
          uniform(2.0 / std::sqrt(double(D.d.n)), "uniform[-1, 1) x 2/sqrt(d) (logits O(1))"));
  b.param("param.g", {D.L + 1, D.d}, "RMSNorm gains of the keys", range(0.5, 1.5, "uniform on [0.5, 1.5)"));
  declare_layer_outputs(b, D);
  if (p.grad) declare_layer_upstream(b, D);
  return std::move(b.s);
}

void corpus(std::vector<CaseSpec>& v) {
  for (const char* dt : kCorpusDtypes) {
    const std::string s = std::string(".") + dt + ".s1";
    const json base = {{"tokens", 2}, {"layers", 8}, {"d", 8}};
    json full = base, block = base, model = base;
    full["variant"] = "full";
    block["variant"] = "block";
    block["block_size"] = 3;
    model["variant"] = "block";
    model["block_size"] = 2;
    model["level"] = "model";
    model["hidden"] = 8;
    v.push_back(forward_case("attnres_full.kernel.d8.L8" + s, "attnres", "default", dt, full));
    v.push_back(forward_case("attnres_block.kernel.d8_S3.L8" + s, "attnres", "default", dt, block));
    v.push_back(forward_case("attnres_block.model.d8_S2_h8.L8" + s, "attnres", "default", dt, model));
    v.push_back(forward_case("attnres_block.kernel.d8_N3.L8" + s, "attnres", "default", dt,
                             {{"tokens", 2}, {"layers", 8}, {"d", 8}, {"variant", "block"}, {"blocks", 3}}));
    v.push_back(grad_case("attnres_block.kernel_grad.d8_N3.L6", "attnres", "default", dt,
                          {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"variant", "block"}, {"blocks", 3}}));
    const json k = {{"tokens", 2}, {"layers", 6}, {"d", 8}};
    json m = k;
    m["level"] = "model";
    m["hidden"] = 8;
    json gfull = k, gblock = k, gblockm = m;
    gfull["variant"] = "full";
    gblock["variant"] = "block";
    gblock["block_size"] = 3;
    gblockm["variant"] = "block";
    gblockm["block_size"] = 2;
    v.push_back(grad_case("attnres_full.kernel_grad.d8.L6", "attnres", "default", dt, gfull));
    v.push_back(grad_case("attnres_block.kernel_grad.d8_S3.L6", "attnres", "default", dt, gblock));
    v.push_back(grad_case("attnres_block.model_grad.d8_S2_h8.L6", "attnres", "default", dt, gblockm));
  }
  v.push_back(forward_case("attnres_block.kernel.d256_S6.L48.bf16.s1", "attnres", "default", "bf16",
                           {{"tokens", 1}, {"layers", 48}, {"d", 256}, {"variant", "block"}, {"block_size", 6}}, true,
                           false));
}

}  // namespace

const SchemeInfo attnres_info{"attnres.md", "Attention Residuals: a softmax over depth replaces the residual sum",
                              &schema, &corpus,
                              {{{"tokens", 2}, {"layers", 3}, {"d", 4}, {"variant", "full"}},
                               {{"tokens", 2}, {"layers", 3}, {"d", 4}, {"variant", "block"}, {"block_size", 2}},
                               {{"tokens", 2}, {"layers", 3}, {"d", 4}, {"level", "model"}, {"hidden", 5}}}};

}  // namespace dmref::conf
