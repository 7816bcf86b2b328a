// tests/mutants/hc_ops.cpp: the mutants of Hyper-Connections at op level
// (mutants.hpp; docs/fixtures.md, "Mutation score"): forward_hc_ops<F>
// (instantiated at float and double) and backward_hc_ops. Each is the
// reference's op runner (run_hc_ops) with one of its steps (HcOpsSteps) replaced.
#include "common.hpp"

namespace dmref::mutants {

using namespace dmref::conf;

namespace {

// ------------------------------------------------------------------ forward
/// width with A_r transposed: H'_i = sum_j A_r[i,j] H_j (alpha's columns read as rows).
template <class F>
struct OpsCarryTransposed : HcOpsSteps<F> {
  Mat<F> carry(const Mat<F>& H, const Mat<F>& ar) const { return hc_carry<F>(H, Mat<F>(ar.transpose())); }
};
/// depth with beta applied to the carried streams instead of the branch
/// output: Y_i = B_i H'_i + x (the weighting on the wrong term).
template <class F>
struct OpsBetaOnCarried : HcOpsSteps<F> {
  Mat<F> depth(const Mat<F>& carried, const Vec<F>& b, const Vec<F>& x) const {
    Mat<F> y = carried;
    for (Eigen::Index i = 0; i < y.rows(); ++i) y.row(i) = (b(i) * carried.row(i).transpose() + x).transpose();
    return y;
  }
};
/// width with the norm's gain dropped (lucidrains' gamma + 1 read as 1).
template <class F>
struct OpsNormWithoutGain : HcOpsSteps<F> {
  HcLayer<F> layer(const Problem& p, const Schema& s, const HcConfig<F>& c) const {
    HcLayer<F> q = hc_layer_from_lucidrains<F>(p, s, c);
    if (c.dynamic) q.ln_gain = Vec<F>::Ones(c.d);
    return q;
  }
};
/// width without the tanh (act = identity where config.tanh is on).
template <class F>
struct OpsTanhMissing : HcOpsSteps<F> {
  HcCoefficients<F> coefficients(const HyperConnections<F>& m, const Mat<F>& H) const {
    HcConfig<F> c = m.config();
    c.tanh = false;
    return HyperConnections<F>(std::move(c)).coefficients(H, 0);
  }
};
/// width with one scale for alpha and beta (dynamic_alpha_scale used for B too).
template <class F>
struct OpsScaleShared : HcOpsSteps<F> {
  HcLayer<F> layer(const Problem& p, const Schema& s, const HcConfig<F>& c) const {
    HcLayer<F> q = hc_layer_from_lucidrains<F>(p, s, c);
    q.s_b = q.s_a;
    return q;
  }
};
/// width with alpha's read column taken last ([A_r | A_m] instead of [A_m | A_r]).
template <class F>
struct OpsAlphaColumnLast : HcOpsSteps<F> {
  HcLayer<F> layer(const Problem& p, const Schema& s, const HcConfig<F>& c) const {
    HcLayer<F> q = hc_layer_from_lucidrains<F>(p, s, c);
    const Mat<F> A = hc_alpha<F>(q.am, q.ar);  // re-read the stored [n, n+1] shifted by one column
    q.am = A.col(c.n);
    q.ar = A.leftCols(c.n);
    if (c.dynamic) {
      const Mat<F> W = hc_alpha<F>(q.wm, q.wr);
      q.wm = W.col(c.n);
      q.wr = W.leftCols(c.n);
    }
    return q;
  }
};
/// depth_width with the width reading the depth's carried input instead of its result.
template <class F>
struct OpsWidthReadsCarried : HcOpsSteps<F> {
  const Mat<F>& width_input(const Mat<F>& Hc, const Mat<F>& Y) const {
    (void)Y;
    return Hc;
  }
};

template <class Steps, class F>
Outputs<F> ops_with(const Problem& p) {
  Outputs<F> o;
  run_hc_ops<F>(p, schema_of(p), o, Steps{});
  return o;
}

// ----------------------------------------------------------------- backward
using S = double;

/// width's backward with the carry untransposed: dH_j += A_r[i,j] dH'_i.
struct OpsBwCarryTransposed : HcOpsSteps<S> {
  void carry_vjp(const Mat<S>& H, const Mat<S>& ar, const Mat<S>& dC, Mat<S>& dar, Mat<S>& dH) const {
    Mat<S> dar_t = dar;
    B::carry_vjp(H, Mat<S>(ar.transpose()), dC, dar_t, dH);  // dH with A_r^T
    Mat<S> ignored = Mat<S>::Zero(H.rows(), H.cols());
    B::carry_vjp(H, ar, dC, dar, ignored);  // dA_r as the reference
  }
};
/// width's backward with A_m detached from branch_input (dA_m = upstream of alpha only).
struct OpsBwMixDetached : HcOpsSteps<S> {
  void mix_vjp(const Mat<S>& H, const Vec<S>& w, const Vec<S>& dh, Mat<S>& dH, Vec<S>& dw) const {
    B::mix_vjp(H, w, dh, dH, dw);
    dw.setZero();
  }
};
/// width's backward without the path through the norm (dH gets the mixes' adjoints only).
struct OpsBwNormDetached : HcOpsSteps<S> {
  void coefficients_vjp(const B& bw, const Mat<S>& H, const HcCoefficients<S>& dc, Mat<S>& dH, B::Grad& g) const {
    Mat<S> lost = dH;
    bw.coefficients_vjp(H, 0, dc, lost, g);
  }
};
/// depth's backward with beta's gradient left zero.
struct OpsBwBetaGradDropped : HcOpsSteps<S> {
  Vec<S> depth_vjp(const Vec<S>& b, const Vec<S>& x, const Mat<S>& dY, Vec<S>& db) const {
    const Vec<S> dx = B::depth_vjp(b, x, dY, db);
    db.setZero();
    return dx;
  }
};
/// depth_width's backward without the upstream of output.residual.
struct OpsBwResidualUpstreamDropped : HcOpsSteps<S> {
  void add_residual_upstream(Mat<S>& dY, const Mat<S>& up) const {
    (void)dY;
    (void)up;
  }
};
/// width's backward without the gradient of dynamic_beta_scale (it stays zero).
struct OpsBwBetaScaleGradDropped : HcOpsSteps<S> {
  void coefficients_vjp(const B& bw, const Mat<S>& H, const HcCoefficients<S>& dc, Mat<S>& dH, B::Grad& g) const {
    const S sb = g.at(0).s_b;
    bw.coefficients_vjp(H, 0, dc, dH, g);
    g.at(0).s_b = sb;
  }
};

}  // namespace

template <class F>
std::vector<Variant<F>> forward_hc_ops() {
  ForwardList<F> m{"hc_ops", {}};
  m.add("carry_transposed", "width: H'_i = sum_j A_r[i,j] H_j (A_r transposed)", ops_with<OpsCarryTransposed<F>, F>);
  m.add("beta_on_carried", "depth: B_i weighs the carried stream, not the branch output", ops_with<OpsBetaOnCarried<F>, F>);
  m.add("norm_without_gain", "width: the norm's gain dropped (gamma + 1 read as 1)", ops_with<OpsNormWithoutGain<F>, F>);
  m.add("tanh_missing", "width: no tanh on the dynamic logits", ops_with<OpsTanhMissing<F>, F>);
  m.add("scale_shared", "width: dynamic_alpha_scale used for beta too", ops_with<OpsScaleShared<F>, F>);
  m.add("alpha_column_last", "width: alpha's read column taken last ([A_r | A_m])", ops_with<OpsAlphaColumnLast<F>, F>);
  m.add("depth_width_reads_carried", "depth_width: the width reads the depth's carried input, not its result",
        ops_with<OpsWidthReadsCarried<F>, F>);
  return m.m;
}
DMREF_INSTANTIATE_MUTANTS(hc_ops)

std::vector<Mutant> backward_hc_ops() {
  BackwardList m{"hc_ops", {}};
  m.add("bw_carry_transposed", "backward of width: dH_j += A_r[i,j] dH'_i (A_r transposed)", ops_with<OpsBwCarryTransposed, S>);
  m.add("bw_mix_detached", "backward of width: A_m detached from branch_input", ops_with<OpsBwMixDetached, S>);
  m.add("bw_norm_detached", "backward of width: no adjoint through the norm into the residual", ops_with<OpsBwNormDetached, S>);
  m.add("bw_beta_grad_dropped", "backward of depth: grad.input.beta left zero", ops_with<OpsBwBetaGradDropped, S>);
  m.add("bw_depth_width_residual_upstream_dropped", "backward of depth_width: the upstream of output.residual dropped",
        ops_with<OpsBwResidualUpstreamDropped, S>);
  m.add("bw_beta_scale_grad_dropped", "backward of width: grad.param.dynamic_beta_scale left zero",
        ops_with<OpsBwBetaScaleGradDropped, S>);
  return m.m;
}

}  // namespace dmref::mutants
