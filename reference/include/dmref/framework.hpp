// dmref/framework.hpp: the Depth Memory framework (docs/framework.md).
//
// A depth-mixing scheme is a set of per-token streams with four operations:
//   init(e)          streams from the token embedding e
//   read(s, l)       the input h_l of layer l
//   write(s, l, v)   fold the layer output v_l = F_l(h_l) into the streams
//   final(s)         the vector handed to the final norm / LM head
// Tokens are independent in depth mixing, so everything here is one token.
// Every scheme is a small class satisfying `Scheme`; `forward` is the one
// generic driver that runs a stack of L layers with a caller-supplied F_l.
#pragma once

#include "dmref/scalar_traits.hpp"

#include <concepts>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace dmref {

template <class M>
concept Scheme = requires(const M& m, typename M::State& s, const typename M::State& cs, int l,
                          const Vec<typename M::Scalar>& v) {
  typename M::Scalar;
  typename M::State;
  { m.init(v) } -> std::same_as<typename M::State>;
  { m.read(cs, l) } -> std::convertible_to<Vec<typename M::Scalar>>;
  { m.write(s, l, v) };
  { m.final(cs) } -> std::convertible_to<Vec<typename M::Scalar>>;
};

/// Storage between layers. A scalar that models the rounding of stored values
/// (Perturbed, the tolerance model: docs/precision.md) has a member `store()`;
/// each scheme's State (and Adjoint) lists the streams a kernel keeps in the
/// activation dtype between layers with `stored(f)`, calling f on each of them
/// (an Eigen vector or matrix). Auxiliary state (LDM's P, mHC's coefficients)
/// is not listed: kernels keep it in float32. For every other scalar this is
/// a no-op.
template <class S>
concept ModelsStores = requires(S& s) { s.store(); };

template <class S, class T>
void store_values(T& m) {  // an Eigen vector or matrix
  if constexpr (ModelsStores<S>)
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i].store();
}

template <class S, class Streams>
void store_streams(Streams& st) {
  if constexpr (ModelsStores<S>) st.stored([](auto& m) { store_values<S>(m); });
}

/// A layer function that ignores its input and returns given outputs: how
/// kernel-level entry points (values supplied, as a GPU kernel sees them) run
/// through the same driver.
template <class S>
struct GivenOutputs {
  const std::vector<Vec<S>>* v;
  Vec<S> operator()(int l, const Vec<S>&) const { return (*v)[l]; }
};

/// Whether a layer function computes its outputs (model level) rather than
/// handing over given ones (kernel level, GivenOutputs). A computed layer
/// output is an activation like the streams: in a 16-bit model it is another
/// kernel's output tensor, stored in the activation dtype before the write
/// reads it, so the driver stores it (and the backward its adjoint). Given
/// outputs are inputs, already in the input format.
template <class Layer, class S>
inline constexpr bool computes_outputs = !std::is_same_v<std::decay_t<Layer>, GivenOutputs<S>>;

/// Everything one forward pass through the stack produced.
template <class S, class State>
struct Trace {
  std::vector<Vec<S>> h;         // h[l]: input of layer l
  std::vector<Vec<S>> v;         // v[l]: output of layer l
  std::vector<State> states;     // states[l]: streams after write l (if recorded)
  State last;                    // streams after the last write
  Vec<S> out;                    // final(streams)
};

/// Runs layers l = 0..L-1: h_l = read(l), v_l = F(l, h_l), write(l, v_l).
/// `F` is any callable (int l, const Vec<S>& h) -> Vec<S>.
template <Scheme M, class Layer>
Trace<typename M::Scalar, typename M::State> forward(const M& scheme, const Vec<typename M::Scalar>& e,
                                                     int L, Layer&& F, bool record_states = true) {
  using S = typename M::Scalar;
  if (L < 0) throw std::invalid_argument("forward: L must be >= 0, got " + std::to_string(L));
  Trace<S, typename M::State> t;
  t.h.reserve(L);
  t.v.reserve(L);
  auto st = scheme.init(e);
  for (int l = 0; l < L; ++l) {
    t.h.push_back(scheme.read(st, l));
    Vec<S> v = F(l, t.h.back());
    if (v.size() != t.h.back().size())
      throw std::invalid_argument("forward: layer " + std::to_string(l) + " returned width " +
                                  std::to_string(v.size()) + ", expected " +
                                  std::to_string(t.h.back().size()));
    if constexpr (computes_outputs<Layer, S>) store_values<S>(v);
    scheme.write(st, l, v);
    store_streams<S>(st);
    t.v.push_back(std::move(v));
    if (record_states) t.states.push_back(st);
  }
  t.out = scheme.final(st);
  t.last = std::move(st);
  return t;
}

}  // namespace dmref
