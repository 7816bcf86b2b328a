// dmref/scalar.hpp: the scalar types dmref is instantiated for: the
// vocabulary of dmref/scalar_traits.hpp, plus Boost's MPFR and MPFI numbers
// and their specializations of its traits. Include this to name mpfr<D>,
// mpfi<D> or mp77 (oracles, tests, stability); the reference's headers
// include only scalar_traits.hpp.
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

#include "dmref/scalar_traits.hpp"

#include <boost/multiprecision/eigen.hpp>
#include <boost/multiprecision/mpfi.hpp>
#include <boost/multiprecision/mpfr.hpp>

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

template <unsigned D>
struct is_interval<mpfi<D>> : std::true_type {};

/// Boost's numbers (any backend): one MPFR/MPFI call per operation through the
/// backend's eval_* functions; Boost's MPFR numbers also expose their mpfr_t.
namespace detail {
template <class S>
struct BoostMpArith {
  static constexpr bool is_mp = true, is_mpfr_point = false;
  static void mul(S& r, const S& a, const S& b) {
    using bmp::default_ops::eval_multiply;
    eval_multiply(r.backend(), a.backend(), b.backend());
  }
  static void add(S& r, const S& a, const S& b) {
    using bmp::default_ops::eval_add;
    eval_add(r.backend(), a.backend(), b.backend());
  }
  static void sub(S& r, const S& a, const S& b) {
    using bmp::default_ops::eval_subtract;
    eval_subtract(r.backend(), a.backend(), b.backend());
  }
  static void div(S& r, const S& a, const S& b) {
    using bmp::default_ops::eval_divide;
    eval_divide(r.backend(), a.backend(), b.backend());
  }
  static void half(S& r, const S& a) {  // exact, as a / S(2) is
    using bmp::default_ops::eval_ldexp;
    eval_ldexp(r.backend(), a.backend(), -1L);
  }
};
}  // namespace detail
template <class B, bmp::expression_template_option E>
struct MpArith<bmp::number<B, E>> : detail::BoostMpArith<bmp::number<B, E>> {};
template <unsigned D>
struct MpArith<mpfr<D>> : detail::BoostMpArith<mpfr<D>> {
  static constexpr bool is_mpfr_point = true;
  static mpfr_ptr data(mpfr<D>& x) { return x.backend().data(); }
  static mpfr_srcptr data(const mpfr<D>& x) { return x.backend().data(); }
};

}  // namespace dmref
