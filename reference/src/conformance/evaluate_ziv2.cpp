// One instantiation of the conformance evaluator per translation unit.
#include "dmref/conformance/evaluate_impl.hpp"
namespace dmref::conf {
template Outputs<mpfi<kZiv2>> evaluate<mpfi<kZiv2>>(const Problem&);
}  // namespace dmref::conf
