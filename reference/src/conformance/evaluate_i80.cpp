// One instantiation of the conformance evaluator per translation unit.
#include "dmref/conformance/evaluate_impl.hpp"
namespace dmref::conf {
template Outputs<mpfi<80>> evaluate<mpfi<80>>(const Problem&);
}  // namespace dmref::conf
