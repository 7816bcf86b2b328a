// dmref/matrix.hpp: the vocabulary every module shares and no scalar type's
// library is needed for: Vec<S> and Mat<S> (Eigen, any scalar), convert and
// to_double. The conformance layer's declarations (problem.hpp, schema,
// registry, gate) include this, not scalar.hpp, whose Boost.Multiprecision
// and MPFI headers every translation unit that includes it must parse.
#pragma once

#include <Eigen/Core>

#include <initializer_list>
#include <type_traits>

namespace dmref {

template <class S>
using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;
template <class S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;

/// y_k = A_k^T x for each k (several projections of one vector, as Eigen
/// evaluates `y = A.transpose() * x`). Perturbed has its own, the chains of
/// all the products in one pass with the same bits (perturbed_gemv.hpp).
template <class S>
void transposed_products(std::initializer_list<const Mat<S>*> A, const Vec<S>& x, std::initializer_list<Vec<S>*> y) {
  auto out = y.begin();
  for (const Mat<S>* a : A) **out++ = a->transpose() * x;
}

/// d += t entry by entry (Eigen's `d += t` for plain matrices or vectors).
/// Perturbed has its own, in vector lanes with the same bits (perturbed_gemv.hpp).
template <class S, int R, int C>
void add_to(Eigen::Matrix<S, R, C>& d, const Eigen::Matrix<S, R, C>& t) {
  d += t;
}

/// y += A (a x) (as Eigen evaluates `y += A * (a * x)`, which takes the
/// factor a out of the product into its alpha). Ball has its own (ball.hpp).
template <class S>
void add_scaled_product(Vec<S>& y, const Mat<S>& A, const S& a, const Vec<S>& x) {
  // Eigen's `y += A * (a * x)`: the product into a temporary (Eigen assumes a product may alias its
  // destination), then added entry by entry (add_to: Perturbed's is vectorized).
  const Vec<S> t = A * (a * x);
  add_to(y, t);
}

/// r(j) = v . A.row(j) for every row of A (Eigen's `v.dot(A.row(j).transpose())`:
/// r = v(0) A(j, 0), then r = r + v(i) A(j, i) in index order). Perturbed has
/// its own, the rows' chains in the lanes of a vector with the same bits
/// (perturbed_gemv.hpp).
template <class S>
void row_dots(const Mat<S>& A, const Vec<S>& v, Vec<S>& r) {
  r.resize(A.rows());
  for (Eigen::Index j = 0; j < A.rows(); ++j) r(j) = v.dot(A.row(j).transpose());
}

/// d += x y^T (a rank-1 update, as Eigen evaluates `d += x * y.transpose()`:
/// column by column, d(i, j) = d(i, j) + y(j) x(i)). Perturbed has its own,
/// vectorized with the same bits (perturbed_gemv.hpp): a backward's
/// parameter gradients are such updates.
template <class S>
void add_outer(Mat<S>& d, const Vec<S>& x, const Vec<S>& y) {
  d += x * y.transpose();
}

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
