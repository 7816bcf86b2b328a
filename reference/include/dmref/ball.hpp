// dmref/ball.hpp: `Ball`, a midpoint-radius interval (FLINT/Arb arb_t) at a
// RUNTIME working precision, for the certified evaluations (docs/precision.md).
//
// Why a second interval type next to MPFI: the precision of an mpfi<D> is a
// template argument (Eigen needs std::numeric_limits), so every rung of Ziv's
// ladder was its own instantiation of the whole evaluator, and Boost derives
// the bits from decimal digits, so 256 and 512 bits were out of reach. A Ball
// computes at `ball_precision()` bits, a thread-local value that certify_bits
// sets per attempt: one instantiation serves every rung, and the rungs are
// exactly 128, 512, 2048, ... bits. Arb also gives exact-accumulation dot
// products (arb_dot: one rounding per sum, not per product), used by the hot
// loops (ldm.hpp rls_step, ball_gemv below).
//
// Semantics: value type (copy = arb_set, move = swap). Every operation is
// Arb's, rounded outward at the current precision: the result encloses the
// exact result of the operation on any reals inside the operands. Conversion
// from double or an integer is exact; from a decimal string, an enclosure.
// The only comparison is identity of balls (==, for Eigen's own constants):
// the reference never branches on data values.
// static_cast<double> gives the nearest double of the midpoint (for input
// validation and messages; never for a golden, which certify.hpp rounds from
// both ends of the ball).
#pragma once

#include <arb.h>
#include <arf.h>

#include "dmref/matrix.hpp"

#include <Eigen/Core>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace dmref {

namespace detail {
inline slong& ball_prec_ref() {
  thread_local slong p = 128;
  return p;
}

// FLINT/Arb keep per-thread caches (constants, mpz pools) that only
// flint_cleanup() frees; without it every worker thread of `run --jobs`
// leaks them at exit (LeakSanitizer, scripts/sanitize). Every thread that
// does Ball arithmetic at a chosen precision passes through BallPrecision,
// which registers this once per thread: its destructor runs at thread exit
// (and for the main thread at exit()).
struct FlintThreadCleanup {
  ~FlintThreadCleanup() { flint_cleanup(); }
};
inline void flint_cleanup_at_thread_exit() {
  thread_local FlintThreadCleanup registered;
  (void)registered;
}
}  // namespace detail

/// Working precision of Ball arithmetic on this thread, in bits.
inline slong ball_precision() { return detail::ball_prec_ref(); }

/// Sets this thread's Ball precision for its lifetime, restoring the previous.
class BallPrecision {
 public:
  explicit BallPrecision(slong bits) : old_(detail::ball_prec_ref()) {
    if (bits < 2) throw std::invalid_argument("BallPrecision: bits must be >= 2");
    detail::flint_cleanup_at_thread_exit();
    detail::ball_prec_ref() = bits;
  }
  ~BallPrecision() { detail::ball_prec_ref() = old_; }
  BallPrecision(const BallPrecision&) = delete;
  BallPrecision& operator=(const BallPrecision&) = delete;

 private:
  slong old_;
};

class Ball {
 public:
  Ball() noexcept { arb_init(v_); }
  Ball(double d) { // NOLINT: implicit, like the other scalar types
    arb_init(v_);
    arb_set_d(v_, d);
  }
  template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  Ball(I i) {  // NOLINT
    arb_init(v_);
    static_assert(sizeof(I) <= sizeof(slong) || std::is_signed_v<I>, "Ball: integer type too wide");
    arb_set_si(v_, static_cast<slong>(i));
  }
  /// An enclosure of the decimal number in `s` (Arb's syntax: "1e-6", "0.1").
  explicit Ball(const std::string& s) {
    arb_init(v_);
    if (arb_set_str(v_, s.c_str(), ball_precision()) != 0) {
      arb_clear(v_);
      throw std::invalid_argument("Ball: not a number: \"" + s + "\"");
    }
  }
  explicit Ball(const char* s) : Ball(std::string(s)) {}
  Ball(const Ball& o) {
    arb_init(v_);
    arb_set(v_, o.v_);
  }
  Ball(Ball&& o) noexcept {
    arb_init(v_);
    arb_swap(v_, o.v_);
  }
  Ball& operator=(const Ball& o) {
    arb_set(v_, o.v_);
    return *this;
  }
  Ball& operator=(Ball&& o) noexcept {
    arb_swap(v_, o.v_);
    return *this;
  }
  ~Ball() { arb_clear(v_); }

  arb_ptr get() noexcept { return v_; }
  arb_srcptr get() const noexcept { return v_; }

  Ball& operator+=(const Ball& o) {
    arb_add(v_, v_, o.v_, ball_precision());
    return *this;
  }
  Ball& operator-=(const Ball& o) {
    arb_sub(v_, v_, o.v_, ball_precision());
    return *this;
  }
  Ball& operator*=(const Ball& o) {
    arb_mul(v_, v_, o.v_, ball_precision());
    return *this;
  }
  Ball& operator/=(const Ball& o) {
    arb_div(v_, v_, o.v_, ball_precision());
    return *this;
  }
  friend Ball operator+(Ball a, const Ball& b) { return std::move(a += b); }
  friend Ball operator-(Ball a, const Ball& b) { return std::move(a -= b); }
  friend Ball operator*(Ball a, const Ball& b) { return std::move(a *= b); }
  friend Ball operator/(Ball a, const Ball& b) { return std::move(a /= b); }
  friend Ball operator-(Ball a) {
    arb_neg(a.v_, a.v_);
    return a;
  }
  friend Ball operator+(Ball a) { return a; }
  /// Identity of two balls (same midpoint, same radius), not equality of the
  /// reals inside: Eigen's product kernels test alpha == 0 on their own
  /// constants; the reference never compares data.
  friend bool operator==(const Ball& a, const Ball& b) { return arb_equal(a.v_, b.v_) != 0; }
  friend bool operator!=(const Ball& a, const Ball& b) { return !(a == b); }

  /// Nearest double of the midpoint (not an enclosure: see the header).
  explicit operator double() const { return arf_get_d(arb_midref(v_), ARF_RND_NEAR); }
  explicit operator float() const { return static_cast<float>(static_cast<double>(*this)); }

 private:
  arb_t v_;
};

}  // namespace dmref

namespace std {
/// Limits of Ball: Arb's exponents are unbounded; max and min are MPFR's
/// default range (2^(2^30 - 1), 2^-(2^30)), the range the MPFI evaluation had,
/// so input checks that use them (attnres logit bound) accept the same inputs.
/// digits is 0: the precision is a runtime value (dmref::ball_precision()).
template <>
class numeric_limits<dmref::Ball> {
 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr int radix = 2;
  static constexpr int digits = 0;
  static dmref::Ball max() {
    dmref::Ball r;
    arb_one(r.get());
    arb_mul_2exp_si(r.get(), r.get(), (1L << 30) - 1);
    return r;
  }
  static dmref::Ball min() {
    dmref::Ball r;
    arb_one(r.get());
    arb_mul_2exp_si(r.get(), r.get(), -(1L << 30));
    return r;
  }
  static dmref::Ball lowest() { return -max(); }
};
}  // namespace std

namespace Eigen {
template <>
struct NumTraits<dmref::Ball> : GenericNumTraits<dmref::Ball> {
  using Real = dmref::Ball;
  using NonInteger = dmref::Ball;
  using Nested = dmref::Ball;
  using Literal = dmref::Ball;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 1,
    ReadCost = 2,
    AddCost = 8,
    MulCost = 16
  };
  static inline int digits10() { return int(dmref::ball_precision() * 0.30102999566398120); }
  static inline Real epsilon() {
    dmref::Ball r(1);
    arb_mul_2exp_si(r.get(), r.get(), 1 - dmref::ball_precision());
    return r;
  }
  static inline Real dummy_precision() { return epsilon(); }
  static inline Real highest() { return std::numeric_limits<dmref::Ball>::max(); }
  static inline Real lowest() { return std::numeric_limits<dmref::Ball>::lowest(); }
};
}  // namespace Eigen

namespace dmref {

#define DMREF_BALL_FN(name, call)                   \
  inline Ball name(const Ball& x) {                 \
    Ball r;                                         \
    call(r.get(), x.get(), ball_precision());       \
    return r;                                       \
  }
DMREF_BALL_FN(sqrt, arb_sqrt)
DMREF_BALL_FN(exp, arb_exp)
DMREF_BALL_FN(log, arb_log)
DMREF_BALL_FN(log1p, arb_log1p)
DMREF_BALL_FN(tanh, arb_tanh)
#undef DMREF_BALL_FN
inline Ball abs(const Ball& x) {
  Ball r;
  arb_abs(r.get(), x.get());
  return r;
}

static_assert(sizeof(Ball) == sizeof(arb_struct), "Ball must be layout-compatible with arb_struct");

/// The arb_struct array behind Eigen storage of Balls.
inline arb_srcptr ball_ptr(const Ball* p) { return reinterpret_cast<arb_srcptr>(p); }

/// r = sum_j x(j) y(j) with one rounding (arb_dot: the exact sum of the
/// products' midpoints rounded once, radii bounded); x, y Eigen vectors or
/// rows/columns with direct access, any stride.
template <class X, class Y>
void ball_dot(Ball& r, const X& x, const Y& y) {
  arb_dot(r.get(), nullptr, 0, ball_ptr(x.data()), x.innerStride(), ball_ptr(y.data()), y.innerStride(), x.size(),
          ball_precision());
}

// matrix.hpp's products on Balls: each entry one arb_dot (exact accumulation,
// one rounding) or arb_addmul (one rounding), rather than Eigen's loops, a
// rounded product and a rounded sum per term with a temporary ball each. Any
// order and rounding encloses the exact value, so the certified goldens are
// the same; the balls are tighter and cost a fraction (docs/performance.md).

/// y_k = A_k^T x: y_k(i) = arb_dot of column i of A_k with x.
inline void transposed_products(std::initializer_list<const Mat<Ball>*> A, const Vec<Ball>& x,
                                std::initializer_list<Vec<Ball>*> y) {
  auto out = y.begin();
  for (const Mat<Ball>* a : A) {
    Vec<Ball>& v = **out++;
    v.resize(a->cols());
    for (Eigen::Index i = 0; i < a->cols(); ++i)
      arb_dot(v(i).get(), nullptr, 0, ball_ptr(a->data() + i * a->outerStride()), 1, ball_ptr(x.data()), 1,
              a->rows(), ball_precision());
  }
}

/// y += A (a x): y(i) = arb_dot with initial value y(i) over row i of A and a x.
inline void add_scaled_product(Vec<Ball>& y, const Mat<Ball>& A, const Ball& a, const Vec<Ball>& x) {
  const Vec<Ball> ax = a * x;
  for (Eigen::Index i = 0; i < A.rows(); ++i)
    arb_dot(y(i).get(), y(i).get(), 0, ball_ptr(A.data() + i), A.outerStride(), ball_ptr(ax.data()), 1, A.cols(),
            ball_precision());
}

/// d += x y^T: d(i, j) = arb_addmul(d(i, j), x(i), y(j)).
inline void add_outer(Mat<Ball>& d, const Vec<Ball>& x, const Vec<Ball>& y) {
  for (Eigen::Index j = 0; j < d.cols(); ++j)
    for (Eigen::Index i = 0; i < d.rows(); ++i) arb_addmul(d(i, j).get(), x(i).get(), y(j).get(), ball_precision());
}

/// y = A x, each y(i) one arb_dot over row i of A (column-major: stride A.rows()).
template <class MA>
void ball_gemv(Eigen::Matrix<Ball, Eigen::Dynamic, 1>& y, const MA& A, const Eigen::Matrix<Ball, Eigen::Dynamic, 1>& x) {
  const Eigen::Index m = A.rows(), n = A.cols();
  y.resize(m);
  for (Eigen::Index i = 0; i < m; ++i)
    arb_dot(y(i).get(), nullptr, 0, ball_ptr(A.data() + i), A.outerStride(), ball_ptr(x.data()), 1, n,
            ball_precision());
}

}  // namespace dmref

