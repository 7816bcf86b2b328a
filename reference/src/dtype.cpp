// Exact rounding to binary32 / bfloat16 / binary16 (dmref/dtype.hpp).
//
// The rounding works on the double directly: with q the exponent of the unit
// in the last place of the target at |x| (q = max(e, emin) - (p - 1), e the
// exponent of |x|), s = |x| 2^-q is computed exactly (a power-of-two scaling
// that neither overflows nor underflows), rounded to an integer with ties to
// even by hand (independent of the FPU rounding mode), and scaled back.
#include "dmref/dtype.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

namespace dmref {

namespace {

constexpr std::uint64_t kDoubleMantissa = (std::uint64_t{1} << 52) - 1;

std::uint64_t nan_bits(const FloatFormat& f, double x) {
  const int m = f.precision - 1;  // stored mantissa bits
  const std::uint64_t d = std::bit_cast<std::uint64_t>(x);
  std::uint64_t payload = (d & kDoubleMantissa) >> (52 - m);
  if (payload == 0) payload = std::uint64_t{1} << (m - 1);
  const std::uint64_t sign = (d >> 63) << (width_bits(f) - 1);
  const std::uint64_t exponent = ((std::uint64_t{1} << f.exponent_bits) - 1) << m;
  return sign | exponent | payload;
}

}  // namespace

double max_finite(const FloatFormat& f) { return std::ldexp(2.0 - std::ldexp(1.0, 1 - f.precision), f.emax); }

double round_to(const FloatFormat& f, double x) {
  // float32, finite: the hardware's conversion rounds to nearest, ties to
  // even, with float32's subnormals and overflow to infinity: the result of
  // round_to_generic (test_dtype compares the two on 2.2 million values), at a
  // fraction of its cost (the tolerance model converts every input of every
  // sample). NaNs take the generic path (their payload rule).
  if (f.precision == 24 && f.exponent_bits == 8 && std::isfinite(x)) return static_cast<double>(static_cast<float>(x));
  return round_to_generic(f, x);
}

double round_to_generic(const FloatFormat& f, double x) {
  if (std::isnan(x)) return decode(f, nan_bits(f, x));
  if (std::isinf(x) || x == 0) return x;
  const double a = std::fabs(x);
  const int e = std::ilogb(a);
  const int q = std::max(e, f.emin) - (f.precision - 1);
  const double s = std::ldexp(a, -q);  // exact, < 2^p
  double r = std::floor(s);
  const double frac = s - r;  // exact
  if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0)) r += 1;
  double y = std::ldexp(r, q);
  if (y > max_finite(f)) y = std::numeric_limits<double>::infinity();
  return std::copysign(y, x);
}

std::uint64_t encode(const FloatFormat& f, double x) {
  if (std::isnan(x)) return nan_bits(f, x);
  const int m = f.precision - 1;
  const std::uint64_t sign = std::signbit(x) ? std::uint64_t{1} << (width_bits(f) - 1) : 0;
  const std::uint64_t all_ones = (std::uint64_t{1} << f.exponent_bits) - 1;
  const double a = std::fabs(round_to(f, x));
  if (std::isinf(a)) return sign | (all_ones << m);
  if (a == 0) return sign;
  const int e = std::ilogb(a);
  if (e < f.emin) {  // subnormal: exponent field 0, a = mant 2^(emin - m)
    return sign | static_cast<std::uint64_t>(std::ldexp(a, m - f.emin));
  }
  const auto mant = static_cast<std::uint64_t>(std::ldexp(a, m - e)) - (std::uint64_t{1} << m);
  const auto biased = static_cast<std::uint64_t>(e + f.emax);
  return sign | (biased << m) | mant;
}

double decode(const FloatFormat& f, std::uint64_t bits) {
  const int w = width_bits(f);
  if (w < 64 && (bits >> w) != 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(bits));
    throw std::invalid_argument(std::string("dtype: bits: ") + buf + " is wider than " + f.name);
  }
  const int m = f.precision - 1;
  const bool negative = (bits >> (w - 1)) & 1;
  const std::uint64_t all_ones = (std::uint64_t{1} << f.exponent_bits) - 1;
  const std::uint64_t field = (bits >> m) & all_ones;
  const std::uint64_t mant = bits & ((std::uint64_t{1} << m) - 1);
  double v;
  if (field == all_ones) {
    if (mant == 0) {
      v = std::numeric_limits<double>::infinity();
    } else {
      const std::uint64_t d = (std::uint64_t{negative} << 63) | (std::uint64_t{0x7ff} << 52) | (mant << (52 - m));
      return std::bit_cast<double>(d);
    }
  } else if (field == 0) {
    v = std::ldexp(static_cast<double>(mant), f.emin - m);
  } else {
    v = std::ldexp(static_cast<double>(mant | (std::uint64_t{1} << m)), static_cast<int>(field) - f.emax - m);
  }
  return negative ? -v : v;
}

}  // namespace dmref
