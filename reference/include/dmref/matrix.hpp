// dmref/matrix.hpp: the vocabulary every module shares and no scalar type's
// library is needed for: Vec<S> and Mat<S> (Eigen, any scalar), convert and
// to_double. The conformance layer's declarations (problem.hpp, schema,
// registry, gate) include this, not scalar.hpp, whose Boost.Multiprecision
// and MPFI headers every translation unit that includes it must parse.
#pragma once

#include <Eigen/Core>

#include <type_traits>

namespace dmref {

template <class S>
using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;
template <class S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;

/// Exact conversion between scalar types through the widest common path:
/// double -> S is exact for every S here; S -> T rounds once (to nearest).
template <class T, class S>
T convert(const S& s) {
  if constexpr (std::is_same_v<T, S>) {
    return s;
  } else if constexpr (std::is_arithmetic_v<S>) {
    return T(s);
  } else {
    return static_cast<T>(s);
  }
}

template <class T, class S>
Mat<T> convert(const Mat<S>& m) {
  return m.unaryExpr([](const S& s) { return convert<T>(s); });
}
template <class T, class S>
Vec<T> convert(const Vec<S>& m) {
  return m.unaryExpr([](const S& s) { return convert<T>(s); });
}

/// Nearest double (the midpoint for an interval).
template <class S>
double to_double(const S& s) {
  return static_cast<double>(s);
}

}  // namespace dmref
