// dmref/oracles/mhc_layer.hpp: one mHC layer (arXiv 2512.24880 Eqs. 3, 7-9)
// written independently of the reference, for evaluation at high precision:
// explicit loops for the norm and the projections, the sigmoid through tanh,
// sigma(z) = (1 + tanh(z/2)) / 2, and the max-subtracted Sinkhorn of
// mhc_sinkhorn.hpp. Point types only.
//
// It also returns the magnitudes the suite's error bounds are made of (the
// absolute sums behind every logit and every mixed entry, and the Sinkhorn
// intermediates); see `MhcBounds`.
#pragma once

#include "dmref/oracles/mhc_sinkhorn.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace dmref::oracle {

/// Everything one layer needs, in the oracle's own terms.
template <class S>
struct MhcLayerInput {
  int n = 0, C = 0;
  Mat<S> phi_pre, phi_post;  // nC x n
  Mat<S> phi_res;            // nC x n^2, column i*n + j -> logit (i, j)
  S a_pre = 1, a_post = 1, a_res = 1;
  Vec<S> b_pre, b_post;      // n
  Mat<S> b_res;              // n x n
  S rms_eps = 0, pre_eps = 0, eps_add = 0, eps_den = 0, post_scale = 2;
  int rounds = 20;
};

template <class S>
struct MhcLayerOutput {
  Vec<S> xn;                      // x' = RMSNorm(vec X)
  Vec<S> pre_logits, post_logits; // n
  Mat<S> res_logits;              // n x n
  Vec<S> pre, post;               // H_pre, H_post
  SinkhornRun<S> sinkhorn;        // H_res = sinkhorn.H, with its intermediates
  Vec<S> h;                       // sum_j H_pre[j] X_j (C)
  Mat<S> X;                       // the streams after the write (n x C)
  // Magnitudes for error bounds:
  Vec<S> pre_abs, post_abs;       // |a| sum_k |x'_k phi_kj| + |b_j|
  Mat<S> res_abs;                 // the same for the n x n residual logits
  Vec<S> h_abs;                   // sum_j H_pre[j] |X_jc|
  Mat<S> carry_abs;               // sum_j H_res[i,j] |X_jc|
  Mat<S> post_abs_v;              // H_post[i] |v_c|
  const Mat<S>& res() const { return sinkhorn.H; }
};

template <class S>
S sigmoid_tanh(const S& z) {
  using std::tanh;
  return (1 + tanh(z / 2)) / 2;
}

/// x' = x / sqrt(mean(x^2) + eps), x = vec(X) stream-major.
template <class S>
Vec<S> mhc_rms(const Mat<S>& X, const S& eps) {
  using std::sqrt;
  const int n = static_cast<int>(X.rows()), C = static_cast<int>(X.cols());
  Vec<S> x(n * C);
  S ss = 0;
  for (int j = 0; j < n; ++j)
    for (int c = 0; c < C; ++c) {
      x(j * C + c) = X(j, c);
      ss += X(j, c) * X(j, c);
    }
  const S r = sqrt(ss / (n * C) + eps);
  for (int k = 0; k < n * C; ++k) x(k) /= r;
  return x;
}

namespace detail {
/// a * (x . phi_col) + b, and |a| sum |x_k phi_k| + |b|.
template <class S>
void logit(const Vec<S>& x, const Mat<S>& phi, int col, const S& a, const S& b, S& value, S& mag) {
  using std::abs;
  S s = 0, m = 0;
  for (Eigen::Index k = 0; k < x.size(); ++k) {
    s += x(k) * phi(k, col);
    m += abs(x(k) * phi(k, col));
  }
  value = a * s + b;
  mag = abs(a) * m + abs(b);
}
}  // namespace detail

/// One layer: coefficients from X, then h and the update with layer output v.
template <class S>
MhcLayerOutput<S> mhc_layer(const MhcLayerInput<S>& p, const Mat<S>& X, const Vec<S>& v) {
  using std::abs;
  const int n = p.n, C = p.C;
  if (X.rows() != n || X.cols() != C || v.size() != C) throw std::invalid_argument("oracle::mhc_layer: shapes");
  MhcLayerOutput<S> o;
  o.xn = mhc_rms(X, p.rms_eps);
  o.pre_logits.resize(n);
  o.post_logits.resize(n);
  o.pre_abs.resize(n);
  o.post_abs.resize(n);
  o.pre.resize(n);
  o.post.resize(n);
  o.res_logits.resize(n, n);
  o.res_abs.resize(n, n);
  for (int j = 0; j < n; ++j) {
    detail::logit(o.xn, p.phi_pre, j, p.a_pre, p.b_pre(j), o.pre_logits(j), o.pre_abs(j));
    detail::logit(o.xn, p.phi_post, j, p.a_post, p.b_post(j), o.post_logits(j), o.post_abs(j));
    o.pre(j) = sigmoid_tanh(o.pre_logits(j)) + p.pre_eps;
    o.post(j) = p.post_scale * sigmoid_tanh(o.post_logits(j));
  }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      detail::logit(o.xn, p.phi_res, i * n + j, p.a_res, p.b_res(i, j), o.res_logits(i, j), o.res_abs(i, j));
  SinkhornOptions<S> so;
  so.rounds = p.rounds;
  so.eps_add = p.eps_add;
  so.eps_den = p.eps_den;
  so.subtract_max = true;  // exact for both placements of the paper and DeepSeek-V4
  o.sinkhorn = sinkhorn(o.res_logits, so);
  const Mat<S>& H = o.sinkhorn.H;
  o.h = Vec<S>::Zero(C);
  o.h_abs = Vec<S>::Zero(C);
  o.X.resize(n, C);
  o.carry_abs.resize(n, C);
  o.post_abs_v.resize(n, C);
  for (int c = 0; c < C; ++c) {
    for (int j = 0; j < n; ++j) {
      o.h(c) += o.pre(j) * X(j, c);
      o.h_abs(c) += o.pre(j) * abs(X(j, c));
    }
    for (int i = 0; i < n; ++i) {
      S acc = 0, mag = 0;
      for (int j = 0; j < n; ++j) {
        acc += H(i, j) * X(j, c);
        mag += H(i, j) * abs(X(j, c));
      }
      o.X(i, c) = acc + o.post(i) * v(c);
      o.carry_abs(i, c) = mag;
      o.post_abs_v(i, c) = o.post(i) * abs(v(c));
    }
  }
  return o;
}

/// DeepSeek-V4's learned reduce head: sum_j pre_j X_j, pre = sigmoid(a x'.phi_j + b_j) + eps.
template <class S>
Vec<S> mhc_head(const Mat<S>& X, const Mat<S>& phi, const S& a, const Vec<S>& b, const S& rms_eps, const S& eps,
                Vec<S>* weights = nullptr, Vec<S>* logit_abs = nullptr) {
  const int n = static_cast<int>(X.rows()), C = static_cast<int>(X.cols());
  const Vec<S> xn = mhc_rms(X, rms_eps);
  Vec<S> w(n), mags(n), y = Vec<S>::Zero(C);
  for (int j = 0; j < n; ++j) {
    S z;
    detail::logit(xn, phi, j, a, b(j), z, mags(j));
    w(j) = sigmoid_tanh(z) + eps;
  }
  for (int c = 0; c < C; ++c)
    for (int j = 0; j < n; ++j) y(c) += w(j) * X(j, c);
  if (weights) *weights = w;
  if (logit_abs) *logit_abs = mags;
  return y;
}

/// A priori rounding-error bounds of the reference's algorithm (mhc.hpp), in
/// units of eps of the type it runs in. First order; each "(m) eps" below
/// counts roundings, every rounding counted as a full eps.
///  - x': a sum of nC squares, a division, an add, a sqrt and a division:
///    relative error <= (nC + 4) eps per entry.
///  - a logit a (x'.phi) + b: the dot product adds nC eps relative to its
///    absolute sum, x' adds (nC + 4), the scale and bias 2 more: absolute
///    error <= (2 nC + 6) eps * mag, mag = |a| sum |x'_k phi_k| + |b|.
///  - sigmoid (+ eps, * scale): relative error <= |d logit| + 4 eps
///    (d sigma / sigma = (1 - sigma) d z; exp, add, divide, add).
///  - Sinkhorn, t rounds: the computed iterate is an exact Sinkhorn iterate of
///    exp(L) perturbed entrywise by Delta, where Delta collects the logit error
///    d0 = |dL| + eps (exp) and (n + 2) eps per normalization (a sum of n
///    terms, the eps add, the division). In scaling form B = diag(r) E' diag(c),
///    a perturbation of size delta of log E' moves the oscillation of log r
///    or log c by at most 2 delta per normalization, and the final entries
///    by the oscillation plus 2 delta. Summed over the 2t normalizations, with
///    Delta growing linearly: |log(H/H_exact)| <= 2 [2t d0 + (n+2) t (2t+1) eps].
///    (Worst case: Sinkhorn contracts, so the observed error is far smaller.)
///  - a mixed entry sum_j w_j X_jc (+ w' v_c): (n + 1) eps relative to the
///    absolute sum, plus the coefficients' own relative errors.
/// The oracle's own algorithm differs in two places, bounded by `oracle_*`:
/// its sigmoid (1 + tanh(z/2))/2 has relative error <= (3 + 1/(2 sigma)) eps
/// (the absolute error eps of tanh, relative to 1 + tanh = 2 sigma), and its
/// max subtraction rounds L - m, adding |L - m| eps to d0.
struct MhcBounds {
  int n = 0, C = 0, rounds = 0;
  double logit_pre = 0, logit_post = 0, logit_res = 0;  // max mag of each logit group
  double logit_spread = 0;  // max |L_ij - max_k L_kj| of the residual logits
  double min_sigmoid = 1;   // smallest sigmoid of the pre and post logits

  /// Absolute logit error bound, in eps, for a logit of magnitude `mag`.
  double logit(double mag) const { return (2.0 * n * C + 6) * mag; }
  /// Relative error bounds, in eps.
  double pre() const { return logit(logit_pre) + 4; }
  double post() const { return logit(logit_post) + 4; }
  double res() const { return res_given(logit(logit_res) + 1); }
  /// Sinkhorn alone, from logits known to d0 eps (absolute) after exp.
  double res_given(double d0) const {
    const double t = rounds;
    return 2 * (2 * t * d0 + (n + 2) * t * (2 * t + 1));
  }
  /// h_c: relative to h_abs.
  double h() const { return n + 1 + pre(); }
  /// X_new(i, c): eps * (carry() * carry_abs + post_mix() * post_abs_v).
  double carry() const { return n + 2 + res(); }
  double post_mix() const { return n + 2 + post(); }
  /// The oracle's own relative (pre, post, res) and mixing bounds, in its eps.
  double oracle_pre() const { return logit(logit_pre) + 3 + 1 / (2 * min_sigmoid); }
  double oracle_post() const { return logit(logit_post) + 3 + 1 / (2 * min_sigmoid); }
  double oracle_res() const { return res_given(logit(logit_res) + 1 + logit_spread); }
  double oracle_h() const { return n + 1 + oracle_pre(); }
  double oracle_carry() const { return n + 2 + oracle_res(); }
  double oracle_post_mix() const { return n + 2 + oracle_post(); }
};

template <class S>
MhcBounds mhc_bounds(const MhcLayerInput<S>& p, const MhcLayerOutput<S>& o) {
  MhcBounds b;
  b.n = p.n;
  b.C = p.C;
  b.rounds = p.rounds;
  b.logit_pre = to_double(S(o.pre_abs.maxCoeff()));
  b.logit_post = to_double(S(o.post_abs.maxCoeff()));
  b.logit_res = to_double(S(o.res_abs.maxCoeff()));
  for (int j = 0; j < p.n; ++j) {
    S m = o.res_logits(0, j);
    for (int i = 1; i < p.n; ++i) m = std::max<S>(m, o.res_logits(i, j));
    for (int i = 0; i < p.n; ++i) b.logit_spread = std::max(b.logit_spread, to_double(S(m - o.res_logits(i, j))));
    b.min_sigmoid = std::min({b.min_sigmoid, to_double(sigmoid_tanh(o.pre_logits(j))),
                              to_double(sigmoid_tanh(o.post_logits(j)))});
  }
  return b;
}

}  // namespace dmref::oracle
