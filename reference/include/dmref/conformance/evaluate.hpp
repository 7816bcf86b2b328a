// dmref/conformance/evaluate.hpp: the reference on a Problem at scalar S:
// evaluate<S>(problem) returns the named outputs (docs/fixtures.md). It
// dispatches through the scheme registry (registry.hpp, registry.cpp) to each
// scheme's binding (conformance/schemes/<s>.hpp); the types below are instantiated once
// (float for the f32/bf16/f16 baselines, double for the f64 one, Ball for
// the certified goldens at every precision of the ladder, Perturbed for the
// tolerance model),
// per scheme (reference/src/conformance/schemes/<s>_eval.cpp).
#pragma once

#include "dmref/ball.hpp"
#include "dmref/conformance/problem.hpp"
#include "dmref/perturbed.hpp"

#include <vector>

namespace dmref::conf {

template <class S>
Outputs<S> evaluate(const Problem& p);

/// Ziv's ladder for the goldens, in bits (Ball precisions, whole 64-bit
/// limbs: 2, 8, 32, 128). Each rung has 4x the bits of the one before, so a
/// token that fails a rung costs at most about a tenth of the next one
/// (cost grows faster than linearly in bits). The cap, 8192 bits: a ball is
/// then ~1 KiB, so one layer of a d = 1024 model is tens of MiB per thread,
/// and the depth a scheme certifies grows with the bits only as fast as the
/// widths of its enclosures grow per layer (docs/precision.md); a token that
/// needs more is reported with its widest element.
inline const std::vector<int> kZivBits = {128, 512, 2048, 8192};

extern template Outputs<float> evaluate<float>(const Problem&);
extern template Outputs<double> evaluate<double>(const Problem&);
extern template Outputs<Ball> evaluate<Ball>(const Problem&);
/// The tolerance model: samples of the standard model of rounding (perturbed.hpp, tolerance.hpp).
extern template Outputs<Perturbed> evaluate<Perturbed>(const Problem&);

}  // namespace dmref::conf
