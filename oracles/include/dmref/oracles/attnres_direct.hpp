// dmref/oracles/attnres_direct.hpp: Attention Residuals evaluated directly
// from the full list of sources of one readout (docs/attnres.md):
//   b_i = sum of its terms (the raw layer outputs it is made of),
//   k_i = g * b_i / sqrt(mean(b_i^2) + eps),  z_i = w^T k_i,
//   a_i = exp(z_i - max_j z_j) / sum_j exp(z_j - max_j z_j),  h = sum_i a_i b_i.
// Unlike the reference this subtracts the largest logit (a comparison: point
// types only), rebuilds every source from the layer outputs by index
// arithmetic instead of a running state, and uses its own loops throughout.
// It never calls the reference.
#pragma once

#include "dmref/scalar_traits.hpp"

#include <cmath>
#include <stdexcept>
#include <vector>

namespace dmref::oracle {

/// One readout as the oracle sees it: source i is the sum of the columns of
/// terms[i] (d x m_i; m_i = 1 for Full AttnRes and for the embedding).
template <class S>
struct DepthReadout {
  std::vector<Mat<S>> terms;
  Vec<S> w, g;  // pseudo-query and RMSNorm gain of this readout
  S eps = S(0);

  int n() const { return static_cast<int>(terms.size()); }
  int d() const { return static_cast<int>(w.size()); }

  template <class T>
  DepthReadout<T> to() const {
    DepthReadout<T> r;
    for (const auto& t : terms) r.terms.push_back(convert<T>(t));
    r.w = convert<T>(w);
    r.g = convert<T>(g);
    r.eps = convert<T>(eps);
    return r;
  }
};

template <class S>
struct DirectReadout {
  Vec<S> h;     // sum_i a_i b_i
  Vec<S> a;     // softmax weights
  Vec<S> z;     // logits
  Mat<S> b;     // d x n sources (columns)
  // The error scale of this readout evaluated in a precision with unit
  // roundoff eps/2 by the branch-free algorithm, with each source a left-to-
  // right sum of its m_i terms (tests/support/check.hpp, K::attnres):
  //   cond = ((d+2) C + n + 1) ||sum_i a_i |b_i| ||_2 + ||sum_i a_i (m_i-1) A_i||_2,
  //   C = max_i [ sum_j |w_j k_ij| + (m_i-1) ||w g||_2 ||A_i||_2 / r_i ],
  // A_i = sum of |terms of b_i| (componentwise), r_i = sqrt(mean(b_i^2) + eps).
  S cond;
};

template <class S>
DirectReadout<S> attnres_direct(const DepthReadout<S>& p) {
  using std::abs;
  using std::exp;
  using std::sqrt;
  const int n = p.n(), d = p.d();
  if (n == 0) throw std::invalid_argument("attnres_direct: no sources");
  DirectReadout<S> r;
  r.b = Mat<S>::Zero(d, n);
  Mat<S> A = Mat<S>::Zero(d, n);
  Vec<S> rms(n);
  Mat<S> keys(d, n);
  r.z.resize(n);
  for (int i = 0; i < n; ++i) {
    const Mat<S>& t = p.terms[i];
    for (int c = 0; c < t.cols(); ++c)
      for (int j = 0; j < d; ++j) {
        r.b(j, i) += t(j, c);
        A(j, i) += abs(t(j, c));
      }
    S ss = S(0);
    for (int j = 0; j < d; ++j) ss += r.b(j, i) * r.b(j, i);
    rms(i) = sqrt(ss / S(d) + p.eps);
    S zi = S(0);
    for (int j = 0; j < d; ++j) {
      keys(j, i) = p.g(j) * r.b(j, i) / rms(i);
      zi += p.w(j) * keys(j, i);
    }
    r.z(i) = zi;
  }
  S zmax = r.z(0);
  for (int i = 1; i < n; ++i)
    if (r.z(i) > zmax) zmax = r.z(i);
  r.a.resize(n);
  S total = S(0);
  for (int i = 0; i < n; ++i) {
    r.a(i) = exp(r.z(i) - zmax);
    total += r.a(i);
  }
  for (int i = 0; i < n; ++i) r.a(i) /= total;
  r.h = Vec<S>::Zero(d);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < d; ++j) r.h(j) += r.a(i) * r.b(j, i);

  S wg = S(0);
  for (int j = 0; j < d; ++j) wg += p.w(j) * p.g(j) * p.w(j) * p.g(j);
  wg = sqrt(wg);
  S C = S(0);
  Vec<S> mix_abs = Vec<S>::Zero(d), mix_sum_err = Vec<S>::Zero(d);
  for (int i = 0; i < n; ++i) {
    const S m1 = S(static_cast<int>(p.terms[i].cols()) - 1);
    S ci = S(0);
    for (int j = 0; j < d; ++j) ci += abs(p.w(j) * keys(j, i));
    ci += m1 * wg * A.col(i).norm() / rms(i);
    if (ci > C) C = ci;
    for (int j = 0; j < d; ++j) {
      mix_abs(j) += r.a(i) * abs(r.b(j, i));
      mix_sum_err(j) += r.a(i) * m1 * A(j, i);
    }
  }
  r.cond = (S(d + 2) * C + S(n + 1)) * mix_abs.norm() + mix_sum_err.norm();
  return r;
}

/// The terms of every source of readout r (layer r reads, r = L is final) of
/// Full AttnRes: [e], [v_0], .., [v_{r-1}].
template <class S>
std::vector<Mat<S>> attnres_full_terms(const Vec<S>& e, const std::vector<Vec<S>>& v, int r) {
  std::vector<Mat<S>> t{Mat<S>(e)};
  for (int i = 0; i < r; ++i) t.push_back(Mat<S>(v[i]));
  return t;
}

/// The terms of every source of readout r of Block AttnRes with blocks of
/// `block` layers: [e], block 1 = [v_0..v_{S-1}], .., the r div S finished
/// blocks, then the r mod S outputs of the open block (when there are any).
template <class S>
std::vector<Mat<S>> attnres_block_terms(const Vec<S>& e, const std::vector<Vec<S>>& v, int block, int r) {
  const int d = static_cast<int>(e.size());
  std::vector<Mat<S>> t{Mat<S>(e)};
  const int finished = r / block, open = r % block;
  for (int n = 0; n < finished; ++n) {
    Mat<S> m(d, block);
    for (int c = 0; c < block; ++c) m.col(c) = v[n * block + c];
    t.push_back(m);
  }
  if (open > 0) {
    Mat<S> m(d, open);
    for (int c = 0; c < open; ++c) m.col(c) = v[finished * block + c];
    t.push_back(m);
  }
  return t;
}

}  // namespace dmref::oracle
