// tests/mutants/denseformer.cpp: DenseFormer's mutants (mutants.hpp;
// docs/fixtures.md, "Mutation score"): forward_denseformer<F> (instantiated
// at float and double) and backward_denseformer.
#include "common.hpp"

#include <type_traits>

namespace dmref::mutants {

using namespace dmref::conf;

namespace {

// ------------------------------------------------------------------ forward
/// DenseFormer with the reference's state, and a DWA with a shifted pattern.
template <class F, bool PeriodShift>
struct DenseFormerShifted : DenseFormer<F> {
  using Base = DenseFormer<F>;
  using typename Base::State;
  using Base::Base;
  using Base::config;
  Vec<F> dwa_shifted(const std::vector<Vec<F>>& X, int i) const {
    const int k = config().dilation, p = config().period;
    // period: DWA after 0-based block i-1 when p | (i-1) (reference: p | i);
    // dilation: X_j with j = 0 (mod k) (reference: j = i (mod k)).
    if (i == 0 || (PeriodShift ? (i - 1) % p != 0 : i % p != 0)) return X[i];
    int j = PeriodShift ? i % k : 0;
    Vec<F> y = config().a(i, j) * X[j];
    for (j += k; j <= i; j += k) y += config().a(i, j) * X[j];
    return y;
  }
  Vec<F> read(const State& s, int l) const { return dwa_shifted(s.X, l); }
  Vec<F> final(const State& s) const { return dwa_shifted(s.X, int(s.X.size()) - 1); }
};

/// The DWA without the embedding term: Y_i = sum_{j >= 1} a_{i,j} X_j (i >= 1).
template <class F>
struct DenseFormerNoEmbedding : DenseFormer<F> {
  using Base = DenseFormer<F>;
  using typename Base::State;
  using Base::Base;
  using Base::config;
  using Base::dwa;
  Vec<F> dwa_no_e(const std::vector<Vec<F>>& X, int i) const {
    const Vec<F> y = dwa(X, i);
    const int k = config().dilation, p = config().period;
    if (i == 0 || i % p != 0 || i % k != 0) return y;  // no X_0 term to drop
    return y - config().a(i, 0) * X[0];
  }
  Vec<F> read(const State& s, int l) const { return dwa_no_e(s.X, l); }
  Vec<F> final(const State& s) const { return dwa_no_e(s.X, int(s.X.size()) - 1); }
};

template <class M, class F>
Outputs<F> denseformer_as(const Problem& p) {
  return outputs_of<F>(p, [&](const Dims& D, Outputs<F>& o) { run_plain<F>(p, D, o, M(denseformer_config<F>(p, D))); });
}

// ----------------------------------------------------------------- backward
using S = double;

/// The DWA adjoint with alpha transposed, dX_j += a_{j,i} dY_i.
struct TransposedAlphaDenseFormer : DenseFormer<S> {
  using DenseFormer<S>::DenseFormer;
};
/// d a_{i,j} against the DWA's own block output X_i instead of its source
/// X_j (the loop index of the output reused for the source).
struct OwnOutputDalphaDenseFormer : DenseFormer<S> {
  using DenseFormer<S>::DenseFormer;
};

/// The reference's DenseFormer Backward (dwa_vjp as in denseformer_backward.hpp)
/// with the DWA weight a_{i,j} and the source X_j it differentiates against
/// taken from D (weight, source), so a mutant replaces just one of them
/// (CRTP: final and read, the callers, are not virtual).
template <class D>
struct DenseFormerBackwardWith : Backward<DenseFormer<S>> {
  using State = DenseFormer<S>::State;
  S weight(int i, int j) const { return this->scheme.config().a(i, j); }
  const Vec<S>& source(const std::vector<Vec<S>>& X, int, int j) const { return X[j]; }
  void dwa_vjp(const std::vector<Vec<S>>& X, int i, const Vec<S>& dy, Adjoint& a, Grad& da) const {
    const auto& c = this->scheme.config();
    if (i == 0 || i % c.period != 0) {
      a.X[i] += dy;
      return;
    }
    for (int j = i % c.dilation; j <= i; j += c.dilation) {
      a.X[j] += self().weight(i, j) * dy;
      da(i, j) += dy.dot(self().source(X, i, j));
    }
  }
  Adjoint final(const State& s, const Vec<S>& dout, Grad& da) const {
    Adjoint a{std::vector<Vec<S>>(s.X.size(), Vec<S>::Zero(dout.size()))};
    dwa_vjp(s.X, static_cast<int>(s.X.size()) - 1, dout, a, da);
    return a;
  }
  void read(const State& before, int l, const Vec<S>& dh, Adjoint& a, Grad& da) const { dwa_vjp(before.X, l, dh, a, da); }
  const D& self() const { return static_cast<const D&>(*this); }
};

}  // namespace
}  // namespace dmref::mutants

namespace dmref {

template <>
struct Backward<mutants::TransposedAlphaDenseFormer>
    : mutants::DenseFormerBackwardWith<Backward<mutants::TransposedAlphaDenseFormer>> {
  using S = double;
  explicit Backward(const mutants::TransposedAlphaDenseFormer& m) : DenseFormerBackwardWith{{m}} {}
  double weight(int i, int j) const { return this->scheme.config().a(j, i); }  // a(j, i) for a(i, j)
};

template <>
struct Backward<mutants::OwnOutputDalphaDenseFormer>
    : mutants::DenseFormerBackwardWith<Backward<mutants::OwnOutputDalphaDenseFormer>> {
  using S = double;
  explicit Backward(const mutants::OwnOutputDalphaDenseFormer& m) : DenseFormerBackwardWith{{m}} {}
  const Vec<double>& source(const std::vector<Vec<double>>& X, int i, int) const { return X[i]; }  // X[i] for X[j]
};

}  // namespace dmref

namespace dmref::mutants {

template <class F>
std::vector<Variant<F>> forward_denseformer() {
  ForwardList<F> m{"denseformer", {}};
  m.add("period_shifted", "DWA after 0-based block l with p | l instead of p | l+1",
        denseformer_as<DenseFormerShifted<F, true>, F>);
  m.add("dilation_shifted", "DWA averages X_j with j = 0 (mod k) instead of j = i (mod k)",
        denseformer_as<DenseFormerShifted<F, false>, F>);
  m.add("embedding_dropped", "the DWA leaves out the embedding X_0", denseformer_as<DenseFormerNoEmbedding<F>, F>);
  return m.m;
}
DMREF_INSTANTIATE_MUTANTS(denseformer)

std::vector<Mutant> backward_denseformer() {
  BackwardList m{"denseformer", {}};
  auto denseformer = [](auto scheme) {
    return [](const Problem& p) {
      return outputs_of<S>(p, [&](const Dims& D, Outputs<S>& o) {
        run_denseformer<S>(p, D, o, typename decltype(scheme)::type(denseformer_config<S>(p, D)));
      });
    };
  };
  m.add("bw_alpha_transposed", "backward: DWA adjoint with alpha transposed (dX_j += a_{j,i} dY_i)",
        denseformer(std::type_identity<TransposedAlphaDenseFormer>{}));
  m.add("bw_dalpha_own_output", "backward: d a_{i,j} = dY_i . X_i (the DWA's own output for its source X_j)",
        denseformer(std::type_identity<OwnOutputDalphaDenseFormer>{}));
  return m.m;
}

}  // namespace dmref::mutants
