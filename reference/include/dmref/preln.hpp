// dmref/preln.hpp: the PreLN residual stream, the baseline every scheme is
// compared with (docs/preln.md).
//   init: x = e;  read: h_l = x;  write: x += v_l;  final: x.
#pragma once

#include "dmref/framework.hpp"

namespace dmref {

template <class S>
struct PreLN {
  using Scalar = S;
  struct State {
    Vec<S> x;
    template <class F>
    void stored(F&& f) { f(x); }  // framework.hpp: the streams kept in the activation dtype
  };
  State init(const Vec<S>& e) const { return {e}; }
  Vec<S> read(const State& s, int) const { return s.x; }
  void write(State& s, int, const Vec<S>& v) const { s.x += v; }
  Vec<S> final(const State& s) const { return s.x; }
};

}  // namespace dmref
