// dmref/hc_backward.hpp: the adjoints of Hyper-Connections (docs/hc.md,
// "Backward"). With dH the adjoint of the n x d streams (row j = stream j):
//   final^T:  dH_j = d out for every row (out = sum_j H_j)
//   write^T(l), H'_i = B_i v + sum_j A_r[j,i] H_j:
//             dv = sum_i B_i dH'_i,  dB_i = dH'_i . v,  dA_r[j,i] = dH'_i . H_j,
//             dH_j = sum_i A_r[j,i] dH'_i
//   read^T(l), h = sum_j A_m[j] H_j:   dH_j += A_m[j] dh,  dA_m[j] = dh . H_j
// The coefficients' adjoints (dA_m, dA_r, dB) go to the static parameters
// and, for dynamic HC, back through the stream-dependent terms
//   A_m[j] = A_m^s[j] + s_a act(Hb_j . W_m)   (and A_r, B alike), Hb_j = LN(H_j):
//   dz = dA * s * act'(z),  ds += dA act(z),  dW += dz Hb_j,  dHb_j += dz W,
//   dH_j += N^T(dHb_j), the norm's VJP (layers_backward.hpp): RMSNorm^T(g) =
//   (g' - xhat mean(g' * xhat)) / r with g' = gain * g, dgain += g * xhat;
//   LayerNorm is RMSNorm of the centred row plus the bias, so LN^T(g) is
//   RMSNorm^T(g) at the centred row with its mean removed, and dbias += g.
// Read and write use the same coefficients; their adjoints are propagated
// separately, which is exact because the VJP is linear in the upstream.
#pragma once

#include "dmref/backward.hpp"
#include "dmref/hc.hpp"
#include "dmref/layers_backward.hpp"

#include <vector>

namespace dmref {

template <class S>
struct Backward<HyperConnections<S>> {
  using State = typename HyperConnections<S>::State;
  struct Adjoint {
    Mat<S> H;
    template <class F>
    void stored(F&& f) { f(H); }  // framework.hpp
    Adjoint& operator+=(const Adjoint& o) {
      H += o.H;
      return *this;
    }
  };
  using Grad = std::vector<HcLayer<S>>;  // per layer, the shapes of HcLayer (s_a, s_b: their gradients)

  const HyperConnections<S>& scheme;

  Grad zero_grad() const {
    const auto& c = scheme.config();
    Grad g;
    for (int l = 0; l < static_cast<int>(c.layers.size()); ++l) {
      HcLayer<S> z;
      z.am = Vec<S>::Zero(c.n);
      z.ar = Mat<S>::Zero(c.n, c.n);
      z.b = Vec<S>::Zero(c.n);
      if (c.dynamic) {
        z.ln_gain = Vec<S>::Zero(c.d);
        z.ln_bias = Vec<S>::Zero(c.d);
        z.wm = Vec<S>::Zero(c.d);
        z.wr = Mat<S>::Zero(c.d, c.n);
        z.wb = Vec<S>::Zero(c.d);
      }
      z.s_a = S(0);
      z.s_b = S(0);
      g.push_back(std::move(z));
    }
    return g;
  }

  /// The VJP of coefficients(H, l) for adjoints dc of its three outputs:
  /// adds into the static gradients, the dynamic ones and dH.
  void coefficients_vjp(const Mat<S>& H, int l, const HcCoefficients<S>& dc, Mat<S>& dH, Grad& gr) const {
    using std::tanh;
    const auto& c = scheme.config();
    const HcLayer<S>& p = c.layers[l];
    HcLayer<S>& g = gr[l];
    g.am += dc.am;
    g.ar += dc.ar;
    g.b += dc.b;
    if (!c.dynamic) return;
    const bool use_tanh = c.tanh;
    // act(z) and act'(z) (tanh or the identity; a config switch, not a data branch)
    auto act = [use_tanh](const S& z) { return use_tanh ? S(tanh(z)) : z; };
    auto dact = [use_tanh](const S& z) {
      if (!use_tanh) return S(1);
      const S t = tanh(z);
      return S(S(1) - t * t);
    };
    for (int j = 0; j < c.n; ++j) {
      const Vec<S> x = H.row(j).transpose();
      const bool ln = c.norm == HcNorm::layer;  // a config switch, not a data branch
      const Vec<S> hb = ln ? hc_layer_norm<S>(x, c.ln_eps, p.ln_gain, p.ln_bias) : rms_norm<S>(x, c.ln_eps, p.ln_gain);
      Vec<S> dhb = Vec<S>::Zero(c.d);
      auto term = [&](const S& dA, const S& scale, const Vec<S>& W, S& dscale, auto&& dW) {
        const S z = hb.dot(W);
        dscale += dA * act(z);
        const S dz = dA * scale * dact(z);
        dW += dz * hb;
        dhb += dz * W;
      };
      term(dc.am(j), p.s_a, p.wm, g.s_a, g.wm);
      for (int i = 0; i < c.n; ++i) term(dc.ar(j, i), p.s_a, Vec<S>(p.wr.col(i)), g.s_a, g.wr.col(i));
      term(dc.b(j), p.s_b, p.wb, g.s_b, g.wb);
      dH.row(j) += (ln ? layer_norm_vjp<S>(x, c.ln_eps, p.ln_gain, dhb, &g.ln_gain, &g.ln_bias)
                       : rms_norm_vjp<S>(x, c.ln_eps, p.ln_gain, dhb, &g.ln_gain))
                       .transpose();
    }
  }

  /// The adjoint of stream i of hc_depth for dY (n x d): dv += b_i dY_i,
  /// db_i = dY_i . v (the carried stream's adjoint is dY_i itself).
  static void depth_vjp_stream(const Vec<S>& b, const Vec<S>& v, const Mat<S>& dY, Eigen::Index i, Vec<S>& dv, Vec<S>& db) {
    const Vec<S> gi = dY.row(i).transpose();
    dv += b(i) * gi;
    db(i) = gi.dot(v);
  }
  /// The adjoint of hc_depth: dv (returned) and db.
  static Vec<S> depth_vjp(const Vec<S>& b, const Vec<S>& v, const Mat<S>& dY, Vec<S>& db) {
    Vec<S> dv = Vec<S>::Zero(v.size());
    db = Vec<S>::Zero(dY.rows());
    for (Eigen::Index i = 0; i < dY.rows(); ++i) depth_vjp_stream(b, v, dY, i, dv, db);
    return dv;
  }
  /// The adjoint of hc_carry_stream(H, ar, i) for dC_i: dar(j, i) = dC_i . H_j,
  /// dH_j += ar(j, i) dC_i.
  static void carry_vjp_stream(const Mat<S>& H, const Mat<S>& ar, const Mat<S>& dC, Eigen::Index i, Mat<S>& dar, Mat<S>& dH) {
    const Vec<S> gi = dC.row(i).transpose();
    for (Eigen::Index j = 0; j < H.rows(); ++j) {
      dar(j, i) = gi.dot(H.row(j).transpose());
      dH.row(j) += ar(j, i) * gi.transpose();
    }
  }
  /// The adjoint of hc_carry (stream by stream).
  static void carry_vjp(const Mat<S>& H, const Mat<S>& ar, const Mat<S>& dC, Mat<S>& dar, Mat<S>& dH) {
    for (Eigen::Index i = 0; i < dC.rows(); ++i) carry_vjp_stream(H, ar, dC, i, dar, dH);
  }
  /// The adjoint of hc_mix(H, w) for dh: dH_j += w_j dh, dw_j = dh . H_j.
  static void mix_vjp(const Mat<S>& H, const Vec<S>& w, const Vec<S>& dh, Mat<S>& dH, Vec<S>& dw) {
    for (Eigen::Index j = 0; j < H.rows(); ++j) {
      dH.row(j) += w(j) * dh.transpose();
      dw(j) = dh.dot(H.row(j).transpose());
    }
  }

  Adjoint final(const State& s, const Vec<S>& dout, Grad&) const {
    Adjoint a{Mat<S>(s.H.rows(), s.H.cols())};
    for (Eigen::Index j = 0; j < s.H.rows(); ++j) a.H.row(j) = dout.transpose();
    return a;
  }

  Vec<S> write(const State& before, int l, const Vec<S>& v, Adjoint& a, Grad& gr) const {
    const auto& c = scheme.config();
    const HcCoefficients<S> k = scheme.coefficients(before.H, l);
    HcCoefficients<S> dc{Vec<S>::Zero(c.n), Mat<S>::Zero(c.n, c.n), Vec<S>::Zero(c.n)};
    Mat<S> dH = Mat<S>::Zero(c.n, c.d);
    Vec<S> dv = Vec<S>::Zero(c.d);
    for (int i = 0; i < c.n; ++i) {  // stream by stream (the tolerance model's operation order)
      depth_vjp_stream(k.b, v, a.H, i, dv, dc.b);
      carry_vjp_stream(before.H, k.ar, a.H, i, dc.ar, dH);
    }
    coefficients_vjp(before.H, l, dc, dH, gr);
    a.H = std::move(dH);
    return dv;
  }

  void read(const State& before, int l, const Vec<S>& dh, Adjoint& a, Grad& gr) const {
    const auto& c = scheme.config();
    const HcCoefficients<S> k = scheme.coefficients(before.H, l);
    HcCoefficients<S> dc{Vec<S>::Zero(c.n), Mat<S>::Zero(c.n, c.n), Vec<S>::Zero(c.n)};
    mix_vjp(before.H, k.am, dh, a.H, dc.am);
    coefficients_vjp(before.H, l, dc, a.H, gr);
  }

  Vec<S> init(const Vec<S>&, const Adjoint& a, Grad&) const {
    Vec<S> de = a.H.row(0).transpose();
    for (Eigen::Index j = 1; j < a.H.rows(); ++j) de += a.H.row(j).transpose();
    return de;
  }
};

}  // namespace dmref
