// One instantiation of the conformance evaluator per translation unit.
#include "dmref/conformance/evaluate_impl.hpp"
namespace dmref::conf {
template Outputs<mpfi<kZiv1>> evaluate<mpfi<kZiv1>>(const Problem&);
}  // namespace dmref::conf
