// dmref/oracles/mhc_ops_fused.hpp: the op-level mHC ops (docs/mhc_ops.md)
// transcribed the way the public kernels compute them, on their storage,
// independently of the reference (mhc.hpp):
//   pre  (flag-gems mhc_pre, TileKernels / DeepSeek-V4 hc_pre):
//     g = fn vec(X)            the raw GEMM, n3 = 2n + n^2 logits (no norm yet)
//     r = 1 / sqrt(sum(vec(X)^2) / nC + rms_eps)
//     z = r g (times hc_scale[group]) + hc_base
//     pre  = pre_scale sigmoid(z[0:n]) + pre_eps       (sigmoid through tanh)
//     post = post_mult sigmoid(z[n:2n])
//     comb = DeepSeek's Sinkhorn on the stored [in, out] matrix z[2n:]
//            (oracle::dsv4_storage_sinkhorn: row softmax with max subtracted)
//     layer_input = sum_j pre_j X_j
//   post (flag-gems mhc_post_ref): out[i] = post_i x + sum_j comb[j, i] X_j.
//   head (DeepSeek-V4 inference ParallelHead.hc_head, TileKernels mhc_head):
//     g = hc_fn vec(X) (n logits), r as in pre, w = sigmoid(r g hc_scale + hc_base) + hc_eps,
//     y = sum_j w_j X_j.
// The norm is applied after the GEMM (the kernels' order), not to x before
// it (the reference's): the same number, a different evaluation. Point types
// only (the softmax's max).
#pragma once

#include "dmref/oracles/mhc_layer.hpp"  // sigmoid_tanh
#include "dmref/oracles/mhc_sinkhorn.hpp"

#include <cmath>
#include <stdexcept>

namespace dmref::oracle {

template <class S>
struct FusedMhc {
  int n = 0, C = 0;
  Mat<S> fn;        // [2n + n^2, nC]
  S scale[3] = {1, 1, 1};
  Vec<S> base;      // [2n + n^2]
  S rms_eps = 0, pre_eps = 0, pre_scale = 1, sinkhorn_eps = 0, post_mult = 2;
  int repeat = 20;
};

template <class S>
struct FusedPre {
  Vec<S> layer_input;  // C
  Vec<S> pre, post;    // n
  Mat<S> comb;         // n x n, [in, out]
};

/// X: n x C, row j = stream j.
template <class S>
FusedPre<S> fused_pre(const FusedMhc<S>& m, const Mat<S>& X) {
  using std::sqrt;
  const int n = m.n, C = m.C, nC = n * C, n3 = 2 * n + n * n;
  if (X.rows() != n || X.cols() != C || m.fn.rows() != n3 || m.fn.cols() != nC || m.base.size() != n3)
    throw std::invalid_argument("oracle::fused_pre: shapes");
  Vec<S> g = Vec<S>::Zero(n3);
  S sq = 0;
  for (int j = 0; j < n; ++j)
    for (int c = 0; c < C; ++c) {
      const S x = X(j, c);
      sq += x * x;
      for (int k = 0; k < n3; ++k) g(k) += m.fn(k, j * C + c) * x;
    }
  const S r = S(1) / sqrt(sq / S(nC) + m.rms_eps);
  Vec<S> z(n3);
  for (int k = 0; k < n3; ++k) z(k) = g(k) * r * m.scale[k < n ? 0 : k < 2 * n ? 1 : 2] + m.base(k);
  FusedPre<S> o;
  o.pre.resize(n);
  o.post.resize(n);
  for (int i = 0; i < n; ++i) {
    o.pre(i) = m.pre_scale * sigmoid_tanh(z(i)) + m.pre_eps;
    o.post(i) = m.post_mult * sigmoid_tanh(z(n + i));
  }
  Mat<S> A(n, n);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) A(a, b) = z(2 * n + a * n + b);
  o.comb = dsv4_storage_sinkhorn<S>(A, m.repeat, m.sinkhorn_eps);
  o.layer_input = Vec<S>::Zero(C);
  for (int c = 0; c < C; ++c)
    for (int j = 0; j < n; ++j) o.layer_input(c) += o.pre(j) * X(j, c);
  return o;
}

/// The head's parameters in DeepSeek-V4's storage.
template <class S>
struct FusedHead {
  Mat<S> fn;     // [n, nC]
  S scale = 1;   // hc_head_scale[0]
  Vec<S> base;   // [n]
  S rms_eps = 0, hc_eps = 0;
};

/// y = sum_j w_j X_j (C values), X: n x C, row j = stream j.
template <class S>
Vec<S> fused_head(const FusedHead<S>& m, const Mat<S>& X) {
  using std::sqrt;
  const Eigen::Index n = X.rows(), C = X.cols();
  if (m.fn.rows() != n || m.fn.cols() != n * C || m.base.size() != n) throw std::invalid_argument("oracle::fused_head: shapes");
  Vec<S> g = Vec<S>::Zero(n);
  S sq = 0;
  for (Eigen::Index j = 0; j < n; ++j)
    for (Eigen::Index c = 0; c < C; ++c) {
      const S x = X(j, c);
      sq += x * x;
      for (Eigen::Index k = 0; k < n; ++k) g(k) += m.fn(k, j * C + c) * x;
    }
  const S r = S(1) / sqrt(sq / S(double(n * C)) + m.rms_eps);
  Vec<S> w(n);
  for (Eigen::Index k = 0; k < n; ++k) w(k) = sigmoid_tanh(S(g(k) * r * m.scale + m.base(k))) + m.hc_eps;
  Vec<S> y = Vec<S>::Zero(C);
  for (Eigen::Index c = 0; c < C; ++c)
    for (Eigen::Index j = 0; j < n; ++j) y(c) += w(j) * X(j, c);
  return y;
}

/// out[i, c] = post_i x_c + sum_j comb[j, i] X(j, c).
template <class S>
Mat<S> fused_post(const Vec<S>& x, const Mat<S>& X, const Vec<S>& post, const Mat<S>& comb) {
  const Eigen::Index n = X.rows(), C = X.cols();
  Mat<S> out(n, C);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index c = 0; c < C; ++c) {
      S acc = post(i) * x(c);
      for (Eigen::Index j = 0; j < n; ++j) acc += comb(j, i) * X(j, c);
      out(i, c) = acc;
    }
  return out;
}

}  // namespace dmref::oracle
