// One instantiation of the conformance evaluator per translation unit.
#include "dmref/conformance/evaluate_impl.hpp"
namespace dmref::conf {
template Outputs<float> evaluate<float>(const Problem&);
}  // namespace dmref::conf
