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

/// Ziv's precisions for the goldens, as the decimal digits D of mpfi<D>: 38,
/// 173, 616 are 128, 576, 2048 bits, whole 64-bit limbs (2, 9, 32). Boost sets
/// the binary precision from D as floor(1000 D / 301) + 2 (+ 1 when 301
/// divides 1000 D), so 256 and 512 bits are out of reach; the previous 40,
/// 160, 640 were 134, 533, 2128 bits: a third limb at the first step, two more
/// at the last (docs/precision.md).
inline constexpr unsigned kZiv0 = 38, kZiv1 = 173, kZiv2 = 616;

extern template Outputs<float> evaluate<float>(const Problem&);
extern template Outputs<double> evaluate<double>(const Problem&);
extern template Outputs<mpfi<kZiv0>> evaluate<mpfi<kZiv0>>(const Problem&);
extern template Outputs<mpfi<kZiv1>> evaluate<mpfi<kZiv1>>(const Problem&);
extern template Outputs<mpfi<kZiv2>> evaluate<mpfi<kZiv2>>(const Problem&);

}  // namespace dmref::conf
