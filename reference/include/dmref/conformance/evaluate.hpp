// dmref/conformance/evaluate.hpp: the reference on a Problem at scalar S:
// evaluate<S>(problem) returns the named outputs (docs/fixtures.md). The
// definitions are in evaluate_impl.hpp; the types below are instantiated once
// (float for the f32/bf16/f16 baselines, double for the f64 one, the certification precisions for goldens),
// each in its own translation unit (reference/src/evaluate_*.cpp).
#pragma once

#include "dmref/conformance/problem.hpp"

namespace dmref::conf {

template <class S>
Outputs<S> evaluate(const Problem& p);

extern template Outputs<float> evaluate<float>(const Problem&);
extern template Outputs<double> evaluate<double>(const Problem&);
extern template Outputs<mpfi<40>> evaluate<mpfi<40>>(const Problem&);
extern template Outputs<mpfi<160>> evaluate<mpfi<160>>(const Problem&);
extern template Outputs<mpfi<640>> evaluate<mpfi<640>>(const Problem&);

}  // namespace dmref::conf
