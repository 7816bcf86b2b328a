// dmref/ldm_backward.hpp: the adjoints of Linear Depth Memory (docs/ldm.md,
// "Backward"). Streams x, M_g, P_g (RLS) and the last query q; the adjoint
// carries dx, dM_g, dP_g, dq.
//   read^T / final^T (h = [x +] concat_g M_g q_g):
//       dx += dh (read residual),  dM_g += dh_g q_g^T,  dq_g += M_g^T dh_g
//   write^T(l) (x' = x [+ v]; a = address(l, x'); M_g, P_g <- step; q' = a.q):
//       da.q = dq', the step's adjoint per group gives dM_g, dP_g, dk_g, dv_g,
//       d omega_g and the parameter gradients; the address's adjoint goes to
//       the given q, k, omega (kernel level) or back through the MLPs into dx'
//       (model level); then dx = dx', dv = dx' [write residual] + concat_g dv_g.
//       With keys from x_prev (k, omega = MLP_k(x)), the key MLP's adjoint
//       goes to dx only: dx = dx' + MLP_k^T(dk, d omega), dv as before.
//   init^T: de = dx; d alpha += sum_g trace(dP_g) (P_{-1} = alpha I).
// The RLS step (pi = P k, gamma = lambda + w k.pi, g = pi/gamma, u = v - M k,
// M' = M + w u g^T, Q = (P - w g pi^T)/lambda, P' = (Q + Q^T)/2) in reverse:
//   dQ = (dP' + dP'^T)/2            (symmetric; naive: dQ = dP')
//   dP = dQ/lambda, dT = -dQ/lambda (T = w g pi^T), d lambda -= <dQ, Q>/lambda
//   dw += g^T dT pi, dg += w dT pi, dpi += w dT^T g
//   dw += u^T dM' g, du = w dM' g, dg += w dM'^T u, dM = dM'
//   dv += du, dM -= du k^T, dk -= M^T du
//   dpi += dg/gamma, dgamma = -(dg . g)/gamma
//   d lambda += dgamma, dw += dgamma k.pi, dk += dgamma w pi, dpi += dgamma w k
//   dP += dpi k^T, dk += P^T dpi
// (Joseph: P' = (A P A^T + lambda w g g^T)/lambda, A = I - w g k^T, reversed
// the same way, below.) The P update is differentiated, not frozen: a
// gradient that treats P as a constant is a known bug the gate rejects.
#pragma once

#include "dmref/backward.hpp"
#include "dmref/layers_backward.hpp"
#include "dmref/ldm.hpp"

#include <type_traits>
#include <vector>

namespace dmref {

/// The adjoint of one RLS step of one group: given dM, dP of the step's
/// results, turns them into those of its inputs (M, P before the step) and
/// adds dk, dv, dw, dlambda.
template <class S>
void rls_step_vjp(const Mat<S>& M, const Mat<S>& P, const Vec<S>& k, const Vec<S>& v, const S& w, const S& lambda,
                  PUpdate how, Mat<S>& dM, Mat<S>& dP, Vec<S>& dk, Vec<S>& dv, S& dw, S& dlambda) {
  const Vec<S> pi = P * k;
  const S kpi = k.dot(pi);
  const S gamma = lambda + w * kpi;
  const Vec<S> g = pi / gamma;
  const Vec<S> u = v - M * k;
  const Eigen::Index n = P.rows();
  Vec<S> dg = Vec<S>::Zero(n), dpi = Vec<S>::Zero(n);
  Mat<S> dPin;
  if (how == PUpdate::joseph) {
    const Mat<S> A = Mat<S>::Identity(n, n) - (w * g) * k.transpose();
    const Mat<S> Pn = (A * P * A.transpose() + (lambda * w) * g * g.transpose()) / lambda;
    const Mat<S> dN = dP / lambda;
    dlambda -= (dP.cwiseProduct(Pn)).sum() / lambda;
    const Mat<S> dA = dN * A * P.transpose() + dN.transpose() * A * P;
    dPin = A.transpose() * dN * A;
    const S dc = g.dot(dN * g);
    dg += (lambda * w) * (dN + dN.transpose()) * g;
    dlambda += dc * w;
    dw += dc * lambda;
    dw -= g.dot(dA * k);
    dg -= w * (dA * k);
    dk -= w * (dA.transpose() * g);
  } else {
    const Mat<S> dQ = how == PUpdate::symmetric ? Mat<S>((dP + dP.transpose()) / S(2)) : dP;
    const Mat<S> Q = (P - (w * g) * pi.transpose()) / lambda;
    dlambda -= dQ.cwiseProduct(Q).sum() / lambda;
    const Mat<S> dT = -dQ / lambda;
    dPin = dQ / lambda;
    dw += g.dot(dT * pi);
    dg += w * (dT * pi);
    dpi += w * (dT.transpose() * g);
  }
  // M' = M + w u g^T
  dw += u.dot(dM * g);
  const Vec<S> du = w * (dM * g);
  dg += w * (dM.transpose() * u);
  dv += du;
  dk -= M.transpose() * du;
  dM -= du * k.transpose();
  // g = pi / gamma, gamma = lambda + w k.pi
  dpi += dg / gamma;
  const S dgamma = -dg.dot(g) / gamma;
  dlambda += dgamma;
  dw += dgamma * kpi;
  dk += (dgamma * w) * pi;
  dpi += (dgamma * w) * k;
  // pi = P k
  dPin += dpi * k.transpose();
  dk += P.transpose() * dpi;
  dP = std::move(dPin);
}

template <class S, class Addresser>
struct Backward<LinearDepthMemory<S, Addresser>> {
  using Scheme = LinearDepthMemory<S, Addresser>;
  using State = typename Scheme::State;
  static constexpr bool kernel = std::is_same_v<Addresser, GivenAddresses<S>>;
  struct Adjoint {
    Vec<S> x, q;
    std::vector<Mat<S>> M, P;
    template <class F>
    void stored(F&& f) {  // framework.hpp: as the State (the adjoint of P stays float32)
      f(x);
      f(q);
      for (auto& m : M) f(m);
    }
    Adjoint& operator+=(const Adjoint& o) {
      x += o.x;
      q += o.q;
      for (std::size_t g = 0; g < M.size(); ++g) {
        M[g] += o.M[g];
        if (P[g].size()) P[g] += o.P[g];
      }
      return *this;
    }
  };
  struct Grad {
    std::vector<Address<S>> address;  // kernel level: d q, d k, d omega of every layer
    SmallMlp<S> mlp_q, mlp_k;         // model level: the addressing MLPs' weights
    Mat<S> lambda, beta;              // L x G (rls, delta)
    S alpha = S(0);                   // rls
  };

  const Scheme& scheme;

  Grad zero_grad() const {
    const auto& c = scheme.config();
    Grad g;
    const Eigen::Index n = c.groups * c.dk;
    if constexpr (kernel) {
      for (std::size_t l = 0; l < scheme.addresser().a.size(); ++l)
        g.address.push_back({Vec<S>::Zero(n), Vec<S>::Zero(n), Vec<S>::Zero(c.groups)});
    } else {
      auto zero = [](const SmallMlp<S>& m) {
        return SmallMlp<S>{Mat<S>::Zero(m.W1.rows(), m.W1.cols()), Mat<S>::Zero(m.W2.rows(), m.W2.cols())};
      };
      g.mlp_q = zero(scheme.addresser().mlp_q);
      g.mlp_k = zero(scheme.addresser().mlp_k);
    }
    g.lambda = Mat<S>::Zero(c.lambda.rows(), c.lambda.cols());
    g.beta = Mat<S>::Zero(c.beta.rows(), c.beta.cols());
    return g;
  }

  Adjoint zero_adjoint(const State& s) const {
    Adjoint a{Vec<S>::Zero(s.x.size()), Vec<S>::Zero(s.q.size()), {}, {}};
    for (const auto& G : s.mem) {
      a.M.push_back(Mat<S>::Zero(G.M.rows(), G.M.cols()));
      a.P.push_back(Mat<S>::Zero(G.P.rows(), G.P.cols()));
    }
    return a;
  }

  void read(const State& s, int, const Vec<S>& dh, Adjoint& a, Grad&) const {
    const auto& c = scheme.config();
    const int dv = c.dv(), dk = c.dk;
    if (c.read_residual) a.x += dh;
    for (int g = 0; g < c.groups; ++g) {
      const Vec<S> d = dh.segment(g * dv, dv);
      a.M[g] += d * s.q.segment(g * dk, dk).transpose();
      a.q.segment(g * dk, dk) += s.mem[g].M.transpose() * d;
    }
  }

  Adjoint final(const State& s, const Vec<S>& dout, Grad& gr) const {
    Adjoint a = zero_adjoint(s);
    read(s, -1, dout, a, gr);
    return a;
  }

  Vec<S> write(const State& before, int l, const Vec<S>& v, Adjoint& a, Grad& gr) const {
    const auto& c = scheme.config();
    const int dv = c.dv(), dk = c.dk;
    const Vec<S> x = c.write_residual ? Vec<S>(before.x + v) : before.x;
    // The query comes from x_l = x; the key and weight from x_l or, with
    // keys from x_prev, from before.x (the layer's input residual).
    const bool keys_prev = c.keys == KeySource::layer_input;
    const Vec<S>& xk = keys_prev ? before.x : x;
    const Address<S> ad = scheme.addresser()(l, x, xk);
    Address<S> da{a.q, Vec<S>::Zero(ad.k.size()), Vec<S>::Zero(ad.omega.size())};
    Vec<S> dvv = Vec<S>::Zero(c.d);
    for (int g = 0; g < c.groups; ++g) {
      const Mat<S>& M = before.mem[g].M;
      const Vec<S> k = ad.k.segment(g * dk, dk), vg = v.segment(g * dv, dv);
      Vec<S> dkg = Vec<S>::Zero(dk), dvg = Vec<S>::Zero(dv);
      switch (c.write) {
        case MemoryWrite::outer_product:  // M' = M + v k^T
          dvg += a.M[g] * k;
          dkg += a.M[g].transpose() * vg;
          break;
        case MemoryWrite::delta: {  // M' = M + beta u k^T, u = v - M k
          const S b = c.beta(l, g);
          const Vec<S> u = vg - M * k;
          gr.beta(l, g) += u.dot(a.M[g] * k);
          const Vec<S> du = b * (a.M[g] * k);
          dkg += b * (a.M[g].transpose() * u);
          dvg += du;
          dkg -= M.transpose() * du;
          a.M[g] -= du * k.transpose();
          break;
        }
        case MemoryWrite::rls:
          rls_step_vjp<S>(M, before.mem[g].P, k, vg, ad.omega(g), c.lambda(l, g), c.p_update, a.M[g], a.P[g], dkg,
                          dvg, da.omega(g), gr.lambda(l, g));
          break;
      }
      da.k.segment(g * dk, dk) = dkg;
      dvv.segment(g * dv, dv) = dvg;
    }
    Vec<S> dx = a.x, dxk;  // dx: adjoint of x_l; dxk: of before.x through keys from x_prev
    if constexpr (kernel) {
      gr.address[l].q += da.q;
      gr.address[l].k += da.k;
      gr.address[l].omega += da.omega;
    } else {  // q = normalize(MLP_q(x)), [k; o] = MLP_k(x), k = normalize(k), omega = softplus(o)
      const auto& m = scheme.addresser();
      const int n = c.groups * c.dk;
      dx += small_mlp_vjp<S>(m.mlp_q, x, normalize_groups_vjp<S>(m.mlp_q(x), c.groups, da.q), gr.mlp_q);
      const Vec<S> kq = m.mlp_k(xk);
      Vec<S> dkq(kq.size());
      dkq.head(n) = normalize_groups_vjp<S>(Vec<S>(kq.head(n)), c.groups, da.k);
      for (int g = 0; g < c.groups; ++g) dkq(n + g) = da.omega(g) * sigmoid(kq(n + g));  // softplus' = sigmoid
      if (keys_prev) dxk = small_mlp_vjp<S>(m.mlp_k, xk, dkq, gr.mlp_k);
      else dx += small_mlp_vjp<S>(m.mlp_k, xk, dkq, gr.mlp_k);
    }
    a.q = Vec<S>::Zero(a.q.size());  // the query before the write is overwritten
    // x_l = before.x [+ v]: dx reaches both; keys from x_prev add to before.x only.
    if (c.write_residual) dvv += dx;
    a.x = dxk.size() != 0 ? Vec<S>(dx + dxk) : dx;
    return dvv;
  }

  Vec<S> init(const Vec<S>&, const Adjoint& a, Grad& gr) const {
    if (scheme.config().write == MemoryWrite::rls)  // P_{-1} = alpha I
      for (const auto& P : a.P)
        for (Eigen::Index i = 0; i < P.rows(); ++i) gr.alpha += P(i, i);
    return a.x;
  }
};

}  // namespace dmref
