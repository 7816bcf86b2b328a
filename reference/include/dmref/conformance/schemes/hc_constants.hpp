// dmref/conformance/schemes/hc_constants.hpp: Hyper-Connections' config keys
// (dynamic, tanh, ln_eps, norm), shared by the hc binding (schemes/hc.hpp) and
// the hc_ops binding (schemes/hc_ops.hpp), so that neither binding includes
// the other. The keys and around_init are defined in src/conformance/schemes/hc.cpp.
#pragma once

#include "dmref/conformance/schema.hpp"
#include "dmref/hc.hpp"

#include <functional>
#include <string>
#include <vector>

namespace dmref::conf {

/// What declare_hc_keys declared: dynamic HC, and (dynamic) whether the norm is LayerNorm.
struct HcKeys {
  bool dynamic = false, layernorm = true;
};

/// Declares dynamic, and for dynamic HC tanh, ln_eps and norm; `bias` is the
/// tensor of the LayerNorm bias (unread with RMSNorm) and `dynamic_tensors`
/// the tensors static HC does not read (unread, naming config.dynamic).
HcKeys declare_hc_keys(SchemaBuilder& b, const Problem& p, const std::string& bias,
                       const std::vector<std::string>& dynamic_tensors);

/// The values of the keys declare_hc_keys declared, as an HcConfig with no layers.
template <class S>
HcConfig<S> hc_constants(const Schema& s, std::int64_t n, std::int64_t d) {
  HcConfig<S> c;
  c.n = int(n);
  c.d = int(d);
  c.dynamic = s.flag("dynamic");
  if (c.dynamic) {  // static HC has no norm and no activation: its coefficients are parameters
    c.tanh = s.flag("tanh");
    c.ln_eps = s.real<S>("ln_eps");
    c.norm = s.text("norm") == "rmsnorm" ? HcNorm::rms : HcNorm::layer;
  }
  return c;
}

/// Around the paper's init (A_m = e_{l mod n}, A_r = I, B = 1): uniform[-1, 1)
/// x 0.2, then `where(l, i)` says which entries of layer l (of `per_layer`) get the 1 added.
Draw around_init(std::int64_t L, std::int64_t per_layer, std::function<bool(std::int64_t, std::int64_t)> where,
                 std::string text);

}  // namespace dmref::conf
