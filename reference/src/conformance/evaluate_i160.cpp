// One instantiation of the conformance evaluator per translation unit.
#include "dmref/conformance/evaluate_impl.hpp"
namespace dmref::conf {
template Outputs<mpfi<160>> evaluate<mpfi<160>>(const Problem&);
}  // namespace dmref::conf
