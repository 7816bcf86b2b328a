// tests/support/grad_cases.hpp: backward problems for the adjoint identity
// (grad_check.hpp), used by tests/test_backward.cpp and
// properties/grad_properties.cpp: one token through a scheme at kernel or
// model level, at 667 bits, with its inputs and parameters paired with their
// gradients. Random values come from oracle::random_direction seeded by
// `next_seed` (set it to replay a case). What a scheme adds, its `Spec` (the
// parameters, scheme() and their pairing with the gradients), is in that
// scheme's tests/support/<s>_cases.hpp (PrelnSpec, LdmSpec, AttnResSpec,
// HcSpec, MhcSpec, DenseFormerSpec), in namespace dmref::test::grad like
// everything here (S = GradHi, rnd: not to meet the forward tests' own).
#pragma once

#include "grad_check.hpp"

#include "dmref/backward.hpp"
#include "dmref/layers_backward.hpp"

#include <cmath>
#include <type_traits>

namespace dmref::test::grad {

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

}  // namespace dmref::test::grad
