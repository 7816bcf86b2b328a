// dmref/certify_mpfi.hpp: Ziv's strategy in MPFI interval arithmetic
// (certify, certify_with), at fixed decimal precisions D: the tests' second,
// independent route to a certified double-double (tests/test_certify.cpp,
// tests/test_ball.cpp), beside the Arb-ball ladder of dmref/certify.hpp that
// makes the goldens. Both decide with the same exact check of the interval's
// ends (detail::check_ends). Apart because it needs Boost's MPFI numbers
// (dmref/scalar.hpp), which the conformance library does not parse.
#pragma once

#include "dmref/certify.hpp"
#include "dmref/scalar.hpp"

#include <climits>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace dmref {

/// The argument certify() calls the computation with: `typename
/// decltype(p)::type` is the interval type mpfi<D> to compute in.
template <unsigned D>
struct Precision {
  using type = mpfi<D>;
  static constexpr unsigned digits10 = D;
};

namespace detail {

template <unsigned D>
std::string describe(const mpfi<D>& x) {
  const auto a = bmp::lower(x), b = bmp::upper(x);
  return describe_ends(a.backend().data(), b.backend().data());
}

template <unsigned D>
std::string where(Eigen::Index i, Eigen::Index j) {
  return "element (" + std::to_string(i) + ", " + std::to_string(j) + ") at " + std::to_string(D) + " digits (" +
         std::to_string(bits<mpfi<D>>()) + " bits)";
}

/// The result of f as a matrix of intervals.
template <unsigned D, class R>
Mat<mpfi<D>> as_matrix(R&& r) {
  using T = std::decay_t<R>;
  if constexpr (std::is_same_v<T, mpfi<D>>) {
    Mat<mpfi<D>> m(1, 1);
    m(0, 0) = r;
    return m;
  } else {
    static_assert(std::is_same_v<typename T::Scalar, mpfi<D>>,
                  "certify: the computation must return mpfi<D> values for the Precision<D> it is given");
    return Mat<mpfi<D>>(std::forward<R>(r));
  }
}

/// One attempt at precision D. Returns true and fills `out` if every element
/// certifies; records the first failing element in `failure` otherwise.
template <unsigned D, class F>
bool attempt(F& f, unsigned max_digits10, Certified& out, std::string& tried, std::string& failure) {
  if (D > max_digits10) return false;
  tried += (tried.empty() ? "" : ", ") + std::to_string(D);
  const Mat<mpfi<D>> x = as_matrix<D>(f(Precision<D>{}));
  Mat<double> hi(x.rows(), x.cols()), lo(x.rows(), x.cols());
  for (Eigen::Index j = 0; j < x.cols(); ++j) {
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      const auto a = bmp::lower(x(i, j)), b = bmp::upper(x(i, j));
      const ElementResult r = check_ends(a.backend().data(), b.backend().data());
      if (r.verdict == Verdict::non_finite) {
        throw std::runtime_error("certify: " + where<D>(i, j) + " is not finite in double: " + describe(x(i, j)));
      }
      if (r.verdict == Verdict::not_yet) {
        failure = "at the last, " + where<D>(i, j) + " is " + describe(x(i, j)) +
                  ", whose ends do not round to the same double-double";
        return false;
      }
      hi(i, j) = r.hi;
      lo(i, j) = r.lo;
    }
  }
  out.hi = std::move(hi);
  out.lo = std::move(lo);
  out.bits = bits<mpfi<D>>();
  out.digits10 = D;
  return true;
}

}  // namespace detail

/// Ziv's strategy over the precisions Ds (decimal digits, increasing): calls
/// f(Precision<D>{}) for each D <= max_digits10 in turn, which must return a
/// Mat or Vec (or any Eigen expression) of mpfi<D>, or one mpfi<D>; returns
/// the double-double of the first result whose every element certifies.
/// Throws std::runtime_error naming the element and its interval if none
/// does, or at once if an element is NaN or beyond the double range.
template <unsigned... Ds, class F>
Certified certify_with(F&& f, unsigned max_digits10 = UINT_MAX) {
  static_assert(sizeof...(Ds) > 0, "certify_with: give at least one precision");
  Certified out;
  std::string tried, failure;
  if (!(detail::attempt<Ds>(f, max_digits10, out, tried, failure) || ...)) {
    if (tried.empty()) {
      throw std::runtime_error("certify: no precision in the list is <= max_digits10 = " +
                               std::to_string(max_digits10));
    }
    throw std::runtime_error("certify: not certified at " + tried + " digits; " + failure);
  }
  return out;
}

/// certify_with over the default list 40, 80, 160, 320, 640 decimal digits
/// (134 to 2128 bits), trying those <= max_digits10.
template <class F>
Certified certify(F&& f, unsigned max_digits10 = 640) {
  return certify_with<40, 80, 160, 320, 640>(std::forward<F>(f), max_digits10);
}

}  // namespace dmref
