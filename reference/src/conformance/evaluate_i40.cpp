// One instantiation of the conformance evaluator per translation unit.
#include "dmref/conformance/evaluate_impl.hpp"
namespace dmref::conf {
template Outputs<mpfi<40>> evaluate<mpfi<40>>(const Problem&);
}  // namespace dmref::conf
