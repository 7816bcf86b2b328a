// tests/support/hc_cases.hpp: random kernel-level Hyper-Connections problems
// for the tests and the properties (docs/hc.md). Coefficients scatter around
// the paper's init (A_m = e_{l mod n}, A_r = I, B = 1) with standard deviation
// `spread`; dynamic weights have scale `wscale / sqrt(d)`, so the dynamic terms
// s act(z) have z = O(wscale). Every number is a double, exact in every type.
// At the end, grad::HcSpec: the backward problem of the adjoint identity
// (grad_cases.hpp).
#pragma once

#include "grad_cases.hpp"
#include "check.hpp"
#include "dmref/hc.hpp"
#include "dmref/hc_backward.hpp"
#include "dmref/oracles/hc_matrix.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace dmref::test {

struct HcShape {
  int n = 1, d = 4, layers = 8;
  bool dynamic = false, tanh = true;
  double spread = 0.2;  // std of the coefficients around the paper's init
  double wscale = 1;    // dynamic weights ~ N(0, wscale^2 / d)
  double smax = 0.1;    // dynamic scales s ~ U[0.01, smax]
  std::uint64_t seed = 1;
};

inline std::string describe(const HcShape& s) {
  std::ostringstream o;
  o << "n=" << s.n << " d=" << s.d << " L=" << s.layers
    << (s.dynamic ? (s.tanh ? " dynamic" : " dynamic-no-tanh") : " static") << " spread=" << s.spread
    << " wscale=" << s.wscale << " smax=" << s.smax << " seed=" << s.seed;
  return o.str();
}

/// A kernel-level HC case in doubles (converts exactly to every type).
struct HcCase {
  HcShape shape;
  std::vector<HcLayer<double>> p;
  Vec<double> e;
  std::vector<Vec<double>> v;
  double ln_eps = 1e-5;

  template <class T>
  HcConfig<T> config() const {
    HcConfig<T> c;
    c.n = shape.n;
    c.d = shape.d;
    c.dynamic = shape.dynamic;
    c.tanh = shape.tanh;
    c.ln_eps = T(ln_eps);
    for (const auto& q : p)
      c.layers.push_back({convert<T>(q.am), convert<T>(q.ar), convert<T>(q.b), convert<T>(q.ln_gain),
                          convert<T>(q.ln_bias), convert<T>(q.wm), convert<T>(q.wr), convert<T>(q.wb), T(q.s_a),
                          T(q.s_b)});
    return c;
  }
  /// The inputs at full precision: the double values divided by 3 in T,
  /// so that even the first sums round at every precision.
  template <class T>
  Vec<T> embedding() const {
    return convert<T>(e) / T(3);
  }
  template <class T>
  std::vector<Vec<T>> values() const {
    std::vector<Vec<T>> r;
    for (const auto& x : v) r.push_back(convert<T>(x) / T(3));
    return r;
  }
  /// The oracle's problem at T, with the inputs of type In converted exactly.
  template <class T, class In = T>
  oracle::HcProblem<T> problem() const {
    oracle::HcProblem<T> o;
    o.n = shape.n;
    o.dynamic = shape.dynamic;
    o.tanh = shape.tanh;
    o.ln_eps = T(ln_eps);
    for (const auto& q : p)
      o.layer.push_back({convert<T>(q.am), convert<T>(q.ar), convert<T>(q.b), convert<T>(q.ln_gain),
                         convert<T>(q.ln_bias), convert<T>(q.wm), convert<T>(q.wb), convert<T>(q.wr), T(q.s_a),
                         T(q.s_b)});
    o.e = embedding<In>().template cast<T>();
    for (const auto& x : values<In>()) o.v.push_back(x.template cast<T>());
    return o;
  }
};

inline HcCase make_hc_case(const HcShape& s) {
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<double> N(0, 1);
  std::uniform_real_distribution<double> U(0.01, std::max(0.01, s.smax));
  auto vec = [&](int m, double scale) {
    Vec<double> x(m);
    for (int i = 0; i < m; ++i) x(i) = scale * N(rng);
    return x;
  };
  auto mat = [&](int r, int k, double scale) {
    Mat<double> x(r, k);
    for (Eigen::Index i = 0; i < x.size(); ++i) x(i) = scale * N(rng);
    return x;
  };
  HcCase c;
  c.shape = s;
  for (int l = 0; l < s.layers; ++l) {
    HcLayer<double> q;
    q.am = vec(s.n, s.spread);
    q.am(l % s.n) += 1;
    q.ar = Mat<double>::Identity(s.n, s.n) + mat(s.n, s.n, s.spread);
    q.b = Vec<double>::Ones(s.n) + vec(s.n, s.spread);
    if (s.dynamic) {
      q.ln_gain = Vec<double>::Ones(s.d) + vec(s.d, 0.25);
      q.ln_bias = vec(s.d, 0.25);
      const double w = s.wscale / std::sqrt(double(s.d));
      q.wm = vec(s.d, w);
      q.wr = mat(s.d, s.n, w);
      q.wb = vec(s.d, w);
      q.s_a = U(rng);
      q.s_b = U(rng);
    }
    c.p.push_back(q);
    c.v.push_back(vec(s.d, 1));
  }
  c.e = vec(s.d, 1);
  return c;
}

// ------------------------------------------------------------------ backward
// The backward problem of the adjoint identity (grad_cases.hpp's GradProblem;
// tests/test_backward.cpp, properties/grad_properties.cpp).
namespace grad {

struct HcSpec {
  HcConfig<S> c;
  HcSpec(int n, int d, int L, bool dynamic, bool use_tanh, HcNorm norm = HcNorm::layer) {
    c = hc_paper_init<S>(n, d, L, dynamic);
    c.tanh = use_tanh;
    c.norm = norm;
    for (auto& q : c.layers) {
      q.am += rnd(n, 0.2);
      q.ar += rnd(n, n, 0.2);
      q.b += rnd(n, 0.2);
      if (!dynamic) continue;
      q.ln_gain = Vec<S>(rnd(d, 0.5).array() + S(1));
      q.ln_bias = rnd(d, 0.1);
      q.wm = rnd(d, 1 / std::sqrt(d));
      q.wr = rnd(d, n, 1 / std::sqrt(d));
      q.wb = rnd(d, 1 / std::sqrt(d));
      q.s_a = S(0.05);
      q.s_b = S(0.07);
    }
  }
  HyperConnections<S> scheme() const { return HyperConnections<S>(c); }
  static constexpr bool has_state = true;
  static Vec<S> state_vec(const HyperConnections<S>::State& s) { return s.H.reshaped(); }
  static Backward<HyperConnections<S>>::Adjoint state_adjoint(const HyperConnections<S>&, const HyperConnections<S>::State& s,
                                                              const Vec<S>& u) {
    return {Mat<S>(u.reshaped(s.H.rows(), s.H.cols()))};
  }
  void pairs(std::vector<HcLayer<S>>& ls, Flat<S>& f) const {
    for (auto& q : ls) {
      f.add(q.am).add(q.ar).add(q.b);
      if (!c.dynamic) continue;
      f.add(q.ln_gain);
      if (c.norm == HcNorm::layer) f.add(q.ln_bias);  // RMSNorm has no bias
      f.add(q.wm).add(q.wr).add(q.wb).add(q.s_a).add(q.s_b);
    }
  }
  void add_params(Flat<S>& f) { pairs(c.layers, f); }
  void add_grads(std::vector<HcLayer<S>>& g, Flat<S>& f) const { pairs(g, f); }
};

}  // namespace grad

}  // namespace dmref::test
