// dmref/dtype.hpp: exact rounding of doubles to the narrow floating-point
// formats that tensors are stored in (binary32, bfloat16, binary16), and the
// bit patterns of those formats.
//
// Rounding is IEEE 754 round-to-nearest, ties-to-even, with gradual underflow
// (subnormals) and overflow to infinity: a value rounds to +-inf exactly when
// its magnitude is at least max_finite + ulp(max_finite)/2. Signed zeros and
// infinities are kept. The result is returned as a double (every value of
// these formats is a double), so round_to(f, x) == decode(f, encode(f, x)).
//
// NaNs: encode keeps the sign and the leading (p - 1) bits of the double's
// payload; if those are all zero it sets the leading payload bit so that the
// result is still a NaN. decode puts the payload back in the leading bits.
// Hence encode(decode(b)) == b for every bit pattern b, NaNs included (unlike
// most hardware conversions, which quiet signalling NaNs).
#pragma once

#include <cstdint>

namespace dmref {

/// A binary floating-point interchange format. precision counts the hidden
/// bit; the bias is emax; the stored width is 1 + exponent_bits + precision - 1.
struct FloatFormat {
  int precision;      // p: significand bits, hidden bit included
  int exponent_bits;  // w
  int emin;           // exponent of the smallest normal number, 1 - emax
  int emax;           // exponent of the largest finite number
  const char* name;
};

inline constexpr FloatFormat float32{24, 8, -126, 127, "float32"};
inline constexpr FloatFormat bfloat16{8, 8, -126, 127, "bfloat16"};
inline constexpr FloatFormat float16{11, 5, -14, 15, "float16"};

/// Width of the format in bits (32 or 16).
constexpr int width_bits(const FloatFormat& f) { return f.exponent_bits + f.precision; }

/// The largest finite value of f, (2 - 2^(1-p)) 2^emax.
double max_finite(const FloatFormat& f);

/// x rounded to the nearest value of f (ties to even), as a double.
double round_to(const FloatFormat& f, double x);

/// round_to by the format-generic algorithm (scale to an integer significand,
/// round, scale back), which round_to uses for every format but float32,
/// where the hardware's conversion gives the same result faster.
double round_to_generic(const FloatFormat& f, double x);

/// The bit pattern of round_to(f, x), in the low width_bits(f) bits.
std::uint64_t encode(const FloatFormat& f, double x);

/// The value of bit pattern `bits` of f. Throws std::invalid_argument if
/// bits has a bit set above width_bits(f).
double decode(const FloatFormat& f, std::uint64_t bits);

// The same for each format, with the exact-width bit patterns.
inline double round_to_float32(double x) { return round_to(float32, x); }
inline double round_to_bfloat16(double x) { return round_to(bfloat16, x); }
inline double round_to_float16(double x) { return round_to(float16, x); }

inline std::uint32_t encode_float32(double x) { return static_cast<std::uint32_t>(encode(float32, x)); }
inline std::uint16_t encode_bfloat16(double x) { return static_cast<std::uint16_t>(encode(bfloat16, x)); }
inline std::uint16_t encode_float16(double x) { return static_cast<std::uint16_t>(encode(float16, x)); }

inline double decode_float32(std::uint32_t bits) { return decode(float32, bits); }
inline double decode_bfloat16(std::uint16_t bits) { return decode(bfloat16, bits); }
inline double decode_float16(std::uint16_t bits) { return decode(float16, bits); }

}  // namespace dmref
