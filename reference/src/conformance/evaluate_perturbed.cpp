// One instantiation of the conformance evaluator per translation unit:
// Perturbed, the samples of the tolerance model (perturbed.hpp, tolerance.hpp).
#include "dmref/conformance/evaluate_impl.hpp"
namespace dmref::conf {
template Outputs<Perturbed> evaluate<Perturbed>(const Problem&);
}  // namespace dmref::conf
