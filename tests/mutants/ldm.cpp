// tests/mutants/ldm.cpp: Linear Depth Memory's mutants (mutants.hpp;
// docs/fixtures.md, "Mutation score"): forward_ldm<F> (instantiated at float
// and double) and backward_ldm.
#include "common.hpp"

#include <type_traits>

namespace dmref::mutants {

using namespace dmref::conf;

namespace {

// ------------------------------------------------------------------ forward
template <class F, class Make>
Outputs<F> ldm_with(const Problem& p, const std::function<void(LdmConfig<F>&)>& edit, const Make& make) {
  return outputs_of<F>(p, [&](const Dims& D, Outputs<F>& o) {
    LdmConfig<F> c = ldm_config<F>(p, D);
    edit(c);
    run_ldm<F>(p, D, o, c, make);
  });
}
template <class F>
Outputs<F> ldm_config_edit(const Problem& p, const std::function<void(LdmConfig<F>&)>& edit) {
  return ldm_with<F>(p, edit, MakeLdm{});
}

/// Group readouts interleaved: entry i of group g's readout lands at i*G + g
/// instead of g*dv + i.
template <class F, class A>
struct LdmInterleaved : LinearDepthMemory<F, A> {
  using Base = LinearDepthMemory<F, A>;
  using typename Base::State;
  using Base::Base;
  Vec<F> read(const State& s, int) const {
    const auto& c = this->config();
    const int dv = c.dv(), dk = c.dk, G = c.groups;
    Vec<F> r(c.d);
    for (int g = 0; g < G; ++g) {
      const Vec<F> y = s.mem[g].M * s.q.segment(g * dk, dk);
      for (int i = 0; i < dv; ++i) r(i * G + g) = y(i);
    }
    return c.read_residual ? Vec<F>(s.x + r) : r;
  }
  Vec<F> final(const State& s) const { return read(s, -1); }
};

/// A write that keeps its own copy of the addresser (the reference's is private).
template <class F, class A>
struct LdmOwnWrite : LinearDepthMemory<F, A> {
  using Base = LinearDepthMemory<F, A>;
  A addr;
  LdmOwnWrite(const LdmConfig<F>& c, A a) : Base(c, a), addr(std::move(a)) {}
  /// x += v (if configured), then the address exactly as the reference computes it.
  template <class State>
  Address<F> advance(State& s, int l, const Vec<F>& v) const {
    const auto& c = this->config();
    const Vec<F> x_in = s.x;
    if (c.write_residual) s.x += v;
    return addr(l, s.x, c.keys == KeySource::layer_input ? x_in : s.x);
  }
};

/// omega applied once, to the key (k -> omega k, v unchanged, unit weight),
/// instead of sqrt(omega) on both key and value.
template <class F, class A>
struct LdmOmegaOnce : LdmOwnWrite<F, A> {
  using LdmOwnWrite<F, A>::LdmOwnWrite;
  using State = typename LinearDepthMemory<F, A>::State;
  void write(State& s, int l, const Vec<F>& v) const {
    const auto& c = this->config();
    if (c.write != MemoryWrite::rls) return LinearDepthMemory<F, A>::write(s, l, v);
    Address<F> a = this->advance(s, l, v);
    for (int g = 0; g < c.groups; ++g)
      rls_step<F>(s.mem[g].M, s.mem[g].P, Vec<F>(a.omega(g) * a.k.segment(g * c.dk, c.dk)),
                  Vec<F>(v.segment(g * c.dv(), c.dv())), F(1), c.lambda(l, g), c.p_update);
    s.q = a.q;
  }
};

/// Undecayed ridge: the forgetting factors decay the data but not the prior,
///   M = S (R + alpha^{-1} I)^{-1},  R <- lambda R + omega k k^T,  S <- lambda S + omega v k^T,
/// where the reference's objective decays the ridge term with the data.
template <class F, class A>
struct LdmUndecayedRidge : LdmOwnWrite<F, A> {
  using LdmOwnWrite<F, A>::LdmOwnWrite;
  using BaseState = typename LinearDepthMemory<F, A>::State;
  struct State : BaseState {
    std::vector<Mat<F>> R, Sv;
  };
  State init(const Vec<F>& e) const {
    State s;
    static_cast<BaseState&>(s) = LinearDepthMemory<F, A>::init(e);
    const auto& c = this->config();
    s.R.assign(c.groups, Mat<F>::Zero(c.dk, c.dk));
    s.Sv.assign(c.groups, Mat<F>::Zero(c.dv(), c.dk));
    return s;
  }
  void write(State& s, int l, const Vec<F>& v) const {
    const auto& c = this->config();
    if (c.write != MemoryWrite::rls) return LinearDepthMemory<F, A>::write(s, l, v);
    Address<F> a = this->advance(s, l, v);
    for (int g = 0; g < c.groups; ++g) {
      const Vec<F> k = a.k.segment(g * c.dk, c.dk), vg = v.segment(g * c.dv(), c.dv());
      const F lam = c.lambda(l, g), w = a.omega(g);
      s.R[g] = lam * s.R[g] + w * k * k.transpose();
      s.Sv[g] = lam * s.Sv[g] + w * vg * k.transpose();
      s.mem[g].P = (s.R[g] + Mat<F>::Identity(c.dk, c.dk) / c.alpha).inverse();
      s.mem[g].M = s.Sv[g] * s.mem[g].P;
    }
    s.q = a.q;
  }
};

/// Model level without the L2 normalisation of queries and keys.
template <class F>
struct NoNormAddresses : MlpAddresses<F> {
  Address<F> operator()(int, const Vec<F>& x_q, const Vec<F>& x_k) const {
    const int n = this->groups * this->dk;
    const Vec<F> kq = this->mlp_k(x_k);
    Address<F> r;
    r.q = this->mlp_q(x_q);
    r.k = kq.head(n);
    r.omega = kq.tail(this->groups).unaryExpr([](F t) { return softplus(t); });
    return r;
  }
};

// ----------------------------------------------------------------- backward
using S = double;

/// RLS: P treated as a constant (no adjoint flows through the P update).
template <class A>
struct FrozenPLdm : LinearDepthMemory<S, A> {
  using LinearDepthMemory<S, A>::LinearDepthMemory;
};

}  // namespace
}  // namespace dmref::mutants

namespace dmref {

template <class A>
struct Backward<mutants::FrozenPLdm<A>> : Backward<LinearDepthMemory<double, A>> {
  using S = double;
  using Base = Backward<LinearDepthMemory<S, A>>;
  using typename Base::Adjoint;
  using typename Base::Grad;
  explicit Backward(const mutants::FrozenPLdm<A>& m) : Base{m} {}
  Vec<S> write(const typename LinearDepthMemory<S, A>::State& before, int l, const Vec<S>& v, Adjoint& a, Grad& gr) const {
    for (auto& P : a.P) P.setZero();
    Vec<S> dv = Base::write(before, l, v, a, gr);
    for (auto& P : a.P) P.setZero();
    return dv;
  }
};

}  // namespace dmref

namespace dmref::mutants {

template <class F>
std::vector<Variant<F>> forward_ldm() {
  ForwardList<F> m{"ldm", {}};
  m.add("undecayed_ridge", "RLS prior alpha^-1 I not decayed by lambda with the data", [](const Problem& p) {
    return ldm_with<F>(p, [](LdmConfig<F>&) {}, [](const LdmConfig<F>& c, auto a) { return LdmUndecayedRidge<F, decltype(a)>(c, a); });
  });
  m.add("omega_once", "importance weight applied once to the key (omega k) instead of sqrt(omega) on key and value",
        [](const Problem& p) {
          return ldm_with<F>(p, [](LdmConfig<F>&) {}, [](const LdmConfig<F>& c, auto a) { return LdmOmegaOnce<F, decltype(a)>(c, a); });
        });
  m.add("lambda_shifted", "layer l uses the forgetting factors of layer l+1 (mod L)", [](const Problem& p) {
    return ldm_config_edit<F>(p, [](LdmConfig<F>& c) {
      if (c.lambda.rows() < 2) return;
      Mat<F> s(c.lambda.rows(), c.lambda.cols());
      for (Eigen::Index l = 0; l < s.rows(); ++l) s.row(l) = c.lambda.row((l + 1) % s.rows());
      c.lambda = s;
    });
  });
  m.add("keys_from_prev", "model level: keys and weights from x_{l-1} (option keys_from = x_prev) instead of x_l",
        [](const Problem& p) { return ldm_config_edit<F>(p, [](LdmConfig<F>& c) { c.keys = KeySource::layer_input; }); });
  m.add("no_l2_norm", "model level: queries and keys not L2-normalised per group", [](const Problem& p) {
    return ldm_with<F>(p, [](LdmConfig<F>&) {}, [](const LdmConfig<F>& c, auto a) {
      if constexpr (std::is_same_v<decltype(a), MlpAddresses<F>>) return LinearDepthMemory<F, NoNormAddresses<F>>(c, {a});
      else return LinearDepthMemory<F, decltype(a)>(c, a);
    });
  });
  m.add("readout_interleaved", "group readouts interleaved (i*G + g) instead of concatenated (g*dv + i)",
        [](const Problem& p) {
          return ldm_with<F>(p, [](LdmConfig<F>&) {}, [](const LdmConfig<F>& c, auto a) { return LdmInterleaved<F, decltype(a)>(c, a); });
        });
  m.add("P0_inverse_alpha", "RLS P initialised to alpha^-1 I instead of alpha I",
        [](const Problem& p) { return ldm_config_edit<F>(p, [](LdmConfig<F>& c) { c.alpha = F(1) / c.alpha; }); });
  return m.m;
}
DMREF_INSTANTIATE_MUTANTS(ldm)

std::vector<Mutant> backward_ldm() {
  BackwardList m{"ldm", {}};
  m.add("bw_P_constant", "backward: RLS P treated as a constant (no adjoint through the P update)",
        [](const Problem& p) {
          return outputs_of<S>(p, [&](const Dims& D, Outputs<S>& o) {
            run_ldm<S>(p, D, o, ldm_config<S>(p, D), [](const LdmConfig<S>& c, auto a) { return FrozenPLdm<decltype(a)>(c, a); });
          });
        });
  return m.m;
}

}  // namespace dmref::mutants
