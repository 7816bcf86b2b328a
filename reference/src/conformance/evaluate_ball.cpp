// One instantiation of the conformance evaluator per translation unit: Balls,
// at the precision certify_bits sets for each rung of Ziv's ladder.
#include "dmref/conformance/evaluate_impl.hpp"
namespace dmref::conf {
template Outputs<Ball> evaluate<Ball>(const Problem&);
}  // namespace dmref::conf
