// The ldm_ops binding at each scalar type the library instantiates (registry.cpp
// points at these): float (the f32/bf16/f16 baselines), double (f64), Ball
// (the certified goldens), Perturbed (the tolerance model).
#include "dmref/conformance/schemes/ldm_ops.hpp"

namespace dmref::conf {
DMREF_INSTANTIATE_SCHEME(ldm_ops)
}  // namespace dmref::conf
