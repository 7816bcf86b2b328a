// dmref/oracles/depth_regression.hpp: the depth regression problem of one
// memory group, as the oracles see it: columns are layers i = 0..n-1.
// Oracles include only dmref/scalar.hpp from the library and never call the
// reference recursions they check.
#pragma once

#include "dmref/scalar_traits.hpp"

namespace dmref::oracle {

template <class S>
struct DepthRegression {
  Mat<S> K;       // dk x n keys k_i
  Mat<S> V;       // dv x n values v_i
  Vec<S> omega;   // n importance weights (>= 0)
  Vec<S> lambda;  // n forgetting factors (in (0, 1])
  S alpha = S(1); // P_{-1} = alpha I

  int n() const { return static_cast<int>(K.cols()); }

  /// beta(i, l) = prod_{j=i+1..l} lambda_j for -1 <= i <= l (empty product 1),
  /// each an explicit product (no recursion shared with the reference).
  S decay(int i, int l) const {
    S b = S(1);
    for (int j = i + 1; j <= l; ++j) b *= lambda(j);
    return b;
  }

  /// The first n' = l+1 layers only.
  DepthRegression head(int l) const {
    return {K.leftCols(l + 1), V.leftCols(l + 1), omega.head(l + 1), lambda.head(l + 1), alpha};
  }

  template <class T>
  DepthRegression<T> to() const {
    return {convert<T>(K), convert<T>(V), convert<T>(omega), convert<T>(lambda), convert<T>(alpha)};
  }
};

}  // namespace dmref::oracle
