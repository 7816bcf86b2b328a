// dmref/real.hpp: `Real<Bits>`, an MPFR point number of exactly `Bits` bits:
// the limb-aligned point type (real256, real512), the point twin of Ball.
//
// Why a point type next to Boost's mpfr<Digits10> (scalar.hpp): Boost's MPFR
// backend takes a decimal digit count and rounds it up to bits
// (digits10_2_2: 77 digits -> 257 bits, 154 -> 513), so no Boost MPFR type
// has 256 or 512 bits, and the 257th bit costs a fifth (ninth) 64-bit limb:
// plain MPFR C at 257 bits is 1.02-1.22x itself at 256 (docs/performance.md,
// "The point step"). Real<Bits> holds one mpfr_t initialised to exactly
// `Bits` bits; every operation is one MPFR call rounded to nearest into a
// destination of `Bits` bits, so a computation on Real<B> rounds exactly as
// the same computation on Boost's MPFR type of B bits does (tests/test_real.cpp
// checks every scheme bit for bit against mpfr<77> at B = 257).
// Boost's types stay for the oracles and tests, which use Boost.Math on them.
//
// Semantics: value type (copy = mpfr_set, move = swap); conversion from
// double or an integer is exact (Bits >= 64), from a decimal string rounded
// to nearest; static_cast<double> rounds to nearest. Comparisons are MPFR's
// (a point type may be compared; NaN compares false).
#pragma once

#include <mpfr.h>

#include <Eigen/Core>

#include <climits>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace dmref {

template <mpfr_prec_t Bits>
class Real {
  static_assert(Bits >= 64, "Real: at least 64 bits (exact conversion from double and 64-bit integers)");

 public:
  static constexpr mpfr_prec_t bits = Bits;

  Real() noexcept {
    mpfr_init2(v_, Bits);
    mpfr_set_zero(v_, 1);
  }
  Real(double d) {  // NOLINT: implicit, like the other scalar types
    mpfr_init2(v_, Bits);
    mpfr_set_d(v_, d, MPFR_RNDN);
  }
  template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  Real(I i) {  // NOLINT
    static_assert(sizeof(I) <= sizeof(long), "Real: integer type too wide");
    mpfr_init2(v_, Bits);
    if constexpr (std::is_signed_v<I>) mpfr_set_si(v_, static_cast<long>(i), MPFR_RNDN);
    else mpfr_set_ui(v_, static_cast<unsigned long>(i), MPFR_RNDN);
  }
  /// The decimal number in `s` rounded to nearest (MPFR's syntax: "1e-6", "0.1").
  explicit Real(const std::string& s) {
    mpfr_init2(v_, Bits);
    if (s.empty() || mpfr_set_str(v_, s.c_str(), 10, MPFR_RNDN) != 0) {
      mpfr_clear(v_);
      throw std::invalid_argument("Real: not a number: \"" + s + "\"");
    }
  }
  explicit Real(const char* s) : Real(std::string(s)) {}
  Real(const Real& o) {
    mpfr_init2(v_, Bits);
    mpfr_set(v_, o.v_, MPFR_RNDN);
  }
  Real(Real&& o) noexcept {
    mpfr_init2(v_, Bits);
    mpfr_swap(v_, o.v_);
  }
  Real& operator=(const Real& o) {
    mpfr_set(v_, o.v_, MPFR_RNDN);
    return *this;
  }
  Real& operator=(Real&& o) noexcept {
    mpfr_swap(v_, o.v_);
    return *this;
  }
  ~Real() { mpfr_clear(v_); }

  mpfr_ptr get() noexcept { return v_; }
  mpfr_srcptr get() const noexcept { return v_; }

  Real& operator+=(const Real& o) {
    mpfr_add(v_, v_, o.v_, MPFR_RNDN);
    return *this;
  }
  Real& operator-=(const Real& o) {
    mpfr_sub(v_, v_, o.v_, MPFR_RNDN);
    return *this;
  }
  Real& operator*=(const Real& o) {
    mpfr_mul(v_, v_, o.v_, MPFR_RNDN);
    return *this;
  }
  Real& operator/=(const Real& o) {
    mpfr_div(v_, v_, o.v_, MPFR_RNDN);
    return *this;
  }
  friend Real operator+(Real a, const Real& b) { return std::move(a += b); }
  friend Real operator-(Real a, const Real& b) { return std::move(a -= b); }
  friend Real operator*(Real a, const Real& b) { return std::move(a *= b); }
  friend Real operator/(Real a, const Real& b) { return std::move(a /= b); }
  friend Real operator-(Real a) {
    mpfr_neg(a.v_, a.v_, MPFR_RNDN);
    return a;
  }
  friend Real operator+(Real a) { return a; }
  friend bool operator==(const Real& a, const Real& b) { return mpfr_equal_p(a.v_, b.v_) != 0; }
  friend bool operator!=(const Real& a, const Real& b) { return !(a == b); }
  friend bool operator<(const Real& a, const Real& b) { return mpfr_less_p(a.v_, b.v_) != 0; }
  friend bool operator<=(const Real& a, const Real& b) { return mpfr_lessequal_p(a.v_, b.v_) != 0; }
  friend bool operator>(const Real& a, const Real& b) { return mpfr_greater_p(a.v_, b.v_) != 0; }
  friend bool operator>=(const Real& a, const Real& b) { return mpfr_greaterequal_p(a.v_, b.v_) != 0; }

  explicit operator double() const { return mpfr_get_d(v_, MPFR_RNDN); }
  explicit operator float() const { return mpfr_get_flt(v_, MPFR_RNDN); }

  /// Shortest decimal that reads back to this number ("%.*Re" with enough digits).
  std::string str() const {
    char* p = nullptr;
    const int digits = int(2 + Bits * 0.30102999566398120);  // reads back exactly (MPFR's mpfr_get_str_ndigits)
    if (mpfr_asprintf(&p, "%.*Re", digits, v_) < 0) throw std::bad_alloc();
    std::string s(p);
    mpfr_free_str(p);
    return s;
  }

 private:
  mpfr_t v_;
};

using real256 = Real<256>;  // the suite's limb-aligned point types
using real512 = Real<512>;

template <class T>
struct is_real : std::false_type {};
template <mpfr_prec_t B>
struct is_real<Real<B>> : std::true_type {};
template <class T>
inline constexpr bool is_real_v = is_real<T>::value;

#define DMREF_REAL_FN(name, call)             \
  template <mpfr_prec_t B>                    \
  Real<B> name(const Real<B>& x) {            \
    Real<B> r;                                \
    call(r.get(), x.get(), MPFR_RNDN);        \
    return r;                                 \
  }
DMREF_REAL_FN(sqrt, mpfr_sqrt)
DMREF_REAL_FN(exp, mpfr_exp)
DMREF_REAL_FN(log, mpfr_log)
DMREF_REAL_FN(log1p, mpfr_log1p)
DMREF_REAL_FN(tanh, mpfr_tanh)
DMREF_REAL_FN(abs, mpfr_abs)
#undef DMREF_REAL_FN

}  // namespace dmref

namespace std {
/// Limits of Real<B>: digits B; the exponent range is MPFR's default
/// (emin = 1 - 2^30, emax = 2^30 - 1 on this platform's MPFR), the range of
/// Boost's MPFR types too, so input checks that use it (attnres logit bound)
/// accept the same inputs.
template <mpfr_prec_t B>
class numeric_limits<dmref::Real<B>> {
  using R = dmref::Real<B>;
  static R pow2(long e) {
    R r(1);
    mpfr_mul_2si(r.get(), r.get(), e, MPFR_RNDN);
    return r;
  }

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr bool is_iec559 = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = false;
  static constexpr bool has_denorm_loss = false;
  static constexpr std::float_denorm_style has_denorm = std::denorm_absent;
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr int radix = 2;
  static constexpr int digits = int(B);
  static constexpr int digits10 = int((B - 1) * 301L / 1000);            // floor((B - 1) log10 2)
  static constexpr int max_digits10 = int(2 + B * 301L / 1000);          // ceil(1 + B log10 2)
  static R epsilon() { return pow2(1 - long(B)); }                       // 2^(1-B)
  static R round_error() { return R(0.5); }
  static R min() { return pow2(mpfr_get_emin() - 1); }                  // smallest positive normal
  static R max() {                                                       // (1 - 2^-B) 2^emax
    R r(1);
    mpfr_nextbelow(r.get());
    mpfr_mul_2si(r.get(), r.get(), mpfr_get_emax(), MPFR_RNDN);
    return r;
  }
  static R lowest() { return -max(); }
  static R denorm_min() { return min(); }
  static R infinity() {
    R r;
    mpfr_set_inf(r.get(), 1);
    return r;
  }
  static R quiet_NaN() {
    R r;
    mpfr_set_nan(r.get());
    return r;
  }
};
}  // namespace std

namespace Eigen {
/// The costs are those Boost.Multiprecision's eigen.hpp gives its MPFR
/// numbers, so Eigen picks the same kernels (and summation orders) for both.
template <mpfr_prec_t B>
struct NumTraits<dmref::Real<B>> : GenericNumTraits<dmref::Real<B>> {
  using Real = dmref::Real<B>;
  using NonInteger = Real;
  using Nested = Real;
  using Literal = Real;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 1,
    ReadCost = 1,
    AddCost = 4,
    MulCost = 8
  };
  static inline int digits10() { return std::numeric_limits<Real>::digits10; }
  static inline Real epsilon() { return std::numeric_limits<Real>::epsilon(); }
  static inline Real dummy_precision() { return 1000 * epsilon(); }
  static inline Real highest() { return std::numeric_limits<Real>::max(); }
  static inline Real lowest() { return std::numeric_limits<Real>::lowest(); }
};
}  // namespace Eigen
