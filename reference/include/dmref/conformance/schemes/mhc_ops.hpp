// dmref/conformance/schemes/mhc_ops.hpp: mHC at op level (docs/mhc_ops.md):
// the fused ops public kernels compute (FlagGems / TileKernels / aiter
// `mhc_pre`, `mhc_post`, their fusion `post_pre`), one layer, M tokens, with
// the kernels' tensor names and storage, and DeepSeek-V4's learned reduce head
// `hc_head` (op head: Mhc::final with MhcReduce::head):
//   input.residual  [M, n, C]   the residual streams X (row j = stream j)
//   param.fn        [n3, nC]    rows [pre (n) | post (n) | comb (n*n, row in*n + out)], n3 = 2n + n^2;
//                               column j*C + c multiplies X(j, c) (a torch.nn.Linear weight over vec X)
//   param.hc_scale  [3]         alpha_pre, alpha_post, alpha_res
//   param.hc_base   [n3]        b_pre | b_post | b_res stored [in, out]
//   comb_mix        [M, n, n]   H_res stored [in, out]: comb[in, out] = H_res[out, in]
//   param.hc_head_fn    [n, nC] the head's projection (a torch.nn.Linear weight over vec X: phi^T)
//   param.hc_head_scale [1]     its scale a;  param.hc_head_base [n]: its bias b
// Every number comes from the scheme's own functions (mhc.hpp: the
// coefficients, Sinkhorn, mhc_mix, mhc_update; mhc_backward.hpp: their
// adjoints); this file only moves tensors between the kernels' storage and
// MhcLayer / MhcCoefficients / MhcHead. Schema, corpus rows, registry entry:
// src/conformance/schemes/mhc_ops.cpp.
#pragma once

#include "dmref/conformance/binding.hpp"
#include "dmref/conformance/schemes/mhc_constants.hpp"
#include "dmref/mhc_backward.hpp"

namespace dmref::conf {

enum class MhcOp { pre, post, post_pre, head };
/// The op of config key `op` (one of the schema's choices).
inline MhcOp mhc_op_named(const std::string& o) {
  return o == "pre" ? MhcOp::pre : o == "post" ? MhcOp::post : o == "post_pre" ? MhcOp::post_pre : MhcOp::head;
}
inline MhcOp mhc_op(const Schema& s) { return mhc_op_named(s.text("op")); }
inline bool mhc_op_has_pre(MhcOp op) { return op == MhcOp::pre || op == MhcOp::post_pre; }
inline bool mhc_op_has_post(MhcOp op) { return op == MhcOp::post || op == MhcOp::post_pre; }

/// Rows `first[k]` (k = 0 .. K-1) of a row-major tensor of rows of `cols`
/// values, as the columns of a Mat [cols, K]: mat_at(...).transpose() with
/// its columns chosen, in one pass (for Balls, mat_at, the transpose and
/// mhc_res_columns_transpose each made a copy of 393,216 balls per token at
/// C = 4096).
template <class S>
Mat<S> mhc_fused_columns(const io::Tensor& t, const std::vector<std::int64_t>& first, std::int64_t cols) {
  Mat<S> m(cols, static_cast<Eigen::Index>(first.size()));
  for (std::size_t k = 0; k < first.size(); ++k)
    for (std::int64_t j = 0; j < cols; ++j) m(j, Eigen::Index(k)) = S(t.values[std::size_t(first[k] * cols + j)]);
  return m;
}
inline std::vector<std::int64_t> mhc_rows_from(std::int64_t first, std::int64_t count) {
  std::vector<std::int64_t> r(static_cast<std::size_t>(count));
  for (std::int64_t k = 0; k < count; ++k) r[std::size_t(k)] = first + k;
  return r;
}

/// One layer's parameters from the kernels' fused storage (fn, hc_scale, hc_base).
template <class S>
MhcLayer<S> mhc_layer_from_fused(const io::Tensor& fn, const io::Tensor& scale, const io::Tensor& base, int n,
                                 std::int64_t C) {
  const std::int64_t nC = n * C;
  MhcLayer<S> q;
  q.phi_pre = mhc_fused_columns<S>(fn, mhc_rows_from(0, n), nC);
  q.phi_post = mhc_fused_columns<S>(fn, mhc_rows_from(n, n), nC);
  // comb row in*n + out (storage) is phi_res column out*n + in (mhc_res_columns_transpose)
  std::vector<std::int64_t> res(std::size_t(n) * n);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) res[std::size_t(a * n + b)] = 2 * n + b * n + a;
  q.phi_res = mhc_fused_columns<S>(fn, res, nC);
  q.a_pre = S(scale.values[0]);
  q.a_post = S(scale.values[1]);
  q.a_res = S(scale.values[2]);
  q.b_pre = vec_at<S>(base, 0, n);
  q.b_post = vec_at<S>(base, n, n);
  q.b_res = mhc_from_storage<S>(mat_at<S>(base, 2 * n, n, n));
  return q;
}

/// The head's parameters from DeepSeek-V4's storage: hc_head_fn [n, nC] is
/// phi^T, hc_head_scale [1] the scale a, hc_head_base [n] the bias b.
template <class S>
MhcHead<S> mhc_head_from_fused(const io::Tensor& fn, const io::Tensor& scale, const io::Tensor& base, int n,
                               std::int64_t C) {
  return {mhc_fused_columns<S>(fn, mhc_rows_from(0, n), n * C), S(scale.values[0]), vec_at<S>(base, 0, n)};
}

/// The head's gradients (Backward<Mhc>::Grad::head) in the same storage.
template <class S>
std::vector<ParamGrad<S>> mhc_head_fused_grads(const MhcHead<S>& g) {
  std::vector<ParamGrad<S>> r{{"param.hc_head_fn", {}}, {"param.hc_head_scale", {}}, {"param.hc_head_base", {}}};
  r[0].add(g.phi.transpose());
  r[1].add(g.a);
  r[2].add(g.b.transpose());
  return r;
}

/// The parameter gradients (Backward<Mhc>::Grad, layer 0) in the same storage,
/// moved out of g.
template <class S>
std::vector<ParamGrad<S>> mhc_fused_grads(MhcLayer<S>& g, int n) {
  std::vector<ParamGrad<S>> r{{"param.fn", {}}, {"param.hc_scale", {}}, {"param.hc_base", {}}};
  // fn's rows: the columns of phi_pre, of phi_post, then comb row in*n + out = phi_res column out*n + in
  // (mhc_res_columns_transpose), each moved out of the gradient, not copied.
  r[0].values.reserve(std::size_t(g.phi_pre.size() + g.phi_post.size() + g.phi_res.size()));
  r[0].take(g.phi_pre.transpose()).take(g.phi_post.transpose());
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) r[0].take(g.phi_res.col(b * n + a).transpose());
  r[1].add(g.a_pre).add(g.a_post).add(g.a_res);
  r[2].add(g.b_pre.transpose()).add(g.b_post.transpose()).add(mhc_to_storage<S>(g.b_res));
  return r;
}

/// The steps of the ops, each the scheme's own function (tests/mutants
/// replaces one at a time: a struct deriving from this one hides a member).
template <class S>
struct MhcOpsSteps {
  using B = Backward<Mhc<S>>;
  /// post's comb_mix ([in, out]) as H_res.
  Mat<S> comb(const Mat<S>& stored) const { return mhc_from_storage<S>(stored); }
  Mat<S> update(const Mat<S>& X, const MhcCoefficients<S>& k, const Vec<S>& x) const { return mhc_update<S>(X, k, x); }
  /// post_pre: the streams pre reads, post's result Y (R: post's input).
  const Mat<S>& pre_input(const Mat<S>& R, const Mat<S>& Y) const {
    (void)R;
    return Y;
  }
  MhcCoefficients<S> coefficients(const Mhc<S>& m, const Mat<S>& X) const { return m.coefficients(X, 0); }
  Vec<S> mix(const Mat<S>& X, const Vec<S>& w) const { return mhc_mix<S>(X, w); }
  /// head: the parameters from the stored tensors, and the weights (its
  /// result is mix(X, weights): Mhc::final with reduce == head).
  MhcHead<S> head_params(const io::Tensor& fn, const io::Tensor& scale, const io::Tensor& base, int n,
                         std::int64_t C) const {
    return mhc_head_from_fused<S>(fn, scale, base, n, C);
  }
  Vec<S> head_weights(const Mhc<S>& m, const Mat<S>& X) const { return m.head_weights(X); }
  // ---- backward
  Vec<S> mix_vjp(const Mat<S>& X, const Vec<S>& w, const Vec<S>& dh, Mat<S>& dX) const { return B::mix_vjp(X, w, dh, dX); }
  /// k: the forward's coefficients of X (coefficients(m, X)), reused by the backward.
  void coefficients_vjp(const B& bw, const Mat<S>& X, const MhcCoefficients<S>& k, const Vec<S>& dpre,
                        const Vec<S>& dpost, const Mat<S>& dres, Mat<S>& dX, typename B::Grad& g) const {
    bw.coefficients_vjp(X, 0, dpre, dpost, dres, dX, g, nullptr, &k);
  }
  void head_weights_vjp(const B& bw, const Mat<S>& X, const Vec<S>& dw, Mat<S>& dX, typename B::Grad& g) const {
    bw.head_weights_vjp(X, dw, dX, g);
  }
  /// post_pre: the adjoint of post's result, pre's dX plus the upstream of output.residual.
  void add_residual_upstream(Mat<S>& dY, const Mat<S>& up) const { dY += up; }
  Mat<S> update_vjp(const Mat<S>& X, const MhcCoefficients<S>& k, const Vec<S>& x, const Mat<S>& dY, Mat<S>& dres,
                    Vec<S>& dpost, Vec<S>& dx) const {
    return B::update_vjp(X, k, x, dY, dres, dpost, dx);
  }
};

/// Token by token: post (when the op has it) X <- H_res X + post x, then pre
/// (when it has it) h = sum_j H_pre[j] X_j with the coefficients of X, or
/// (op head) y = sum_j w_j X_j with the head's weights w of X; with p.grad,
/// their adjoints in reverse order, parameter gradients summed over tokens in
/// token order.
template <class S, class Steps = MhcOpsSteps<S>>
void run_mhc_ops(const Problem& p, const Schema& s, Outputs<S>& o, const Steps& st = {}) {
  const MhcOp op = mhc_op(s);
  const bool pre = mhc_op_has_pre(op), post = mhc_op_has_post(op), head = op == MhcOp::head;
  const std::int64_t T = s.integer("tokens"), n = s.integer("n"), C = s.integer("d"), nC = n * C;
  check_upstream(p, s);
  const io::Tensor& R = s.read(p, "input.residual");
  const io::Tensor *X = nullptr, *PM = nullptr, *CM = nullptr;
  if (post) {
    X = &s.read(p, "input.x");
    PM = &s.read(p, "input.post_mix");
    CM = &s.read(p, "input.comb_mix");
  }
  std::optional<Mhc<S>> scheme;
  if (pre) {
    MhcConfig<S> c = mhc_constants<S>(s, n, C);
    c.layers.push_back(mhc_layer_from_fused<S>(s.read(p, "param.fn"), s.read(p, "param.hc_scale"),
                                               s.read(p, "param.hc_base"), int(n), C));
    scheme.emplace(std::move(c));  // validates (ParameterError names the field)
  }
  if (head) {
    MhcConfig<S> c = mhc_constants<S>(s, n, C);
    c.reduce = MhcReduce::head;
    c.head = st.head_params(s.read(p, "param.hc_head_fn"), s.read(p, "param.hc_head_scale"),
                            s.read(p, "param.hc_head_base"), int(n), C);
    scheme.emplace(std::move(c));
  }
  std::vector<std::string> outs;
  if (post) outs.push_back("residual");
  if (pre)
    for (const char* k : {"layer_input", "pre_mix", "post_mix", "comb_mix"}) outs.push_back(k);
  if (head) outs.push_back("hidden");
  OpOutputs<S> ports = op_outputs(p, s, o, outs);
  if (p.layout_only) return;
  auto& up = ports.up;
  auto& out = ports.out;
  using B = Backward<Mhc<S>>;
  std::optional<B> bw;
  typename B::Grad grad;
  if (p.grad && scheme) {
    bw.emplace(B{*scheme});
    grad = bw->zero_grad();
  }
  InputGrads<S> g{p, {}};  // grad.input.*, token after token
  for (std::int64_t t = 0; t < T; ++t) {
    const Mat<S> R_t = mat_at<S>(R, t * nC, n, C);
    Mat<S> Xs = R_t;  // the streams pre reads
    MhcCoefficients<S> kp;
    Vec<S> x;
    if (post) {
      kp.post = vec_at<S>(*PM, t * n, n);
      kp.res = st.comb(mat_at<S>(*CM, t * n * n, n, n));
      x = vec_at<S>(*X, t * C, C);
      const Mat<S> Y = st.update(R_t, kp, x);
      Outputs<S>::append(*out["residual"], mhc_vec<S>(Y).transpose());
      Xs = st.pre_input(R_t, Y);
      if (pre) store_values<S>(Xs);  // post_pre: pre reads the new residual as stored (an output, in the activation dtype)
    }
    MhcCoefficients<S> k;
    if (pre) {
      k = st.coefficients(*scheme, Xs);
      Outputs<S>::append(*out["layer_input"], st.mix(Xs, k.pre).transpose());
      Outputs<S>::append(*out["pre_mix"], k.pre.transpose());
      Outputs<S>::append(*out["post_mix"], k.post.transpose());
      Outputs<S>::append(*out["comb_mix"], mhc_vec<S>(mhc_to_storage<S>(k.res)).transpose());
    }
    Vec<S> w;
    if (head) {
      w = st.head_weights(*scheme, Xs);
      Outputs<S>::append(*out["hidden"], st.mix(Xs, w).transpose());
    }
    if (!p.grad) continue;
    Mat<S> dXs = Mat<S>::Zero(n, C);
    if (pre) {
      const Vec<S> dh = vec_at<S>(*up["layer_input"], t * C, C);
      const Vec<S> dpre = Vec<S>(st.mix_vjp(Xs, k.pre, dh, dXs) + vec_at<S>(*up["pre_mix"], t * n, n));
      const Vec<S> dpost = vec_at<S>(*up["post_mix"], t * n, n);
      const Mat<S> dres = mhc_from_storage<S>(mat_at<S>(*up["comb_mix"], t * n * n, n, n));
      st.coefficients_vjp(*bw, Xs, k, dpre, dpost, dres, dXs, grad);
    }
    if (head) {
      const Vec<S> dw = st.mix_vjp(Xs, w, vec_at<S>(*up["hidden"], t * C, C), dXs);
      st.head_weights_vjp(*bw, Xs, dw, dXs, grad);
    }
    if (post) {
      if (pre) store_values<S>(dXs);  // its adjoint, stored likewise (framework.hpp, Adjoint::stored)
      st.add_residual_upstream(dXs, mat_at<S>(*up["residual"], t * nC, n, C));
      Mat<S> dres;
      Vec<S> dpost, dx;
      const Mat<S> dR = st.update_vjp(R_t, kp, x, dXs, dres, dpost, dx);
      Outputs<S>::append(g["grad.input.residual"], mhc_vec<S>(dR).transpose());
      Outputs<S>::append(g["grad.input.x"], dx.transpose());
      Outputs<S>::append(g["grad.input.post_mix"], dpost.transpose());
      Outputs<S>::append(g["grad.input.comb_mix"], mhc_vec<S>(mhc_to_storage<S>(dres)).transpose());
    } else {
      Outputs<S>::append(g["grad.input.residual"], mhc_vec<S>(dXs).transpose());
    }
  }
  if (!p.grad) return;
  g.into(o);
  std::vector<ParamGrad<S>> params;  // post has none
  if (pre) params = mhc_fused_grads<S>(grad.layers.at(0), int(n));
  if (head) params = mhc_head_fused_grads<S>(grad.head);
  for (auto& pg : params) o.add("grad." + pg.name, p.tensors.at(pg.name).shape).values = std::move(pg.values);
}

template <class S>
void evaluate_mhc_ops(const Problem& p, const Schema& s, Outputs<S>& o) {
  run_mhc_ops<S>(p, s, o);
}

}  // namespace dmref::conf
