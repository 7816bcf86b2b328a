// dmref/attnres_backward.hpp: the adjoints of Attention Residuals
// (docs/attnres.md, "Backward").
// One readout h = sum_i a_i v_i, a = softmax(z), z_i = w . k_i, k_i = g * v_i / r_i,
// r_i = sqrt(mean(v_i^2) + eps). For an upstream dh:
//   dv_i  += a_i dh                              (value path)
//   da_i   = dh . v_i
//   dz     = (diag(a) - a a^T) da,  i.e.  dz_i = a_i (da_i - D),
//            D = sum_j a_j da_j = dh . h  (computed as dh . h: see below)
//   dw    += sum_i dz_i k_i
//   dg    += sum_i dz_i w * v_i / r_i
//   dv_i  += RMSNorm^T(dz_i w)                   (key path; layers_backward.hpp)
// The scheme's streams are a source list (and, for Block AttnRes, the open
// block's partial sum), so
//   final^T / read^T(l):  the readout's VJP over sources(s), split back into
//                         d sources and d partial;
//   write^T(l), Full:     dv_l = d sources.back() (popped);
//   write^T(l), Block:    the partial sum after write l is the source just
//                         appended (block finished) or the partial; dv_l is
//                         its adjoint, which also flows to the partial before
//                         the write when that block was already open.
#pragma once

#include "dmref/attnres.hpp"
#include "dmref/backward.hpp"
#include "dmref/layers_backward.hpp"

#include <vector>

namespace dmref {

/// The VJP of attnres_mix(sources, w, g, eps) for upstream dh: adds into
/// dsources (same length as sources), dw and dg.
/// With `dlse` (the upstream of the statistics' lse, attnres_stats), the
/// VJP of (o, lse): lse = log sum_j exp(z_j) adds a_i dlse to dz_i.
template <class S>
void attnres_mix_vjp(const std::vector<Vec<S>>& sources, const Vec<S>& w, const Vec<S>& g, const S& eps,
                     const Vec<S>& dh, std::vector<Vec<S>>& dsources, Vec<S>& dw, Vec<S>& dg, const S* dlse = nullptr) {
  const Vec<S> a = attnres_weights<S>(sources, w, g, eps);
  const auto n = static_cast<Eigen::Index>(sources.size());
  Vec<S> da(n);
  for (Eigen::Index i = 0; i < n; ++i) da(i) = dh.dot(sources[i]);
  // D = sum_j a_j da_j, computed as dh . h with h = sum_j a_j v_j the
  // readout (FlashAttention's D = rowsum(dO o O)): the same number, but the
  // two terms of da_i - D then come from separate dot products, as in every
  // kernel that does not reuse da (a flash-style backward, autograd of a
  // deferred normalisation). The tolerance model samples this code's
  // roundings (perturbed.hpp): with D = a . da the difference would share
  // da_i's rounding, and at a cancelling logit gradient (exactly 0 at one
  // source) the model's spread would be far below such a kernel's error
  // (docs/attnres.md, "Backward"; issue 19's capture study, class 2).
  Vec<S> h = Vec<S>::Zero(dh.size());
  for (Eigen::Index i = 0; i < n; ++i) h += a(i) * sources[i];
  const S mean = dh.dot(h);
  for (Eigen::Index i = 0; i < n; ++i) {
    const S dz = dlse ? S(a(i) * ((da(i) - mean) + *dlse)) : S(a(i) * (da(i) - mean));
    const Vec<S>& v = sources[i];
    dw += dz * rms_norm<S>(v, eps, g);
    dsources[i] += a(i) * dh + rms_norm_vjp<S>(v, eps, g, Vec<S>(dz * w), &dg);
  }
}

/// The VJP of attnres_stats(sources, w, g, eps) = (o, lse) for upstreams
/// (do, dlse): o is the readout (attnres_mix_vjp), lse = log sum_j exp(z_j)
/// has d lse / d z_i = a_i, so dz_i = a_i (da_i - D + dlse) (the gradient a
/// flash-style backward takes with the upstream of its saved lse).
template <class S>
void attnres_stats_vjp(const std::vector<Vec<S>>& sources, const Vec<S>& w, const Vec<S>& g, const S& eps,
                       const Vec<S>& dout, const S& dlse, std::vector<Vec<S>>& dsources, Vec<S>& dw, Vec<S>& dg) {
  attnres_mix_vjp<S>(sources, w, g, eps, dout, dsources, dw, dg, &dlse);
}

/// The VJP of attnres_merge(st, b, w, g, eps) = (h, lse') for upstreams
/// (dh, dlse'). The merge is a two-source softmax with logits (lse, z),
/// z = w . k, k = RMSNorm_g(b), values (o, b), so as in attnres_mix_vjp:
///   do += a_old dh,   db += a_new dh                         (value path)
///   D = dh . h,  dlse += a_old (dh . o - D + dlse'),  dz = a_new (dh . b - D + dlse')
///   dw += dz k,  dg, db += RMSNorm^T(dz w)                   (key path)
template <class S>
void attnres_merge_vjp(const AttnResStats<S>& st, const Vec<S>& b, const Vec<S>& w, const Vec<S>& g, const S& eps,
                       const Vec<S>& dh, const S& dlse_out, Vec<S>& dout, S& dlse, Vec<S>& db, Vec<S>& dw, Vec<S>& dg) {
  const Vec<S> k = rms_norm<S>(b, eps, g);
  const auto m = attnres_merge_weights<S>(st.lse, S(w.dot(k)));
  const Vec<S> h = m.a_old * st.o + m.a_new * b;
  const S D = dh.dot(h);  // as in attnres_mix_vjp: from the readout, FlashAttention's D
  const S dz = m.a_new * ((dh.dot(b) - D) + dlse_out);
  dlse += m.a_old * ((dh.dot(st.o) - D) + dlse_out);
  dout += m.a_old * dh;
  dw += dz * k;
  db += m.a_new * dh + rms_norm_vjp<S>(b, eps, g, Vec<S>(dz * w), &dg);
}

template <class S>
struct Backward<AttentionResiduals<S>> {
  using State = typename AttentionResiduals<S>::State;
  struct Adjoint {
    std::vector<Vec<S>> sources;
    Vec<S> partial;  // always width d (zero while no block is open)
    template <class F>
    void stored(F&& f) {  // framework.hpp
      for (auto& x : sources) f(x);
      f(partial);
    }
    Adjoint& operator+=(const Adjoint& o) {
      for (std::size_t j = 0; j < sources.size(); ++j) sources[j] += o.sources.at(j);
      partial += o.partial;
      return *this;
    }
  };
  struct Grad {
    std::vector<Vec<S>> w, g;  // L+1 each, like the config
  };

  const AttentionResiduals<S>& scheme;

  Grad zero_grad() const {
    const auto& c = scheme.config();
    return {std::vector<Vec<S>>(c.layers + 1, Vec<S>::Zero(c.d)), std::vector<Vec<S>>(c.layers + 1, Vec<S>::Zero(c.d))};
  }

  /// The readout with pair r over sources(s): its VJP added into a.
  void mix_vjp(const State& s, int r, const Vec<S>& dh, Adjoint& a, Grad& gr) const {
    const auto& c = scheme.config();
    const auto src = scheme.sources(s);
    std::vector<Vec<S>> d(src.size(), Vec<S>::Zero(c.d));
    attnres_mix_vjp<S>(src, c.w[r], c.g[r], c.eps, dh, d, gr.w[r], gr.g[r]);
    for (std::size_t j = 0; j < s.sources.size(); ++j) a.sources[j] += d[j];
    if (s.in_block > 0) a.partial += d.back();
  }

  Adjoint final(const State& s, const Vec<S>& dout, Grad& gr) const {
    const int d = scheme.config().d;
    Adjoint a{std::vector<Vec<S>>(s.sources.size(), Vec<S>::Zero(d)), Vec<S>::Zero(d)};
    mix_vjp(s, scheme.config().layers, dout, a, gr);
    return a;
  }

  Vec<S> write(const State& before, int, const Vec<S>&, Adjoint& a, Grad&) const {
    const auto& c = scheme.config();
    const bool appended = c.variant == AttnResVariant::full ||
                          before.in_block + 1 == attnres_block_length(c, static_cast<int>(before.sources.size()) - 1);
    Vec<S> dv;
    if (appended) {
      dv = std::move(a.sources.back());
      a.sources.pop_back();
    } else {
      dv = a.partial;
    }
    // b^i = b^{i-1} + v: the partial before the write gets the same adjoint
    // when the block was open; a fresh block (b^1 = v) has no earlier partial.
    if (c.variant == AttnResVariant::block && before.in_block > 0) a.partial = dv;
    else a.partial = Vec<S>::Zero(c.d);
    return dv;
  }

  void read(const State& before, int l, const Vec<S>& dh, Adjoint& a, Grad& gr) const { mix_vjp(before, l, dh, a, gr); }
  Vec<S> init(const Vec<S>&, const Adjoint& a, Grad&) const { return a.sources.at(0); }
};

}  // namespace dmref
