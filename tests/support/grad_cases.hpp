// tests/support/grad_cases.hpp: backward problems for the adjoint identity
// (grad_check.hpp), shared by tests/test_backward.cpp and
// properties/grad_properties.cpp: one token through each scheme at kernel or
// model level, at 667 bits, with its inputs and parameters paired with their
// gradients. Random values come from oracle::random_direction seeded by
// `next_seed` (set it to replay a case).
#pragma once

#include "grad_check.hpp"

#include "dmref/attnres_backward.hpp"
#include "dmref/denseformer_backward.hpp"
#include "dmref/hc_backward.hpp"
#include "dmref/layers_backward.hpp"
#include "dmref/ldm_backward.hpp"
#include "dmref/mhc_backward.hpp"
#include "dmref/preln_backward.hpp"

#include <cmath>
#include <type_traits>

namespace dmref::test {

using S = GradHi;

inline std::uint64_t next_seed = 1;
inline Vec<S> rnd(int n, double scale = 1) { return oracle::random_direction<S>(n, next_seed++) * S(scale); }
inline Mat<S> rnd(int r, int c, double scale) { return Mat<S>(rnd(r * c, scale).reshaped(r, c)); }

/// One token through a scheme (`Spec`: its parameters, scheme() and the
/// pairing of parameters with their gradients) at kernel level (layer outputs
/// v given) or model level (TanhMlp stack). Inputs: e, then v or the stack
/// weights, then the scheme's parameters. Outputs: every h_l, every v_l
/// (model level), out, then the final streams where the scheme outputs them
/// (Spec::has_state: HC's H, mHC's X, LDM's M and P; their upstream enters
/// as Upstream::last), then the per-layer state outputs where the scheme has
/// them (Spec::has_layer_states: mHC's coefficients; Upstream::states).
template <class Spec>
struct GradProblem : Spec {
  int L = 0;
  bool model = false;
  Vec<S> e;
  std::vector<Vec<S>> v;
  TanhMlpStack<S> stack;

  GradProblem(Spec spec, int d, int layers, bool model_level) : Spec(std::move(spec)), L(layers), model(model_level) {
    e = rnd(d);
    if (model) {
      for (int l = 0; l < L; ++l) stack.layers.push_back({rnd(d + 2, d, 1 / std::sqrt(d)), rnd(d, d + 2, 1 / std::sqrt(d + 2))});
    } else {
      for (int l = 0; l < L; ++l) v.push_back(rnd(d));
    }
  }

  Flat<S> inputs() {
    Flat<S> f;
    f.add(e);
    if (model)
      for (auto& q : stack.layers) f.add(q.W1).add(q.W2);
    else
      f.add(v);
    this->add_params(f);
    return f;
  }

  auto run() const {
    const auto m = this->scheme();
    return model ? forward(m, e, L, stack) : forward(m, e, L, GivenOutputs<S>{&v});
  }

  Vec<S> outputs() const {
    const auto tr = run();
    std::vector<Vec<S>> parts = tr.h;
    if (model) parts.insert(parts.end(), tr.v.begin(), tr.v.end());
    parts.push_back(tr.out);
    if constexpr (requires { Spec::has_state; }) parts.push_back(Spec::state_vec(tr.last));
    if constexpr (requires { Spec::has_layer_states; })
      for (const auto& st : tr.states) parts.push_back(Spec::layer_state_vec(st));
    return concat(parts);
  }

  Vec<S> vjp(const Vec<S>& u) const {
    const auto m = this->scheme();
    const auto tr = run();
    using B = Backward<std::decay_t<decltype(m)>>;
    Upstream<S, typename B::Adjoint> up;
    const Eigen::Index d = e.size();
    Eigen::Index k = 0;
    for (int l = 0; l < L; ++l, k += d) up.h.push_back(u.segment(k, d));
    if (model)
      for (int l = 0; l < L; ++l, k += d) up.v.push_back(u.segment(k, d));
    up.out = u.segment(k, d);
    if constexpr (requires { Spec::has_state; }) {  // the final streams are outputs too
      k += d;
      const Eigen::Index w = Spec::state_vec(tr.last).size();
      up.last = Spec::state_adjoint(m, tr.last, Vec<S>(u.segment(k, w)));
      k += w;
    }
    if constexpr (requires { Spec::has_layer_states; })  // per-layer state outputs (mHC's coefficients)
      for (const auto& st : tr.states) {
        const Eigen::Index w = Spec::layer_state_vec(st).size();
        up.states.push_back(Spec::layer_state_adjoint(st, Vec<S>(u.segment(k, w))));
        k += w;
      }
    Flat<S> f;
    if (model) {
      TanhMlpStackVjp<S> fv(stack);
      auto g = backward(m, e, tr, fv, up);
      f.add(g.e);
      for (auto& q : fv.grad) f.add(q.W1).add(q.W2);
      this->add_grads(g.param, f);
      return f.get();
    }
    auto g = backward(m, e, tr, GivenOutputsVjp{}, up);
    f.add(g.e).add(g.v);
    this->add_grads(g.param, f);
    return f.get();
  }
};

// ---------------------------------------------------------------- specs
struct PrelnSpec {
  PreLN<S> scheme() const { return {}; }
  void add_params(Flat<S>&) {}
  template <class G>
  void add_grads(G&, Flat<S>&) const {}
};

struct DenseFormerSpec {
  DenseFormerConfig<S> c;
  DenseFormerSpec(int d, int L, int k, int p) {
    c.d = d;
    c.dilation = k;
    c.period = p;
    c.a = Mat<S>::Identity(L + 1, L + 1);
    for (int i = 1; i <= L; ++i)
      for (int j = 0; j <= i; ++j)
        if (free(i, j)) c.a(i, j) += rnd(1, 0.3)(0);
  }
  bool free(int i, int j) const { return i > 0 && i % c.period == 0 && c.in_pattern(i, j); }
  DenseFormer<S> scheme() const { return DenseFormer<S>(c); }
  template <class A>
  void pairs(A& a, Flat<S>& f) const {
    for (int i = 0; i < a.rows(); ++i)
      for (int j = 0; j < a.cols(); ++j)
        if (free(i, j)) f.add(a(i, j));
  }
  void add_params(Flat<S>& f) { pairs(c.a, f); }
  void add_grads(Mat<S>& g, Flat<S>& f) const { pairs(g, f); }
};

struct AttnResSpec {
  AttnResConfig<S> c;
  AttnResSpec(int d, int L, AttnResVariant var, int block) {
    c.d = d;
    c.layers = L;
    c.variant = var;
    c.block_size = block;
    for (int l = 0; l <= L; ++l) {
      c.w.push_back(rnd(d, 2 / std::sqrt(d)));
      c.g.push_back(Vec<S>(rnd(d, 0.5).array() + S(1)));
    }
  }
  AttentionResiduals<S> scheme() const { return AttentionResiduals<S>(c); }
  void add_params(Flat<S>& f) { f.add(c.w).add(c.g); }
  template <class G>
  void add_grads(G& g, Flat<S>& f) const {
    f.add(g.w).add(g.g);
  }
};

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

/// LDM with a write rule and P update; kernel addresses (q, k, omega given
/// per layer) or the model's MLP addresses.
template <bool Kernel>
struct LdmSpec {
  using Addr = std::conditional_t<Kernel, GivenAddresses<S>, MlpAddresses<S>>;
  LdmConfig<S> c;
  Addr addr;
  LdmSpec(int d, int L, int G, int dk, MemoryWrite w, PUpdate pu = PUpdate::symmetric, bool rr = true, bool wr = true,
          KeySource keys = KeySource::layer_output) {
    c.keys = keys;
    c.d = d;
    c.groups = G;
    c.dk = dk;
    c.write = w;
    c.p_update = pu;
    c.read_residual = rr;
    c.write_residual = wr;
    c.alpha = S(0.8);
    c.lambda = Mat<S>(rnd(L, G, 0.2).array() + S(0.75));
    c.beta = Mat<S>(rnd(L, G, 0.4).array() + S(0.5));
    if constexpr (Kernel) {
      for (int l = 0; l < L; ++l)
        addr.a.push_back({rnd(G * dk), rnd(G * dk), Vec<S>(rnd(G, 0.8).array() + S(1))});
    } else {
      addr = {{rnd(5, d, 1 / std::sqrt(d)), rnd(G * dk, 5, 1 / std::sqrt(5))}, {Mat<S>(), rnd(G * dk + G, d, 1 / std::sqrt(d))}, G, dk};
    }
  }
  LinearDepthMemory<S, Addr> scheme() const { return {c, addr}; }
  using Scheme = LinearDepthMemory<S, Addr>;
  static constexpr bool has_state = true;
  static Vec<S> state_vec(const typename Scheme::State& s) {  // every M_g, then every P_g
    std::vector<Vec<S>> parts;
    for (const auto& g : s.mem) parts.push_back(g.M.reshaped());
    for (const auto& g : s.mem) parts.push_back(g.P.reshaped());
    return concat(parts);
  }
  static typename Backward<Scheme>::Adjoint state_adjoint(const Scheme& m, const typename Scheme::State& s, const Vec<S>& u) {
    auto a = Backward<Scheme>{m}.zero_adjoint(s);
    Eigen::Index k = 0;
    for (auto& M : a.M) {
      M = u.segment(k, M.size()).reshaped(M.rows(), M.cols());
      k += M.size();
    }
    for (auto& P : a.P) {
      P = u.segment(k, P.size()).reshaped(P.rows(), P.cols());
      k += P.size();
    }
    return a;
  }
  template <class G>
  void pairs(G& lambda, G& beta, S& alpha, Flat<S>& f) const {
    if (c.write == MemoryWrite::rls) f.add(lambda).add(alpha);
    if (c.write == MemoryWrite::delta) f.add(beta);
  }
  void add_params(Flat<S>& f) {
    pairs(c.lambda, c.beta, c.alpha, f);
    if constexpr (Kernel) {
      for (auto& a : addr.a) f.add(a.q).add(a.k).add(a.omega);
    } else {
      f.add(addr.mlp_q.W1).add(addr.mlp_q.W2).add(addr.mlp_k.W2);
    }
  }
  template <class Grad>
  void add_grads(Grad& g, Flat<S>& f) const {
    pairs(g.lambda, g.beta, g.alpha, f);
    if constexpr (Kernel) {
      for (auto& a : g.address) f.add(a.q).add(a.k).add(a.omega);
    } else {
      f.add(g.mlp_q.W1).add(g.mlp_q.W2).add(g.mlp_k.W2);
    }
  }
};

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

}  // namespace dmref::test
