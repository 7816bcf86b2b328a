// tests/mutants/hc.cpp: Hyper-Connections' mutants (mutants.hpp;
// docs/fixtures.md, "Mutation score"): forward_hc<F> (instantiated at float
// and double) and backward_hc.
#include "common.hpp"

namespace dmref::mutants {

using namespace dmref::conf;

namespace {

// ------------------------------------------------------------------ forward
template <class F>
Outputs<F> hc_config_edit(const Problem& p, const std::function<void(HcConfig<F>&)>& edit) {
  return outputs_of<F>(p, [&](const Dims& D, Outputs<F>& o) {
    HcConfig<F> c = hc_config<F>(p, D);
    edit(c);
    run_hc<F>(p, D, o, HyperConnections<F>(c));
  });
}

/// The write weights B on the wrong side of the sum: H_i <- v + B[i] sum_j A_r[j,i] H_j.
template <class F>
struct HcBetaWrongSide : HyperConnections<F> {
  using Base = HyperConnections<F>;
  using typename Base::State;
  using Base::Base;
  using Base::config;
  void write(State& s, int, const Vec<F>& v) const {
    const int n = config().n;
    Mat<F> next(n, config().d);
    for (int i = 0; i < n; ++i) {
      Vec<F> carried = s.coef.ar(0, i) * s.H.row(0).transpose();
      for (int j = 1; j < n; ++j) carried += s.coef.ar(j, i) * s.H.row(j).transpose();
      next.row(i) = (v + s.coef.b(i) * carried).transpose();
    }
    s.H = std::move(next);
    s.layer = -1;
  }
};

/// final = the mean of the streams instead of their sum.
template <class F>
struct HcFinalMean : HyperConnections<F> {
  using Base = HyperConnections<F>;
  using typename Base::State;
  using Base::Base;
  using Base::config;
  Vec<F> final(const State& s) const { return Base::final(s) / F(config().n); }
};

template <class M, class F>
Outputs<F> hc_as(const Problem& p) {
  return outputs_of<F>(p, [&](const Dims& D, Outputs<F>& o) { run_hc<F>(p, D, o, M(hc_config<F>(p, D))); });
}

// ----------------------------------------------------------------- backward
using S = double;

/// The stream-mixing adjoint with the forward's orientation reused: the
/// forward mixes H'_i = sum_j A_r[j,i] H_j, the mutant's adjoint gives
/// dH_j = sum_i A_r[i,j] dH'_i instead of sum_i A_r[j,i] dH'_i.
struct UntransposedHc : HyperConnections<S> {
  using HyperConnections<S>::HyperConnections;
};
/// The width-connection gradient with its two stream axes swapped,
/// dA_r[j,i] = dH'_j . H_i instead of dH'_i . H_j.
struct SwappedDarHc : HyperConnections<S> {
  using HyperConnections<S>::HyperConnections;
};

}  // namespace
}  // namespace dmref::mutants

namespace dmref {

template <>
struct Backward<mutants::UntransposedHc> : Backward<HyperConnections<double>> {
  using S = double;
  using Base = Backward<HyperConnections<S>>;
  explicit Backward(const mutants::UntransposedHc& m) : Base{m} {}
  Vec<S> write(const State& before, int l, const Vec<S>& v, Adjoint& a, Grad& gr) const {
    const Mat<S> dY = a.H;                               // rows dH'_i
    const Vec<S> dv = Base::write(before, l, v, a, gr);  // the right adjoint, then the wrong mixing path:
    const Mat<S> Ar = this->scheme.coefficients(before.H, l).ar;
    a.H += (Ar.transpose() - Ar) * dY;  // A_r dH' + (A_r^T - A_r) dH' = A_r^T dH'
    return dv;
  }
};

template <>
struct Backward<mutants::SwappedDarHc> : Backward<HyperConnections<double>> {
  using S = double;
  using Base = Backward<HyperConnections<S>>;
  explicit Backward(const mutants::SwappedDarHc& m) : Base{m} {}
  Vec<S> write(const State& before, int l, const Vec<S>& v, Adjoint& a, Grad& gr) const {
    const Mat<S> D = before.H * a.H.transpose();         // D(j,i) = H_j . dH'_i, the right dA_r
    const Vec<S> dv = Base::write(before, l, v, a, gr);  // the right adjoint, then the swap's difference:
    const int n = this->scheme.config().n;
    // coefficients_vjp is linear in dc: adding its VJP of D^T - D turns dA_r = D into D^T
    coefficients_vjp(before.H, l, {Vec<S>::Zero(n), Mat<S>(D.transpose() - D), Vec<S>::Zero(n)}, a.H, gr);
    return dv;
  }
};

}  // namespace dmref

namespace dmref::mutants {

template <class F>
std::vector<Variant<F>> forward_hc() {
  ForwardList<F> m{"hc", {}};
  m.add("rmsnorm", "dynamic HC with RMSNorm (option norm = rmsnorm) instead of LayerNorm",
        [](const Problem& p) { return hc_config_edit<F>(p, [](HcConfig<F>& c) { c.norm = HcNorm::rms; }); });
  m.add("tanh_dropped", "dynamic HC without the tanh (option tanh = false)",
        [](const Problem& p) { return hc_config_edit<F>(p, [](HcConfig<F>& c) { c.tanh = false; }); });
  m.add("static_ar_transposed", "static A_r read transposed (A_r[i,j] weighs stream j into i)", [](const Problem& p) {
    return hc_config_edit<F>(p, [](HcConfig<F>& c) {
      for (auto& l : c.layers) l.ar.transposeInPlace();
    });
  });
  m.add("beta_wrong_side", "write weights B scale the carried streams instead of the layer output",
        hc_as<HcBetaWrongSide<F>, F>);
  m.add("final_mean", "final returns the mean of the streams instead of their sum", hc_as<HcFinalMean<F>, F>);
  return m.m;
}
DMREF_INSTANTIATE_MUTANTS(hc)

std::vector<Mutant> backward_hc() {
  BackwardList m{"hc", {}};
  m.add("bw_mix_untransposed", "backward: stream-mixing adjoint untransposed (dH_j = sum_i A_r[i,j] dH'_i)",
        hc_as<UntransposedHc, S>);
  m.add("bw_dar_swapped", "backward: width-connection gradient dA_r[j,i] = dH'_j . H_i (stream axes swapped)",
        hc_as<SwappedDarHc, S>);
  return m.m;
}

}  // namespace dmref::mutants
