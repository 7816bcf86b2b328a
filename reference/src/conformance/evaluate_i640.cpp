// One instantiation of the conformance evaluator per translation unit.
#include "dmref/conformance/evaluate_impl.hpp"
namespace dmref::conf {
template Outputs<mpfi<640>> evaluate<mpfi<640>>(const Problem&);
}  // namespace dmref::conf
