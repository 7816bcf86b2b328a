// dmref/oracles/ldm_rls_ols.hpp: ordinary least squares, the limit of RLS for
// lambda = omega = 1 and alpha -> infinity when the keys span R^dk:
//   M = argmin sum_i ||v_i - M k_i||^2 = V K^T (K K^T)^{-1},
// computed without forming K K^T: a column-pivoting Householder QR of K^T
// solves K^T M^T = V^T in the least-squares sense.
#pragma once

#include "dmref/oracles/depth_regression.hpp"

namespace dmref::oracle {

template <class S>
Mat<S> ols(const Mat<S>& K, const Mat<S>& V) {
  Mat<S> Kt = K.transpose();
  Mat<S> Vt = V.transpose();
  return Kt.colPivHouseholderQr().solve(Vt).transpose();
}

}  // namespace dmref::oracle
