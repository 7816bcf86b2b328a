// dmref/oracles/hc_ops_lucidrains.hpp: the op-level HC ops (docs/hc_ops.md)
// transcribed from lucidrains' HyperConnections (hyper_connections.py) on its
// storage, independently of the reference (hc.hpp):
//   width_connection: normed = norm(H) (row by row); alpha = act(normed @
//     dynamic_alpha_fn) * dynamic_alpha_scale + static_alpha  ([n, n+1]);
//     beta = act(normed @ dynamic_beta_fn) * dynamic_beta_scale + static_beta;
//     mix_h = alpha^T H  ((n+1) x C, one matrix product: einsum '... s t, ... s d -> ... t d');
//     branch_input = mix_h[0], carried = mix_h[1:]
//   depth_connection: residual = beta x^T + carried (einsum, then the add)
// The norm: lucidrains' RMSNorm written as x * sqrt(C) / sqrt(|x|^2 + C eps) * gain
// (F.normalize's form with the reference's eps moved inside: the same number),
// or LayerNorm (biased variance) with gain and bias. Matrix products, not loops.
#pragma once

#include "dmref/scalar_traits.hpp"

#include <cmath>

namespace dmref::oracle {

template <class S>
struct LucidrainsHc {
  int n = 0, C = 0;
  bool dynamic = false, tanh = true, layernorm = false;
  S eps = S(0);
  Mat<S> static_alpha;      // n x (n+1)
  Vec<S> static_beta;       // n
  Mat<S> dynamic_alpha_fn;  // C x (n+1)
  Vec<S> dynamic_beta_fn;   // C
  S alpha_scale = S(0), beta_scale = S(0);
  Vec<S> gain, bias;        // C
};

template <class S>
struct LucidrainsWidth {
  Vec<S> branch_input;  // C
  Mat<S> carried;       // n x C
  Mat<S> alpha;         // n x (n+1)
  Vec<S> beta;          // n
};

/// H: n x C, row j = stream j.
template <class S>
LucidrainsWidth<S> lucidrains_width(const LucidrainsHc<S>& m, const Mat<S>& H) {
  using std::sqrt;
  using std::tanh;
  LucidrainsWidth<S> r;
  r.alpha = m.static_alpha;
  r.beta = m.static_beta;
  if (m.dynamic) {
    Mat<S> normed(m.n, m.C);
    for (int j = 0; j < m.n; ++j) {
      Vec<S> x = H.row(j).transpose();
      if (m.layernorm) {
        const S mu = x.sum() / S(m.C);
        x = (x.array() - mu).matrix();
      }
      const S sq = x.squaredNorm();
      normed.row(j) = (x * (sqrt(S(m.C)) / sqrt(sq + S(m.C) * m.eps))).cwiseProduct(m.gain).transpose();
      if (m.layernorm) normed.row(j) += m.bias.transpose();
    }
    Mat<S> za = normed * m.dynamic_alpha_fn;  // n x (n+1)
    Vec<S> zb = normed * m.dynamic_beta_fn;   // n
    if (m.tanh) {
      za = za.unaryExpr([](const S& z) { return S(tanh(z)); });
      zb = zb.unaryExpr([](const S& z) { return S(tanh(z)); });
    }
    r.alpha = za * m.alpha_scale + m.static_alpha;
    r.beta = zb * m.beta_scale + m.static_beta;
  }
  const Mat<S> mix = r.alpha.transpose() * H;  // (n+1) x C
  r.branch_input = mix.row(0).transpose();
  r.carried = mix.bottomRows(m.n);
  return r;
}

template <class S>
Mat<S> lucidrains_depth(const Vec<S>& x, const Mat<S>& carried, const Vec<S>& beta) {
  return beta * x.transpose() + carried;
}

}  // namespace dmref::oracle
