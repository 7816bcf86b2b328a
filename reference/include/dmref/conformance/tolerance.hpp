// dmref/conformance/tolerance.hpp: the gate's tolerance rule, in one place
// (docs/fixtures.md "Tolerance rule", derivation in docs/precision.md
// "Tolerance model"). The generator writes the rule into every fixture; the
// C++ gate (verify.cpp) and the Python gate (dmref_fixtures.check) read it from
// there and apply, element by element,
//     |observed_i - y_i| <= factor * B_i + floor_ulps * ulp_D(|y_i| + factor * B_i)
// where y = hi + lo is the certified golden, D the recipe's storage format and
// B_i = bound.<recipe>.<name>[i] = |mean_k e_ik| / factor + std_k e_ik over
// kToleranceSamples evaluations of the reference under the recipe's model of
// rounding (perturbed.hpp), e_ik their errors against the golden.
#pragma once

#include "dmref/dtype.hpp"

#include <cmath>
#include <string>
#include <vector>

namespace dmref {
struct RoundingModel;  // perturbed.hpp: only the generator's bounds need it, not the gate that reads them
}  // namespace dmref

namespace dmref::conf {

/// The rule's constants (docs/precision.md, "Tolerance model").
/// kToleranceSamples, K: evaluations of the standard model with random
/// rounding signs per recipe; B_i = |mean| / factor + std of element i's K
/// errors, so that factor B_i = |mean| + factor std: the deterministic part
/// (inputs and constants rounded to D: a kernel receives them the same) once,
/// the random part factor times.
/// kToleranceFactor, lambda: a correct kernel's error e_i at element i, to
/// first order sum_z (dy_i/dz) z delta_z with |delta_z| <= u_z, has variance at
/// most sigma_i^2 = sum_z (dy_i/dz z u_z)^2, the variance of the samples; for a
/// (near-)Gaussian e_i, (e_i - mean) / (std sqrt(1 + 1/K)) follows Student's t
/// with K - 1 = 31 degrees of freedom, and P(|t_31| > 8 / sqrt(1 + 1/32)) is
/// 6e-9 (mpmath: betainc(15.5, 0.5, 0, 31 / (31 + 62.06))): the chance that a
/// correct element fails even when its rounding errors all have the largest
/// magnitude allowed. (Rounding to nearest has errors of standard deviation
/// u / sqrt(3), which puts a real kernel at about 14 of its own sigmas.)
/// kToleranceFloorUlps: the kernel stores its output in D: rounding to
/// nearest errs by at most half an ulp of the unrounded value, whose magnitude
/// is at most |y| + factor B when it passes (tolerance() takes the ulp there);
/// one ulp leaves the other half for a store that rounds twice (f64 -> f32 ->
/// bf16) or toward zero.
inline constexpr int kToleranceSamples = 32;
inline constexpr double kToleranceFactor = 8;
inline constexpr double kToleranceFloorUlps = 1;

/// A precision recipe: how a correct kernel stores and computes. Its name is
/// the candidate dtype of `verify --dtype` and the tag of its bound tensors.
struct Recipe {
  const char* name;              // "f64", "f32", "bf16", "f16"
  const char* spelled;           // storage:arithmetic, also accepted by --dtype ("bf16:f32")
  const FloatFormat* storage;    // inputs, parameters, streams between layers, outputs
  double u;                      // unit roundoff of + - * in the arithmetic
  bool stores_streams;           // streams rounded to `storage` after every layer (forward and backward)
  const char* what;              // one line for the docs and --help
};

/// Every recipe, in the order fixtures list them.
const std::vector<Recipe>& recipes();

/// The recipe a --dtype value names ("bf16" or "bf16:f32", ...);
/// std::invalid_argument listing the accepted names otherwise.
const Recipe& recipe(const std::string& dtype);

/// The storage format of a dtype name ("f32", "bf16", "f16", "f64").
const FloatFormat& format_of(const std::string& dtype);

/// The rounding model Perturbed evaluates a recipe under (sample stream 0);
/// include dmref/perturbed.hpp to call it.
RoundingModel rounding_model_of(const Recipe& r);

/// Units in the last place of x in format D (the spacing at |x|; the
/// subnormal spacing below the normal range).
double ulp_in(const std::string& dtype, double x);

/// The rule for one element: factor * B + floor_ulps * ulp_D(|y| + factor * B).
/// The ulp is taken at the largest magnitude a passing unrounded value can
/// have, |y| + factor * B: rounding it to D errs by at most half an ulp there
/// (the deterministic part of B, inputs rounded to D, can put the kernel's
/// value far from a small y). dmref_fixtures.verify.tolerance is the same
/// expression, operation for operation.
inline double tolerance(double factor, double B, double floor_ulps, const std::string& dtype, double y) {
  return factor * B + floor_ulps * ulp_in(dtype, std::fabs(y) + factor * B);
}

/// Name of the bound tensor of golden `name` under recipe `r`.
inline std::string bound_name(const Recipe& r, const std::string& name) {
  return std::string("bound.") + r.name + "." + name;
}

}  // namespace dmref::conf
