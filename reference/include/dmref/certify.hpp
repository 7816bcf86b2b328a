// dmref/certify.hpp: certified double-double values by Ziv's strategy.
//
// A golden value is stored as a double-double (hi, lo) with
//     hi = RN(x),  lo = RN(x - hi)
// where x is the exact real value and RN rounds to the nearest double, ties
// to even. certify_bits() evaluates a computation on Arb balls (dmref/ball.hpp)
// over a runtime ladder of binary precisions, certify()/certify_with()
// (dmref/certify_mpfi.hpp) in MPFI interval arithmetic at
// increasing precisions D (decimal digits) and stops at the first D where,
// for every element, both ends a <= x <= b of its interval give the same hi,
// and the remainders a - hi and b - hi (exact at precision D) give the same
// lo. RN is monotone, so then every real in [a, b], x included, has that same
// (hi, lo): the pair is exactly the double-double of x, and
//     |x - (hi + lo)| <= ulp(lo)/2 <= max(2^-53 |lo|, 2^-1075) <= max(2^-106 |hi|, 2^-1075)
// (the 2^-1075 only when lo is subnormal).
//
// Limits: an x that is itself a tie point of RN (a midpoint between doubles,
// or x - hi one) certifies only if its interval collapses to that point; an
// exact zero computed with rounding certifies only once the interval is below
// the smallest subnormal (about 330 digits plus the digits lost on the way).
#pragma once

#include "dmref/scalar_traits.hpp"

#include <mpfr.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace dmref {

/// The double-double of a matrix of exact values, and the precision that
/// certified it.
struct Certified {
  Mat<double> hi, lo;     // hi = RN(x), lo = RN(x - hi), element by element
  int bits = 0;           // binary precision of the successful evaluation
  unsigned digits10 = 0;  // its decimal precision D (mpfi<D>); 0 for Balls (certify_bits)
};

namespace detail {

/// Owns an mpfr_t for the remainder computation.
struct MpfrTemp {
  mpfr_t v;
  explicit MpfrTemp(mpfr_prec_t p) { mpfr_init2(v, p); }
  ~MpfrTemp() { mpfr_clear(v); }
  MpfrTemp(const MpfrTemp&) = delete;
  MpfrTemp& operator=(const MpfrTemp&) = delete;
};

enum class Verdict { certified, not_yet, non_finite };

struct ElementResult {
  Verdict verdict;
  double hi = 0, lo = 0;
};

/// Zero of either sign compares equal; a certified zero is reported as +0
/// unless both ends agree that it is -0.
inline double join_zero(double a, double b) { return (a == 0 && std::signbit(a) != std::signbit(b)) ? 0.0 : a; }

inline ElementResult check_ends(mpfr_srcptr a, mpfr_srcptr b) {
  if (mpfr_nan_p(a) || mpfr_nan_p(b)) return {Verdict::non_finite};
  const double ha = mpfr_get_d(a, MPFR_RNDN), hb = mpfr_get_d(b, MPFR_RNDN);
  if (ha != hb) return {Verdict::not_yet};
  if (std::isinf(ha)) return {Verdict::non_finite};  // the whole interval is beyond the double range
  MpfrTemp r(std::max(mpfr_get_prec(a), mpfr_get_prec(b)));
  // a - RN(a) is exact at the precision of a: it is a multiple of the
  // smaller ulp and at most ulp(hi)/2 in size. The ternary value checks it.
  if (mpfr_sub_d(r.v, a, ha, MPFR_RNDN) != 0) return {Verdict::not_yet};
  const double la = mpfr_get_d(r.v, MPFR_RNDN);
  if (mpfr_sub_d(r.v, b, hb, MPFR_RNDN) != 0) return {Verdict::not_yet};
  const double lb = mpfr_get_d(r.v, MPFR_RNDN);
  if (la != lb) return {Verdict::not_yet};
  return {Verdict::certified, join_zero(ha, hb), join_zero(la, lb)};
}

/// "[a, b] (width w, relative r)" of the interval [a, b], for messages.
inline std::string describe_ends(mpfr_srcptr a, mpfr_srcptr b) {
  MpfrTemp w(std::max(mpfr_get_prec(a), mpfr_get_prec(b)));
  mpfr_sub(w.v, b, a, MPFR_RNDU);
  char buf[256];
  mpfr_snprintf(buf, sizeof buf, "[%.21Rg, %.21Rg] (width %.3Rg", a, b, w.v);
  std::string s = buf;
  if (mpfr_number_p(w.v) && !mpfr_zero_p(a)) {
    mpfr_div(w.v, w.v, a, MPFR_RNDU);
    mpfr_abs(w.v, w.v, MPFR_RNDU);
    mpfr_snprintf(buf, sizeof buf, ", relative %.3Rg", w.v);
    s += buf;
  }
  return s + ")";
}

/// The ends m - r and m + r of a Ball, exactly, as MPFR numbers. An end
/// beyond 2^(2^20) in magnitude is replaced by +-2^(2^20), and a nonzero end
/// below 2^-(2^20) by +-2^-(2^20) (MPFR's exponent range is smaller than
/// Arb's): the replacement rounds to the same double (+-inf, +-0) and leaves
/// the same remainder's double (+-0 for the tiny one), so check_ends gives the
/// verdict it would give on the exact end.
class BallEnds {
 public:
  explicit BallEnds(const Ball& x) {
    arf_t r, e;
    arf_init(r);
    arf_init(e);
    arf_set_mag(r, arb_radref(x.get()));
    arf_sub(e, arb_midref(x.get()), r, ARF_PREC_EXACT, ARF_RND_DOWN);
    set(a_, e);
    arf_add(e, arb_midref(x.get()), r, ARF_PREC_EXACT, ARF_RND_DOWN);
    set(b_, e);
    arf_clear(r);
    arf_clear(e);
  }
  ~BallEnds() {
    mpfr_clear(a_);
    mpfr_clear(b_);
  }
  BallEnds(const BallEnds&) = delete;
  BallEnds& operator=(const BallEnds&) = delete;
  mpfr_srcptr a() const { return a_; }
  mpfr_srcptr b() const { return b_; }

 private:
  static void set(mpfr_t m, const arf_t x) {
    constexpr slong kRange = slong(1) << 20;
    if (!arf_is_finite(x) || arf_is_zero(x)) {
      mpfr_init2(m, MPFR_PREC_MIN);
      arf_get_mpfr(m, x, MPFR_RNDN);  // +-0, +-inf, NaN: exact
      return;
    }
    const int sign = arf_sgn(x);
    if (arf_cmpabs_2exp_si(x, kRange) > 0 || arf_cmpabs_2exp_si(x, -kRange) < 0) {
      mpfr_init2(m, MPFR_PREC_MIN);
      mpfr_set_si_2exp(m, sign, arf_cmpabs_2exp_si(x, kRange) > 0 ? kRange : -kRange, MPFR_RNDN);
      return;
    }
    mpfr_init2(m, std::max<mpfr_prec_t>(MPFR_PREC_MIN, mpfr_prec_t(arf_bits(x))));
    if (arf_get_mpfr(m, x, MPFR_RNDN) != 0) throw std::logic_error("certify: an end of a ball did not convert exactly");
  }
  mpfr_t a_, b_;
};

}  // namespace detail

/// One rung of certify_bits: the double-double of every element of x, which
/// was evaluated at `bits` (the check certify_bits makes, below). Returns true
/// and fills `out` (out.bits = bits) if every element certifies; otherwise
/// false, with `failure` naming the first element that does not ("element (i,
/// j) at <bits> bits is ..."). certify_bits climbs the ladder with it; a caller
/// that combines evaluations before the check (a backward problem's
/// parameter gradients, summed over tokens: conf::generate.cpp) uses it alone.
inline bool certify_rung(const Mat<Ball>& x, int bits, Certified& out, std::string& failure) {
  const auto at = [&](Eigen::Index i, Eigen::Index j) {
    return "element (" + std::to_string(i) + ", " + std::to_string(j) + ") at " + std::to_string(bits) + " bits";
  };
  Mat<double> hi(x.rows(), x.cols()), lo(x.rows(), x.cols());
  for (Eigen::Index j = 0; j < x.cols(); ++j) {
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      const detail::BallEnds e(x(i, j));
      // Arb's indeterminate ball [NaN +- inf] (a division by a ball that
      // contains 0, a function outside its domain) says nothing about the
      // value: not certified at this precision, unlike MPFI's NaN.
      if (mpfr_nan_p(e.a()) || mpfr_nan_p(e.b())) {
        failure = at(i, j) + " is indeterminate ([NaN +- inf]: a division by a ball containing 0, " +
                  "or a function outside its domain)";
        return false;
      }
      const detail::ElementResult v = detail::check_ends(e.a(), e.b());
      if (v.verdict == detail::Verdict::non_finite) {  // both ends round to the same +-inf: proven beyond
        hi(i, j) = mpfr_sgn(e.a()) > 0 ? INFINITY : -INFINITY;
        lo(i, j) = double(mpfr_get_exp(mpfr_sgn(e.a()) > 0 ? e.a() : e.b()) - 1);  // |x| >= 2^lo
        continue;
      }
      if (v.verdict == detail::Verdict::not_yet) {
        failure = at(i, j) + " is " + detail::describe_ends(e.a(), e.b()) +
                  ", whose ends do not round to the same double-double";
        return false;
      }
      hi(i, j) = v.hi;
      lo(i, j) = v.lo;
    }
  }
  out.hi = std::move(hi);
  out.lo = std::move(lo);
  out.bits = bits;
  out.digits10 = 0;
  return true;
}

/// Ziv's strategy on Balls (dmref/ball.hpp) over a runtime ladder of binary
/// precisions `bits` (increasing): for each in turn, sets this thread's Ball
/// precision to it and calls f(bits), which must return a Mat or Vec (or an
/// Eigen expression) of Ball, or one Ball; returns the double-double of the
/// first result whose every element certifies (certify_rung): both exact ends
/// m - r, m + r of its ball round to the same (hi, lo) (check_ends), so the
/// exact value, which the ball encloses, has that double-double. An element
/// whose ends both round to the same +-inf is proven beyond double's range
/// (|x| >= 2^1024 - 2^970, where RN overflows): it does not hold the ladder
/// back and is returned as hi = +-inf (RN(x)) and lo = E, an integer with |x|
/// >= 2^E (E >= 1023: floor(log2) of the end nearest 0); the caller decides
/// what to do with it (conf::assemble leaves its tensor out). An enclosure
/// that merely straddles the overflow threshold is not_yet and climbs. Other
/// errors as certify_with (which, in MPFI, still throws on an overflowing
/// element).
template <class F>
Certified certify_bits(F&& f, const std::vector<int>& ladder) {
  if (ladder.empty()) throw std::invalid_argument("certify_bits: give at least one precision");
  std::string tried, failure;
  for (const int b : ladder) {
    tried += (tried.empty() ? "" : ", ") + std::to_string(b);
    const BallPrecision guard(b);
    auto r = f(b);
    Mat<Ball> x;
    if constexpr (std::is_same_v<std::decay_t<decltype(r)>, Ball>) {
      x.resize(1, 1);
      x(0, 0) = std::move(r);
    } else {
      x = std::move(r);
    }
    Certified out;
    if (certify_rung(x, b, out, failure)) return out;
  }
  throw std::runtime_error("certify: not certified at " + tried + " bits; at the last, " + failure);
}

}  // namespace dmref
