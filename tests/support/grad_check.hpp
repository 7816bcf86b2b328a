// tests/support/grad_check.hpp: the adjoint identity, oracle 1 of every
// backward pass (docs/framework.md, "Backward"). For a forward map f with
// Jacobian J at x, random u (outputs) and w (inputs),
//     <u, J w>  (central differences of the forward, oracles/central_difference.hpp)
//  == <J^T u, w> (the backward under test).
// Both sides are computed at Hi = mp200 (667 bits) with step h = 2^-200.
// Tolerance (derived): the difference quotient errs by h^2/6 |u^T f'''[w,w,w]|
// plus about 2^-667 (sum of |f| terms)/h; the backward by about 2^-667 times its
// condition. With the O(1)-scaled cases here (entries of u, w in [-1, 1),
// weights ~ 1/sqrt(fan-in)), |u^T f'''[w,w,w]| <= ||u||_1 ||w||_1^3 max|f'''| and
// max|f'''| is a modest constant, so
//     |gap| <= 2^-400 ||u||_1 ||w||_1^3 C3 + 2^-467 ||u||_1 ||f||_inf.
// The test allows tol = 2^-300 ||u||_1 (1 + ||w||_1)^3 (1 + ||f||_inf): it admits
// C3 up to 2^100 and still rejects any adjoint error above 2^-300 of the scale,
// while a wrong adjoint term is O(1) of it.
#pragma once

#include "dmref/oracles/central_difference.hpp"
#include "dmref/scalar.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace dmref::test {

using GradHi = mp200;

/// Pointers to the entries of a problem's inputs (or of their gradients), in
/// one fixed order, read from and written to a flat vector.
template <class S>
struct Flat {
  std::vector<S*> at;
  Flat& add(S& x) {
    at.push_back(&x);
    return *this;
  }
  template <class D>
  Flat& add(Eigen::MatrixBase<D>& x) {
    for (Eigen::Index j = 0; j < x.cols(); ++j)
      for (Eigen::Index i = 0; i < x.rows(); ++i) at.push_back(&x(i, j));
    return *this;
  }
  template <class D>
  Flat& add(Eigen::MatrixBase<D>&& x) {  // a block expression (a column, a segment)
    for (Eigen::Index j = 0; j < x.cols(); ++j)
      for (Eigen::Index i = 0; i < x.rows(); ++i) at.push_back(&x.derived().coeffRef(i, j));
    return *this;
  }
  Flat& add(std::vector<Vec<S>>& xs) {
    for (auto& x : xs) add(x);
    return *this;
  }
  Vec<S> get() const {
    Vec<S> r(static_cast<Eigen::Index>(at.size()));
    for (std::size_t i = 0; i < at.size(); ++i) r(static_cast<Eigen::Index>(i)) = *at[i];
    return r;
  }
  void set(const Vec<S>& x) const {
    REQUIRE(static_cast<std::size_t>(x.size()) == at.size());
    for (std::size_t i = 0; i < at.size(); ++i) *at[i] = x(static_cast<Eigen::Index>(i));
  }
};

/// Concatenation of a list of vectors (the outputs of one forward pass).
template <class S>
Vec<S> concat(const std::vector<Vec<S>>& xs) {
  Eigen::Index n = 0;
  for (const auto& x : xs) n += x.size();
  Vec<S> r(n);
  Eigen::Index k = 0;
  for (const auto& x : xs) {
    r.segment(k, x.size()) = x;
    k += x.size();
  }
  return r;
}

/// A problem P for the adjoint identity provides (at S = GradHi):
///   Flat<S> inputs(P&)            every differentiated input, in order
///   Vec<S> outputs(const P&)      the forward outputs, flattened
///   Vec<S> vjp(const P&, u)       J^T u, flattened in the order of inputs()
/// check_adjoint draws u, w, compares both sides, prints the gap and returns
/// gap / tol (< 1 passes).
template <class P>
double check_adjoint(const std::string& what, const P& p0, std::uint64_t seed) {
  using S = GradHi;
  using std::abs;
  P p = p0;
  const Vec<S> x0 = p.inputs().get();
  const Vec<S> y0 = p.outputs();
  const Vec<S> u = oracle::random_direction<S>(y0.size(), seed);
  const Vec<S> w = oracle::random_direction<S>(x0.size(), seed ^ 0x5eedull);
  const S h = S(1) / pow(S(2), 200);
  auto f = [&](const Vec<S>& x) {
    P q = p0;
    q.inputs().set(x);
    return q.outputs();
  };
  const S jw = u.dot(oracle::central_difference<S>(f, x0, w, h));
  const Vec<S> g = p.vjp(u);
  REQUIRE(g.size() == x0.size());
  const S jtu = g.dot(w);
  const S tol = pow(S(2), -300) * u.lpNorm<1>() * pow(S(1) + w.lpNorm<1>(), 3) * (S(1) + y0.lpNorm<Eigen::Infinity>());
  CHECK(jw != 0);  // a vanishing directional derivative would make the identity vacuous
  const double ratio = static_cast<double>(abs(jw - jtu) / tol);
  std::printf("adjoint %-40s inputs %5ld outputs %5ld  <u,Jw> = %+.12e  gap/tol = %.2e\n", what.c_str(),
              static_cast<long>(x0.size()), static_cast<long>(y0.size()), static_cast<double>(jw), ratio);
  return ratio;
}

}  // namespace dmref::test
