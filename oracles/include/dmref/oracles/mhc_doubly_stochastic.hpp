// dmref/oracles/mhc_doubly_stochastic.hpp: the limit the Sinkhorn iteration of
// mHC tends to, solved directly rather than by iterating.
//
// For E = exp(L) > 0 (n x n) there are unique (up to r -> r a, c -> c / a)
// positive vectors with B* = diag(r) E diag(c) doubly stochastic (Sinkhorn
// 1964). With u = log r, v = log c they minimize the strictly convex
//   Phi(u, v) = sum_ij E_ij exp(u_i + v_j) - sum_i u_i - sum_j v_j
// (gradient: row sums - 1, column sums - 1) once the gauge is fixed by
// v_{n-1} = 0. This oracle runs Newton's method with Armijo backtracking on
// Phi: Hessian [[diag(row sums), B], [B^T, diag(column sums)]] without the
// last column, factored by LDL^T. It converges quadratically; it throws if the
// gradient does not reach the working precision (the convergence check).
//
// Also: Birkhoff's contraction coefficient of the Sinkhorn round for E, and the
// Hilbert projective distance that round contracts (for the properties).
#pragma once

#include "dmref/scalar_traits.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace dmref::oracle {

template <class S>
struct DoublyStochastic {
  Mat<S> B;             // the doubly stochastic scaling of exp(L)
  Vec<S> u, v;          // log of the row and column scalings, v(n-1) = 0
  int iterations = 0;   // Newton steps taken
  S residual = 0;       // max |row sum - 1|, |column sum - 1| at exit
};

template <class S>
DoublyStochastic<S> doubly_stochastic_limit(const Mat<S>& L, int max_iterations = 200) {
  using std::abs;
  using std::exp;
  using std::log;
  const int n = static_cast<int>(L.rows());
  if (n == 0 || L.cols() != n) throw std::invalid_argument("oracle::doubly_stochastic_limit: L must be square");
  S Lmax = 0;
  for (Eigen::Index i = 0; i < L.size(); ++i) Lmax = std::max<S>(Lmax, abs(L(i)));
  // Evaluating a row sum rounds exp(L + u + v) (argument error ~ eps |arg|)
  // and adds n terms: the gradient is known to ~ n (1 + |L|) eps at best.
  const S tol = S(1024) * S(n) * (1 + Lmax) * epsilon<S>();
  DoublyStochastic<S> r;
  r.u.resize(n);
  r.v = Vec<S>::Zero(n);
  for (int i = 0; i < n; ++i) {
    S s = 0;
    for (int j = 0; j < n; ++j) s += exp(L(i, j));
    r.u(i) = -log(s);
  }
  auto scaled = [&](const Vec<S>& u, const Vec<S>& v) {
    Mat<S> B(n, n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) B(i, j) = exp(L(i, j) + u(i) + v(j));
    return B;
  };
  auto phi = [&](const Mat<S>& B, const Vec<S>& u, const Vec<S>& v) { return B.sum() - u.sum() - v.sum(); };
  auto grad_max = [&](const Mat<S>& B) {
    S g = 0;
    for (int i = 0; i < n; ++i) g = std::max<S>(g, abs(S(B.row(i).sum() - 1)));
    for (int j = 0; j < n; ++j) g = std::max<S>(g, abs(S(B.col(j).sum() - 1)));
    return g;
  };
  const int m = 2 * n - 1;
  for (r.iterations = 0;; ++r.iterations) {
    r.B = scaled(r.u, r.v);
    const Vec<S> rs = r.B.rowwise().sum(), cs = r.B.colwise().sum().transpose();
    Vec<S> g(m);
    for (int i = 0; i < n; ++i) g(i) = rs(i) - 1;
    for (int j = 0; j + 1 < n; ++j) g(n + j) = cs(j) - 1;
    r.residual = std::max<S>(g.cwiseAbs().maxCoeff(), abs(cs(n - 1) - 1));
    if (r.residual <= tol) break;
    if (r.iterations == max_iterations)
      throw std::runtime_error("oracle::doubly_stochastic_limit: no convergence after " +
                               std::to_string(max_iterations) + " Newton steps, residual " +
                               std::to_string(to_double(r.residual)));
    Mat<S> Hs = Mat<S>::Zero(m, m);
    for (int i = 0; i < n; ++i) Hs(i, i) = rs(i);
    for (int j = 0; j + 1 < n; ++j) {
      Hs(n + j, n + j) = cs(j);
      for (int i = 0; i < n; ++i) Hs(i, n + j) = Hs(n + j, i) = r.B(i, j);
    }
    const Vec<S> d = Hs.ldlt().solve(Vec<S>(-g));
    const S phi0 = phi(r.B, r.u, r.v), slope = g.dot(d);
    // Armijo backtracking on Phi; a step that halves the gradient is also
    // accepted, since near the solution the decrease of Phi (~ |g|^2) falls
    // below the rounding of Phi itself and Armijo can no longer be resolved.
    S alpha = 1;
    bool moved = false;
    for (int k = 0; k < 80 && !moved; ++k, alpha /= 2) {
      Vec<S> u = r.u + alpha * d.head(n), v = r.v;
      v.head(n - 1) += alpha * d.tail(n - 1);
      const Mat<S> B = scaled(u, v);
      if (phi(B, u, v) <= phi0 + alpha * slope / 10000 || grad_max(B) <= r.residual / 2) {
        r.u = u;
        r.v = v;
        moved = true;
      }
    }
    if (!moved)
      throw std::runtime_error("oracle::doubly_stochastic_limit: line search failed at residual " +
                               std::to_string(to_double(r.residual)));
  }
  return r;
}

/// Birkhoff's coefficient for one Sinkhorn round on E = exp(L):
/// kappa = tau(E)^2, tau = tanh(Delta / 4), Delta = max_{i,j,k,l}
/// (L_ik + L_jl - L_jk - L_il) the projective diameter of E. The column
/// scalings c_t of successive rounds satisfy d_H(c_{t+1}, c*) <= kappa d_H(c_t, c*).
template <class S>
S birkhoff_kappa(const Mat<S>& L) {
  using std::tanh;
  const Eigen::Index n = L.rows();
  S delta = 0;
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < n; ++j)
      for (Eigen::Index k = 0; k < n; ++k)
        for (Eigen::Index l = 0; l < n; ++l) delta = std::max<S>(delta, L(i, k) + L(j, l) - L(j, k) - L(i, l));
  const S tau = tanh(delta / 4);
  return tau * tau;
}

/// Hilbert distance between the column scalings of two scalings of the same
/// E: for H = diag(r) E diag(c) and B = diag(r*) E diag(c*), every row i of
/// log(H / B) is (log r - log r*)_i + (log c - log c*), so its oscillation
/// over j is d_H(c, c*). Returns the maximum over rows (equal in exact
/// arithmetic) of max_j - min_j log(H_ij / B_ij).
template <class S, class T>
S hilbert_column_distance(const Mat<T>& H, const Mat<S>& B) {
  using std::log;
  S d = 0;
  for (Eigen::Index i = 0; i < B.rows(); ++i) {
    S lo = 0, hi = 0;
    for (Eigen::Index j = 0; j < B.cols(); ++j) {
      const S x = log(S(H(i, j)) / B(i, j));
      if (j == 0 || x < lo) lo = x;
      if (j == 0 || x > hi) hi = x;
    }
    d = std::max<S>(d, hi - lo);
  }
  return d;
}

}  // namespace dmref::oracle
