// dmref/oracles/mhc_sinkhorn.hpp: independent Sinkhorn-Knopp iterations for
// mHC (arXiv 2512.24880 Eq. 9), with the variants the suite compares:
//   - the order: column-then-row (the paper, and the reference) or
//     row-then-column (a different matrix: its columns, not its rows, sum to 1);
//   - subtracting each normalized line's max from the logits before exp (what
//     GPU kernels do to avoid overflow; comparisons, so point types only);
//   - DeepSeek-V4's epsilons: eps_add after the first normalization, eps_den in
//     every later denominator; and, to show what breaks, eps_den also in the
//     first denominator (then max subtraction is no longer exact).
// It records every intermediate sum, which the suite's bounds use.
// `dsv4_storage_sinkhorn` transcribes DeepSeek's kernel as written, on its
// stored (transposed) matrix, to pin the storage convention.
#pragma once

#include "dmref/scalar_traits.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace dmref::oracle {

enum class SinkhornOrder { column_first, row_first };

template <class S>
struct SinkhornOptions {
  int rounds = 20;
  S eps_add = S(0);  // added to every entry after the first normalization
  S eps_den = S(0);  // added to every later denominator
  SinkhornOrder order = SinkhornOrder::column_first;
  bool subtract_max = false;              // exp(L - max of the line) instead of exp(L); point types only
  bool eps_in_first_denominator = false;  // not DeepSeek's placement: exp / (sum exp + eps_den)
};

template <class S>
struct SinkhornRun {
  Mat<S> H;                  // the result
  Mat<S> first;              // after the first normalization, before eps_add
  std::vector<Vec<S>> sums;  // the sum every normalization divided by (without eps), in order
};

namespace detail {
/// Normalizes the lines of M (columns if `columns`, else rows): M /= (sum + eps).
template <class S>
Vec<S> normalize_lines(Mat<S>& M, bool columns, const S& eps) {
  const Eigen::Index n = M.rows();
  Vec<S> sums(n);
  for (Eigen::Index a = 0; a < n; ++a) {
    S s = 0;
    for (Eigen::Index b = 0; b < n; ++b) s += columns ? M(b, a) : M(a, b);
    sums(a) = s;
    const S den = s + eps;
    for (Eigen::Index b = 0; b < n; ++b) (columns ? M(b, a) : M(a, b)) /= den;
  }
  return sums;
}
}  // namespace detail

template <class S>
SinkhornRun<S> sinkhorn(const Mat<S>& logits, const SinkhornOptions<S>& o) {
  using std::exp;
  const Eigen::Index n = logits.rows();
  if (n == 0 || logits.cols() != n) throw std::invalid_argument("oracle::sinkhorn: logits must be square");
  if (o.rounds < 1) throw std::invalid_argument("oracle::sinkhorn: rounds must be >= 1");
  const bool col_first = o.order == SinkhornOrder::column_first;
  SinkhornRun<S> r;
  Mat<S> M(n, n);
  for (Eigen::Index a = 0; a < n; ++a) {  // line a: column a (column-first) or row a
    S m = 0;
    if (o.subtract_max) {
      m = col_first ? logits(0, a) : logits(a, 0);
      for (Eigen::Index b = 1; b < n; ++b) m = std::max<S>(m, col_first ? logits(b, a) : logits(a, b));
    }
    for (Eigen::Index b = 0; b < n; ++b) {
      S& x = col_first ? M(b, a) : M(a, b);
      x = exp((col_first ? logits(b, a) : logits(a, b)) - m);
    }
  }
  r.sums.push_back(detail::normalize_lines(M, col_first, o.eps_in_first_denominator ? o.eps_den : S(0)));
  r.first = M;
  M = (M.array() + o.eps_add).matrix();
  r.sums.push_back(detail::normalize_lines(M, !col_first, o.eps_den));
  for (int t = 2; t <= o.rounds; ++t) {
    r.sums.push_back(detail::normalize_lines(M, col_first, o.eps_den));
    r.sums.push_back(detail::normalize_lines(M, !col_first, o.eps_den));
  }
  r.H = std::move(M);
  return r;
}

/// DeepSeek's kernel (TileKernels mhc/sinkhorn_kernel.py, DeepSeek-V4
/// hc_split_sinkhorn) on its stored matrix A (A[in, out]), line for line:
///   A = softmax(A, dim=-1) + eps;  A = A / (A.sum(-2) + eps)
///   repeat - 1 times: A = A / (A.sum(-1) + eps);  A = A / (A.sum(-2) + eps)
/// The softmax subtracts each row's max. Point types only.
template <class S>
Mat<S> dsv4_storage_sinkhorn(const Mat<S>& A_logits, int repeat, const S& eps) {
  using std::exp;
  const Eigen::Index n = A_logits.rows();
  Mat<S> A(n, n);
  for (Eigen::Index i = 0; i < n; ++i) {
    S m = A_logits(i, 0);
    for (Eigen::Index k = 1; k < n; ++k) m = std::max<S>(m, A_logits(i, k));
    S s = 0;
    for (Eigen::Index k = 0; k < n; ++k) s += (A(i, k) = exp(A_logits(i, k) - m));
    for (Eigen::Index k = 0; k < n; ++k) A(i, k) = A(i, k) / s + eps;
  }
  auto sum_dim = [&](int dim) {  // dim -1: over the last index (rows of A); -2: over the first
    for (Eigen::Index a = 0; a < n; ++a) {
      S s = 0;
      for (Eigen::Index b = 0; b < n; ++b) s += dim == -1 ? A(a, b) : A(b, a);
      for (Eigen::Index b = 0; b < n; ++b) (dim == -1 ? A(a, b) : A(b, a)) /= (s + eps);
    }
  };
  sum_dim(-2);
  for (int t = 1; t < repeat; ++t) {
    sum_dim(-1);
    sum_dim(-2);
  }
  return A;
}

}  // namespace dmref::oracle
