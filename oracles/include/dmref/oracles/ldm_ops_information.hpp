// dmref/oracles/ldm_ops_information.hpp: one layer's Linear Depth Memory write
// and readout at op level (docs/ldm_ops.md), one group, written from the
// equations of shared/spec/ldm-math.md independently of the reference
// (ldm.hpp's rls_step, its outer-product and delta writes):
//   rls, in information form (the step of the closed form, not the gain
//   recursion): the state (M, P) is the solution of the normal equations
//   M R = B with R = P^-1; one layer decays them by lambda and adds the
//   weighted observation (sqrt(omega) k, sqrt(omega) v):
//     R  = P^-1,                 B  = M R
//     R' = lambda R + omega k k^T,  B' = lambda B + omega v k^T
//     P' = R'^-1,                M' = B' P'
//   (ldm-math.md: R_l = lambda_l R_{l-1} + kb kb^T, S_l = lambda_l S_{l-1} +
//   vb kb^T, M_l = S_l R_l^-1, P_l = R_l^-1). No gain, no pi, no gamma, no
//   P-update form: two Cholesky inversions. P must be symmetric positive
//   definite (an inverse covariance).
//   outer: M'_ij = M_ij + v_i k_j.
//   delta: u_i = v_i - sum_j M_ij k_j,  M'_ij = M_ij + beta u_i k_j.
//   readout: r_i = sum_j M'_ij q_j.
// Point types only (the Cholesky factorization checks its pivots).
#pragma once

#include "dmref/scalar_traits.hpp"

#include <Eigen/Cholesky>

#include <stdexcept>
#include <string>

namespace dmref::oracle {

template <class S>
struct RlsInformationStep {
  Mat<S> M, P;         // M' (dv x dk), P' (dk x dk)
  S cond_P, cond_R2;   // ||P||_F ||P^-1||_F and ||R'||_F ||R'^-1||_F: the two inversions' amplification
};

template <class S>
Mat<S> spd_inverse(const Mat<S>& A, const char* what) {
  Eigen::LLT<Mat<S>> llt(A);
  if (llt.info() != Eigen::Success) throw std::runtime_error(std::string("oracle::rls_information_step: ") + what + " is not positive definite");
  return llt.solve(Mat<S>::Identity(A.rows(), A.cols()));
}

/// One RLS step of one group in information form: M (dv x dk), P (dk x dk,
/// symmetric positive definite), key k and value v of the group, weight omega
/// >= 0, forgetting factor lambda in (0, 1].
template <class S>
RlsInformationStep<S> rls_information_step(const Mat<S>& M, const Mat<S>& P, const Vec<S>& k, const Vec<S>& v,
                                           const S& omega, const S& lambda) {
  const Eigen::Index dk = P.rows(), dv = M.rows();
  if (P.cols() != dk || M.cols() != dk || k.size() != dk || v.size() != dv)
    throw std::invalid_argument("oracle::rls_information_step: shapes");
  const Mat<S> R = spd_inverse<S>(P, "P");
  Mat<S> R2 = lambda * R;
  Mat<S> B2 = lambda * (M * R);
  for (Eigen::Index i = 0; i < dk; ++i)
    for (Eigen::Index j = 0; j < dk; ++j) R2(i, j) += omega * k(i) * k(j);
  for (Eigen::Index i = 0; i < dv; ++i)
    for (Eigen::Index j = 0; j < dk; ++j) B2(i, j) += omega * v(i) * k(j);
  RlsInformationStep<S> o;
  o.P = spd_inverse<S>(R2, "R'");
  o.M = B2 * o.P;
  o.cond_P = P.norm() * R.norm();
  o.cond_R2 = R2.norm() * o.P.norm();
  return o;
}

/// The outer-product write M' = M + v k^T.
template <class S>
Mat<S> outer_write(const Mat<S>& M, const Vec<S>& k, const Vec<S>& v) {
  Mat<S> r = M;
  for (Eigen::Index i = 0; i < M.rows(); ++i)
    for (Eigen::Index j = 0; j < M.cols(); ++j) r(i, j) += v(i) * k(j);
  return r;
}

/// The delta-rule write M' = M + beta (v - M k) k^T.
template <class S>
Mat<S> delta_write(const Mat<S>& M, const Vec<S>& k, const Vec<S>& v, const S& beta) {
  Mat<S> r = M;
  for (Eigen::Index i = 0; i < M.rows(); ++i) {
    S u = v(i);
    for (Eigen::Index j = 0; j < M.cols(); ++j) u -= M(i, j) * k(j);
    for (Eigen::Index j = 0; j < M.cols(); ++j) r(i, j) += beta * u * k(j);
  }
  return r;
}

/// The readout r = M' q of one group.
template <class S>
Vec<S> memory_readout(const Mat<S>& M, const Vec<S>& q) {
  Vec<S> r = Vec<S>::Zero(M.rows());
  for (Eigen::Index i = 0; i < M.rows(); ++i)
    for (Eigen::Index j = 0; j < M.cols(); ++j) r(i) += M(i, j) * q(j);
  return r;
}

}  // namespace dmref::oracle
