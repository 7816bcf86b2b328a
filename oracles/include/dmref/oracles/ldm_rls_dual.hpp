// dmref/oracles/ldm_rls_dual.hpp: the dual (kernel) form of the RLS readout,
//   M_l q = V (W K^T K + c I)^{-1} W K^T q,  W = diag(beta(i,l) omega_i),
//   c = beta(-1,l)/alpha,
// an n x n solve (n = number of layers) independent of the dk x dk primal one.
// The matrix is not symmetric; it is solved by LU with partial pivoting.
#pragma once

#include "dmref/oracles/depth_regression.hpp"

namespace dmref::oracle {

template <class S>
Vec<S> rls_dual_readout(const DepthRegression<S>& p, const Vec<S>& q) {
  const int n = p.n(), l = n - 1;
  Vec<S> w(n);
  for (int i = 0; i < n; ++i) w(i) = p.decay(i, l) * p.omega(i);
  const S c = p.decay(-1, l) / p.alpha;
  Mat<S> A = w.asDiagonal() * (p.K.transpose() * p.K);
  A.diagonal().array() += c;
  const Vec<S> rhs = w.asDiagonal() * (p.K.transpose() * q);
  return p.V * A.partialPivLu().solve(rhs);
}

}  // namespace dmref::oracle
