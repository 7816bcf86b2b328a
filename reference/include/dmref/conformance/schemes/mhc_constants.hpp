// dmref/conformance/schemes/mhc_constants.hpp: mHC's preset and the knobs
// production kernels expose, as config keys: shared by the mhc binding
// (schemes/mhc.hpp) and the mhc_ops binding (schemes/mhc_ops.hpp), so that
// neither binding includes the other (touching one rebuilds one translation
// unit of the library, docs/performance.md "Compile time"). The keys are
// declared in src/conformance/schemes/mhc.cpp.
#pragma once

#include "dmref/conformance/schema.hpp"
#include "dmref/mhc.hpp"

namespace dmref::conf {

/// The preset and the knobs production kernels expose (t_max, the epsilons,
/// the scales; each defaults to the preset's value), as declared by
/// declare_mhc_constants (and head_eps where a schema declares it, mhc_ops'
/// op head): an MhcConfig with no layers yet.
template <class S>
MhcConfig<S> mhc_constants(const Schema& s, std::int64_t n, std::int64_t C) {
  MhcConfig<S> c = mhc_config<S>(s.text("preset") == "deepseek-v4" ? MhcPreset::deepseek_v4 : MhcPreset::paper, int(n), int(C));
  if (s.has_key("t_max")) c.t_max = int(s.integer("t_max"));
  for (auto [key, x] : {std::pair<const char*, S*>{"rms_eps", &c.rms_eps}, {"pre_eps", &c.pre_eps},
                        {"res_eps_add", &c.res_eps_add}, {"res_eps_den", &c.res_eps_den}, {"pre_scale", &c.pre_scale},
                        {"post_scale", &c.post_scale}, {"head_eps", &c.head_eps}})
    if (s.has_key(key)) *x = s.real<S>(key);
  return c;
}
/// Declares the keys mhc_constants reads (src/conformance/schemes/mhc.cpp):
/// every knob; or, with `layer_why` (a problem without a layer: mhc_ops' op
/// head), only the preset and rms_eps, the layer's knobs unread for that reason.
void declare_mhc_constants(SchemaBuilder& b, const std::string& layer_why = "");

}  // namespace dmref::conf
