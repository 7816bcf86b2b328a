// The attnres_ops binding at each scalar type the library instantiates
// (registry.cpp points at these): float, double, Ball, Perturbed.
#include "dmref/conformance/schemes/attnres_ops.hpp"

namespace dmref::conf {
DMREF_INSTANTIATE_SCHEME(attnres_ops)
}  // namespace dmref::conf
