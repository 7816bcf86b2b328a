// dmref/hc.hpp: Hyper-Connections on the framework (docs/hc.md; arXiv 2409.19606,
// Zhu et al., "Hyper-Connections", Sec. 2 and App. J).
//
// Streams: n copies of the residual, the rows H_0..H_{n-1} of an n x d matrix H.
// Layer l has the coefficients of the paper's HC matrix [[0, B], [A_m, A_r]]:
//   A_m (n)      read weights:    h_l   = sum_j A_m[j] H_j
//   A_r (n x n)  carry weights:   H'_i  = sum_j A_r[j,i] H_j
//   B (n)        write weights:   H_i  <- B[i] v_l + H'_i
// Static HC: the coefficients are parameters (paper init: A_m = e_{l mod n},
// A_r = I, B = 1). Dynamic HC adds to them terms computed from the streams:
//   Hb   = LayerNorm(H) row by row (eps 1e-5, affine gain/bias of layer l), or
//          RMSNorm(H) row by row (eps, gain of layer l, no bias) with HcNorm::rms
//   A_m  = A_m^s + s_a act(Hb W_m)       (entry j from stream j)
//   A_r  = A_r^s + s_a act(Hb W_r)       (row j from stream j)
//   B    = B^s   + s_b act(Hb W_b)^T     (entry i from stream i)
// with act = tanh (paper) or the identity (the paper's "W/O tanh" ablation),
// one scale s_a shared by A_m and A_r and a separate s_b (paper init: W = 0,
// s_a = s_b = 0.01, which makes dynamic HC start as static HC).
// init: H = n copies of e; final: sum of the rows.
//
// The coefficients of layer l are a function of the streams *before* the
// layer, so read(l) computes them and keeps them in the State; write(l) uses
// exactly those (it rejects a write of a layer that was not read first).
// Sums are explicit loops in stream order 0..n-1, so the reductions the
// properties state (n = 1 is PreLN, zero dynamic weights are static HC) hold
// to the last bit.
//
// No recursion here branches on data values, so all of it runs on intervals.
#pragma once

#include "dmref/diagnostics.hpp"
#include "dmref/framework.hpp"
#include "dmref/layers.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace dmref {

/// Parameters of one hyper-connection (one layer). The dynamic fields are
/// used (and validated) only when HcConfig::dynamic is set.
template <class S>
struct HcLayer {
  Vec<S> am;       // n: static read weights A_m^s
  Mat<S> ar;       // n x n: static carry weights A_r^s; ar(j, i) weighs stream j in stream i
  Vec<S> b;        // n: static write weights B^s
  Vec<S> ln_gain;  // d: LayerNorm gain (paper init 1)
  Vec<S> ln_bias;  // d: LayerNorm bias (paper init 0); unused with RMSNorm
  Vec<S> wm;       // d: W_m
  Mat<S> wr;       // d x n: W_r; column i produces column i of A_r
  Vec<S> wb;       // d: W_b
  S s_a = S(1) / S(100);  // scale of the dynamic A_m and A_r (paper init 0.01)
  S s_b = S(1) / S(100);  // scale of the dynamic B (paper init 0.01)
};

/// The norm of dynamic HC: LayerNorm (paper) or RMSNorm (gain, eps; no bias, no mean).
enum class HcNorm { layer, rms };

template <class S>
struct HcConfig {
  int n = 0;               // expansion rate (number of streams)
  int d = 0;               // model width
  bool dynamic = false;    // dynamic (DHC) or static (SHC) hyper-connections
  bool tanh = true;        // dynamic only: false is the paper's "W/O tanh" ablation
  S ln_eps = S(1) / S(100000);  // dynamic only: norm epsilon (PyTorch LayerNorm default 1e-5)
  HcNorm norm = HcNorm::layer;  // dynamic only: LayerNorm (gain, bias) or RMSNorm (gain)
  std::vector<HcLayer<S>> layers;  // one per layer; layer l uses layers[l]
};

/// The paper's initialization for L layers: A_m = e_{l mod n}, A_r = I, B = 1;
/// dynamic: LayerNorm gain 1 and bias 0, W_m = W_r = W_b = 0, s_a = s_b = 0.01.
template <class S>
HcConfig<S> hc_paper_init(int n, int d, int L, bool dynamic) {
  if (n <= 0 || d <= 0 || L < 0)
    throw std::invalid_argument("hc: init: need n > 0, d > 0, L >= 0, got n = " + std::to_string(n) +
                                ", d = " + std::to_string(d) + ", L = " + std::to_string(L));
  HcConfig<S> c;
  c.n = n;
  c.d = d;
  c.dynamic = dynamic;
  for (int l = 0; l < L; ++l) {
    HcLayer<S> p;
    p.am = Vec<S>::Zero(n);
    p.am(l % n) = S(1);
    p.ar = Mat<S>::Identity(n, n);
    p.b = Vec<S>::Ones(n);
    if (dynamic) {
      p.ln_gain = Vec<S>::Ones(d);
      p.ln_bias = Vec<S>::Zero(d);
      p.wm = Vec<S>::Zero(d);
      p.wr = Mat<S>::Zero(d, n);
      p.wb = Vec<S>::Zero(d);
    }
    c.layers.push_back(std::move(p));
  }
  return c;
}

/// LayerNorm of one row: gain * (x - mean) / sqrt(var + eps) + bias, with the
/// biased (1/d) variance of PyTorch's nn.LayerNorm.
template <class S>
Vec<S> hc_layer_norm(const Vec<S>& x, const S& eps, const Vec<S>& gain, const Vec<S>& bias) {
  using std::sqrt;
  const S mean = x.sum() / S(x.size());
  const Vec<S> c = x.array() - mean;
  const S var = c.squaredNorm() / S(x.size());
  const S sigma = sqrt(var + eps);
  return (c / sigma).cwiseProduct(gain) + bias;
}

/// sum_j w[j] H_j in stream order (the read h = sum_j A_m[j] H_j).
template <class S>
Vec<S> hc_mix(const Mat<S>& H, const Vec<S>& w) {
  Vec<S> h = w(0) * H.row(0).transpose();
  for (Eigen::Index j = 1; j < H.rows(); ++j) h += w(j) * H.row(j).transpose();
  return h;
}

/// The carried stream i, H'_i = sum_j A_r[j,i] H_j, in stream order: the
/// write's mixing of the old streams, before the layer output is added.
template <class S>
Vec<S> hc_carry_stream(const Mat<S>& H, const Mat<S>& ar, Eigen::Index i) {
  Vec<S> c = ar(0, i) * H.row(0).transpose();
  for (Eigen::Index j = 1; j < H.rows(); ++j) c += ar(j, i) * H.row(j).transpose();
  return c;
}

/// Every carried stream (row i = H'_i).
template <class S>
Mat<S> hc_carry(const Mat<S>& H, const Mat<S>& ar) {
  Mat<S> carried(ar.cols(), H.cols());
  for (Eigen::Index i = 0; i < ar.cols(); ++i) carried.row(i) = hc_carry_stream<S>(H, ar, i).transpose();
  return carried;
}

/// The depth connection of one stream: B_i v + H'_i.
template <class S>
Vec<S> hc_depth_stream(const S& b, const Vec<S>& v, const Vec<S>& carried) {
  return b * v + carried;
}

/// The depth connection of every stream: row i = B[i] v + H'_i.
template <class S>
Mat<S> hc_depth(const Mat<S>& carried, const Vec<S>& b, const Vec<S>& v) {
  Mat<S> next(carried.rows(), carried.cols());
  for (Eigen::Index i = 0; i < carried.rows(); ++i)
    next.row(i) = hc_depth_stream<S>(b(i), v, Vec<S>(carried.row(i).transpose())).transpose();
  return next;
}

/// The coefficients of one layer as the write will use them.
template <class S>
struct HcCoefficients {
  Vec<S> am;  // n
  Mat<S> ar;  // n x n
  Vec<S> b;   // n
};

template <class S>
class HyperConnections {
 public:
  using Scalar = S;
  struct State {
    Mat<S> H;  // n x d, row j = stream j
    // The coefficients computed by the last read, for layer `layer` (-1: none).
    // A read computes them from H, which it does not change; the following
    // write of that layer must use the same numbers, so they travel here.
    mutable int layer = -1;
    mutable HcCoefficients<S> coef;
    template <class F>
    void stored(F&& f) { f(H); }  // framework.hpp: the streams (coefficients stay float32)
  };

  explicit HyperConnections(HcConfig<S> cfg) : cfg_(std::move(cfg)) { validate(); }

  const HcConfig<S>& config() const { return cfg_; }

  State init(const Vec<S>& e) const {
    if (e.size() != cfg_.d)
      fail("embedding", "width " + std::to_string(e.size()) + " != d = " + std::to_string(cfg_.d));
    State s;
    s.H.resize(cfg_.n, cfg_.d);
    for (int j = 0; j < cfg_.n; ++j) s.H.row(j) = e.transpose();
    return s;
  }

  /// The coefficients of layer l for streams H (static: the parameters;
  /// dynamic: the parameters plus the stream-dependent terms).
  HcCoefficients<S> coefficients(const Mat<S>& H, int l) const {
    const HcLayer<S>& p = layer(l);
    HcCoefficients<S> c{p.am, p.ar, p.b};
    if (!cfg_.dynamic) return c;
    using std::tanh;
    const bool use_tanh = cfg_.tanh;
    auto act = [use_tanh](const S& z) { return use_tanh ? S(tanh(z)) : z; };
    for (int j = 0; j < cfg_.n; ++j) {
      const Vec<S> row = H.row(j).transpose();
      const Vec<S> hb = cfg_.norm == HcNorm::layer ? hc_layer_norm<S>(row, cfg_.ln_eps, p.ln_gain, p.ln_bias)
                                                   : rms_norm<S>(row, cfg_.ln_eps, p.ln_gain);
      c.am(j) = p.am(j) + p.s_a * act(hb.dot(p.wm));
      for (int i = 0; i < cfg_.n; ++i) c.ar(j, i) = p.ar(j, i) + p.s_a * act(hb.dot(p.wr.col(i)));
      c.b(j) = p.b(j) + p.s_b * act(hb.dot(p.wb));
    }
    return c;
  }

  /// h_l = sum_j A_m[j] H_j; keeps the coefficients for write(l).
  Vec<S> read(const State& s, int l) const {
    s.coef = coefficients(s.H, l);
    s.layer = l;
    return hc_mix<S>(s.H, s.coef.am);
  }

  /// H_i <- B[i] v + sum_j A_r[j,i] H_j with the coefficients of read(l):
  /// hc_depth_stream(B_i, v, hc_carry_stream(H, A_r, i)) stream by stream.
  void write(State& s, int l, const Vec<S>& v) const {
    if (s.layer != l)
      fail("write", "layer " + std::to_string(l) + " was not read first (its coefficients come from the read)");
    if (v.size() != cfg_.d)
      fail("v", "layer " + std::to_string(l) + " output has width " + std::to_string(v.size()) + " != d = " +
                    std::to_string(cfg_.d));
    Mat<S> next(cfg_.n, cfg_.d);
    for (int i = 0; i < cfg_.n; ++i)  // stream by stream: carry, then depth (the tolerance model's operation order)
      next.row(i) = hc_depth_stream<S>(s.coef.b(i), v, hc_carry_stream<S>(s.H, s.coef.ar, i)).transpose();
    s.H = std::move(next);
    s.layer = -1;
  }

  /// sum_j H_j, in stream order.
  Vec<S> final(const State& s) const {
    Vec<S> out = s.H.row(0).transpose();
    for (int j = 1; j < cfg_.n; ++j) out += s.H.row(j).transpose();
    return out;
  }

 private:
  [[noreturn]] static void fail(const std::string& field, const std::string& what) {
    throw ParameterError("hc", field, what);
  }

  const HcLayer<S>& layer(int l) const {
    if (l < 0 || l >= static_cast<int>(cfg_.layers.size()))
      fail("layers", "no parameters for layer " + std::to_string(l) + " (have " +
                         std::to_string(cfg_.layers.size()) + ")");
    return cfg_.layers[l];
  }

  template <class M>
  static void check(const M& m, Eigen::Index rows, Eigen::Index cols, const std::string& field, int l) {
    const std::string at = " at layer " + std::to_string(l);
    if (m.rows() != rows || m.cols() != cols)
      fail(field, "shape " + std::to_string(m.rows()) + "x" + std::to_string(m.cols()) + ", expected " +
                      std::to_string(rows) + "x" + std::to_string(cols) + at);
    for (Eigen::Index i = 0; i < m.size(); ++i)
      if (!std::isfinite(to_double(m(i)))) fail(field, "entry " + std::to_string(i) + " is not finite" + at);
  }

  void validate() const {
    if (cfg_.n <= 0) fail("n", "must be > 0, got " + std::to_string(cfg_.n));
    if (cfg_.d <= 0) fail("d", "must be > 0, got " + std::to_string(cfg_.d));
    if (cfg_.dynamic) {
      const double e = to_double(cfg_.ln_eps);
      if (!(std::isfinite(e) && e > 0)) fail("ln_eps", "must be finite and > 0, got " + show(e));
    }
    const int n = cfg_.n, d = cfg_.d;
    for (int l = 0; l < static_cast<int>(cfg_.layers.size()); ++l) {
      const HcLayer<S>& p = cfg_.layers[l];
      check(p.am, n, 1, "am", l);
      check(p.ar, n, n, "ar", l);
      check(p.b, n, 1, "b", l);
      if (!cfg_.dynamic) continue;
      check(p.ln_gain, d, 1, "ln_gain", l);
      if (cfg_.norm == HcNorm::layer) check(p.ln_bias, d, 1, "ln_bias", l);
      check(p.wm, d, 1, "wm", l);
      check(p.wr, d, n, "wr", l);
      check(p.wb, d, 1, "wb", l);
      if (!std::isfinite(to_double(p.s_a))) fail("s_a", "is not finite at layer " + std::to_string(l));
      if (!std::isfinite(to_double(p.s_b))) fail("s_b", "is not finite at layer " + std::to_string(l));
    }
  }

  HcConfig<S> cfg_;
};

/// Kernel-level entry point: per-layer outputs v[l] given; the whole trace.
template <class S>
Trace<S, typename HyperConnections<S>::State> hc_kernel(const HcConfig<S>& cfg, const Vec<S>& e,
                                                         const std::vector<Vec<S>>& v) {
  HyperConnections<S> m(cfg);
  return forward(m, e, static_cast<int>(v.size()), GivenOutputs<S>{&v});
}

}  // namespace dmref
