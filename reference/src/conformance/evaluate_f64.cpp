// One instantiation of the conformance evaluator per translation unit.
#include "dmref/conformance/evaluate_impl.hpp"
namespace dmref::conf {
template Outputs<double> evaluate<double>(const Problem&);
}  // namespace dmref::conf
