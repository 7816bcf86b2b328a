// The mhc_ops binding at each scalar type the library instantiates (registry.cpp
// points at these): float (the f32/bf16/f16 baselines), double (f64), Ball
// (the certified goldens), Perturbed (the tolerance model).
#include "dmref/conformance/schemes/mhc_ops.hpp"

namespace dmref::conf {
template void evaluate_mhc_ops<float>(const Problem&, const Schema&, Outputs<float>&);
template void evaluate_mhc_ops<double>(const Problem&, const Schema&, Outputs<double>&);
template void evaluate_mhc_ops<Ball>(const Problem&, const Schema&, Outputs<Ball>&);
template void evaluate_mhc_ops<Perturbed>(const Problem&, const Schema&, Outputs<Perturbed>&);
}  // namespace dmref::conf
