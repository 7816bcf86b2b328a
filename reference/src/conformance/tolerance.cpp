// The gate's tolerance rule: recipes and formats (tolerance.hpp).
#include "dmref/conformance/tolerance.hpp"

#include "dmref/perturbed.hpp"

#include <cmath>
#include <stdexcept>

namespace dmref::conf {

namespace {
constexpr FloatFormat float64{53, 11, -1022, 1023, "float64"};
}

const FloatFormat& format_of(const std::string& dtype) {
  if (dtype == "f32") return float32;
  if (dtype == "bf16") return bfloat16;
  if (dtype == "f16") return float16;
  if (dtype == "f64") return float64;
  throw std::invalid_argument("unknown dtype \"" + dtype + "\" (f32, bf16, f16, f64)");
}

const std::vector<Recipe>& recipes() {
  // u: 2^-24 (binary32 arithmetic) or 2^-53 (binary64). The 16-bit recipes
  // compute in float32 and store in the 16-bit format, as GPU kernels do
  // (tensor-core products accumulate in float32).
  static const std::vector<Recipe> r = {
      {"f32", "f32:f32", &float32, 0x1p-24, false, "float32 storage, float32 arithmetic"},
      {"bf16", "bf16:f32", &bfloat16, 0x1p-24, true,
       "bfloat16 inputs, parameters, streams between layers, model-level layer outputs and outputs; float32 arithmetic"},
      {"f16", "f16:f32", &float16, 0x1p-24, true,
       "float16 inputs, parameters, streams between layers, model-level layer outputs and outputs; float32 arithmetic"},
      {"f64", "f64:f64", &float64, 0x1p-53, false, "float64 storage, float64 arithmetic"},
  };
  return r;
}

const Recipe& recipe(const std::string& dtype) {
  for (const Recipe& r : recipes())
    if (dtype == r.name || dtype == r.spelled) return r;
  throw std::invalid_argument("unknown dtype \"" + dtype +
                              "\" (f32, bf16, f16, f64; or as storage:arithmetic f32:f32, bf16:f32, f16:f32, f64:f64)");
}

RoundingModel rounding_model_of(const Recipe& r) {
  RoundingModel m;
  m.u = r.u;
  m.u_fn = 4 * r.u;  // 2 ulps: perturbed.hpp
  // Inputs reach the evaluation already stored in D (generate.cpp); what is
  // converted from double inside it is a constant of the kernel: a literal of
  // its arithmetic (float32), or exact for f64.
  m.input = r.u == 0x1p-53 ? nullptr : &float32;
  if (r.stores_streams) {
    m.u_store = std::ldexp(1.0, -r.storage->precision);
    m.store_max = max_finite(*r.storage);
    m.store_tiny = std::ldexp(1.0, r.storage->emin - r.storage->precision);  // half of 2^(emin - p + 1)
  }
  return m;
}

double ulp_in(const std::string& dtype, double x) {
  const FloatFormat& f = format_of(recipe(dtype).name);
  const double ax = std::fabs(x);
  int e = std::ilogb(ax == 0 ? std::ldexp(1.0, f.emin) : ax);
  if (e < f.emin) e = f.emin;
  return std::ldexp(1.0, e - (f.precision - 1));
}

}  // namespace dmref::conf
