// tests/mutants/mhc_ops.cpp: the mutants of mHC at op level (mutants.hpp;
// docs/fixtures.md, "Mutation score"): forward_mhc_ops<F> (instantiated at
// float and double) and backward_mhc_ops. Each is the reference's op runner
// (run_mhc_ops) with one of its steps (MhcOpsSteps) replaced.
#include "common.hpp"

namespace dmref::mutants {

using namespace dmref::conf;

namespace {

// ------------------------------------------------------------------ forward
/// post with comb_mix read as H_res itself: the [in, out] storage of the
/// kernels taken for the paper's [out, in] (comb not transposed).
template <class F>
struct OpsCombUntransposed : MhcOpsSteps<F> {
  Mat<F> comb(const Mat<F>& stored) const { return stored; }
};
/// pre with a row-first Sinkhorn (rows of H_res normalised first).
template <class F>
struct OpsSinkhornRowFirst : MhcOpsSteps<F> {
  MhcCoefficients<F> coefficients(const Mhc<F>& m, const Mat<F>& X) const {
    MhcCoefficients<F> k = m.coefficients(X, 0);
    const auto& c = m.config();
    k.res = mhc_sinkhorn<F>(Mat<F>(k.res_logits.transpose()), c.t_max, c.res_eps_add, c.res_eps_den).transpose();
    return k;
  }
};
/// post_pre with pre reading the residual before post (the fused kernel's
/// second pass over the old streams instead of the new ones).
template <class F>
struct OpsPreReadsOldResidual : MhcOpsSteps<F> {
  const Mat<F>& pre_input(const Mat<F>& R, const Mat<F>& Y) const {
    (void)Y;
    return R;
  }
};

/// head with the weights' epsilon dropped: sigmoid(.) instead of sigmoid(.) + head_eps.
template <class F>
struct OpsHeadWithoutEps : MhcOpsSteps<F> {
  Vec<F> head_weights(const Mhc<F>& m, const Mat<F>& X) const {
    return Vec<F>(m.head_weights(X).array() - m.config().head_eps);
  }
};
/// head with the RMS norm's epsilon dropped: x' = x / sqrt(mean(x^2)).
template <class F>
struct OpsHeadRmsEpsDropped : MhcOpsSteps<F> {
  Vec<F> head_weights(const Mhc<F>& m, const Mat<F>& X) const {
    MhcConfig<F> c = m.config();
    c.rms_eps = F(0);
    return Mhc<F>(std::move(c)).head_weights(X);
  }
};
/// head with hc_head_fn [n, nC] read as [nC, n] (row-major): the weights' storage transposed.
template <class F>
struct OpsHeadFnTransposed : MhcOpsSteps<F> {
  MhcHead<F> head_params(const io::Tensor& fn, const io::Tensor& scale, const io::Tensor& base, int n,
                         std::int64_t C) const {
    MhcHead<F> h = mhc_head_from_fused<F>(fn, scale, base, n, C);
    h.phi = mat_at<F>(fn, 0, n * C, n);
    return h;
  }
};

/// The op problem through run_mhc_ops with the steps `Steps` (forward
/// mutants at F; backward mutants at double, the gradient problem).
template <class Steps, class F>
Outputs<F> ops_with(const Problem& p) {
  Outputs<F> o;
  run_mhc_ops<F>(p, schema_of(p), o, Steps{});
  return o;
}

// ----------------------------------------------------------------- backward
using S = double;

/// post's backward with the residual mix untransposed: dR = H_res dY
/// instead of H_res^T dY.
struct OpsBwPostUntransposed : MhcOpsSteps<S> {
  Mat<S> update_vjp(const Mat<S>& X, const MhcCoefficients<S>& k, const Vec<S>& x, const Mat<S>& dY, Mat<S>& dres,
                    Vec<S>& dpost, Vec<S>& dx) const {
    const Mat<S> dX = B::update_vjp(X, k, x, dY, dres, dpost, dx);
    return dX + (k.res - k.res.transpose()) * dY;  // H^T dY + (H - H^T) dY = H dY
  }
};
/// pre's backward with the pre mix detached: dH_pre gets only its
/// upstream, not dh . X_j (layer_input's dependence on H_pre dropped).
struct OpsBwPreMixDetached : MhcOpsSteps<S> {
  Vec<S> mix_vjp(const Mat<S>& X, const Vec<S>& w, const Vec<S>& dh, Mat<S>& dX) const {
    (void)B::mix_vjp(X, w, dh, dX);
    return Vec<S>::Zero(X.rows());
  }
};
/// post's backward without the upstream of output.residual (in post_pre
/// only pre's adjoint reaches post; in post alone nothing does).
struct OpsBwResidualUpstreamDropped : MhcOpsSteps<S> {
  void add_residual_upstream(Mat<S>& dY, const Mat<S>& up) const {
    (void)dY;
    (void)up;
  }
};
/// head's backward with X's path through the weights dropped: dX gets only
/// w_j dy, the norm's and projection's adjoint is lost (parameter gradients kept).
struct OpsBwHeadWeightsDetached : MhcOpsSteps<S> {
  void head_weights_vjp(const B& bw, const Mat<S>& X, const Vec<S>& dw, Mat<S>& dX, typename B::Grad& g) const {
    Mat<S> lost = dX;
    bw.head_weights_vjp(X, dw, lost, g);
  }
};
/// head's backward without the gradient of hc_head_scale (it stays zero).
struct OpsBwHeadScaleGradDropped : MhcOpsSteps<S> {
  void head_weights_vjp(const B& bw, const Mat<S>& X, const Vec<S>& dw, Mat<S>& dX, typename B::Grad& g) const {
    const S a = g.head.a;
    bw.head_weights_vjp(X, dw, dX, g);
    g.head.a = a;
  }
};
/// head's backward with hc_head_base's gradient overwritten by each token's
/// instead of summed over the tokens (the last token's only).
struct OpsBwHeadBaseLastToken : MhcOpsSteps<S> {
  void head_weights_vjp(const B& bw, const Mat<S>& X, const Vec<S>& dw, Mat<S>& dX, typename B::Grad& g) const {
    const Vec<S> b = g.head.b;
    bw.head_weights_vjp(X, dw, dX, g);
    g.head.b -= b;
  }
};

}  // namespace

template <class F>
std::vector<Variant<F>> forward_mhc_ops() {
  ForwardList<F> m{"mhc_ops", {}};
  m.add("post_comb_untransposed", "post reads comb_mix [in, out] as H_res [out, in] (not transposed)",
        ops_with<OpsCombUntransposed<F>, F>);
  m.add("pre_sinkhorn_row_first", "pre's Sinkhorn normalises rows before columns", ops_with<OpsSinkhornRowFirst<F>, F>);
  m.add("post_pre_reads_old_residual", "post_pre's pre reads the residual before post instead of after",
        ops_with<OpsPreReadsOldResidual<F>, F>);
  m.add("head_without_eps", "head: weights sigmoid(.) without + head_eps", ops_with<OpsHeadWithoutEps<F>, F>);
  m.add("head_rms_eps_dropped", "head: x' = x / sqrt(mean(x^2)), rms_eps dropped", ops_with<OpsHeadRmsEpsDropped<F>, F>);
  m.add("head_fn_transposed", "head: hc_head_fn [n, nC] read as [nC, n]", ops_with<OpsHeadFnTransposed<F>, F>);
  return m.m;
}
DMREF_INSTANTIATE_MUTANTS(mhc_ops)

std::vector<Mutant> backward_mhc_ops() {
  BackwardList m{"mhc_ops", {}};
  m.add("bw_post_res_untransposed", "backward of post: dR = H_res dY instead of H_res^T dY",
        ops_with<OpsBwPostUntransposed, S>);
  m.add("bw_pre_mix_detached", "backward of pre: H_pre detached from layer_input (dH_pre = upstream only)",
        ops_with<OpsBwPreMixDetached, S>);
  m.add("bw_post_pre_residual_upstream_dropped",
        "backward of post_pre: the upstream of output.residual dropped (only pre's adjoint reaches post)",
        ops_with<OpsBwResidualUpstreamDropped, S>);
  m.add("bw_head_weights_detached", "backward of head: dX = sum_j w_j dy only (the path through the weights dropped)",
        ops_with<OpsBwHeadWeightsDetached, S>);
  m.add("bw_head_scale_grad_dropped", "backward of head: grad.param.hc_head_scale left zero",
        ops_with<OpsBwHeadScaleGradDropped, S>);
  m.add("bw_head_base_last_token", "backward of head: grad.param.hc_head_base of the last token only (not summed)",
        ops_with<OpsBwHeadBaseLastToken, S>);
  return m.m;
}

}  // namespace dmref::mutants
