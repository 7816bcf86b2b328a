// dmref/oracles/denseformer_matrix.hpp: DenseFormer's depth-weighted averages
// (arXiv 2402.02622) from the full matrix of coefficients. With the block
// outputs as the columns of X = [X_0 .. X_L] (d x (L+1)) and the effective
// weight matrix W ((L+1) x (L+1)), every average at once is
//     Y = X W^T        (column i is Y_i),
// where W is `a` with the dilation/period pattern applied: row 0 = e_0
// (Y_0 = X_0), row i = e_i when the period p does not divide i, and otherwise
// a's row i restricted to j <= i, j = i (mod k). Independent of the
// reference: one matrix product instead of a loop over the kept terms.
#pragma once

#include "dmref/scalar_traits.hpp"

#include <vector>

namespace dmref::oracle {

/// The effective weights of a k x p-DenseFormer (entries off the pattern zeroed).
template <class S>
Mat<S> denseformer_weights(const Mat<S>& a, int dilation, int period) {
  const Eigen::Index n = a.rows();
  Mat<S> W = Mat<S>::Zero(n, n);
  W(0, 0) = S(1);
  for (Eigen::Index i = 1; i < n; ++i) {
    if (i % period != 0) {
      W(i, i) = S(1);
      continue;
    }
    for (Eigen::Index j = 0; j <= i; ++j)
      if ((i - j) % dilation == 0) W(i, j) = a(i, j);
  }
  return W;
}

/// Y = X W^T for given block outputs X (d x (L+1), column 0 the embedding).
template <class S>
Mat<S> denseformer_averages(const Mat<S>& W, const Mat<S>& X) {
  return X * W.leftCols(X.cols()).topRows(X.cols()).transpose();
}

/// |X| |W|^T: column i bounds the terms of Y_i (the condition of the sum).
template <class S>
Mat<S> denseformer_abs_averages(const Mat<S>& W, const Mat<S>& X) {
  return X.cwiseAbs() * W.leftCols(X.cols()).topRows(X.cols()).cwiseAbs().transpose();
}

/// The whole stack with a block function B(l, y) (layer l is block l+1):
/// X_0 = e, X_{l+1} = B(l, Y_l), Y_l = X_{0..l} W(l, 0..l)^T. Returns X.
template <class S, class Block>
Mat<S> denseformer_stack(const Mat<S>& W, const Vec<S>& e, int L, Block&& B) {
  Mat<S> X(e.size(), L + 1);
  X.col(0) = e;
  for (int l = 0; l < L; ++l) {
    const Vec<S> y = X.leftCols(l + 1) * W.row(l).head(l + 1).transpose();
    X.col(l + 1) = B(l, y);
  }
  return X;
}

}  // namespace dmref::oracle
