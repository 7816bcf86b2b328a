// tests/mutants/attnres_ops.cpp: the mutants of Block AttnRes at op level
// (mutants.hpp; docs/fixtures.md, "Mutation score"): forward_attnres_ops<F>
// (instantiated at float and double) and backward_attnres_ops. Each is the
// reference's op runner (run_attnres_ops) with one of its steps
// (AttnResOpsSteps) replaced: plausible wrong kernels.
#include "common.hpp"

namespace dmref::mutants {

using namespace dmref::conf;

namespace {

// ------------------------------------------------------------------ forward
/// phase2 without rescaling the old statistics: h = o + a_new b (the flash
/// merge that forgets to scale the old accumulator by l_old e^{m_old - m_new} / l_new).
template <class F>
struct OpsMergeOldNotRescaled : AttnResOpsSteps<F> {
  AttnResStats<F> merge(const AttnResStats<F>& st, const Vec<F>& b, const Vec<F>& w, const Vec<F>& g, const F& eps) const {
    AttnResStats<F> r = attnres_merge<F>(st, b, w, g, eps);
    const auto m = attnres_merge_weights<F>(st.lse, F(w.dot(rms_norm<F>(b, eps, g))));
    r.o = st.o + m.a_new * b;
    return r;
  }
};
/// phase2's merged lse as the running max max(lse, z) (the max kept, the
/// denominator's log not added).
template <class F>
struct OpsMergeLseIsMax : AttnResOpsSteps<F> {
  AttnResStats<F> merge(const AttnResStats<F>& st, const Vec<F>& b, const Vec<F>& w, const Vec<F>& g, const F& eps) const {
    AttnResStats<F> r = attnres_merge<F>(st, b, w, g, eps);
    r.lse = std::max(st.lse, F(w.dot(rms_norm<F>(b, eps, g))));
    return r;
  }
};
/// phase1 computing query s's statistics with the next layer's pseudo-query
/// (statistics of the wrong layer: an off-by-one in the query index).
template <class F>
struct OpsPhase1QueryShifted : AttnResOpsSteps<F> {
  int query(int s, int S_) const { return (s + 1) % S_; }
};
/// phase1 storing the denominator l = sum exp(z_i) instead of its log.
template <class F>
struct OpsPhase1LseNotLogged : AttnResOpsSteps<F> {
  AttnResStats<F> stats(const std::vector<Vec<F>>& src, const Vec<F>& w, const Vec<F>& g, const F& eps) const {
    AttnResStats<F> r = attnres_stats<F>(src, w, g, eps);
    r.lse = F(std::exp(r.lse));
    return r;
  }
};
/// readout ignoring the partial sum (the first-layer path taken for every layer of a block).
template <class F>
struct OpsReadoutPartialDropped : AttnResOpsSteps<F> {
  std::vector<Vec<F>> sources(std::vector<Vec<F>> blocks, const Vec<F>*) const { return blocks; }
};
/// partial_sum not reset at a block start is not expressible on one step;
/// its plausible slip is the update written as b - v (a sign error in a fused
/// axpy with alpha = -1).
template <class F>
struct OpsPartialSumSubtracts : AttnResOpsSteps<F> {
  Vec<F> partial_sum(const Vec<F>& b, const Vec<F>& v) const { return b - v; }
};

template <class Steps, class F>
Outputs<F> ops_with(const Problem& p) {
  Outputs<F> o;
  run_attnres_ops<F>(p, schema_of(p), o, Steps{});
  return o;
}

// ----------------------------------------------------------------- backward
using S = double;

/// phase2's backward with lse treated as a constant: grad.input.lse = 0.
struct OpsBwMergeLseDetached : AttnResOpsSteps<S> {
  void merge_vjp(const AttnResStats<S>& st, const Vec<S>& b, const Vec<S>& w, const Vec<S>& g, const S& eps,
                 const Vec<S>& dh, const S& dlse_out, Vec<S>& dout, S& dlse, Vec<S>& db, Vec<S>& dw, Vec<S>& dg) const {
    S lost = dlse;
    attnres_merge_vjp<S>(st, b, w, g, eps, dh, dlse_out, dout, lost, db, dw, dg);
  }
};
/// phase1's backward without the upstream of output.lse (the public kernel's HAS_GRAD_LSE off).
struct OpsBwPhase1LseUpstreamDropped : AttnResOpsSteps<S> {
  void stats_vjp(const std::vector<Vec<S>>& src, const Vec<S>& w, const Vec<S>& g, const S& eps, const Vec<S>& dout,
                 const S&, std::vector<Vec<S>>& dsrc, Vec<S>& dw, Vec<S>& dg) const {
    attnres_mix_vjp<S>(src, w, g, eps, dout, dsrc, dw, dg);
  }
};
/// readout's backward without the key path: the sources get only a_i dh
/// (the logits' dependence on the sources dropped; dw, dg kept).
struct OpsBwReadoutKeysDetached : AttnResOpsSteps<S> {
  void readout_vjp(const std::vector<Vec<S>>& src, const Vec<S>& w, const Vec<S>& g, const S& eps, const Vec<S>& dh,
                   std::vector<Vec<S>>& dsrc, Vec<S>& dw, Vec<S>& dg) const {
    std::vector<Vec<S>> lost(src.size(), Vec<S>::Zero(dh.size()));
    attnres_mix_vjp<S>(src, w, g, eps, dh, lost, dw, dg);
    const Vec<S> a = attnres_weights<S>(src, w, g, eps);
    for (std::size_t i = 0; i < src.size(); ++i) dsrc[i] += a(Eigen::Index(i)) * dh;
  }
};

}  // namespace

template <class F>
std::vector<Variant<F>> forward_attnres_ops() {
  ForwardList<F> m{"attnres_ops", {}};
  m.add("phase2_old_not_rescaled", "phase2: h = o + a_new b (the old statistics not rescaled by the merged denominator)",
        ops_with<OpsMergeOldNotRescaled<F>, F>);
  m.add("phase2_lse_is_max", "phase2: merged lse = max(lse, z) (the running max, log of the denominator dropped)",
        ops_with<OpsMergeLseIsMax<F>, F>);
  m.add("phase1_query_shifted", "phase1: query s's statistics with w, g of query s+1 (statistics of the wrong layer)",
        ops_with<OpsPhase1QueryShifted<F>, F>);
  m.add("phase1_lse_not_logged", "phase1: output.lse is the denominator sum exp(z_i), not its log",
        ops_with<OpsPhase1LseNotLogged<F>, F>);
  m.add("readout_partial_dropped", "readout: the partial sum not among the sources", ops_with<OpsReadoutPartialDropped<F>, F>);
  m.add("partial_sum_subtracts", "partial_sum: b - v instead of b + v", ops_with<OpsPartialSumSubtracts<F>, F>);
  return m.m;
}
DMREF_INSTANTIATE_MUTANTS(attnres_ops)

std::vector<Mutant> backward_attnres_ops() {
  BackwardList m{"attnres_ops", {}};
  m.add("bw_phase2_lse_detached", "backward of phase2: grad.input.lse left zero (lse a constant)",
        ops_with<OpsBwMergeLseDetached, S>);
  m.add("bw_phase1_lse_upstream_dropped", "backward of phase1: the upstream of output.lse ignored",
        ops_with<OpsBwPhase1LseUpstreamDropped, S>);
  m.add("bw_readout_keys_detached", "backward of readout: grad of the sources through the values only (key path dropped)",
        ops_with<OpsBwReadoutKeysDetached, S>);
  return m.m;
}

}  // namespace dmref::mutants
