// dmref/conformance/binding.hpp: what every scheme's binding shares
// (conformance/schemes/<s>.hpp turns a Problem, read through its declared
// Schema, into the scheme's parameters, runs every token through `forward`
// and names the outputs):
//   output.h   [T, L, d]  input of every layer (h_0 included)
//   output.v   [T, L, d]  output of every layer (model level only)
//   output.out [T, d]     final(streams)
// plus each scheme's own state outputs (its schema, `dmref schema <s>`).
// With p.grad (backward): the upstream gradients input.grad.* the schema
// declares are inputs, and the outputs gain the vector-Jacobian products
// (backward.hpp, <scheme>_backward.hpp)
//   grad.input.e [T, d], grad.input.v [T, L, d] (kernel level),
//   grad.param.<name> (same shape as param.<name>, summed over tokens),
//   grad.input.<name> for per-token inputs (LDM kernel: q, k, omega),
//   grad.config.alpha [1] (LDM RLS: the ridge).
// Levels: "kernel" (layer outputs given as input.v) and "model" (the layer
// function W2 tanh(W1 RMSNorm(h)) from param.W1 [L, hidden, d], param.W2
// [L, d, hidden]).
// Each binding is two parts: <scheme>_config reads the config and tensors
// into the scheme's parameters, run_<scheme> runs any scheme class with that
// State through the tokens and names its outputs. evaluate_<scheme> joins
// them for the reference (instantiated once per scalar type in
// src/conformance/schemes/<s>_eval.cpp); tests/mutants joins them with
// deliberately wrong variants.
#pragma once

#include "dmref/conformance/evaluate.hpp"
#include "dmref/conformance/schema.hpp"
#include "dmref/backward.hpp"
#include "dmref/layers_backward.hpp"
#include "dmref/model.hpp"

#include <algorithm>
#include <functional>
#include <optional>

/// In src/conformance/schemes/<s>_eval.cpp: the binding at the four scalar
/// types the registry points at.
#define DMREF_INSTANTIATE_SCHEME(s)                                                         \
  template void evaluate_##s<float>(const Problem&, const Schema&, Outputs<float>&);         \
  template void evaluate_##s<double>(const Problem&, const Schema&, Outputs<double>&);       \
  template void evaluate_##s<Ball>(const Problem&, const Schema&, Outputs<Ball>&);           \
  template void evaluate_##s<Perturbed>(const Problem&, const Schema&, Outputs<Perturbed>&);
// (Here, not in registry.hpp, so that an <s>_eval.cpp, the heaviest
// translation units, does not recompile when a scheme is registered.)

namespace dmref::conf {

/// The layer dimensions of a problem, as its schema read them; the schema
/// itself travels with them (every binding reads its config and tensors
/// through it).
struct Dims {
  std::int64_t T, L, d;
  bool model;
  const Schema* schema;
  const Schema& sch() const { return *schema; }
};

inline Dims dims(const Schema& s) {
  return {s.integer("tokens"), s.integer("layers"), s.integer("d"), s.text("level") == "model", &s};
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
  const auto& W1 = D.sch().read(p, "param.W1");
  return {&W1, &D.sch().read(p, "param.W2"), W1.shape.at(1), D.d};
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
  ParamGrad& add(const V& v) {  // a scalar, a vector, or a matrix (or an expression: no copy) row by row
    if constexpr (std::is_same_v<V, S>) {
      values.push_back(v);
    } else {
      // Grown once per call, geometrically: a Ball copied on reallocation is an allocation and a copy.
      const std::size_t need = values.size() + std::size_t(v.size());
      if (need > values.capacity()) values.reserve(std::max(need, 2 * values.capacity()));
      for (Eigen::Index i = 0; i < v.rows(); ++i)
        for (Eigen::Index j = 0; j < v.cols(); ++j) values.push_back(v(i, j));
    }
    return *this;
  }
  /// add, moving the entries out of v (a matrix, or a writable expression of one: a Ball moved is a
  /// swap, copied an allocation); v's entries are left unspecified.
  template <class V>
  ParamGrad& take(V&& v) {
    const std::size_t need = values.size() + std::size_t(v.size());
    if (need > values.capacity()) values.reserve(std::max(need, 2 * values.capacity()));
    for (Eigen::Index i = 0; i < v.rows(); ++i)
      for (Eigen::Index j = 0; j < v.cols(); ++j) values.push_back(std::move(v(i, j)));
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

/// The upstream gradients of a problem: with p.grad every one its schema
/// declares is required (read through the schema); an input.grad.* tensor it
/// does not declare, or any when p.grad is off, is an error (never ignored).
inline void check_upstream(const Problem& p, const Schema& s) {
  for (const auto& [name, t] : p.tensors) {
    if (name.rfind("input.grad.", 0) != 0) continue;
    if (!p.grad) p.fail(name, "an upstream gradient, but no backward was asked for (dmref run --grad)");
    const TensorSpec* spec = s.find(name);
    if (!spec || spec->role != Role::upstream) {
      std::string wanted;
      for (const auto& u : s.tensors)
        if (u.role == Role::upstream) wanted += (wanted.empty() ? "" : ", ") + u.name;
      p.fail(name, "no backward through this output (upstream gradients of this config: " + wanted + ")");
    }
  }
}

/// validate() (p.layout_only) with p.grad: the gradients, bounded with the
/// outputs before any work (Outputs::add): grad.<name> of every input and
/// parameter read (a config number's, LDM's grad.config.alpha, its adapter
/// adds), in its shape.
template <class S>
void add_gradient_layout(const Problem& p, Outputs<S>& o) {
  if (p.grad)
    for (const auto& name : p.tensors_used)
      if (name.rfind("input.grad.", 0) != 0) o.add("grad." + name, p.tensors.at(name).shape);
}

/// An op-level binding's outputs (schemes/<s>_ops.hpp): output.<k> for each
/// k of `outs`, shaped by the schema, and with p.grad the upstream gradient
/// input.grad.<k> of each, read through the schema (upstream first, as the
/// schema lists them). Under p.layout_only the gradients' layout is added too
/// (the binding then returns: nothing runs).
template <class S>
struct OpOutputs {
  std::map<std::string, const io::Tensor*> up;
  std::map<std::string, typename Outputs<S>::Out*> out;
};

template <class S>
OpOutputs<S> op_outputs(const Problem& p, const Schema& s, Outputs<S>& o, const std::vector<std::string>& outs) {
  OpOutputs<S> r;
  if (p.grad)
    for (const auto& k : outs) r.up[k] = &s.read(p, "input.grad." + k);
  for (const auto& k : outs) r.out[k] = &o.add("output." + k, s.shape("output." + k));
  if (p.layout_only) add_gradient_layout(p, o);
  return r;
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
/// tokens in token order. `state_upstream(t, trace, upstream)` turns the
/// upstream gradients of the scheme's state outputs (declared in its schema)
/// into upstream.last.
template <class S, class MakeScheme, class Extra, class ParamGrads = NoParamGrads<S>, class StateUp = NoStateUpstream>
void run_tokens(const Problem& p, const Dims& D, Outputs<S>& o, MakeScheme&& make_scheme, Extra&& extra,
                bool record_states = false, ParamGrads&& param_grads = {}, StateUp&& state_upstream = {}) {
  const Schema& sch = D.sch();
  const auto& E = sch.read(p, "input.e");
  std::optional<TensorMlpStack<S>> stack;
  const io::Tensor* V = nullptr;
  if (D.model) stack = layer_stack<S>(p, D);
  else V = &sch.read(p, "input.v");
  check_upstream(p, sch);
  const io::Tensor *UH = nullptr, *UO = nullptr, *UV = nullptr;
  if (p.grad) {
    UH = &sch.read(p, "input.grad.h");
    UO = &sch.read(p, "input.grad.out");
    if (D.model) UV = &sch.read(p, "input.grad.v");
  }
  auto& h = o.add("output.h", sch.shape("output.h"));
  auto* v = D.model ? &o.add("output.v", sch.shape("output.v")) : nullptr;
  auto& out = o.add("output.out", sch.shape("output.out"));
  if (p.layout_only) {  // validate(): every token's scheme is built (and checks itself), nothing runs
    for (std::int64_t t = 0; t < D.T; ++t) (void)make_scheme(t);
    if (p.grad && D.T > 0) {  // the state upstream tensors are read (so recorded as used) too
      using M = std::decay_t<decltype(make_scheme(0))>;
      if constexpr (HasBackward<M>) {
        Upstream<S, typename Backward<M>::Adjoint> up;
        state_upstream(0, 0, up);
      }
    }
    add_gradient_layout(p, o);
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
    auto& g1 = o.add("grad.param.W1", sch.shape("param.W1"));
    auto& g2 = o.add("grad.param.W2", sch.shape("param.W2"));
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

}  // namespace dmref::conf
