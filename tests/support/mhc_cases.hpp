// tests/support/mhc_cases.hpp: what the mHC tests and properties share
// (docs/mhc.md): the oracle's view of one reference layer, and grad::MhcSpec,
// the backward problem of the adjoint identity (grad_cases.hpp).
#pragma once

#include "grad_cases.hpp"
#include "dmref/mhc.hpp"
#include "dmref/mhc_backward.hpp"
#include "dmref/oracles/mhc_layer.hpp"

namespace dmref::test {

/// Layer l of a reference configuration as the independent layer oracle
/// (oracles/.../mhc_layer.hpp) takes it: the same numbers, field by field.
template <class T>
oracle::MhcLayerInput<T> mhc_oracle_input(const MhcConfig<T>& c, int l) {
  const MhcLayer<T>& p = c.layers[l];
  oracle::MhcLayerInput<T> in;
  in.n = c.n;
  in.C = c.C;
  in.phi_pre = p.phi_pre;
  in.phi_post = p.phi_post;
  in.phi_res = p.phi_res;
  in.a_pre = p.a_pre;
  in.a_post = p.a_post;
  in.a_res = p.a_res;
  in.b_pre = p.b_pre;
  in.b_post = p.b_post;
  in.b_res = p.b_res;
  in.rms_eps = c.rms_eps;
  in.pre_eps = c.pre_eps;
  in.eps_add = c.res_eps_add;
  in.eps_den = c.res_eps_den;
  in.post_scale = c.post_scale;
  in.rounds = c.t_max;
  return in;
}

/// A double layer converted to scalar S, field by field (each number rounded once).
template <class S>
MhcLayer<S> convert_layer(const MhcLayer<double>& p) {
  MhcLayer<S> q;
  q.phi_pre = convert<S>(p.phi_pre);
  q.phi_post = convert<S>(p.phi_post);
  q.phi_res = convert<S>(p.phi_res);
  q.a_pre = S(p.a_pre);
  q.a_post = S(p.a_post);
  q.a_res = S(p.a_res);
  q.b_pre = convert<S>(p.b_pre);
  q.b_post = convert<S>(p.b_post);
  q.b_res = convert<S>(p.b_res);
  return q;
}

// ------------------------------------------------------------------ backward
// The backward problem of the adjoint identity (grad_cases.hpp's GradProblem;
// tests/test_backward.cpp, properties/grad_properties.cpp).
namespace grad {

/// mHC with a preset, t_max rounds, and optionally the learned head and init weights.
struct MhcSpec {
  MhcConfig<S> c;
  MhcSpec(int n, int C, int L, MhcPreset preset, int t_max, bool head = false, bool init_weights = false) {
    c = mhc_config<S>(preset, n, C);
    c.t_max = t_max;
    const int nC = n * C;
    const double s = 1 / std::sqrt(nC);
    for (int l = 0; l < L; ++l) {
      MhcLayer<S> q;
      q.phi_pre = rnd(nC, n, s);
      q.phi_post = rnd(nC, n, s);
      q.phi_res = rnd(nC, n * n, 2 * s);
      q.a_pre = S(0.9);
      q.a_post = S(1.1);
      q.a_res = S(1.3);
      q.b_pre = rnd(n, 0.5);
      q.b_post = rnd(n, 0.5);
      q.b_res = rnd(n, n, 1);
      c.layers.push_back(std::move(q));
    }
    if (head) {
      c.reduce = MhcReduce::head;
      c.head = {rnd(nC, n, s), S(0.7), rnd(n, 0.5)};
    }
    if (init_weights) c.init_weights = Vec<S>(rnd(n, 0.3).array() + S(1));
  }
  Mhc<S> scheme() const { return Mhc<S>(c); }
  static constexpr bool has_state = true;
  static Vec<S> state_vec(const Mhc<S>::State& s) { return s.X.reshaped(); }
  static Backward<Mhc<S>>::Adjoint state_adjoint(const Mhc<S>&, const Mhc<S>::State& s, const Vec<S>& u) {
    return {Mat<S>(u.reshaped(s.X.rows(), s.X.cols()))};
  }
  // The coefficients each state after a write keeps (outputs H_pre, H_post,
  // H_res, Ht_res of the fixtures, and Ht_pre, Ht_post): all differentiated.
  static constexpr bool has_layer_states = true;
  static Vec<S> layer_state_vec(const Mhc<S>::State& s) {
    const auto& k = s.coef;
    return concat<S>({k.pre, k.post, k.res.reshaped(), k.res_logits.reshaped(), k.pre_logits, k.post_logits});
  }
  static Backward<Mhc<S>>::Adjoint layer_state_adjoint(const Mhc<S>::State& s, const Vec<S>& u) {
    const Eigen::Index n = s.coef.pre.size();
    Backward<Mhc<S>>::Adjoint a;
    a.coef.pre = u.segment(0, n);
    a.coef.post = u.segment(n, n);
    a.coef.res = u.segment(2 * n, n * n).reshaped(n, n);
    a.coef.res_logits = u.segment(2 * n + n * n, n * n).reshaped(n, n);
    a.coef.pre_logits = u.segment(2 * n + 2 * n * n, n);
    a.coef.post_logits = u.segment(3 * n + 2 * n * n, n);
    return a;
  }
  template <class Layers, class Head, class W>
  void pairs(Layers& ls, Head& h, W& w, Flat<S>& f) const {
    for (auto& q : ls)
      f.add(q.phi_pre).add(q.phi_post).add(q.phi_res).add(q.a_pre).add(q.a_post).add(q.a_res).add(q.b_pre).add(q.b_post).add(q.b_res);
    if (c.reduce == MhcReduce::head) f.add(h.phi).add(h.a).add(h.b);
    f.add(w);
  }
  void add_params(Flat<S>& f) { pairs(c.layers, c.head, c.init_weights, f); }
  template <class G>
  void add_grads(G& g, Flat<S>& f) const {
    pairs(g.layers, g.head, g.init_weights, f);
  }
};

}  // namespace grad

}  // namespace dmref::test
