// dmref/rls_forms.hpp: two more formulations of the RLS-LDM memory write of
// one group, equal in exact arithmetic to ldm.hpp's rls_step (ldm-math.md),
// for the numerical-stability study (docs/stability.md):
//
//   Potter square root: the state is a factor F with P = F F^T (F_{-1} =
//     sqrt(alpha) I) instead of P. With psi = F^T k,
//       gamma = lambda + w psi^T psi            (= lambda + w k^T P k)
//       g     = F psi / gamma                   (= P k / gamma, the gain)
//       M    <- M + w (v - M k) g^T
//       F    <- (F - w b (F psi) psi^T) / sqrt(lambda),  b = 1 / (gamma + sqrt(lambda gamma))
//     because (I - w b psi psi^T)^2 = I - w psi psi^T / gamma for that b, so
//     F' F'^T = (P - w P k k^T P / gamma) / lambda, the RLS update of P. P stays
//     symmetric positive semidefinite by construction, and F grows only like
//     prod(lambda)^(-1/2) in unexcited directions (P like prod(lambda)^-1).
//     w = 0 is exact: gamma = lambda, F <- F / sqrt(lambda). (Potter 1963;
//     Bierman, "Factorization Methods for Discrete Sequential Estimation", 1977.)
//
//   Closed form (information form): the state is the pair
//       R_l = lambda_l R_{l-1} + w k k^T        (R_{-1} = I / alpha)
//       B_l = lambda_l B_{l-1} + w v k^T        (B_{-1} = 0)
//     i.e. R_l and S_l of ldm-math.md's closed form, and the memory is
//     recomputed every layer as M_l = B_l R_l^{-1} by a Cholesky factorization
//     (P_l = R_l^{-1} when wanted). R decays like prod(lambda) in unexcited
//     directions, so this form underflows where the others overflow.
//
// Everything is scalar-generic and branch-free (the Cholesky factorization has
// no pivoting and no positivity test: a non-positive pivot gives NaN, which
// the stability sweeps report), so it runs on interval types too.
#pragma once

#include "dmref/scalar.hpp"

#include <stdexcept>
#include <string>

namespace dmref {

/// One Potter square-root RLS step of one group: M (dv x dk), F (dk x dk) with
/// P = F F^T, key k, value v, weight w >= 0, forgetting factor lambda in (0, 1].
template <class S>
void rls_potter_step(Mat<S>& M, Mat<S>& F, const Vec<S>& k, const Vec<S>& v, const S& w, const S& lambda) {
  using std::sqrt;
  const Vec<S> psi = F.transpose() * k;
  const S gamma = lambda + w * psi.squaredNorm();
  const Vec<S> Fpsi = F * psi;
  const Vec<S> u = v - M * k;
  M.noalias() += (w * u) * (Fpsi / gamma).transpose();
  const S b = S(1) / (gamma + sqrt(lambda * gamma));
  F = (F - ((w * b) * Fpsi) * psi.transpose()) / sqrt(lambda);
}

/// Potter's initial factor sqrt(alpha) I (P_{-1} = alpha I).
template <class S>
Mat<S> rls_potter_init(int dk, const S& alpha) {
  using std::sqrt;
  return sqrt(alpha) * Mat<S>::Identity(dk, dk);
}

/// One information-form step: R <- lambda R + w k k^T, B <- lambda B + w v k^T.
template <class S>
void rls_information_step(Mat<S>& R, Mat<S>& B, const Vec<S>& k, const Vec<S>& v, const S& w, const S& lambda) {
  R = lambda * R + (w * k) * k.transpose();
  B = lambda * B + (w * v) * k.transpose();
}

/// Lower Cholesky factor of a symmetric positive definite R (R = C C^T), without
/// pivoting or tests: only the lower triangle of R is read.
template <class S>
Mat<S> cholesky_lower(const Mat<S>& R) {
  using std::sqrt;
  const Eigen::Index n = R.rows();
  if (R.cols() != n) throw std::invalid_argument("rls_forms: R: must be square, got " + std::to_string(R.rows()) + "x" +
                                                 std::to_string(R.cols()));
  Mat<S> C = Mat<S>::Zero(n, n);
  for (Eigen::Index j = 0; j < n; ++j) {
    S d = R(j, j);
    for (Eigen::Index p = 0; p < j; ++p) d -= C(j, p) * C(j, p);
    C(j, j) = sqrt(d);
    for (Eigen::Index i = j + 1; i < n; ++i) {
      S s = R(i, j);
      for (Eigen::Index p = 0; p < j; ++p) s -= C(i, p) * C(j, p);
      C(i, j) = s / C(j, j);
    }
  }
  return C;
}

/// X = Y R^{-1} for R = C C^T (C lower): each row y of Y solves C z = y^T by
/// forward substitution, then C^T x = z by back substitution.
template <class S>
Mat<S> solve_right_cholesky(const Mat<S>& C, const Mat<S>& Y) {
  const Eigen::Index n = C.rows();
  if (Y.cols() != n) throw std::invalid_argument("rls_forms: right-hand side has " + std::to_string(Y.cols()) +
                                                 " columns, R is " + std::to_string(n) + "x" + std::to_string(n));
  Mat<S> X(Y.rows(), n);
  Vec<S> z(n);
  for (Eigen::Index r = 0; r < Y.rows(); ++r) {
    for (Eigen::Index i = 0; i < n; ++i) {
      S s = Y(r, i);
      for (Eigen::Index p = 0; p < i; ++p) s -= C(i, p) * z(p);
      z(i) = s / C(i, i);
    }
    for (Eigen::Index i = n - 1; i >= 0; --i) {
      S s = z(i);
      for (Eigen::Index p = i + 1; p < n; ++p) s -= C(p, i) * X(r, p);
      X(r, i) = s / C(i, i);
    }
  }
  return X;
}

/// The closed-form memory M = B R^{-1} (and, if P is given, P = R^{-1}).
template <class S>
Mat<S> rls_closed_form_solve(const Mat<S>& R, const Mat<S>& B, Mat<S>* P = nullptr) {
  const Mat<S> C = cholesky_lower<S>(R);
  if (P) *P = solve_right_cholesky<S>(C, Mat<S>::Identity(R.rows(), R.cols()));
  return solve_right_cholesky<S>(C, B);
}

}  // namespace dmref
