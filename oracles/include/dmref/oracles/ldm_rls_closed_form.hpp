// dmref/oracles/ldm_rls_closed_form.hpp: the weighted, decayed-ridge
// depth-regression solution in closed form (ldm-math.md):
//   R_l = beta(-1,l)/alpha I + sum_i beta(i,l) omega_i k_i k_i^T
//   S_l = sum_i beta(i,l) omega_i v_i k_i^T
//   M_l* = S_l R_l^{-1},  P_l* = R_l^{-1}
// R is symmetric positive definite; it is factored by Cholesky (LLT).
// `Ridge::constant` builds the other, wrong, objective whose ridge does not
// decay (alpha^{-1} I): the suite shows RLS does NOT equal it when lambda < 1.
#pragma once

#include "dmref/oracles/depth_regression.hpp"

#include <stdexcept>

namespace dmref::oracle {

enum class Ridge { decayed, constant };

template <class S>
struct ClosedForm {
  Mat<S> R, Rinv, M;  // R_l, P_l* = R_l^{-1}, M_l*
  S cond1;            // ||R||_1 ||R^{-1}||_1: the condition number tolerances use
};

template <class S>
ClosedForm<S> rls_closed_form(const DepthRegression<S>& p, Ridge ridge = Ridge::decayed) {
  const int n = p.n(), dk = static_cast<int>(p.K.rows()), l = n - 1;
  const S c = (ridge == Ridge::decayed ? p.decay(-1, l) : S(1)) / p.alpha;
  ClosedForm<S> r;
  r.R = c * Mat<S>::Identity(dk, dk);
  Mat<S> Sm = Mat<S>::Zero(p.V.rows(), dk);
  for (int i = 0; i < n; ++i) {
    const S w = p.decay(i, l) * p.omega(i);
    r.R.noalias() += w * p.K.col(i) * p.K.col(i).transpose();
    Sm.noalias() += w * p.V.col(i) * p.K.col(i).transpose();
  }
  Eigen::LLT<Mat<S>> llt(r.R);
  if (llt.info() != Eigen::Success) throw std::runtime_error("rls_closed_form: R is not positive definite");
  r.Rinv = llt.solve(Mat<S>::Identity(dk, dk));
  r.M = llt.solve(Sm.transpose()).transpose();
  r.cond1 = r.R.cwiseAbs().colwise().sum().maxCoeff() * r.Rinv.cwiseAbs().colwise().sum().maxCoeff();
  return r;
}

}  // namespace dmref::oracle
