// dmref/rls_forms.hpp: more formulations of the RLS-LDM memory write of one
// group, equal in exact arithmetic to ldm.hpp's rls_step (ldm-math.md), for
// the numerical-stability study (docs/stability.md). Notation: P_{-1} = alpha I,
// gamma = lambda + w k^T P k (w >= 0 the weight, lambda in (0, 1] the
// forgetting factor), g = P k / gamma the gain, M <- M + w (v - M k) g^T,
// P <- (P - w P k k^T P / gamma) / lambda. Every square-root form below treats
// the weighted observation as the unit-weight pair (sqrt(w) k, sqrt(w) v), so
// w = 0 is exact (no division by w).
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
//   Inverse QR-RLS: the state is the lower-triangular Cholesky factor S of P
//     (P = S S^T, S_{-1} = sqrt(alpha) I). The pre-array
//       A = [ 1   u^T             ]     u = sqrt(w / lambda) S^T k
//           [ 0   S / sqrt(lambda) ]
//     is rotated from the right (Givens rotations of column 0 against columns
//     dk, dk - 1, ..., 1, each zeroing one entry of the first row) into
//       A Theta = [ sqrt(r)   0^T ]     r = 1 + u^T u = gamma / lambda
//                 [ b         S'  ]
//     A Theta Theta^T A^T = A A^T gives b sqrt(r) = lambda^-1 sqrt(w) P k and
//     S' S'^T = lambda^-1 P - b b^T = (P - w P k k^T P / gamma) / lambda, the RLS
//     update; S' stays lower triangular because column 0 only ever holds rows
//     below the column it is rotated against. The gain comes out of the array:
//     w g = sqrt(w) b / sqrt(r). (Alexander and Ghirnikar, "A method for
//     recursive least squares filtering based upon an inverse QR
//     decomposition", IEEE Trans. SP 41(1), 1993; Haykin, Adaptive Filter
//     Theory, 4th ed. 2002, "inverse QR-RLS algorithm".)
//
//   QR-RLS (Givens): the state is the upper-triangular Cholesky factor C of
//     the information matrix R = P^-1 = C^T C (C_{-1} = I / sqrt(alpha)) and
//     Z = C^-T B^T (dk x dv, Z_{-1} = 0), B the weighted data sum of the closed
//     form below. The rows [sqrt(lambda) C | sqrt(lambda) Z] and the new
//     observation row [sqrt(w) k^T | sqrt(w) v^T] are rotated from the left
//     (one Givens rotation per row j, zeroing entry j of the observation row)
//     into [C' | Z'] and [0 | e^T]: Q^T Q = I gives C'^T C' = lambda C^T C +
//     w k k^T = R' and C'^T Z' = lambda B^T + w k v^T = B'^T. The memory is
//     M = B R^-1 = Z^T C^-T, one triangular solve (`rls_qr_memory`). The
//     state decays like sqrt(prod lambda) in unexcited directions, as the
//     closed form's R decays like prod lambda. (Gentleman and Kung 1981;
//     McWhirter 1983; Haykin, Adaptive Filter Theory, "QR-RLS algorithm".)
//
//   U-D factorisation (Bierman): P = U D U^T with U unit upper triangular and
//     D diagonal (U_{-1} = I, D_{-1} = alpha), updated by Bierman's
//     measurement update for the observation a = sqrt(w) k with variance
//     lambda: f = U^T a, vv = D f, and for j = 1..dk
//       alpha_j = alpha_{j-1} + vv_j f_j            (alpha_0 = lambda)
//       d_j    <- d_j alpha_{j-1} / alpha_j
//       u_ij   <- u_ij - b_i f_j / alpha_{j-1},  b_i <- b_i + u_ij vv_j  (i < j, old u_ij)
//       b_j     = vv_j
//     ending with alpha_dk = gamma, b = P a: the Kalman update of P with that
//     observation, P - P a a^T P / gamma; then D <- D / lambda (forgetting), and
//     M <- M + sqrt(w) (v - M k) (b / gamma)^T. No square roots at all; D > 0
//     and U unit triangular by construction. (Bierman, "Factorization Methods
//     for Discrete Sequential Estimation", Academic Press 1977, ch. V; Thornton
//     and Bierman 1980.)
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
// no pivoting and no positivity test, a Givens rotation no test for a zero
// norm: in exact arithmetic its first entry is positive; a non-positive pivot
// gives NaN, which the stability sweeps report), so it runs on interval types too.
#pragma once

#include "dmref/scalar_traits.hpp"

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

/// One inverse QR-RLS step: M (dv x dk), S (dk x dk lower triangular, P = S S^T).
template <class S>
void rls_inverse_qr_step(Mat<S>& M, Mat<S>& Sf, const Vec<S>& k, const Vec<S>& v, const S& w, const S& lambda) {
  using std::sqrt;
  const Eigen::Index n = Sf.rows();
  const S sl = sqrt(lambda), sw = sqrt(w);
  Vec<S> u = (sw / sl) * (Sf.transpose() * k);
  Sf /= sl;
  S top(1);                     // A(0, 0): sqrt(r) when done
  Vec<S> b = Vec<S>::Zero(n);   // column 0 below the first row
  for (Eigen::Index j = n - 1; j >= 0; --j) {
    const S rho = sqrt(top * top + u(j) * u(j));
    const S c = top / rho, s = u(j) / rho;
    top = rho;
    for (Eigen::Index i = j; i < n; ++i) {
      const S b0 = b(i), sj = Sf(i, j);
      b(i) = c * b0 + s * sj;
      Sf(i, j) = c * sj - s * b0;
    }
  }
  const Vec<S> wg = (sw / top) * b;  // w g
  M.noalias() += (v - M * k) * wg.transpose();
}

/// Inverse QR-RLS's initial factor sqrt(alpha) I (the same as Potter's).
template <class S>
Mat<S> rls_inverse_qr_init(int dk, const S& alpha) {
  return rls_potter_init<S>(dk, alpha);
}

/// One QR-RLS step: C (dk x dk upper triangular, P^-1 = C^T C), Z (dk x dv,
/// Z = C^-T B^T).
template <class S>
void rls_qr_step(Mat<S>& C, Mat<S>& Z, const Vec<S>& k, const Vec<S>& v, const S& w, const S& lambda) {
  using std::sqrt;
  const Eigen::Index n = C.rows(), m = Z.cols();
  const S sl = sqrt(lambda), sw = sqrt(w);
  C *= sl;
  Z *= sl;
  Vec<S> x = sw * k, y = sw * v;
  for (Eigen::Index j = 0; j < n; ++j) {
    const S a = C(j, j), rho = sqrt(a * a + x(j) * x(j));
    const S c = a / rho, s = x(j) / rho;
    C(j, j) = rho;
    x(j) = S(0);
    for (Eigen::Index i = j + 1; i < n; ++i) {
      const S ci = C(j, i), xi = x(i);
      C(j, i) = c * ci + s * xi;
      x(i) = c * xi - s * ci;
    }
    for (Eigen::Index t = 0; t < m; ++t) {
      const S zt = Z(j, t), yt = y(t);
      Z(j, t) = c * zt + s * yt;
      y(t) = c * yt - s * zt;
    }
  }
}

/// QR-RLS's initial state: C = I / sqrt(alpha), Z = 0 (dk x dv).
template <class S>
void rls_qr_init(int dk, int dv, const S& alpha, Mat<S>& C, Mat<S>& Z) {
  using std::sqrt;
  C = Mat<S>::Identity(dk, dk) / sqrt(alpha);
  Z = Mat<S>::Zero(dk, dv);
}

/// X = C^-1 Y for an upper-triangular C, by back substitution.
template <class S>
Mat<S> solve_upper(const Mat<S>& C, const Mat<S>& Y) {
  const Eigen::Index n = C.rows();
  if (C.cols() != n || Y.rows() != n)
    throw std::invalid_argument("rls_forms: solve_upper: C is " + std::to_string(C.rows()) + "x" +
                                std::to_string(C.cols()) + ", right-hand side has " + std::to_string(Y.rows()) + " rows");
  Mat<S> X(n, Y.cols());
  for (Eigen::Index t = 0; t < Y.cols(); ++t)
    for (Eigen::Index i = n - 1; i >= 0; --i) {
      S s = Y(i, t);
      for (Eigen::Index p = i + 1; p < n; ++p) s -= C(i, p) * X(p, t);
      X(i, t) = s / C(i, i);
    }
  return X;
}

/// QR-RLS's memory M = Z^T C^-T (and, if P is given, P = C^-1 C^-T).
template <class S>
Mat<S> rls_qr_memory(const Mat<S>& C, const Mat<S>& Z, Mat<S>* P = nullptr) {
  if (P) {
    const Mat<S> Ci = solve_upper<S>(C, Mat<S>::Identity(C.rows(), C.cols()));
    *P = Ci * Ci.transpose();
  }
  return solve_upper<S>(C, Z).transpose();
}

/// One U-D (Bierman) step: M (dv x dk), U (dk x dk unit upper triangular), D
/// (dk), P = U diag(D) U^T.
template <class S>
void rls_ud_step(Mat<S>& M, Mat<S>& U, Vec<S>& D, const Vec<S>& k, const Vec<S>& v, const S& w, const S& lambda) {
  using std::sqrt;
  const Eigen::Index n = U.rows();
  const S sw = sqrt(w);
  const Vec<S> f = U.transpose() * (sw * k);
  const Vec<S> vv = D.cwiseProduct(f);
  Vec<S> b = Vec<S>::Zero(n);
  S alpha = lambda;
  for (Eigen::Index j = 0; j < n; ++j) {
    const S prev = alpha;
    alpha = prev + vv(j) * f(j);
    D(j) = D(j) * prev / alpha;
    const S p = -f(j) / prev;
    for (Eigen::Index i = 0; i < j; ++i) {
      const S uij = U(i, j);
      U(i, j) = uij + b(i) * p;
      b(i) += uij * vv(j);
    }
    b(j) = vv(j);
  }
  D /= lambda;
  const Vec<S> wg = (sw / alpha) * b;  // w g = sqrt(w) P (sqrt(w) k) / gamma
  M.noalias() += (v - M * k) * wg.transpose();
}

/// The U-D form's initial state: U = I, D = alpha.
template <class S>
void rls_ud_init(int dk, const S& alpha, Mat<S>& U, Vec<S>& D) {
  U = Mat<S>::Identity(dk, dk);
  D = Vec<S>::Constant(dk, alpha);
}

/// P = U diag(D) U^T.
template <class S>
Mat<S> rls_ud_P(const Mat<S>& U, const Vec<S>& D) {
  return U * D.asDiagonal() * U.transpose();
}

/// NOT equal to RLS: directional forgetting, the remedy of docs/stability.md
/// (Kulhavy, "Restricted exponential forgetting in real-time
/// identification", Automatica 23(5), 1987; the covariance form of Bittanti,
/// Bolzern and Campi, "Convergence and exponential convergence of
/// identification algorithms with directional forgetting factor", Automatica
/// 26(5), 1990). Information is forgotten only along the excited direction k:
///   R' = R - (1 - lambda) k k^T / s,  s = k^T P k,   R_l = R' + w k k^T
/// (R - k k^T / s >= 0 by Cauchy-Schwarz, so R' >= lambda R: nothing off k is
/// forgotten, P cannot wind up in unexcited directions). With pi = P k and
/// gamma = lambda + w s as in RLS, Sherman-Morrison gives
///   P_l = P - (w - (1 - lambda) / s) g pi^T,  g = pi / gamma  (no division by lambda)
/// symmetrised as the symmetric form, and k^T P_l = g^T, so the memory update
/// is RLS's, M += w (v - M k) g^T. s = 0 (k = 0) forgets nothing: the one
/// branch on data in this file. lambda = 1 is the symmetric RLS step.
template <class S>
void rls_directional_step(Mat<S>& M, Mat<S>& P, const Vec<S>& k, const Vec<S>& v, const S& w, const S& lambda) {
  const Vec<S> pi = P * k;
  const S s = k.dot(pi), gamma = lambda + w * s;
  const Vec<S> g = pi / gamma;
  const Vec<S> u = v - M * k;
  M.noalias() += (w * u) * g.transpose();
  const S wf = s > S(0) ? S(w - (S(1) - lambda) / s) : w;
  const Mat<S> Q = P - (wf * g) * pi.transpose();
  P = (Q + Q.transpose()) / S(2);
}

}  // namespace dmref
