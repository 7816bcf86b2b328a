// dmref/conformance/schemes/hc_ops.hpp: Hyper-Connections at op level
// (docs/hc_ops.md): one layer's HC ops for M tokens at once, split and stored
// as lucidrains' hyper-connections (class HyperConnections) computes them:
//   op width        width_connection: residual H [M, n, C] -> branch_input h [M, C],
//                   carried H' [M, n, C] (H'_i = sum_j A_r[j,i] H_j), alpha [M, n, n+1]
//                   (column 0 A_m, columns 1..n A_r), beta [M, n] (B)
//   op depth        depth_connection: branch_output x [M, C], carried H', beta ->
//                   residual [M, n, C], row i = B_i x + H'_i
//   op depth_width  depth of layer l, then width of layer l+1 on its result
// Parameters (width): static_alpha [n, n+1], static_beta [n]; dynamic HC also
// dynamic_alpha_fn [C, n+1], dynamic_alpha_scale [1], dynamic_beta_fn [C],
// dynamic_beta_scale [1], norm_gain [C] (lucidrains' RMSNorm gamma + 1),
// norm_bias [C] (LayerNorm only).
// Every number comes from the scheme's own functions (hc.hpp:
// HyperConnections::coefficients, hc_mix, hc_carry, hc_depth; hc_backward.hpp:
// coefficients_vjp, mix_vjp, carry_vjp, depth_vjp); this file only moves
// tensors between lucidrains' storage and HcLayer / HcCoefficients. Schema,
// corpus rows, registry entry: src/conformance/schemes/hc_ops.cpp.
#pragma once

#include "dmref/conformance/binding.hpp"
#include "dmref/conformance/schemes/hc_constants.hpp"
#include "dmref/hc_backward.hpp"

namespace dmref::conf {

enum class HcOp { width, depth, depth_width };
inline HcOp hc_op_named(const std::string& o) {
  return o == "width" ? HcOp::width : o == "depth" ? HcOp::depth : HcOp::depth_width;
}
inline bool hc_op_has_width(HcOp op) { return op != HcOp::depth; }
inline bool hc_op_has_depth(HcOp op) { return op != HcOp::width; }

/// One layer's parameters from lucidrains' storage (tensors of the problem;
/// the dynamic ones only for dynamic HC, norm_bias only with LayerNorm).
template <class S>
HcLayer<S> hc_layer_from_lucidrains(const Problem& p, const Schema& s, const HcConfig<S>& c) {
  const std::int64_t n = c.n, C = c.d;
  const io::Tensor& sa = s.read(p, "param.static_alpha");
  const Mat<S> A = mat_at<S>(sa, 0, n, n + 1);
  HcLayer<S> q;
  q.am = A.col(0);
  q.ar = A.rightCols(n);
  q.b = vec_at<S>(s.read(p, "param.static_beta"), 0, n);
  if (!c.dynamic) return q;
  const Mat<S> W = mat_at<S>(s.read(p, "param.dynamic_alpha_fn"), 0, C, n + 1);
  q.wm = W.col(0);
  q.wr = W.rightCols(n);
  q.wb = vec_at<S>(s.read(p, "param.dynamic_beta_fn"), 0, C);
  q.s_a = S(s.read(p, "param.dynamic_alpha_scale").values.at(0));
  q.s_b = S(s.read(p, "param.dynamic_beta_scale").values.at(0));
  q.ln_gain = vec_at<S>(s.read(p, "param.norm_gain"), 0, C);
  if (c.norm == HcNorm::layer) q.ln_bias = vec_at<S>(s.read(p, "param.norm_bias"), 0, C);
  return q;
}

/// alpha in lucidrains' layout [n, n+1]: column 0 A_m, columns 1..n A_r (and dynamic_alpha_fn [C, n+1] from W_m, W_r).
template <class S>
Mat<S> hc_alpha(const Vec<S>& am, const Mat<S>& ar) {
  Mat<S> a(am.size(), ar.cols() + 1);
  a.col(0) = am;
  a.rightCols(ar.cols()) = ar;
  return a;
}

/// The parameter gradients (Backward<HyperConnections>::Grad, layer 0) in the same storage.
template <class S>
std::vector<ParamGrad<S>> hc_lucidrains_grads(const HcLayer<S>& g, const HcConfig<S>& c) {
  std::vector<ParamGrad<S>> r{{"param.static_alpha", {}}, {"param.static_beta", {}}};
  r[0].add(hc_alpha<S>(g.am, g.ar));
  r[1].add(g.b.transpose());
  if (!c.dynamic) return r;
  r.push_back({"param.dynamic_alpha_fn", {}});
  r.back().add(hc_alpha<S>(g.wm, g.wr));
  r.push_back({"param.dynamic_alpha_scale", {}});
  r.back().add(g.s_a);
  r.push_back({"param.dynamic_beta_fn", {}});
  r.back().add(g.wb.transpose());
  r.push_back({"param.dynamic_beta_scale", {}});
  r.back().add(g.s_b);
  r.push_back({"param.norm_gain", {}});
  r.back().add(g.ln_gain.transpose());
  if (c.norm == HcNorm::layer) {
    r.push_back({"param.norm_bias", {}});
    r.back().add(g.ln_bias.transpose());
  }
  return r;
}

/// The steps of the ops, each the scheme's own function (tests/mutants
/// replaces one at a time: a struct deriving from this one hides a member).
template <class S>
struct HcOpsSteps {
  using B = Backward<HyperConnections<S>>;
  HcLayer<S> layer(const Problem& p, const Schema& s, const HcConfig<S>& c) const {
    return hc_layer_from_lucidrains<S>(p, s, c);
  }
  HcCoefficients<S> coefficients(const HyperConnections<S>& m, const Mat<S>& H) const { return m.coefficients(H, 0); }
  Vec<S> mix(const Mat<S>& H, const Vec<S>& am) const { return hc_mix<S>(H, am); }
  Mat<S> carry(const Mat<S>& H, const Mat<S>& ar) const { return hc_carry<S>(H, ar); }
  Mat<S> depth(const Mat<S>& carried, const Vec<S>& b, const Vec<S>& x) const { return hc_depth<S>(carried, b, x); }
  /// depth_width: the streams the width reads, the depth's result Y (Hc: the depth's carried input).
  const Mat<S>& width_input(const Mat<S>& Hc, const Mat<S>& Y) const {
    (void)Hc;
    return Y;
  }
  // ---- backward
  void mix_vjp(const Mat<S>& H, const Vec<S>& w, const Vec<S>& dh, Mat<S>& dH, Vec<S>& dw) const {
    B::mix_vjp(H, w, dh, dH, dw);
  }
  void carry_vjp(const Mat<S>& H, const Mat<S>& ar, const Mat<S>& dC, Mat<S>& dar, Mat<S>& dH) const {
    B::carry_vjp(H, ar, dC, dar, dH);
  }
  void coefficients_vjp(const B& bw, const Mat<S>& H, const HcCoefficients<S>& dc, Mat<S>& dH, typename B::Grad& g) const {
    bw.coefficients_vjp(H, 0, dc, dH, g);
  }
  Vec<S> depth_vjp(const Vec<S>& b, const Vec<S>& x, const Mat<S>& dY, Vec<S>& db) const {
    return B::depth_vjp(b, x, dY, db);
  }
  /// depth_width: the adjoint of the depth's result, the width's dH plus the upstream of output.residual.
  void add_residual_upstream(Mat<S>& dY, const Mat<S>& up) const { dY += up; }
};

/// Token by token: depth (when the op has it) Y_i = B_i x + H'_i, then width
/// (when it has it) the coefficients of its streams, h = sum_j A_m[j] H_j and
/// H'_i = sum_j A_r[j,i] H_j; with p.grad their adjoints in reverse order,
/// parameter gradients summed over tokens in token order.
template <class S, class Steps = HcOpsSteps<S>>
void run_hc_ops(const Problem& p, const Schema& s, Outputs<S>& o, const Steps& st = {}) {
  const HcOp op = hc_op_named(s.text("op"));
  const bool width = hc_op_has_width(op), depth = hc_op_has_depth(op);
  const std::int64_t T = s.integer("tokens"), n = s.integer("n"), C = s.integer("d"), nC = n * C;
  check_upstream(p, s);
  const io::Tensor *R = nullptr, *X = nullptr, *HC = nullptr, *BE = nullptr;
  if (width && !depth) R = &s.read(p, "input.residual");
  if (depth) {
    X = &s.read(p, "input.branch_output");
    HC = &s.read(p, "input.carried");
    BE = &s.read(p, "input.beta");
  }
  std::optional<HyperConnections<S>> scheme;
  if (width) {
    HcConfig<S> c = hc_constants<S>(s, n, C);
    c.layers.push_back(st.layer(p, s, c));
    scheme.emplace(std::move(c));  // validates (ParameterError names the field)
  }
  std::vector<std::string> outs;
  if (depth) outs.push_back("residual");
  if (width)
    for (const char* k : {"branch_input", "carried", "alpha", "beta"}) outs.push_back(k);
  OpOutputs<S> ports = op_outputs(p, s, o, outs);
  if (p.layout_only) return;
  auto& up = ports.up;
  auto& out = ports.out;
  using B = Backward<HyperConnections<S>>;
  std::optional<B> bw;
  typename B::Grad grad;
  if (p.grad && scheme) {
    bw.emplace(B{*scheme});
    grad = bw->zero_grad();
  }
  InputGrads<S> g{p, {}};  // grad.input.*, token after token
  for (std::int64_t t = 0; t < T; ++t) {
    Mat<S> H;  // the streams the width reads
    Mat<S> Hc;
    Vec<S> x, beta;
    if (depth) {
      Hc = mat_at<S>(*HC, t * nC, n, C);
      x = vec_at<S>(*X, t * C, C);
      beta = vec_at<S>(*BE, t * n, n);
      const Mat<S> Y = st.depth(Hc, beta, x);
      Outputs<S>::append(*out["residual"], Y);
      H = st.width_input(Hc, Y);
      if (width) store_values<S>(H);  // depth_width: the width reads the new residual as stored (an output)
    } else if (width) {
      H = mat_at<S>(*R, t * nC, n, C);
    }
    HcCoefficients<S> k;
    if (width) {
      k = st.coefficients(*scheme, H);
      Outputs<S>::append(*out["branch_input"], st.mix(H, k.am).transpose());
      const Mat<S> carried = st.carry(H, k.ar);
      Outputs<S>::append(*out["carried"], carried);
      const Mat<S> alpha = hc_alpha<S>(k.am, k.ar);
      Outputs<S>::append(*out["alpha"], alpha);
      Outputs<S>::append(*out["beta"], k.b.transpose());
    }
    if (!p.grad) continue;
    Mat<S> dH = Mat<S>::Zero(n, C);
    if (width) {
      HcCoefficients<S> dc{Vec<S>::Zero(n), Mat<S>::Zero(n, n), Vec<S>::Zero(n)};
      const Mat<S> dA = mat_at<S>(*up["alpha"], t * n * (n + 1), n, n + 1);
      st.carry_vjp(H, k.ar, mat_at<S>(*up["carried"], t * nC, n, C), dc.ar, dH);
      st.mix_vjp(H, k.am, vec_at<S>(*up["branch_input"], t * C, C), dH, dc.am);
      dc.am += dA.col(0);
      dc.ar += dA.rightCols(n);
      dc.b = vec_at<S>(*up["beta"], t * n, n);
      st.coefficients_vjp(*bw, H, dc, dH, grad);
    }
    if (depth) {
      if (width) store_values<S>(dH);  // its adjoint, stored likewise (framework.hpp, Adjoint::stored)
      st.add_residual_upstream(dH, mat_at<S>(*up["residual"], t * nC, n, C));
      Vec<S> db;
      const Vec<S> dx = st.depth_vjp(beta, x, dH, db);
      Outputs<S>::append(g["grad.input.branch_output"], dx.transpose());
      Outputs<S>::append(g["grad.input.carried"], dH);
      Outputs<S>::append(g["grad.input.beta"], db.transpose());
    } else {
      Outputs<S>::append(g["grad.input.residual"], dH);
    }
  }
  if (!p.grad) return;
  g.into(o);
  if (scheme)
    for (auto& pg : hc_lucidrains_grads<S>(grad.at(0), scheme->config()))
      o.add("grad." + pg.name, p.tensors.at(pg.name).shape).values = std::move(pg.values);
}

template <class S>
void evaluate_hc_ops(const Problem& p, const Schema& s, Outputs<S>& o) {
  run_hc_ops<S>(p, s, o);
}

}  // namespace dmref::conf
