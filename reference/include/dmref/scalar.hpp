// dmref/scalar.hpp: the scalar types dmref is instantiated for, and the few
// scalar-generic helpers every module uses.
//
// Precision policy (docs/precision.md): every reference and oracle is a template
// on the scalar. Point types are `double`, Boost's fixed-precision MPFR numbers
// (mpfr<Digits10>: oracles and tests, with Boost.Math) and Real<Bits> (MPFR at
// exactly Bits bits: real256, real512, dmref/real.hpp); the interval types are
// fixed-precision MPFI (tests, properties) and Ball (FLINT/Arb at a runtime,
// thread-local precision: the certified goldens, dmref/ball.hpp).
// MPFR/MPFI precision is fixed because Eigen needs std::numeric_limits, which
// the variable-precision mpfr_float lacks; Ball and Real define their own.
// Expression templates are off: Eigen already fuses at the matrix level, and
// et_off types behave like ordinary value types inside Eigen's kernels.
#pragma once

#include <boost/math/tools/precision.hpp>
#include <boost/multiprecision/eigen.hpp>
#include <boost/multiprecision/mpfi.hpp>
#include <boost/multiprecision/mpfr.hpp>

#include <Eigen/Dense>

#include "dmref/ball.hpp"
#include "dmref/matrix.hpp"
#include "dmref/real.hpp"

#include <cmath>
#include <string>
#include <type_traits>

namespace dmref {

namespace bmp = boost::multiprecision;

/// MPFR with `Digits10` decimal digits (binary precision: numeric_limits<>::digits).
template <unsigned Digits10>
using mpfr = bmp::number<bmp::mpfr_float_backend<Digits10>, bmp::et_off>;
/// MPFI interval of the same precision.
template <unsigned Digits10>
using mpfi = bmp::number<bmp::mpfi_float_backend<Digits10>, bmp::et_off>;

using mp50 = mpfr<50>;    // 168 bits
using mp77 = mpfr<77>;    // 257 bits (Boost has no 256-bit MPFR type: real256 is one)
using mp100 = mpfr<100>;  // 334 bits
using mp200 = mpfr<200>;  // 667 bits: oracle precision for checks of mp77
using mi77 = mpfi<77>;    // interval counterpart of mp77

template <class T>
struct is_interval : std::false_type {};
template <unsigned D>
struct is_interval<mpfi<D>> : std::true_type {};
template <>
struct is_interval<Ball> : std::true_type {};
template <class T>
inline constexpr bool is_interval_v = is_interval<T>::value;

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
