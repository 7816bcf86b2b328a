// dmref/oracles/ldm_outer_sum.hpp: the outer-product memory readout as an
// explicit sum over depth, i.e. unnormalized linear attention over layers:
//   M_l q = sum_{i<=l} v_i (k_i^T q).
#pragma once

#include "dmref/oracles/depth_regression.hpp"

namespace dmref::oracle {

template <class S>
Vec<S> outer_sum_readout(const Mat<S>& K, const Mat<S>& V, const Vec<S>& q) {
  Vec<S> r = Vec<S>::Zero(V.rows());
  for (Eigen::Index i = 0; i < K.cols(); ++i) r += V.col(i) * K.col(i).dot(q);
  return r;
}

}  // namespace dmref::oracle
