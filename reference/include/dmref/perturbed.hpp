// dmref/perturbed.hpp: the standard model of floating-point arithmetic with
// random rounding directions, as a scalar type the reference runs on
// unchanged: the tolerance model of the gate (docs/precision.md, "Tolerance
// model"; conformance/tolerance.hpp).
//
// A correct kernel of a recipe computes each operation with a relative error
// of at most the unit roundoff: fl(a op b) = (a op b)(1 + delta), |delta| <= u
// (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., section
// 2.2), whatever order, blocking or fused operations it uses. Perturbed
// evaluates the reference in double and multiplies every result r by
// (1 + s u_op) with s = +-1 a hash of the sample's seed, the operation's kind
// and the bits of r: one sample of that model with every rounding error of
// the largest magnitude allowed and random sign. The sign is a function of
// the value, as a real rounding is, and not a position in a stream: a stream
// drawn in evaluation order made the bound tensors depend on the order in
// which a compiler evaluates the operands of one expression (unspecified in
// C++: GCC and clang built different bounds for 99 gradient fixtures).
// Over independent signs the first-order error of an output,
// sum_z (dy/dz) z s_z u_z, has the largest variance any rounding errors within
// their bounds can have, sigma^2 = sum_z (dy/dz z u_z)^2, and Hoeffding's
// inequality bounds its tail: P(|error| >= t) <= 2 exp(-t^2 / (2 sigma^2))
// (Higham and Mary, "A new approach to probabilistic rounding error
// analysis", SISC 2019). The generator draws kToleranceSamples samples and
// stores, per element, |mean error| + standard deviation (tolerance.hpp).
// Sampling the whole evaluation (rather than bounding each operation with the
// triangle inequality) keeps the correlations: Sinkhorn's normalisations, the
// RMS norm and the RLS recursion contract errors that a per-operation
// worst-case bound would add up (docs/precision.md measures the difference).
//
// The caller rounds the inputs and parameters to the recipe's storage format
// (generate.cpp); values converted from double inside the evaluation are the
// kernel's constants (epsilons, scales) and are rounded to the format of its
// arithmetic (RoundingModel::input: float32, or none for f64); the streams
// stored between layers (framework.hpp `stored`) are perturbed by the storage
// format's unit roundoff.
#pragma once

#include "dmref/dtype.hpp"

#include <Eigen/Core>

#include <bit>
#include <cmath>
#include <compare>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <type_traits>

namespace dmref {

/// How a correct kernel of one recipe rounds, and the sample's random stream.
struct RoundingModel {
  double u = 0x1p-24;                  // unit roundoff of + - * (round to nearest)
  double u_fn = 4 * 0x1p-24;           // / , sqrt, exp, log, tanh ...: within 2 ulps
  const FloatFormat* input = nullptr;  // format constants from double are rounded to (nullptr: exact)
  double u_store = 0;                  // rounding of the streams stored between layers (0: none)
  double store_max = std::numeric_limits<double>::infinity();  // largest finite value of the storage format
  double store_tiny = 0;               // half the storage format's subnormal spacing: the error below its normal range
  std::uint64_t state = 0;             // the sample's seed: its signs are hashes of it and of each result
};

/// This thread's rounding model (set by the caller for one evaluation).
inline RoundingModel& rounding_model() {
  thread_local RoundingModel m;
  return m;
}

/// Sets the thread's rounding model for a scope.
class ScopedRoundingModel {
 public:
  explicit ScopedRoundingModel(const RoundingModel& m) : saved_(rounding_model()) { rounding_model() = m; }
  ~ScopedRoundingModel() { rounding_model() = saved_; }
  ScopedRoundingModel(const ScopedRoundingModel&) = delete;
  ScopedRoundingModel& operator=(const ScopedRoundingModel&) = delete;

 private:
  RoundingModel saved_;
};

class Perturbed {
 public:
  Perturbed() = default;
  /// A value as the kernel receives it: rounded to the model's input format.
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Perturbed(T x) : v_(input(static_cast<double>(x))) {}  // NOLINT: implicit, like double
  /// A decimal constant (a config string), rounded to the input format.
  explicit Perturbed(const std::string& decimal) : Perturbed(std::strtod(decimal.c_str(), nullptr)) {}

  static Perturbed exact(double v) {
    Perturbed r;
    r.v_ = v;
    return r;
  }
  double value() const { return v_; }
  explicit operator double() const { return v_; }
  explicit operator float() const { return static_cast<float>(v_); }

  /// Stored in the model's storage format between layers.
  void store() {
    const RoundingModel& m = rounding_model();
    if (m.u_store == 0 || v_ == 0) return;  // zero is stored exactly
    if (std::fabs(v_) > m.store_max) {
      v_ = std::copysign(std::numeric_limits<double>::infinity(), v_);
    } else if (std::fabs(v_) * m.u_store < m.store_tiny) {  // subnormal in the storage format: an absolute error
      v_ += sign(v_, kStore) * m.store_tiny;
    } else {
      v_ = round(v_, m.u_store, kStore);
    }
  }

  friend Perturbed operator+(const Perturbed& a, const Perturbed& b) { return op(a.v_ + b.v_); }
  friend Perturbed operator-(const Perturbed& a, const Perturbed& b) { return op(a.v_ - b.v_); }
  friend Perturbed operator*(const Perturbed& a, const Perturbed& b) { return op(a.v_ * b.v_); }
  friend Perturbed operator/(const Perturbed& a, const Perturbed& b) { return fn(a.v_ / b.v_); }
  friend Perturbed operator-(const Perturbed& a) { return exact(-a.v_); }
  friend Perturbed operator+(const Perturbed& a) { return a; }
  Perturbed& operator+=(const Perturbed& b) { return *this = *this + b; }
  Perturbed& operator-=(const Perturbed& b) { return *this = *this - b; }
  Perturbed& operator*=(const Perturbed& b) { return *this = *this * b; }
  Perturbed& operator/=(const Perturbed& b) { return *this = *this / b; }

  friend bool operator==(const Perturbed& a, const Perturbed& b) { return a.v_ == b.v_; }
  friend std::partial_ordering operator<=>(const Perturbed& a, const Perturbed& b) { return a.v_ <=> b.v_; }

  friend Perturbed sqrt(const Perturbed& a) { return fn(std::sqrt(a.v_)); }
  friend Perturbed exp(const Perturbed& a) { return fn(std::exp(a.v_)); }
  friend Perturbed expm1(const Perturbed& a) { return fn(std::expm1(a.v_)); }
  friend Perturbed log(const Perturbed& a) { return fn(std::log(a.v_)); }
  friend Perturbed log1p(const Perturbed& a) { return fn(std::log1p(a.v_)); }
  /// A normalised weight x / s (layers.hpp `normalized`): besides the
  /// division's u_fn, a relative error u |log(x / s)|, that of a kernel that
  /// forms it in the log domain as exp(log x - log s): the subtraction of the
  /// two logs rounds with relative error u, an absolute error u |log(x / s)|
  /// of the exponent. 0 for a weight of 1, 13.8 u for a weight of 1e-6.
  friend Perturbed normalized(const Perturbed& x, const Perturbed& s) {
    const double q = x.v_ / s.v_;
    const Perturbed r = fn(q);
    if (q == 0 || !std::isfinite(q)) return r;
    return exact(round(r.v_, rounding_model().u * std::fabs(std::log(std::fabs(q))), kLog));
  }
  friend Perturbed tanh(const Perturbed& a) { return fn(std::tanh(a.v_)); }
  friend Perturbed abs(const Perturbed& a) { return exact(std::fabs(a.v_)); }
  friend Perturbed fabs(const Perturbed& a) { return exact(std::fabs(a.v_)); }
  friend Perturbed(max)(const Perturbed& a, const Perturbed& b) { return a.v_ < b.v_ ? b : a; }
  friend Perturbed(min)(const Perturbed& a, const Perturbed& b) { return b.v_ < a.v_ ? b : a; }
  friend bool isfinite(const Perturbed& a) { return std::isfinite(a.v_); }
  friend bool isnan(const Perturbed& a) { return std::isnan(a.v_); }
  friend bool isinf(const Perturbed& a) { return std::isinf(a.v_); }
  friend bool signbit(const Perturbed& a) { return std::signbit(a.v_); }

  friend std::ostream& operator<<(std::ostream& o, const Perturbed& a) { return o << a.v_; }

 private:
  /// The kinds of rounding point, hashed with the value: + - * ; / sqrt and the
  /// functions; a store between layers; normalized's log-domain term.
  static constexpr std::uint64_t kOp = 1, kFn = 2, kStore = 3, kLog = 4;
  /// +-1: the SplitMix64 finaliser (random.hpp) of the sample's seed, the
  /// kind and the bits of the unperturbed result r. Independent of when r is
  /// computed, so of the evaluation order of the operands of an expression.
  static double sign(double r, std::uint64_t kind) {
    std::uint64_t z = std::bit_cast<std::uint64_t>(r);
    sign_mask(rounding_model().state, z, kind);
    return std::bit_cast<double>(std::uint64_t(0xbff0000000000000ull) ^ (z & 0x8000000000000000ull));
  }

 public:
  /// z = all ones if sign(r, kind) is +1, all zeros if it is -1, from z = the
  /// bits of r, for a sample's seed `state`: for std::uint64_t, and for a
  /// vector of them (GCC/clang vector extensions: perturbed_gemv.hpp
  /// evaluates several rows at once with the same bits). In place: a vector
  /// passed by value would change the ABI with the instruction set (-Wpsabi).
  template <class U>
  static void sign_mask(std::uint64_t state, U& z, std::uint64_t kind) {
    using W = std::uint64_t;
    z = state ^ (z + kind * W(0x9e3779b97f4a7c15ull));
    z = (z ^ (z >> 30)) * W(0xbf58476d1ce4e5b9ull);
    z = (z ^ (z >> 27)) * W(0x94d049bb133111ebull);
    // The sign is the top bit of SplitMix64's last step z ^ (z >> 31), which
    // is the top bit of z: 0 - 1 = all ones when it is set.
    z = W(0) - (z >> 63);
  }
  /// fl(r) = r (1 + s u) for the mask of s (sign_mask): r + r u or r - r u,
  /// each exact as r + s (r u) is, chosen by bits rather than multiplied by
  /// s = +-1, and without a branch (the sign is a coin flip: a branch
  /// mispredicts half the time). The hash and the two candidates run in
  /// parallel, so a chain of dependent roundings (a dot product) waits for the
  /// hash and a select only (docs/performance.md). D: a double or a vector
  /// of them, in place (a vector returned by value would change the ABI with
  /// the instruction set, -Wpsabi).
  template <class D, class U>
  static void round_with(D& r, const U& mask, double u) {
    const D a = r * u, up = r + a, down = r - a;
    U bu, bd;
    std::memcpy(&bu, &up, sizeof bu);
    std::memcpy(&bd, &down, sizeof bd);
    const U bits = (bu & mask) | (bd & ~mask);
    std::memcpy(&r, &bits, sizeof r);
  }
  static constexpr std::uint64_t kind_op() { return kOp; }

 private:
  /// r (1 +- u).
  static double round(double r, double u, std::uint64_t kind) {
    std::uint64_t z = std::bit_cast<std::uint64_t>(r);
    sign_mask(rounding_model().state, z, kind);
    round_with(r, z, u);
    return r;
  }
  static Perturbed op(double r) { return exact(round(r, rounding_model().u, kOp)); }
  static Perturbed fn(double r) { return exact(round(r, rounding_model().u_fn, kFn)); }
  static double input(double x) {
    const FloatFormat* f = rounding_model().input;
    return f == nullptr || !std::isfinite(x) ? x : round_to(*f, x);
  }

  double v_ = 0;
};

}  // namespace dmref

template <>
struct std::numeric_limits<dmref::Perturbed> {
  using T = dmref::Perturbed;
  using D = std::numeric_limits<double>;

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
  static constexpr int digits = D::digits;
  static constexpr int digits10 = D::digits10;
  static constexpr int max_digits10 = D::max_digits10;
  static constexpr int radix = 2;
  static constexpr int min_exponent = D::min_exponent;
  static constexpr int min_exponent10 = D::min_exponent10;
  static constexpr int max_exponent = D::max_exponent;
  static constexpr int max_exponent10 = D::max_exponent10;
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;

  static T min() noexcept { return T::exact(D::min()); }
  static T max() noexcept { return T::exact(D::max()); }
  static T lowest() noexcept { return T::exact(D::lowest()); }
  static T epsilon() noexcept { return T::exact(D::epsilon()); }
  static T round_error() noexcept { return T::exact(0.5); }
  static T infinity() noexcept { return T::exact(D::infinity()); }
  static T quiet_NaN() noexcept { return T::exact(D::quiet_NaN()); }
  static T signaling_NaN() noexcept { return quiet_NaN(); }
  static T denorm_min() noexcept { return T::exact(D::denorm_min()); }
};

namespace Eigen {

template <>
struct NumTraits<dmref::Perturbed> : GenericNumTraits<dmref::Perturbed> {
  using Real = dmref::Perturbed;
  using NonInteger = Real;
  using Literal = Real;
  using Nested = Real;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 0,
    ReadCost = 1,
    AddCost = 2,
    MulCost = 2
  };
  static Real epsilon() { return std::numeric_limits<Real>::epsilon(); }
  static Real dummy_precision() { return Real::exact(1e-12); }
  static Real highest() { return std::numeric_limits<Real>::max(); }
  static Real lowest() { return std::numeric_limits<Real>::lowest(); }
  static Real infinity() { return std::numeric_limits<Real>::infinity(); }
  static Real quiet_NaN() { return std::numeric_limits<Real>::quiet_NaN(); }
  static int digits10() { return std::numeric_limits<Real>::digits10; }
  static int digits() { return std::numeric_limits<Real>::digits; }
};

}  // namespace Eigen

#include "dmref/perturbed_gemv.hpp"
