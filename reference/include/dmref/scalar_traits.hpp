// dmref/scalar_traits.hpp: the scalar-generic vocabulary every module uses
// (is_interval, epsilon, bits, scalar_name, MpArith), for any scalar type, without
// the scalar types' heavy headers. The reference's scheme headers include this;
// dmref/scalar.hpp adds Boost's fixed-precision MPFR and MPFI numbers (the
// oracles' and tests' types) and their specializations of the traits here.
// Boost.Multiprecision's MPFR and MPFI headers are about 1.5 s of a
// translation unit's parse (docs/performance.md "Compile time"): the
// conformance library, the CLI and the one-translation-unit-per-header check
// do not instantiate those types and do not pay it.
#pragma once

#include <boost/math/tools/precision.hpp>

#include <Eigen/Dense>

#include "dmref/ball.hpp"
#include "dmref/matrix.hpp"
#include "dmref/real.hpp"

#include <cmath>
#include <string>
#include <type_traits>

namespace dmref {

/// Whether S is an interval type (an enclosure, not a point). Ball here; the
/// MPFI numbers in scalar.hpp.
template <class T>
struct is_interval : std::false_type {};
template <>
struct is_interval<Ball> : std::true_type {};
template <class T>
inline constexpr bool is_interval_v = is_interval<T>::value;

/// In-place MPFR/MPFI arithmetic on S, for the code that calls it directly
/// (ldm.hpp's rls_step primitives): `is_mp` when every arithmetic operation on
/// S is one MPFR or MPFI call (mul, add, sub, div, half: r = a op b, r may
/// alias a or b, no temporary), `is_mpfr_point` when S holds one mpfr_t
/// (`data(x)`). Real<B> here; Boost's numbers in scalar.hpp, which a
/// translation unit that names them includes.
template <class S>
struct MpArith {
  static constexpr bool is_mp = false, is_mpfr_point = false;
};
template <mpfr_prec_t B>
struct MpArith<Real<B>> {
  static constexpr bool is_mp = true, is_mpfr_point = true;
  static void mul(Real<B>& r, const Real<B>& a, const Real<B>& b) { mpfr_mul(r.get(), a.get(), b.get(), MPFR_RNDN); }
  static void add(Real<B>& r, const Real<B>& a, const Real<B>& b) { mpfr_add(r.get(), a.get(), b.get(), MPFR_RNDN); }
  static void sub(Real<B>& r, const Real<B>& a, const Real<B>& b) { mpfr_sub(r.get(), a.get(), b.get(), MPFR_RNDN); }
  static void div(Real<B>& r, const Real<B>& a, const Real<B>& b) { mpfr_div(r.get(), a.get(), b.get(), MPFR_RNDN); }
  static void half(Real<B>& r, const Real<B>& a) { mpfr_div_2ui(r.get(), a.get(), 1, MPFR_RNDN); }  // exact
  static mpfr_ptr data(Real<B>& x) { return x.get(); }
  static mpfr_srcptr data(const Real<B>& x) { return x.get(); }
};

/// Machine epsilon of S (distance from 1 to the next number), never cached.
template <class S>
S epsilon() {
  return boost::math::tools::epsilon<S>();
}

/// Binary precision of S in bits (for Ball: this thread's working precision).
template <class S>
constexpr int bits() {
  if constexpr (std::is_same_v<S, Ball>) return int(ball_precision());
  else return std::numeric_limits<S>::digits;
}

/// Human-readable name of a scalar type, for reports and test output.
template <class S>
std::string scalar_name() {
  if constexpr (std::is_same_v<S, double>) {
    return "double";
  } else if constexpr (std::is_same_v<S, float>) {
    return "float";
  } else if constexpr (std::is_same_v<S, Ball>) {
    return "arb" + std::to_string(bits<S>());
  } else if constexpr (is_interval_v<S>) {
    return "mpfi" + std::to_string(bits<S>());
  } else {
    return "mpfr" + std::to_string(bits<S>());
  }
}

}  // namespace dmref
