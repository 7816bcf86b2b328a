// dmref/lowp.hpp: low-precision arithmetic as scalar types the reference runs
// on unchanged (docs/stability.md).
//
//   Lowp<F>   a number of the binary format F (dtype.hpp: float32, bfloat16,
//             float16), stored exactly in a double. Every operation (+ - * /,
//             sqrt, exp, log, log1p, expm1, tanh, conversion) computes the result
//             in double and rounds it to F, round to nearest, ties to even, with
//             gradual underflow and overflow to +-inf: one rounding per operation,
//             as hardware with a native F unit does.
//   bf16, fp16, fp32e   Lowp<bfloat16>, Lowp<float16>, Lowp<float32> (the last
//             is the emulated twin of native `float`, used to check the emulation).
//
// Why computing in double and rounding once is exact for + - * / and sqrt: the
// operands are F numbers (p <= 24 bits) and double has 53 >= 2p + 2 bits, so
// rounding the exact result first to double and then to F gives the same number
// as rounding it to F directly (Figueroa, "When is double rounding innocuous?",
// SIGNUM 1995). For exp, log, log1p, expm1 and tanh the double result (from the C
// library, within an ulp of double) is rounded once to F: correctly rounded
// except when the exact value lies within about 2^-52 relative of an F midpoint.
//
// Mixed precision (bf16/fp16 storage, float32 arithmetic, as kernels do) is not
// a type: compute in `float` and round what is stored between layers with
// `store_as` / `store_in` below (the sweeps apply this to the streams after
// every write).
//
// The rounding here (`lowp_round`) works on the bit pattern of the double and
// is a second implementation of dtype.hpp's `round_to`; tests/test_lowp.cpp
// checks that the two agree on exhaustive tables.
//
// Lowp provides std::numeric_limits and Eigen::NumTraits, and finds its math
// functions by argument-dependent lookup, so Eigen and the scheme headers
// (`using std::exp; exp(x)`) use it like double.
#pragma once

#include "dmref/dtype.hpp"
#include "dmref/scalar_traits.hpp"

#include <Eigen/Core>

#include <bit>
#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <type_traits>

namespace dmref {

namespace lowp_detail {

constexpr std::uint64_t kSign = std::uint64_t{1} << 63;
constexpr std::uint64_t kInfBits = std::uint64_t{0x7ff} << 52;

/// 2^e as a double, for e in the normal range of double (constexpr ldexp).
constexpr double pow2(int e) { return std::bit_cast<double>(static_cast<std::uint64_t>(e + 1023) << 52); }

/// Bits of the largest finite value of f, as a double: exponent emax, the top
/// p - 1 fraction bits set.
constexpr std::uint64_t max_finite_bits(const FloatFormat& f) {
  const int shift = 53 - f.precision;
  return (static_cast<std::uint64_t>(f.emax + 1023) << 52) |
         (((std::uint64_t{1} << (f.precision - 1)) - 1) << shift);
}

}  // namespace lowp_detail

/// x rounded to the nearest value of f, ties to even (as dtype.hpp's round_to).
/// Fast path for results in f's normal range or above: round-to-nearest-even on
/// the double's bit pattern, then overflow to inf past max_finite (the carry of
/// a value at or above max + ulp(max)/2 lands above max_finite_bits). Zeros,
/// f-subnormals, infinities and NaNs go to round_to.
inline double lowp_round(const FloatFormat& f, double x) {
  using namespace lowp_detail;
  const std::uint64_t b = std::bit_cast<std::uint64_t>(x);
  const std::uint64_t sign = b & kSign;
  std::uint64_t mag = b ^ sign;
  const int biased = static_cast<int>(mag >> 52);
  if (biased == 0x7ff || biased - 1023 < f.emin) return round_to(f, x);
  const int shift = 53 - f.precision;
  if (shift > 0) {
    const std::uint64_t lsb = (mag >> shift) & 1;
    mag += (std::uint64_t{1} << (shift - 1)) - 1 + lsb;
    mag &= ~((std::uint64_t{1} << shift) - 1);
  }
  if (mag > max_finite_bits(f)) mag = kInfBits;
  return std::bit_cast<double>(mag | sign);
}

template <const FloatFormat& F>
class Lowp {
 public:
  static constexpr const FloatFormat& format = F;

  constexpr Lowp() = default;
  /// Conversion from any arithmetic type rounds once to F.
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Lowp(T x) : v_(lowp_round(F, static_cast<double>(x))) {}  // NOLINT: implicit, like double

  /// A value already in F (not checked): no rounding.
  static Lowp exact(double x) {
    Lowp r;
    r.v_ = x;
    return r;
  }

  explicit operator double() const { return v_; }
  explicit operator float() const { return static_cast<float>(v_); }  // exact: F is at most binary32
  /// To any other number type constructible from double (MPFR types, other
  /// formats): through the exact double.
  template <class T, std::enable_if_t<!std::is_arithmetic_v<T> && std::is_constructible_v<T, double>, int> = 0>
  explicit operator T() const {
    return T(v_);
  }
  double value() const { return v_; }

  friend Lowp operator+(const Lowp& a, const Lowp& b) { return exact(lowp_round(F, a.v_ + b.v_)); }
  friend Lowp operator-(const Lowp& a, const Lowp& b) { return exact(lowp_round(F, a.v_ - b.v_)); }
  friend Lowp operator*(const Lowp& a, const Lowp& b) { return exact(lowp_round(F, a.v_ * b.v_)); }
  friend Lowp operator/(const Lowp& a, const Lowp& b) { return exact(lowp_round(F, a.v_ / b.v_)); }
  friend Lowp operator-(const Lowp& a) { return exact(-a.v_); }
  friend Lowp operator+(const Lowp& a) { return a; }
  Lowp& operator+=(const Lowp& b) { return *this = *this + b; }
  Lowp& operator-=(const Lowp& b) { return *this = *this - b; }
  Lowp& operator*=(const Lowp& b) { return *this = *this * b; }
  Lowp& operator/=(const Lowp& b) { return *this = *this / b; }

  friend bool operator==(const Lowp& a, const Lowp& b) { return a.v_ == b.v_; }
  friend std::partial_ordering operator<=>(const Lowp& a, const Lowp& b) { return a.v_ <=> b.v_; }

  // Math functions, found by ADL after `using std::f;`.
  friend Lowp sqrt(const Lowp& a) { return exact(lowp_round(F, std::sqrt(a.v_))); }
  friend Lowp exp(const Lowp& a) { return exact(lowp_round(F, std::exp(a.v_))); }
  friend Lowp expm1(const Lowp& a) { return exact(lowp_round(F, std::expm1(a.v_))); }
  friend Lowp log(const Lowp& a) { return exact(lowp_round(F, std::log(a.v_))); }
  friend Lowp log1p(const Lowp& a) { return exact(lowp_round(F, std::log1p(a.v_))); }
  friend Lowp tanh(const Lowp& a) { return exact(lowp_round(F, std::tanh(a.v_))); }
  friend Lowp abs(const Lowp& a) { return exact(std::fabs(a.v_)); }
  friend Lowp fabs(const Lowp& a) { return exact(std::fabs(a.v_)); }
  friend Lowp floor(const Lowp& a) { return exact(std::floor(a.v_)); }
  friend Lowp ceil(const Lowp& a) { return exact(std::ceil(a.v_)); }
  friend Lowp pow(const Lowp& a, const Lowp& b) { return exact(lowp_round(F, std::pow(a.v_, b.v_))); }
  friend Lowp(max)(const Lowp& a, const Lowp& b) { return a.v_ < b.v_ ? b : a; }
  friend Lowp(min)(const Lowp& a, const Lowp& b) { return b.v_ < a.v_ ? b : a; }
  friend bool isfinite(const Lowp& a) { return std::isfinite(a.v_); }
  friend bool isnan(const Lowp& a) { return std::isnan(a.v_); }
  friend bool isinf(const Lowp& a) { return std::isinf(a.v_); }
  friend bool signbit(const Lowp& a) { return std::signbit(a.v_); }

  friend std::ostream& operator<<(std::ostream& o, const Lowp& a) { return o << a.v_; }

 private:
  double v_ = 0;
};

using fp32e = Lowp<float32>;
using bf16 = Lowp<bfloat16>;
using fp16 = Lowp<float16>;

template <class T>
struct is_lowp : std::false_type {};
template <const FloatFormat& F>
struct is_lowp<Lowp<F>> : std::true_type {};
template <class T>
inline constexpr bool is_lowp_v = is_lowp<T>::value;

template <>
inline std::string scalar_name<fp32e>() {
  return "float32 (emulated)";
}
template <>
inline std::string scalar_name<bf16>() {
  return "bfloat16";
}
template <>
inline std::string scalar_name<fp16>() {
  return "float16";
}

/// Mixed precision: x (computed in any type T) as stored in format f, back in T.
template <class T>
T store_as(const FloatFormat& f, const T& x) {
  return T(lowp_round(f, static_cast<double>(x)));
}

/// Rounds every entry of an Eigen matrix or vector to storage format f, in place.
template <class Derived>
void store_in(const FloatFormat& f, Eigen::DenseBase<Derived>& m) {
  using T = typename Derived::Scalar;
  for (Eigen::Index j = 0; j < m.cols(); ++j)
    for (Eigen::Index i = 0; i < m.rows(); ++i) m(i, j) = store_as<T>(f, m(i, j));
}

}  // namespace dmref

template <const dmref::FloatFormat& F>
struct std::numeric_limits<dmref::Lowp<F>> {
  using T = dmref::Lowp<F>;
  static constexpr double p2(int e) { return dmref::lowp_detail::pow2(e); }

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = false;
  static constexpr std::float_denorm_style has_denorm = std::denorm_present;
  static constexpr bool has_denorm_loss = false;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr bool is_iec559 = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = F.precision;
  // floor((p - 1) log10 2) and ceil(p log10 2 + 1), with log10 2 < 0.30103.
  static constexpr int digits10 = static_cast<int>((F.precision - 1) * 0.30102999566398120);
  static constexpr int max_digits10 = static_cast<int>(F.precision * 0.30102999566398120 + 2);
  static constexpr int radix = 2;
  static constexpr int min_exponent = F.emin + 1;
  static constexpr int min_exponent10 = static_cast<int>(F.emin * 0.30102999566398120);
  static constexpr int max_exponent = F.emax + 1;
  static constexpr int max_exponent10 = static_cast<int>(F.emax * 0.30102999566398120);
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;

  static T min() noexcept { return T::exact(p2(F.emin)); }
  static T max() noexcept { return T::exact(std::bit_cast<double>(dmref::lowp_detail::max_finite_bits(F))); }
  static T lowest() noexcept { return -max(); }
  static T epsilon() noexcept { return T::exact(p2(1 - F.precision)); }
  static T round_error() noexcept { return T::exact(0.5); }
  static T infinity() noexcept { return T::exact(std::numeric_limits<double>::infinity()); }
  static T quiet_NaN() noexcept { return T::exact(std::numeric_limits<double>::quiet_NaN()); }
  static T signaling_NaN() noexcept { return quiet_NaN(); }
  static T denorm_min() noexcept { return T::exact(p2(F.emin - F.precision + 1)); }
};

namespace Eigen {

template <const dmref::FloatFormat& F>
struct NumTraits<dmref::Lowp<F>> : GenericNumTraits<dmref::Lowp<F>> {
  using Real = dmref::Lowp<F>;
  using NonInteger = Real;
  using Literal = Real;
  using Nested = Real;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 0,
    ReadCost = 1,
    AddCost = 1,
    MulCost = 1
  };
  static Real epsilon() { return std::numeric_limits<Real>::epsilon(); }
  /// isApprox's default: about 8 eps for the 16-bit formats (as Eigen::half and
  /// Eigen::bfloat16), 2^-17 ~ 7.6e-6 for binary32 (Eigen's float uses 1e-5).
  static Real dummy_precision() {
    return Real::exact(dmref::lowp_detail::pow2(F.precision <= 11 ? 4 - F.precision : -17));
  }
  static Real highest() { return std::numeric_limits<Real>::max(); }
  static Real lowest() { return std::numeric_limits<Real>::lowest(); }
  static Real infinity() { return std::numeric_limits<Real>::infinity(); }
  static Real quiet_NaN() { return std::numeric_limits<Real>::quiet_NaN(); }
  static int digits10() { return std::numeric_limits<Real>::digits10; }
  static int digits() { return std::numeric_limits<Real>::digits; }
};

}  // namespace Eigen
