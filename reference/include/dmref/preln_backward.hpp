// dmref/preln_backward.hpp: the adjoints of PreLN (docs/preln.md, "Backward").
//   final^T: dx = d out;   write^T: dv_l = dx (dx passes through);
//   read^T:  dx += dh_l;   init^T:  de = dx.
// So dv_l is the reverse running sum d out + sum_{i > l} dh_i.
#pragma once

#include "dmref/backward.hpp"
#include "dmref/preln.hpp"

namespace dmref {

template <class S>
struct Backward<PreLN<S>> {
  struct Adjoint {
    Vec<S> x;
    template <class F>
    void stored(F&& f) { f(x); }  // framework.hpp
    Adjoint& operator+=(const Adjoint& o) {
      x += o.x;
      return *this;
    }
  };
  struct Grad {};  // no parameters

  const PreLN<S>& scheme;

  Grad zero_grad() const { return {}; }
  Adjoint final(const typename PreLN<S>::State&, const Vec<S>& dout, Grad&) const { return {dout}; }
  Vec<S> write(const typename PreLN<S>::State&, int, const Vec<S>&, Adjoint& a, Grad&) const { return a.x; }
  void read(const typename PreLN<S>::State&, int, const Vec<S>& dh, Adjoint& a, Grad&) const { a.x += dh; }
  Vec<S> init(const Vec<S>&, const Adjoint& a, Grad&) const { return a.x; }
};

}  // namespace dmref
