// dmref/denseformer_backward.hpp: the adjoints of DenseFormer's depth-weighted
// averages (docs/denseformer.md, "Backward").
// Y_i = sum_{j kept} a_{i,j} X_j is linear in X and in a, so for an upstream dY_i
//   dX_j += a_{i,j} dY_i   and   da_{i,j} += dY_i . X_j      (j kept by the pattern)
// and Y_i = X_i where no DWA exists (i = 0, or p does not divide i): dX_i += dY_i.
//   final^T = DWA_L^T,  read^T(l) = DWA_l^T,  write^T(l): dv_l = dX_{l+1} (popped),
//   init^T: de = dX_0.
// Weights outside the pattern (and a_{0,0} = 1) are structural constants: their
// gradient is reported as 0.
#pragma once

#include "dmref/backward.hpp"
#include "dmref/denseformer.hpp"

#include <vector>

namespace dmref {

template <class S>
struct Backward<DenseFormer<S>> {
  using State = typename DenseFormer<S>::State;
  struct Adjoint {
    std::vector<Vec<S>> X;  // dX_0..dX_i
    template <class F>
    void stored(F&& f) {  // framework.hpp
      for (auto& x : X) f(x);
    }
    Adjoint& operator+=(const Adjoint& o) {
      for (std::size_t j = 0; j < X.size(); ++j) X[j] += o.X.at(j);
      return *this;
    }
  };
  using Grad = Mat<S>;  // d a, (L+1) x (L+1)

  const DenseFormer<S>& scheme;

  Grad zero_grad() const {
    const auto n = scheme.config().a.rows();
    return Mat<S>::Zero(n, n);
  }

  /// DWA_i^T: adds the adjoint of Y_i = dwa(X, i) into dX and da.
  void dwa_vjp(const std::vector<Vec<S>>& X, int i, const Vec<S>& dy, Adjoint& a, Grad& da) const {
    const auto& c = scheme.config();
    if (i == 0 || i % c.period != 0) {
      a.X[i] += dy;
      return;
    }
    for (int j = i % c.dilation; j <= i; j += c.dilation) {
      a.X[j] += c.a(i, j) * dy;
      da(i, j) += dy.dot(X[j]);
    }
  }

  Adjoint final(const State& s, const Vec<S>& dout, Grad& da) const {
    Adjoint a{std::vector<Vec<S>>(s.X.size(), Vec<S>::Zero(dout.size()))};
    dwa_vjp(s.X, static_cast<int>(s.X.size()) - 1, dout, a, da);
    return a;
  }
  Vec<S> write(const State&, int, const Vec<S>&, Adjoint& a, Grad&) const {
    Vec<S> dv = std::move(a.X.back());
    a.X.pop_back();
    return dv;
  }
  void read(const State& before, int l, const Vec<S>& dh, Adjoint& a, Grad& da) const { dwa_vjp(before.X, l, dh, a, da); }
  Vec<S> init(const Vec<S>&, const Adjoint& a, Grad&) const { return a.X.at(0); }
};

}  // namespace dmref
