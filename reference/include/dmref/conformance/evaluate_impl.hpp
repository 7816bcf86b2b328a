// dmref/conformance/evaluate_impl.hpp: run the reference on a Problem at
// scalar S (declared in evaluate.hpp, instantiated in reference/src/evaluate_*.cpp).
// One adapter per scheme turns the config and tensors into the scheme's
// parameters, runs every token through `forward`, and names the outputs:
//   output.h   [T, L, d]  input of every layer (h_0 included)
//   output.v   [T, L, d]  output of every layer (model level only)
//   output.out [T, d]     final(streams)
// plus each scheme's own state outputs (docs/fixtures.md).
// With p.grad (backward): upstream gradients input.grad.h [T, L, d],
// input.grad.out [T, d] (and input.grad.v at model level) are inputs, and the
// outputs gain the vector-Jacobian products (backward.hpp, <scheme>_backward.hpp)
//   grad.input.e [T, d], grad.input.v [T, L, d] (kernel level),
//   grad.param.<name> (same shape as param.<name>, summed over tokens),
//   grad.input.<name> for per-token inputs (LDM kernel: q, k, omega),
//   grad.config.alpha [1] (LDM RLS: the ridge).
// Levels: "kernel" (layer outputs given as input.v, and for LDM q/k/omega
// given) and "model" (the layer function W2 tanh(W1 RMSNorm(h)) from
// param.W1 [L, hidden, d], param.W2 [L, d, hidden]).
// Each adapter is two parts: <scheme>_config reads the config and tensors
// into the scheme's parameters, run_<scheme> runs any scheme class with that
// State through the tokens and names its outputs. evaluate() joins them for
// the reference; tests/mutants joins them with deliberately wrong variants.
#pragma once

#include "dmref/attnres_backward.hpp"
#include "dmref/conformance/evaluate.hpp"
#include "dmref/denseformer_backward.hpp"
#include "dmref/hc_backward.hpp"
#include "dmref/layers_backward.hpp"
#include "dmref/mhc_backward.hpp"
#include "dmref/ldm_backward.hpp"
#include "dmref/model.hpp"
#include "dmref/preln_backward.hpp"

#include <algorithm>
#include <functional>
#include <optional>

namespace dmref::conf {

struct Dims {
  std::int64_t T, L, d;
  bool model;
};

inline Dims dims(const Problem& p) {
  Dims D{p.integer("tokens"), p.integer("layers"), p.integer("d"), false};
  const std::string level = p.text("level", "kernel");
  if (level != "kernel" && level != "model") p.fail("config.level", "must be \"kernel\" or \"model\", got \"" + level + "\"");
  D.model = level == "model";
  if (D.model) {
    p.unread_tensor("input.v", "at level model the layer outputs are computed (param.W1, param.W2), not given");
  } else {
    const std::string why = "read only at level model (config.level is " + std::string(p.contains("level") ? "kernel" : "missing: kernel") + ")";
    p.unread("hidden", why);
    p.unread_tensor("param.W1", why);
    p.unread_tensor("param.W2", why);
  }
  return D;
}

/// The model's layer function F_l(h) = W2_l tanh(W1_l RMSNorm(h)), read from
/// param.W1 / param.W2 one layer at a time: only layer l is ever held at S.
/// (Converting the whole stack up front held L x 2 x hidden x d intervals:
/// 1.5 GiB for d = 256, hidden 64, L = 48 at 533 bits.) Converting a double to
/// S is exact, so the values are those of TanhMlpStack<S>.
template <class S>
struct TensorMlpStack {
  const io::Tensor *W1, *W2;
  std::int64_t hidden, d;
  Vec<S> operator()(int l, const Vec<S>& h) const {
    return layer(l)(h);
  }
  TanhMlpLayer<S> layer(int l) const {
    return {mat_at<S>(*W1, l * hidden * d, hidden, d), mat_at<S>(*W2, l * d * hidden, d, hidden)};
  }
  /// Every layer at S, for the backward (TanhMlpStackVjp).
  TanhMlpStack<S> all_layers() const {
    TanhMlpStack<S> st;
    for (std::int64_t l = 0; l < W1->shape.at(0); ++l) st.layers.push_back(layer(int(l)));
    return st;
  }
};

template <class S>
TensorMlpStack<S> layer_stack(const Problem& p, const Dims& D) {
  const auto hidden = p.integer("hidden");
  return {&p.tensor("param.W1", {D.L, hidden, D.d}), &p.tensor("param.W2", {D.L, D.d, hidden}), hidden, D.d};
}

/// Whether scheme M has a backward (a Backward<M> specialization).
template <class M>
concept HasBackward = requires(const M& m) { Backward<M>{m}.zero_grad(); };

/// One gradient of one token, row-major in the layout of the problem's tensor
/// `name`: the golden grad.<name>. A param.* gradient is summed over tokens,
/// an input.* one (a per-token input such as LDM's input.q) is concatenated
/// in token order; `shape` is given only for a config number (config.alpha).
template <class S>
struct ParamGrad {
  std::string name;
  std::vector<S> values;
  std::vector<std::int64_t> shape = {};
  template <class V>
  ParamGrad& add(const V& v) {  // a scalar, a vector, or a matrix row by row
    if constexpr (std::is_same_v<V, S>) values.push_back(v);
    else
      for (Eigen::Index i = 0; i < v.rows(); ++i)
        for (Eigen::Index j = 0; j < v.cols(); ++j) values.push_back(v(i, j));
    return *this;
  }
};

/// No scheme parameters (PreLN) or none differentiated.
template <class S>
struct NoParamGrads {
  template <class G>
  std::vector<ParamGrad<S>> operator()(const G&) const {
    return {};
  }
};

/// The upstream gradient names of a problem and the checks on them: with
/// p.grad every one of `wanted` is required; an input.grad.* tensor that is
/// not wanted, or any when p.grad is off, is an error (never ignored).
inline void check_upstream(const Problem& p, const std::vector<std::string>& wanted) {
  for (const auto& [name, t] : p.tensors) {
    if (name.rfind("input.grad.", 0) != 0) continue;
    if (!p.grad) p.fail(name, "an upstream gradient, but no backward was asked for (dmref run --grad)");
    if (std::find(wanted.begin(), wanted.end(), name) == wanted.end())
      p.fail(name, "no backward through this output (upstream gradients: input.grad.h, input.grad.out, "
                   "input.grad.v at model level, the final streams' input.grad.H, .X, .M, .P of HC, mHC, LDM, "
                   "and mHC's input.grad.H_pre, .H_post, .H_res, .Ht_res)");
  }
}

/// No upstream gradient for the scheme's state outputs.
struct NoStateUpstream {
  template <class Tr, class Up>
  void operator()(std::int64_t, const Tr&, Up&) const {}
};


/// Runs each token through `make_scheme(t)` and records h, v, out; `extra`
/// is called with (token, final state) for scheme-specific outputs. With
/// p.grad it also runs `backward` per token and records grad.input.*, the
/// layer weights' grad.param.W1/W2 and, through `param_grads(grad) ->
/// std::vector<ParamGrad<S>>`, the scheme's grad.param.*, each summed over
/// tokens in token order. `state_grads` names the scheme's state outputs
/// that take an upstream gradient input.grad.<name> (required then), which
/// `state_upstream(t, trace, upstream)` turns into upstream.last.
template <class S, class MakeScheme, class Extra, class ParamGrads = NoParamGrads<S>, class StateUp = NoStateUpstream>
void run_tokens(const Problem& p, const Dims& D, Outputs<S>& o, MakeScheme&& make_scheme, Extra&& extra,
                bool record_states = false, ParamGrads&& param_grads = {}, const std::vector<std::string>& state_grads = {},
                StateUp&& state_upstream = {}) {
  const auto& E = p.tensor("input.e", {D.T, D.d});
  std::optional<TensorMlpStack<S>> stack;
  const io::Tensor* V = nullptr;
  if (D.model) stack = layer_stack<S>(p, D);
  else V = &p.tensor("input.v", {D.T, D.L, D.d});
  std::vector<std::string> wanted{"input.grad.h", "input.grad.out"};
  if (D.model) wanted.push_back("input.grad.v");
  for (const auto& n : state_grads) wanted.push_back("input.grad." + n);
  check_upstream(p, wanted);
  const io::Tensor *UH = nullptr, *UO = nullptr, *UV = nullptr;
  if (p.grad) {
    UH = &p.tensor("input.grad.h", {D.T, D.L, D.d});
    UO = &p.tensor("input.grad.out", {D.T, D.d});
    if (D.model) UV = &p.tensor("input.grad.v", {D.T, D.L, D.d});
  }
  auto& h = o.add("output.h", {D.T, D.L, D.d});
  auto* v = D.model ? &o.add("output.v", {D.T, D.L, D.d}) : nullptr;
  auto& out = o.add("output.out", {D.T, D.d});
  if (p.layout_only) {  // validate(): every token's scheme is built (and checks itself), nothing runs
    for (std::int64_t t = 0; t < D.T; ++t) (void)make_scheme(t);
    if (p.grad && D.T > 0) {  // the state upstream tensors are read (so recorded as used) too
      using M = std::decay_t<decltype(make_scheme(0))>;
      if constexpr (HasBackward<M>) {
        Upstream<S, typename Backward<M>::Adjoint> up;
        state_upstream(0, 0, up);
      }
    }
    // The gradients, bounded with the outputs before any work (Outputs::add):
    // grad.<name> of every input and parameter read (a config number's,
    // LDM's grad.config.alpha, its adapter adds), in its shape.
    if (p.grad)
      for (const auto& name : p.tensors_used)
        if (name.rfind("input.grad.", 0) != 0) o.add("grad." + name, p.tensors.at(name).shape);
    return;
  }
  std::optional<TanhMlpStack<S>> whole;  // the backward holds every layer (small gradient cases)
  std::optional<TanhMlpStackVjp<S>> stack_vjp;
  if (p.grad && D.model) {
    whole = stack->all_layers();
    stack_vjp.emplace(*whole);
  }
  std::map<std::string, std::vector<S>> summed, per_token;  // the scheme's grad.param.*, grad.input.*
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (std::int64_t t = 0; t < D.T; ++t) {
    const auto& scheme = make_scheme(t);  // a reference to one shared scheme, or a per-token temporary
    const Vec<S> e = vec_at<S>(E, t * D.d, D.d);
    std::vector<Vec<S>> given;
    if (!D.model)
      for (std::int64_t l = 0; l < D.L; ++l) given.push_back(vec_at<S>(*V, (t * D.L + l) * D.d, D.d));
    const bool states = record_states || p.grad;
    const auto tr = D.model ? forward(scheme, e, int(D.L), *stack, states)
                            : forward(scheme, e, int(D.L), GivenOutputs<S>{&given}, states);
    for (const auto& x : tr.h) Outputs<S>::append(h, x.transpose());
    if (v)
      for (const auto& x : tr.v) Outputs<S>::append(*v, x.transpose());
    Outputs<S>::append(out, tr.out.transpose());
    extra(t, scheme, tr);
    if (!p.grad) continue;
    using M = std::decay_t<decltype(scheme)>;
    if constexpr (!HasBackward<M>) {
      p.fail("scheme", "no backward for scheme \"" + p.scheme + "\" in this version (docs/fixtures.md, \"Gradients\")");
    } else {
      Upstream<S, typename Backward<M>::Adjoint> up;
      up.out = vec_at<S>(*UO, t * D.d, D.d);
      state_upstream(t, tr, up);  // input.grad.<state output> -> d (streams after the last write)
      for (std::int64_t l = 0; l < D.L; ++l) {
        up.h.push_back(vec_at<S>(*UH, (t * D.L + l) * D.d, D.d));
        if (UV) up.v.push_back(vec_at<S>(*UV, (t * D.L + l) * D.d, D.d));
      }
      const auto g = D.model ? backward(scheme, e, tr, *stack_vjp, up) : backward(scheme, e, tr, GivenOutputsVjp{}, up);
      Outputs<S>::append(o.t["grad.input.e"], g.e.transpose());
      o.t["grad.input.e"].shape = {D.T, D.d};
      if (!D.model) {
        auto& gv = o.t["grad.input.v"];
        gv.shape = {D.T, D.L, D.d};
        for (const auto& x : g.v) Outputs<S>::append(gv, x.transpose());
      }
      for (const auto& pg : param_grads(g.param)) {
        shapes[pg.name] = pg.shape.empty() ? p.tensors.at(pg.name).shape : pg.shape;
        if (pg.name.rfind("input.", 0) == 0) {
          auto& all = per_token[pg.name];
          all.insert(all.end(), pg.values.begin(), pg.values.end());
          continue;
        }
        auto& acc = summed[pg.name];
        if (acc.empty()) acc = pg.values;
        else
          for (std::size_t k = 0; k < acc.size(); ++k) acc[k] += pg.values[k];
      }
    }
  }
  for (auto* m : {&summed, &per_token})
    for (auto& [name, values] : *m) {
      auto& gt = o.add("grad." + name, shapes.at(name));
      gt.values = std::move(values);
    }
  if (stack_vjp) {
    const auto hidden = p.integer("hidden");
    auto& g1 = o.add("grad.param.W1", {D.L, hidden, D.d});
    auto& g2 = o.add("grad.param.W2", {D.L, D.d, hidden});
    for (const auto& q : stack_vjp->grad) {
      Outputs<S>::append(g1, q.W1);
      Outputs<S>::append(g2, q.W2);
    }
  }
}

/// Schemes with no outputs beyond h, v, out (PreLN, AttnRes, DenseFormer);
/// `param_grads` names the scheme's parameter gradients (backward).
template <class S, class M, class ParamGrads = NoParamGrads<S>>
void run_plain(const Problem& p, const Dims& D, Outputs<S>& o, const M& scheme, ParamGrads&& param_grads = {}) {
  run_tokens<S>(p, D, o, [&](std::int64_t) -> const auto& { return scheme; }, [](auto, const auto&, const auto&) {}, false,
                std::forward<ParamGrads>(param_grads));
}

// ---------------------------------------------------------------- PreLN
template <class S>
void eval_preln(const Problem& p, Outputs<S>& o) {
  const Dims D = dims(p);
  run_plain<S>(p, D, o, PreLN<S>{});
}

// ---------------------------------------------------------------- LDM
template <class S>
LdmConfig<S> ldm_config(const Problem& p, const Dims& D) {
  LdmConfig<S> c;
  c.d = int(D.d);
  c.groups = int(p.integer("groups"));
  c.dk = int(p.integer("dk"));
  if (D.d % c.groups != 0) p.fail("config.groups", std::to_string(c.groups) + " does not divide d = " + std::to_string(D.d));
  const std::string w = p.text("write", "rls");
  if (w == "rls") c.write = MemoryWrite::rls;
  else if (w == "outer_product") c.write = MemoryWrite::outer_product;
  else if (w == "delta") c.write = MemoryWrite::delta;
  else p.fail("config.write", "must be rls, outer_product or delta, got \"" + w + "\"");
  // Keys and tensors of the other writes: an error if given (strict configs).
  const std::string write_is = "(config.write is " + w + ")";
  if (c.write == MemoryWrite::rls) {
    const std::string pu = p.text("p_update", "symmetric");
    if (pu == "symmetric") c.p_update = PUpdate::symmetric;
    else if (pu == "joseph") c.p_update = PUpdate::joseph;
    else if (pu == "naive") c.p_update = PUpdate::naive;
    else p.fail("config.p_update", "must be symmetric, joseph or naive, got \"" + pu + "\"");
  } else {
    p.unread("p_update", "the update of P, which only the rls write keeps " + write_is);
    p.unread("alpha", "the ridge of P_0 = I / alpha, which only the rls write keeps " + write_is);
    p.unread_tensor("param.lambda", "the forgetting factors of the rls write " + write_is);
  }
  if (c.write != MemoryWrite::delta) p.unread_tensor("param.beta", "the step sizes of the delta write " + write_is);
  const std::string kernel_level = "read only at level model (at level kernel q, k, omega are given)";
  const std::string model_level = "at level model the addresses come from the MLPs (param.mlp_q.*, param.mlp_k.*), not given";
  if (!D.model) {
    for (const char* k : {"keys_from", "mlp_q_hidden", "mlp_k_hidden"}) p.unread(k, kernel_level);
    for (const char* t : {"param.mlp_q.W", "param.mlp_q.W1", "param.mlp_q.W2", "param.mlp_k.W", "param.mlp_k.W1",
                          "param.mlp_k.W2"})
      p.unread_tensor(t, kernel_level);
  } else {
    for (const char* t : {"input.q", "input.k", "input.omega"}) p.unread_tensor(t, model_level);
  }
  c.read_residual = p.flag("read_residual", true);
  c.write_residual = p.flag("write_residual", true);
  if (D.model) {  // kernel level: q, k, omega are inputs, so there is no key source to choose
    const std::string ks = p.text("keys_from", "x_l");
    if (ks == "x_l") c.keys = KeySource::layer_output;
    else if (ks == "x_prev") c.keys = KeySource::layer_input;
    else p.fail("config.keys_from", "must be x_l or x_prev, got \"" + ks + "\"");
  }
  if (c.write == MemoryWrite::rls) {
    const double a = p.number("alpha");
    if (!(a > 0)) p.fail("config.alpha", "must be > 0, got " + show(a));
    c.alpha = S(a);
    const auto& lam = p.tensor("param.lambda", {D.L, c.groups});
    for (std::size_t i = 0; i < lam.values.size(); ++i)
      if (!(lam.values[i] > 0 && lam.values[i] <= 1))
        p.fail("param.lambda", "element " + std::to_string(i) + " = " + show(lam.values[i]) + " is outside (0, 1]");
    c.lambda = mat_at<S>(lam, 0, D.L, c.groups);
  }
  if (c.write == MemoryWrite::delta) c.beta = mat_at<S>(p.tensor("param.beta", {D.L, c.groups}), 0, D.L, c.groups);
  return c;
}

template <class S>
SmallMlp<S> small_mlp(const Problem& p, const std::string& name, std::int64_t in, std::int64_t out) {
  SmallMlp<S> m;
  // Required, no default: 0 (a linear map) and the paper's nonlinear MLP are
  // both common, so a config must say which (and the tensors it names must match).
  const std::int64_t hidden = p.integer(name + "_hidden", 0);
  if (hidden == 0) {
    m.W2 = mat_at<S>(p.tensor("param." + name + ".W", {out, in}), 0, out, in);
    for (const char* t : {".W1", ".W2"})
      p.unread_tensor("param." + name + t, "a linear map has one matrix param." + name + ".W (config." + name + "_hidden is 0)");
  } else {
    p.unread_tensor("param." + name + ".W", "an MLP has param." + name + ".W1 and .W2 (config." + name + "_hidden is " +
                                                 std::to_string(hidden) + ")");
    m.W1 = mat_at<S>(p.tensor("param." + name + ".W1", {hidden, in}), 0, hidden, in);
    m.W2 = mat_at<S>(p.tensor("param." + name + ".W2", {out, hidden}), 0, out, hidden);
  }
  return m;
}

/// The reference scheme for a config and an addresser.
struct MakeLdm {
  template <class S, class A>
  LinearDepthMemory<S, A> operator()(const LdmConfig<S>& c, A a) const {
    return LinearDepthMemory<S, A>(c, std::move(a));
  }
};

/// grad.param.lambda / grad.config.alpha (rls), grad.param.beta (delta).
template <class S, class G>
std::vector<ParamGrad<S>> ldm_param_grads(const LdmConfig<S>& cfg, const G& g) {
  std::vector<ParamGrad<S>> r;
  if (cfg.write == MemoryWrite::rls) {
    r.push_back(ParamGrad<S>{"param.lambda", {}}.add(g.lambda));
    r.push_back(ParamGrad<S>{"config.alpha", {}, {1}}.add(g.alpha));
  }
  if (cfg.write == MemoryWrite::delta) r.push_back(ParamGrad<S>{"param.beta", {}}.add(g.beta));
  return r;
}

/// The given q, k, omega of token t (kernel level).
template <class S>
GivenAddresses<S> ldm_addresses(const Problem& p, const Dims& D, const LdmConfig<S>& cfg, std::int64_t t) {
  const std::int64_t G = cfg.groups, n = G * cfg.dk;
  const auto& Q = p.tensor("input.q", {D.T, D.L, n});
  const auto& K = p.tensor("input.k", {D.T, D.L, n});
  const auto& W = p.tensor("input.omega", {D.T, D.L, G});
  for (std::size_t i = 0; i < W.values.size(); ++i)
    if (!(W.values[i] >= 0)) p.fail("input.omega", "element " + std::to_string(i) + " = " + show(W.values[i]) + " is negative");
  std::vector<Address<S>> a;
  for (std::int64_t l = 0; l < D.L; ++l)
    a.push_back({vec_at<S>(Q, (t * D.L + l) * n, n), vec_at<S>(K, (t * D.L + l) * n, n), vec_at<S>(W, (t * D.L + l) * G, G)});
  return GivenAddresses<S>{std::move(a)};
}

/// The kernel-level LDM gradients: the parameters' and grad.input.q/k/omega.
template <class S, class G>
std::vector<ParamGrad<S>> ldm_kernel_grads(const LdmConfig<S>& cfg, const G& g) {
  std::vector<ParamGrad<S>> r = ldm_param_grads<S>(cfg, g);
  ParamGrad<S> q{"input.q", {}}, k{"input.k", {}}, w{"input.omega", {}};
  for (const auto& a : g.address) {
    q.add(a.q.transpose());
    k.add(a.k.transpose());
    w.add(a.omega.transpose());
  }
  r.insert(r.end(), {q, k, w});
  return r;
}

/// The LDM state outputs that take an upstream gradient: M (and P for RLS).
template <class S>
std::vector<std::string> ldm_state_grads(const LdmConfig<S>& cfg) {
  if (cfg.write == MemoryWrite::rls) return {"M", "P"};
  return {"M"};
}

/// input.grad.M (and .P) of token t as the adjoint of the final streams.
template <class S>
auto ldm_state_upstream(const Problem& p, const Dims& D, const LdmConfig<S>& cfg) {
  return [&p, D, G = std::int64_t(cfg.groups), dk = std::int64_t(cfg.dk), dv = std::int64_t(cfg.dv()),
          rls = cfg.write == MemoryWrite::rls](std::int64_t t, const auto&, auto& up) {
    const auto& GM = p.tensor("input.grad.M", {D.T, G, dv, dk});
    up.last.emplace();
    auto& a = *up.last;
    a.x = Vec<S>::Zero(D.d);
    a.q = Vec<S>::Zero(G * dk);
    for (std::int64_t g = 0; g < G; ++g) {
      a.M.push_back(mat_at<S>(GM, (t * G + g) * dv * dk, dv, dk));
      a.P.push_back(rls ? mat_at<S>(p.tensor("input.grad.P", {D.T, G, dk, dk}), (t * G + g) * dk * dk, dk, dk) : Mat<S>());
    }
  };
}

/// Runs the scheme `make(cfg, addresser)` builds (MakeLdm: the reference).
template <class S, class Make>
void run_ldm(const Problem& p, const Dims& D, Outputs<S>& o, const LdmConfig<S>& cfg, const Make& make) {
  const std::int64_t G = cfg.groups, dk = cfg.dk, dv = cfg.dv(), n = G * dk;
  auto& M = o.add("output.M", {D.T, G, dv, dk});
  auto* P = cfg.write == MemoryWrite::rls ? &o.add("output.P", {D.T, G, dk, dk}) : nullptr;
  const auto state_grads = ldm_state_grads(cfg);
  const auto state_up = ldm_state_upstream<S>(p, D, cfg);
  auto record = [&](const auto& st) {
    for (const auto& g : st.mem) {
      Outputs<S>::append(M, g.M);
      if (P) Outputs<S>::append(*P, g.P);
    }
  };
  if (p.layout_only && p.grad && cfg.write == MemoryWrite::rls) o.add("grad.config.alpha", {1});
  if (D.model) {
    MlpAddresses<S> addr{small_mlp<S>(p, "mlp_q", D.d, n), small_mlp<S>(p, "mlp_k", D.d, n + G), int(G), int(dk)};
    const auto scheme = make(cfg, std::move(addr));
    auto mlp = [&](std::vector<ParamGrad<S>>& r, const std::string& name, const SmallMlp<S>& g) {
      if (g.W1.size() == 0) {
        r.push_back(ParamGrad<S>{"param." + name + ".W", {}}.add(g.W2));
      } else {
        r.push_back(ParamGrad<S>{"param." + name + ".W1", {}}.add(g.W1));
        r.push_back(ParamGrad<S>{"param." + name + ".W2", {}}.add(g.W2));
      }
    };
    run_tokens<S>(p, D, o, [&](std::int64_t) -> const auto& { return scheme; },
                  [&](std::int64_t, const auto&, const auto& tr) { record(tr.last); }, false,
                  [&](const auto& g) {
                    std::vector<ParamGrad<S>> r = ldm_param_grads<S>(cfg, g);
                    mlp(r, "mlp_q", g.mlp_q);
                    mlp(r, "mlp_k", g.mlp_k);
                    return r;
                  },
                  state_grads, state_up);
  } else {
    run_tokens<S>(
        p, D, o, [&](std::int64_t t) { return make(cfg, ldm_addresses<S>(p, D, cfg, t)); },
        [&](std::int64_t, const auto&, const auto& tr) { record(tr.last); }, false,
        [&](const auto& g) { return ldm_kernel_grads<S>(cfg, g); }, state_grads, state_up);
  }
}

template <class S>
void eval_ldm(const Problem& p, Outputs<S>& o) {
  const Dims D = dims(p);
  run_ldm<S>(p, D, o, ldm_config<S>(p, D), MakeLdm{});
}

// ---------------------------------------------------------------- AttnRes
template <class S>
AttnResConfig<S> attnres_config(const Problem& p, const Dims& D) {
  AttnResConfig<S> c;
  c.d = int(D.d);
  c.layers = int(D.L);
  const std::string variant = p.text("variant", "full");
  if (variant == "full") c.variant = AttnResVariant::full;
  else if (variant == "block") c.variant = AttnResVariant::block;
  else p.fail("config.variant", "must be full or block, got \"" + variant + "\"");
  if (c.variant == AttnResVariant::block) {  // exactly one layout: fixed size S, or N blocks
    c.block_size = int(p.integer_or("block_size", 0, 1));
    c.num_blocks = int(p.integer_or("blocks", 0, 1));
    if ((c.block_size > 0) == (c.num_blocks > 0))
      p.fail("config.block_size", "block AttnRes needs exactly one of block_size (fixed size) and blocks (N blocks)");
    if (c.num_blocks > D.L)
      p.fail("config.blocks", std::to_string(c.num_blocks) + " blocks for " + std::to_string(D.L) + " layers");
  } else {
    const std::string why = std::string("read only by the block variant (config.variant is ") +
                            (p.contains("variant") ? "full" : "missing: full") + ")";
    p.unread("block_size", why);
    p.unread("blocks", why);
  }
  c.eps = p.real<S>("eps", "1e-6");
  const auto& w = p.tensor("param.w", {D.L + 1, D.d});
  const auto& g = p.tensor("param.g", {D.L + 1, D.d});
  for (std::int64_t l = 0; l <= D.L; ++l) {
    c.w.push_back(vec_at<S>(w, l * D.d, D.d));
    c.g.push_back(vec_at<S>(g, l * D.d, D.d));
  }
  return c;
}

/// grad.param.w, grad.param.g of an AttnRes backward.
template <class S, class G>
std::vector<ParamGrad<S>> attnres_param_grads(const G& g) {
  std::vector<ParamGrad<S>> r{{"param.w", {}}, {"param.g", {}}};
  for (const auto& x : g.w) r[0].add(x.transpose());
  for (const auto& x : g.g) r[1].add(x.transpose());
  return r;
}

template <class S>
void eval_attnres(const Problem& p, Outputs<S>& o) {
  const Dims D = dims(p);
  run_plain<S>(p, D, o, AttentionResiduals<S>(attnres_config<S>(p, D)),
               [](const auto& g) { return attnres_param_grads<S>(g); });
}

// ---------------------------------------------------------------- HC
template <class S>
HcConfig<S> hc_config(const Problem& p, const Dims& D) {
  const auto n = p.integer("n"), d = D.d;
  HcConfig<S> c;
  c.n = int(n);
  c.d = int(d);
  c.dynamic = p.flag("dynamic", false);
  if (c.dynamic) {  // static HC has no norm and no activation: its coefficients are parameters
    c.tanh = p.flag("tanh", true);
    c.ln_eps = p.real<S>("ln_eps", "1e-5");
    const std::string norm = p.text("norm", "layernorm");
    if (norm == "layernorm") c.norm = HcNorm::layer;
    else if (norm == "rmsnorm") c.norm = HcNorm::rms;
    else p.fail("config.norm", "must be layernorm or rmsnorm, got \"" + norm + "\"");
    if (c.norm == HcNorm::rms) p.unread_tensor("param.ln_bias", "RMSNorm has no bias (config.norm is rmsnorm)");
  } else {
    const std::string why = std::string("read only by dynamic HC (config.dynamic is ") +
                            (p.contains("dynamic") ? "false" : "missing: static HC") + ")";
    for (const char* k : {"tanh", "ln_eps", "norm"}) p.unread(k, why);
    for (const char* t : {"param.ln_gain", "param.ln_bias", "param.wm", "param.wr", "param.wb", "param.scale"})
      p.unread_tensor(t, why);
  }
  const auto& am = p.tensor("param.am", {D.L, n});
  const auto& ar = p.tensor("param.ar", {D.L, n, n});
  const auto& b = p.tensor("param.b", {D.L, n});
  const io::Tensor *g = nullptr, *bias = nullptr, *wm = nullptr, *wr = nullptr, *wb = nullptr, *sc = nullptr;
  if (c.dynamic) {
    g = &p.tensor("param.ln_gain", {D.L, d});
    if (c.norm == HcNorm::layer) bias = &p.tensor("param.ln_bias", {D.L, d});
    wm = &p.tensor("param.wm", {D.L, d});
    wr = &p.tensor("param.wr", {D.L, d, n});
    wb = &p.tensor("param.wb", {D.L, d});
    sc = &p.tensor("param.scale", {D.L, 2});
  }
  for (std::int64_t l = 0; l < D.L; ++l) {
    HcLayer<S> q;
    q.am = vec_at<S>(am, l * n, n);
    q.ar = mat_at<S>(ar, l * n * n, n, n);
    q.b = vec_at<S>(b, l * n, n);
    if (c.dynamic) {
      q.ln_gain = vec_at<S>(*g, l * d, d);
      if (bias) q.ln_bias = vec_at<S>(*bias, l * d, d);
      q.wm = vec_at<S>(*wm, l * d, d);
      q.wr = mat_at<S>(*wr, l * d * n, d, n);
      q.wb = vec_at<S>(*wb, l * d, d);
      q.s_a = S(sc->values[2 * l]);
      q.s_b = S(sc->values[2 * l + 1]);
    }
    c.layers.push_back(std::move(q));
  }
  return c;
}

/// Runs any scheme with HyperConnections' State; output.H as well.
template <class S, class M>
void run_hc(const Problem& p, const Dims& D, Outputs<S>& o, const M& scheme) {
  const auto& c = scheme.config();
  const std::int64_t n = c.n, d = D.d;
  const bool dynamic = c.dynamic, bias = c.norm == HcNorm::layer;  // RMSNorm has no bias
  auto& H = o.add("output.H", {D.T, n, d});
  run_tokens<S>(p, D, o, [&](std::int64_t) -> const auto& { return scheme; },
                [&](std::int64_t, const auto&, const auto& tr) { Outputs<S>::append(H, tr.last.H); }, false,
                [dynamic, bias](const auto& g) {
                  std::vector<ParamGrad<S>> r{{"param.am", {}}, {"param.ar", {}}, {"param.b", {}}};
                  ParamGrad<S> gain{"param.ln_gain", {}}, lnb{"param.ln_bias", {}}, wm{"param.wm", {}}, wr{"param.wr", {}},
                      wb{"param.wb", {}}, scale{"param.scale", {}};
                  for (const auto& q : g) {
                    r[0].add(q.am.transpose());
                    r[1].add(q.ar);
                    r[2].add(q.b.transpose());
                    if (!dynamic) continue;
                    gain.add(q.ln_gain.transpose());
                    lnb.add(q.ln_bias.transpose());
                    wm.add(q.wm.transpose());
                    wr.add(q.wr);
                    wb.add(q.wb.transpose());
                    scale.add(q.s_a).add(q.s_b);
                  }
                  if (dynamic) {
                    r.push_back(gain);
                    if (bias) r.push_back(lnb);
                    r.insert(r.end(), {wm, wr, wb, scale});
                  }
                  return r;
                },
                {"H"}, [&](std::int64_t t, const auto&, auto& up) {
                  up.last.emplace();
                  up.last->H = mat_at<S>(p.tensor("input.grad.H", {D.T, n, d}), t * n * d, n, d);
                });
}

template <class S>
void eval_hc(const Problem& p, Outputs<S>& o) {
  const Dims D = dims(p);
  run_hc<S>(p, D, o, HyperConnections<S>(hc_config<S>(p, D)));
}

// ---------------------------------------------------------------- mHC
/// How the residual matrix travels in files: "out_in" (paper: entry (i, j) weighs
/// stream j into stream i; phi_res column i*n + j) or "in_out" (DeepSeek-V4's
/// comb matrix, the transpose). Applies to param.phi_res, param.b_res and the
/// outputs H_res, Ht_res.
inline bool mhc_res_in_out(const Problem& p) {
  const std::string r = p.text("res_layout", "out_in");
  if (r != "out_in" && r != "in_out") p.fail("config.res_layout", "must be out_in or in_out, got \"" + r + "\"");
  return r == "in_out";
}

template <class S>
MhcConfig<S> mhc_config_of(const Problem& p, const Dims& D) {
  const auto n = p.integer("n"), C = D.d, nC = n * C;
  const std::string preset = p.text("preset", "paper");
  MhcPreset pr = MhcPreset::paper;
  if (preset == "deepseek-v4") pr = MhcPreset::deepseek_v4;
  else if (preset != "paper") p.fail("config.preset", "must be paper or deepseek-v4, got \"" + preset + "\"");
  MhcConfig<S> c = mhc_config<S>(pr, int(n), int(C));
  // The knobs production kernels expose; each defaults to the preset's value.
  c.t_max = int(p.integer_or("t_max", c.t_max, 1, p.limits.max_iterations));
  auto knob = [&](const char* key, S& x, bool nonnegative) {
    if (!p.contains(key)) return;  // asked (strict configs) whether given or not
    x = p.real<S>(key, "0");
    if (nonnegative && !(to_double(x) >= 0)) p.fail(std::string("config.") + key, "must be >= 0");
  };
  knob("rms_eps", c.rms_eps, true);
  knob("pre_eps", c.pre_eps, true);
  knob("res_eps_add", c.res_eps_add, true);
  knob("res_eps_den", c.res_eps_den, true);
  knob("pre_scale", c.pre_scale, false);
  knob("post_scale", c.post_scale, false);
  // Projections stored [nC, out] (x' phi, default "in_out") or [out, nC]
  // (a torch.nn.Linear weight, "out_in").
  const std::string pl = p.text("phi_layout", "in_out");
  if (pl != "in_out" && pl != "out_in") p.fail("config.phi_layout", "must be in_out or out_in, got \"" + pl + "\"");
  const bool phi_t = pl == "out_in", res_t = mhc_res_in_out(p);
  auto phi_tensor = [&](const std::string& name, std::int64_t out) -> const io::Tensor& {
    return phi_t ? p.tensor(name, {D.L, out, nC}) : p.tensor(name, {D.L, nC, out});
  };
  const auto& phi_pre = phi_tensor("param.phi_pre", n);
  const auto& phi_post = phi_tensor("param.phi_post", n);
  const auto& phi_res = phi_tensor("param.phi_res", n * n);
  // Layer l's parameters are converted when Mhc::layer(l) asks for them (one
  // layer held at a time, as TensorMlpStack does): the tensors belong to p,
  // which outlives the scheme; everything else is captured by value.
  auto phi = [phi_t, nC](const io::Tensor& t, std::int64_t l, std::int64_t out) {
    return phi_t ? Mat<S>(mat_at<S>(t, l * nC * out, out, nC).transpose()) : mat_at<S>(t, l * nC * out, nC, out);
  };
  c.layer_count = int(D.L);
  // Pointers into p's tensors (looked up, and their shapes checked, here).
  c.layer_source = [phi, res_t, n, phi_pre = &phi_pre, phi_post = &phi_post, phi_res = &phi_res,
                    a = &p.tensor("param.a", {D.L, 3}), b_pre = &p.tensor("param.b_pre", {D.L, n}),
                    b_post = &p.tensor("param.b_post", {D.L, n}), b_res = &p.tensor("param.b_res", {D.L, n, n})](int l) {
    MhcLayer<S> q;
    q.phi_pre = phi(*phi_pre, l, n);
    q.phi_post = phi(*phi_post, l, n);
    q.phi_res = phi(*phi_res, l, n * n);
    if (res_t) q.phi_res = mhc_res_columns_transpose<S>(q.phi_res, int(n));
    q.a_pre = S(a->values[3 * l]);
    q.a_post = S(a->values[3 * l + 1]);
    q.a_res = S(a->values[3 * l + 2]);
    q.b_pre = vec_at<S>(*b_pre, l * n, n);
    q.b_post = vec_at<S>(*b_post, l * n, n);
    q.b_res = mat_at<S>(*b_res, l * n * n, n, n);
    if (res_t) q.b_res = mhc_from_storage<S>(q.b_res);
    return q;
  };
  return c;
}

/// grad.param.* of an mHC backward, in the layouts of the param tensors.
/// With phi_layout "out_in" the projections' gradients are transposed back,
/// with res_layout "in_out" the residual ones are permuted back: both maps are
/// permutations, so a gradient goes back the way its parameter came in.
template <class S, class G>
std::vector<ParamGrad<S>> mhc_param_grads(const G& g, bool phi_t, bool res_t, int n) {
  auto phi = [&](const Mat<S>& x) { return phi_t ? Mat<S>(x.transpose()) : x; };
  std::vector<ParamGrad<S>> r;
  for (const char* k : {"param.phi_pre", "param.phi_post", "param.phi_res", "param.a", "param.b_pre", "param.b_post",
                        "param.b_res"})
    r.push_back({k, {}});
  for (const auto& q : g.layers) {
    r[0].add(phi(q.phi_pre));
    r[1].add(phi(q.phi_post));
    r[2].add(phi(res_t ? mhc_res_columns_transpose<S>(q.phi_res, n) : q.phi_res));
    r[3].add(q.a_pre).add(q.a_post).add(q.a_res);
    r[4].add(q.b_pre.transpose());
    r[5].add(q.b_post.transpose());
    r[6].add(res_t ? mhc_to_storage<S>(q.b_res) : q.b_res);
  }
  return r;
}

/// The mHC outputs that take an upstream gradient: the final streams X and
/// the per-layer coefficients (docs/mhc.md, "Backward").
inline const std::vector<std::string>& mhc_state_grads() {
  static const std::vector<std::string> names{"X", "H_pre", "H_post", "H_res", "Ht_res"};
  return names;
}

/// input.grad.X of token t as the adjoint of the final streams, and
/// input.grad.H_pre/H_post/H_res/Ht_res of its layer l as the adjoint of the
/// coefficients kept in the streams after write l (H_res, Ht_res in the
/// file's res_layout, brought back to the paper orientation).
template <class S>
auto mhc_state_upstream(const Problem& p, const Dims& D) {
  return [&p, D, n = p.integer("n"), res_t = mhc_res_in_out(p)](std::int64_t t, const auto&, auto& up) {
    up.last.emplace();
    up.last->X = mat_at<S>(p.tensor("input.grad.X", {D.T, n, D.d}), t * n * D.d, n, D.d);
    const auto& pre = p.tensor("input.grad.H_pre", {D.T, D.L, n});
    const auto& post = p.tensor("input.grad.H_post", {D.T, D.L, n});
    const auto& res = p.tensor("input.grad.H_res", {D.T, D.L, n, n});
    const auto& tres = p.tensor("input.grad.Ht_res", {D.T, D.L, n, n});
    up.states.resize(std::size_t(D.L));
    for (std::int64_t l = 0; l < D.L; ++l) {
      auto& c = up.states[std::size_t(l)].coef;
      const std::int64_t tl = t * D.L + l;
      c.pre = vec_at<S>(pre, tl * n, n);
      c.post = vec_at<S>(post, tl * n, n);
      c.res = mat_at<S>(res, tl * n * n, n, n);
      c.res_logits = mat_at<S>(tres, tl * n * n, n, n);
      if (res_t) {
        c.res = mhc_from_storage<S>(c.res);
        c.res_logits = mhc_from_storage<S>(c.res_logits);
      }
    }
  };
}

/// Runs any scheme with Mhc's State; output.X and the per-layer coefficients.
template <class S, class M>
void run_mhc(const Problem& p, const Dims& D, Outputs<S>& o, const M& scheme) {
  const std::int64_t n = scheme.config().n, C = D.d;
  const bool res_t = mhc_res_in_out(p), phi_t = p.text("phi_layout", "in_out") == "out_in";
  auto& X = o.add("output.X", {D.T, n, C});
  auto& Hpre = o.add("output.H_pre", {D.T, D.L, n});
  auto& Hpost = o.add("output.H_post", {D.T, D.L, n});
  auto& Hres = o.add("output.H_res", {D.T, D.L, n, n});
  auto& Htres = o.add("output.Ht_res", {D.T, D.L, n, n});
  run_tokens<S>(
      p, D, o, [&](std::int64_t) -> const auto& { return scheme; },
      [&](std::int64_t, const auto&, const auto& tr) {
        Outputs<S>::append(X, tr.last.X);
        for (const auto& st : tr.states) {  // after write l: the coefficients of layer l
          Outputs<S>::append(Hpre, st.coef.pre.transpose());
          Outputs<S>::append(Hpost, st.coef.post.transpose());
          Outputs<S>::append(Hres, res_t ? mhc_to_storage<S>(st.coef.res) : st.coef.res);
          Outputs<S>::append(Htres, res_t ? mhc_to_storage<S>(st.coef.res_logits) : st.coef.res_logits);
        }
      },
      true, [&](const auto& g) { return mhc_param_grads<S>(g, phi_t, res_t, int(n)); }, mhc_state_grads(),
      mhc_state_upstream<S>(p, D));
}

template <class S>
void eval_mhc(const Problem& p, Outputs<S>& o) {
  const Dims D = dims(p);
  run_mhc<S>(p, D, o, Mhc<S>(mhc_config_of<S>(p, D)));
}

// ---------------------------------------------------------------- DenseFormer
template <class S>
DenseFormerConfig<S> denseformer_config(const Problem& p, const Dims& D) {
  DenseFormerConfig<S> c;
  c.d = int(D.d);
  c.dilation = int(p.integer_or("dilation", 1, 1));
  c.period = int(p.integer_or("period", 1, 1));
  c.a = mat_at<S>(p.tensor("param.a", {D.L + 1, D.L + 1}), 0, D.L + 1, D.L + 1);
  return c;
}

template <class S>
void eval_denseformer(const Problem& p, Outputs<S>& o) {
  const Dims D = dims(p);
  run_plain<S>(p, D, o, DenseFormer<S>(denseformer_config<S>(p, D)),
               [](const Mat<S>& g) { return std::vector<ParamGrad<S>>{ParamGrad<S>{"param.a", {}}.add(g)}; });
}

// ---------------------------------------------------------------- dispatch
/// A value a scheme class refused (ParameterError, diagnostics.hpp) as the
/// problem's field in its file: the config key of that name (config file),
/// else the param.* or input.* tensor (inputs file), with the entry's index.
[[noreturn]] inline void fail_parameter(const Problem& p, const ParameterError& e) {
  const std::string base = e.field.substr(0, e.field.find('['));  // "a[1,3]" -> "a"
  if (p.config.is_object() && p.config.contains(base)) p.fail("config." + e.field, e.problem);
  for (const char* family : {"param.", "input."})
    if (p.tensors.count(family + base)) p.fail(family + e.field, e.problem);
  p.fail(p.scheme + "." + e.field, e.problem);  // a value derived from several (named by the scheme)
}

template <class S>
Outputs<S> evaluate(const Problem& p) {
  Outputs<S> o;
  o.problem = &p;
  try {
    if (p.scheme == "preln") eval_preln<S>(p, o);
    else if (p.scheme == "ldm") eval_ldm<S>(p, o);
    else if (p.scheme == "attnres") eval_attnres<S>(p, o);
    else if (p.scheme == "hc") eval_hc<S>(p, o);
    else if (p.scheme == "mhc") eval_mhc<S>(p, o);
    else if (p.scheme == "denseformer") eval_denseformer<S>(p, o);
    else p.fail("scheme", "unknown scheme \"" + p.scheme + "\" (preln, ldm, attnres, hc, mhc, denseformer)");
  } catch (const ParameterError& e) {
    fail_parameter(p, e);
  }
  o.problem = nullptr;  // p may be a temporary
  return o;
}

}  // namespace dmref::conf
