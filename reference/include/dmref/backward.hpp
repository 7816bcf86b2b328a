// dmref/backward.hpp: the reverse pass of the Depth Memory framework
// (docs/framework.md, "Backward").
//
// The forward driver (framework.hpp) runs, for l = 0..L-1,
//   h_l = read(s_{l-1}, l),  v_l = F_l(h_l),  s_l = write(s_{l-1}, l, v_l),
// from s_{-1} = init(e), and returns out = final(s_{L-1}). Its vector-Jacobian
// product, for upstream gradients of out, of every h_l and v_l, and of the
// streams after the last write, is this one generic reverse walk:
//   ds_{L-1} = final^T(d out) + d s_last
//   for l = L-1..0:
//     ds_l += (upstream of s_l, the streams after write l, where given)
//     dv_l  = write_v^T(ds_l) + (upstream of v_l)         [ds_l -> ds_{l-1} via write_s^T]
//     dh_l  = F_l^T(dv_l) + (upstream of h_l)              [layer VJP; F's parameters accumulate]
//     ds_{l-1} += read^T(dh_l)
//   d e = init^T(ds_{-1})
// Parameters of the scheme accumulate into its Grad on the way. A scheme
// offers its adjoints by specializing `Backward<M>` (in <scheme>_backward.hpp,
// beside its forward) with
//   using Adjoint = ...;   // the streams' adjoint (usually shaped like State)
//   using Grad = ...;      // gradients of the scheme's parameters
//   Grad zero_grad() const;
//   Adjoint final(const State& s, const Vec& dout, Grad&) const;
//   Vec write(const State& before, int l, const Vec& v, Adjoint& a, Grad&) const;
//       // a: adjoint of the streams after write l, turned into the adjoint of
//       // `before` through the write; returns d v_l
//   void read(const State& before, int l, const Vec& dh, Adjoint& a, Grad&) const;
//       // adds read(l)'s contribution to a (the adjoint of `before`)
//   Vec init(const Vec& e, const Adjoint& a, Grad&) const;   // d e (and init's parameters)
// The recorded states of the trace are what the adjoints linearize at, so
// the forward must run with record_states = true. Nothing here branches on
// data values: backward goldens are certified on intervals like forward ones.
#pragma once

#include "dmref/framework.hpp"

#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace dmref {

/// Specialized per scheme in <scheme>_backward.hpp; constructed from the scheme.
template <class M>
struct Backward;

/// Upstream gradients of everything a forward pass produces. An empty member
/// is a zero gradient (the conformance layer requires every one it stores).
template <class S, class Adjoint>
struct Upstream {
  Vec<S> out;                  // d loss / d final(streams)
  std::vector<Vec<S>> h;       // d loss / d h_l (empty, or L entries)
  std::vector<Vec<S>> v;       // d loss / d v_l (empty, or L entries)
  std::optional<Adjoint> last; // d loss / d (streams after the last write)
  std::vector<Adjoint> states; // d loss / d (streams after write l) (empty, or L entries):
                               // per-layer state outputs such as mHC's coefficients
};

/// The vector-Jacobian product of one forward pass.
template <class S, class Grad>
struct Gradients {
  Vec<S> e;               // d e
  std::vector<Vec<S>> v;  // d v_l: total adjoint of layer l's output (kernel level: of the given v_l)
  std::vector<Vec<S>> h;  // d h_l: total adjoint of layer l's input
  Grad param;             // the scheme's parameters
};

/// The layer VJP for kernel level (GivenOutputs ignores h): d h = 0.
struct GivenOutputsVjp {
  template <class S>
  Vec<S> operator()(int, const Vec<S>& h, const Vec<S>&) const {
    return Vec<S>::Zero(h.size());
  }
};

/// The reverse pass of forward(scheme, e, L, F, true) = `tr`. `Fvjp(l, h_l,
/// dv_l)` returns d h_l through layer l (and accumulates F's own parameter
/// gradients, if any, inside itself).
template <Scheme M, class LayerVjp>
Gradients<typename M::Scalar, typename Backward<M>::Grad> backward(
    const M& scheme, const Vec<typename M::Scalar>& e, const Trace<typename M::Scalar, typename M::State>& tr,
    LayerVjp&& Fvjp, const Upstream<typename M::Scalar, typename Backward<M>::Adjoint>& up) {
  using S = typename M::Scalar;
  const Backward<M> b{scheme};
  const int L = static_cast<int>(tr.h.size());
  if (static_cast<int>(tr.states.size()) != L)
    throw std::invalid_argument("backward: the trace must record every state (forward with record_states = true)");
  auto check = [L](const std::vector<Vec<S>>& x, const char* what) {
    if (!x.empty() && static_cast<int>(x.size()) != L)
      throw std::invalid_argument(std::string("backward: upstream ") + what + " has " + std::to_string(x.size()) +
                                  " entries, expected L = " + std::to_string(L));
  };
  check(up.h, "h");
  check(up.v, "v");
  if (!up.states.empty() && static_cast<int>(up.states.size()) != L)
    throw std::invalid_argument("backward: upstream states has " + std::to_string(up.states.size()) +
                                " entries, expected L = " + std::to_string(L));
  Gradients<S, typename Backward<M>::Grad> g{Vec<S>(), std::vector<Vec<S>>(L), std::vector<Vec<S>>(L), b.zero_grad()};
  const Vec<S> dout = up.out.size() != 0 ? up.out : Vec<S>(Vec<S>::Zero(tr.out.size()));
  auto a = b.final(tr.last, dout, g.param);
  if (up.last) a += *up.last;
  const auto s0 = scheme.init(e);
  for (int l = L - 1; l >= 0; --l) {
    const auto& before = l == 0 ? s0 : tr.states[l - 1];
    if (!up.states.empty()) a += up.states[l];
    // The streams after write l were stored (framework.hpp): the backward of a
    // store rounds the adjoint of what was stored, all its consumers' summed.
    store_streams<S>(a);
    Vec<S> dv = b.write(before, l, tr.v[l], a, g.param);
    if (!up.v.empty()) dv += up.v[l];
    // A computed layer output was stored (framework.hpp, computes_outputs):
    // its adjoint, every consumer's summed, is rounded before the layer's VJP.
    if constexpr (!std::is_same_v<std::decay_t<LayerVjp>, GivenOutputsVjp>) store_values<S>(dv);
    Vec<S> dh = Fvjp(l, tr.h[l], dv);
    if (!up.h.empty()) dh += up.h[l];
    b.read(before, l, dh, a, g.param);
    g.v[l] = std::move(dv);
    g.h[l] = std::move(dh);
  }
  g.e = b.init(e, a, g.param);
  return g;
}

}  // namespace dmref
