// dmref/mhc_backward.hpp: the adjoints of mHC (docs/mhc.md, "Backward"),
// through exactly the t_max Sinkhorn rounds the forward runs (the derivative
// of the finite recurrence, not the implicit derivative of its limit).
//   read^T(l),  h = sum_j H_pre[j] X_j:          dX_j += H_pre[j] dh,  dH_pre[j] = dh . X_j
//   write^T(l), X'_i = sum_j H_res[i,j] X_j + H_post[i] v:
//               dX = H_res^T dX',  dH_res[i,j] = dX'_i . X_j,  dH_post[i] = dX'_i . v,
//               dv = sum_i H_post[i] dX'_i
//   coefficients^T (both read and write linearize at X before the layer):
//     H_pre = sigmoid(z) + eps:      dz = dH_pre s (1 - s)
//     H_post = c sigmoid(z):         dz = dH_post c s (1 - s)
//     H_res = Sinkhorn(exp(Z)):      dZ = Sinkhorn^T(dH_res) (below)
//     z = a (phi^T x') + b:          db += dz, da += dz . (phi^T x'), dphi += x' (a dz)^T, dx' += phi (a dz)
//     x' = RMSNorm(vec X):           dX += unvec(RMSNorm^T(dx'))
//   Sinkhorn^T: a normalization Y = M / s (s_j = sum_k M_kj + c per column, or
//   per row) has dM = (dY - 1 (sum_k dY_kj Y_kj)) / s, column by column (row by
//   row); adding eps_add passes dY through; exp gives dZ = dE * E. The rounds
//   are replayed from the logits and reversed one normalization at a time.
//   upstream of the state's coefficients (outputs H_pre, H_post, H_res, Ht_res
//   of layer l, kept in the streams after write l): added to dH_pre, dH_post,
//   dH_res, dHt_res at write^T(l), before coefficients^T.
//   final^T: sum: dX_j = d out; learned head: as read^T with the head's weights.
//   init^T:  de = sum_j w_j dX_j (w = init_weights, or 1).
#pragma once

#include "dmref/backward.hpp"
#include "dmref/layers_backward.hpp"
#include "dmref/mhc.hpp"

#include <vector>

namespace dmref {

/// The VJP of mhc_sinkhorn(logits, t_max, eps_add, eps_den) for dH.
template <class S>
Mat<S> mhc_sinkhorn_vjp(const Mat<S>& logits, int t_max, const S& eps_add, const S& eps_den, const Mat<S>& dH) {
  using std::exp;
  const Eigen::Index n = logits.rows();
  // Replay: inputs of every normalization, with its kind (column/row) and constant.
  struct Step {
    Mat<S> in;
    bool columns;
    S add;
  };
  std::vector<Step> steps;
  Mat<S> E = logits.unaryExpr([](const S& z) { return S(exp(z)); });
  Mat<S> M = E;
  auto normalize = [&](bool columns, const S& add) {
    steps.push_back({M, columns, add});
    for (Eigen::Index a = 0; a < n; ++a) {
      S s = columns ? M(0, a) : M(a, 0);
      for (Eigen::Index b = 1; b < n; ++b) s += columns ? M(b, a) : M(a, b);
      const S den = s + add;
      for (Eigen::Index b = 0; b < n; ++b) (columns ? M(b, a) : M(a, b)) = normalized((columns ? M(b, a) : M(a, b)), den);
    }
  };
  normalize(true, S(0));
  M = M.array() + eps_add;
  normalize(false, eps_den);
  for (int t = 2; t <= t_max; ++t) {
    normalize(true, eps_den);
    normalize(false, eps_den);
  }
  Mat<S> dY = dH;
  for (std::size_t k = steps.size(); k-- > 0;) {
    const Step& st = steps[k];
    Mat<S> dM(n, n);
    for (Eigen::Index a = 0; a < n; ++a) {
      S s = st.columns ? st.in(0, a) : st.in(a, 0);
      for (Eigen::Index b = 1; b < n; ++b) s += st.columns ? st.in(b, a) : st.in(a, b);
      const S den = s + st.add;
      S dot = S(0);  // sum_b dY_b Y_b = sum_b dY_b in_b / den
      for (Eigen::Index b = 0; b < n; ++b) dot += (st.columns ? dY(b, a) * st.in(b, a) : dY(a, b) * st.in(a, b));
      dot = dot / den;
      for (Eigen::Index b = 0; b < n; ++b) (st.columns ? dM(b, a) : dM(a, b)) = ((st.columns ? dY(b, a) : dY(a, b)) - dot) / den;
    }
    dY = std::move(dM);  // + eps_add between the first two steps passes the adjoint through
  }
  return dY.cwiseProduct(E);
}

template <class S>
struct Backward<Mhc<S>> {
  using State = typename Mhc<S>::State;
  struct Adjoint {
    Mat<S> X;
    // The state after write l keeps layer l's coefficients (Mhc::State::coef,
    // the outputs H_pre, H_post, H_res, Ht_res): their adjoints, from a
    // per-layer upstream (Upstream::states). Empty members are zero.
    MhcCoefficients<S> coef = {};
    template <class F>
    void stored(F&& f) { f(X); }  // framework.hpp (the coefficients' adjoints stay float32)
    Adjoint& operator+=(const Adjoint& o) {
      if (o.X.size() != 0) X = X.size() != 0 ? Mat<S>(X + o.X) : o.X;
      auto add = [](auto& x, const auto& y) {
        if (y.size() == 0) return;
        if (x.size() == 0) x = y;
        else x += y;
      };
      add(coef.pre_logits, o.coef.pre_logits);
      add(coef.post_logits, o.coef.post_logits);
      add(coef.res_logits, o.coef.res_logits);
      add(coef.pre, o.coef.pre);
      add(coef.post, o.coef.post);
      add(coef.res, o.coef.res);
      return *this;
    }
  };
  struct Grad {
    std::vector<MhcLayer<S>> layers;  // per layer, the shapes of MhcLayer
    MhcHead<S> head;                  // learned head (reduce == head)
    Vec<S> init_weights;              // when the config has init weights
  };

  const Mhc<S>& scheme;

  Grad zero_grad() const {
    const auto& c = scheme.config();
    Grad g;
    const Eigen::Index n = c.n, nC = n * c.C;
    for (int l = 0; l < scheme.layer_count(); ++l) {
      MhcLayer<S> z;
      z.phi_pre = Mat<S>::Zero(nC, n);
      z.phi_post = Mat<S>::Zero(nC, n);
      z.phi_res = Mat<S>::Zero(nC, n * n);
      z.a_pre = z.a_post = z.a_res = S(0);
      z.b_pre = Vec<S>::Zero(n);
      z.b_post = Vec<S>::Zero(n);
      z.b_res = Mat<S>::Zero(n, n);
      g.layers.push_back(std::move(z));
    }
    if (c.reduce == MhcReduce::head) g.head = {Mat<S>::Zero(nC, n), S(0), Vec<S>::Zero(n)};
    g.init_weights = Vec<S>::Zero(c.init_weights.size());
    return g;
  }

  /// dX of x' = RMSNorm(vec X) for dx' (rms: the forward's divisor, if at hand).
  Mat<S> unvec_rms_vjp(const Mat<S>& X, const Vec<S>& dxn, const S* rms = nullptr) const {
    const Vec<S> dx = rms_norm_vjp<S>(mhc_vec<S>(X), scheme.config().rms_eps, Vec<S>(), dxn, nullptr, rms);
    Mat<S> dX(X.rows(), X.cols());
    for (Eigen::Index j = 0; j < X.rows(); ++j)
      for (Eigen::Index c = 0; c < X.cols(); ++c) dX(j, c) = dx(j * X.cols() + c);
    return dX;
  }

  /// The VJP of mhc_coefficients(cfg, layer l, X) for adjoints of H_pre,
  /// H_post, H_res (any may be zero): adds into the layer's gradients and dX.
  /// `dlogits`, when given, holds adjoints of the logits Ht_pre, Ht_post,
  /// Ht_res (its pre_logits, post_logits, res_logits; empty members are zero).
  /// `fwd`, when given with its linearization (MhcCoefficients::xn), is
  /// mhc_coefficients(cfg, layer l, X) as the forward computed it: reused
  /// rather than computed again (the same numbers).
  void coefficients_vjp(const Mat<S>& X, int l, const Vec<S>& dpre, const Vec<S>& dpost, const Mat<S>& dres, Mat<S>& dX,
                        Grad& gr, const MhcCoefficients<S>* dlogits = nullptr,
                        const MhcCoefficients<S>* fwd = nullptr) const {
    const auto& c = scheme.config();
    const MhcLayer<S>& p = scheme.layer(l);  // made on demand with a layer_source; only l is used below
    MhcLayer<S>& g = gr.layers[l];
    const int n = c.n;
    MhcCoefficients<S> own;
    if (!fwd || fwd->xn.size() == 0) own = scheme.coefficients(X, l);
    const MhcCoefficients<S>& k = own.xn.size() != 0 ? own : *fwd;
    const Vec<S>& xn = k.xn;
    Vec<S> dxn = Vec<S>::Zero(xn.size());
    auto affine = [&](const Vec<S>& dz, const Vec<S>& r, const Mat<S>& phi, const S& a, Mat<S>& dphi, S& da,
                      Vec<S>& db) {  // r = phi^T x'
      db += dz;
      da += dz.dot(r);
      add_outer(dphi, xn, Vec<S>(a * dz));
      add_scaled_product(dxn, phi, a, dz);
    };
    Vec<S> dz(n);
    for (int i = 0; i < n; ++i) {
      const S s = sigmoid(k.pre_logits(i));
      dz(i) = dpre(i) * c.pre_scale * s * (S(1) - s);  // H_pre = pre_scale sigmoid(.) + pre_eps
    }
    if (dlogits && dlogits->pre_logits.size() != 0) dz += dlogits->pre_logits;
    affine(dz, k.proj_pre, p.phi_pre, p.a_pre, g.phi_pre, g.a_pre, g.b_pre);
    for (int i = 0; i < n; ++i) {
      const S s = sigmoid(k.post_logits(i));
      dz(i) = dpost(i) * c.post_scale * s * (S(1) - s);
    }
    if (dlogits && dlogits->post_logits.size() != 0) dz += dlogits->post_logits;
    affine(dz, k.proj_post, p.phi_post, p.a_post, g.phi_post, g.a_post, g.b_post);
    Mat<S> dZ = mhc_sinkhorn_vjp<S>(k.res_logits, c.t_max, c.res_eps_add, c.res_eps_den, dres);
    if (dlogits && dlogits->res_logits.size() != 0) dZ += dlogits->res_logits;
    Vec<S> dzr(n * n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) dzr(i * n + j) = dZ(i, j);
    g.b_res += dZ;
    g.a_res += dzr.dot(k.proj_res);
    add_outer(g.phi_res, xn, Vec<S>(p.a_res * dzr));
    add_scaled_product(dxn, p.phi_res, p.a_res, dzr);
    add_to(dX, unvec_rms_vjp(X, dxn, &k.rms));
  }

  /// read^T of a mix h = sum_j w_j X_j: dX_j += w_j dh; returns dw.
  static Vec<S> mix_vjp(const Mat<S>& X, const Vec<S>& w, const Vec<S>& dh, Mat<S>& dX) {
    Vec<S> dw(X.rows());
    add_outer(dX, w, dh);  // dX.row(j) += w(j) dh^T, element by element
    row_dots(X, dh, dw);   // dw(j) = dh . X_j
    return dw;
  }

  /// write^T of X'_i = sum_j H_res[i,j] X_j + H_post[i] v (mhc_update) for
  /// dY = dX': returns dX = H_res^T dY; dres[i,j] = dY_i . X_j, dpost[i] =
  /// dY_i . v, dv = sum_i H_post[i] dY_i (the coefficients as given: write()
  /// and the op-level `post`, conformance/schemes/mhc_ops.hpp).
  static Mat<S> update_vjp(const Mat<S>& X, const MhcCoefficients<S>& k, const Vec<S>& v, const Mat<S>& dY,
                           Mat<S>& dres, Vec<S>& dpost, Vec<S>& dv) {
    const Eigen::Index n = X.rows();
    dres.resize(n, n);
    row_dots(dY, v, dpost);  // dpost(i) = dY_i . v
    Mat<S> dvm = Mat<S>::Zero(X.cols(), 1);
    Vec<S> dres_i;
    for (Eigen::Index i = 0; i < n; ++i) {
      const Vec<S> dYi = dY.row(i).transpose();
      add_outer(dvm, dYi, Vec<S>(Vec<S>::Constant(1, k.post(i))));  // dv += H_post[i] dY_i
      row_dots(X, dYi, dres_i);                                      // dres(i, j) = dY_i . X_j
      dres.row(i) = dres_i.transpose();
    }
    dv = dvm.col(0);
    return k.res.transpose() * dY;
  }

  /// The VJP of the head's weights w = sigmoid(a (x' phi) + b) + head_eps
  /// (Mhc::head_weights) for dw: dz = dw s (1 - s), then as one group of
  /// coefficients_vjp's affine map and the RMS norm; adds into the head's
  /// gradients and dX (final^T, and the op-level `head` of
  /// conformance/schemes/mhc_ops.hpp).
  void head_weights_vjp(const Mat<S>& X, const Vec<S>& dw, Mat<S>& dX, Grad& gr) const {
    const auto& c = scheme.config();
    const Vec<S> xn = rms_norm<S>(mhc_vec<S>(X), c.rms_eps);
    const Vec<S> r = c.head.phi.transpose() * xn;
    Vec<S> dz(c.n);
    for (int i = 0; i < c.n; ++i) {
      const S sg = sigmoid(S(c.head.a * r(i) + c.head.b(i)));
      dz(i) = dw(i) * sg * (S(1) - sg);
    }
    gr.head.b += dz;
    gr.head.a += dz.dot(r);
    add_outer(gr.head.phi, xn, Vec<S>(c.head.a * dz));
    add_to(dX, unvec_rms_vjp(X, Vec<S>(c.head.phi * (c.head.a * dz))));
  }

  Adjoint final(const State& s, const Vec<S>& dout, Grad& gr) const {
    const auto& c = scheme.config();
    Adjoint a{Mat<S>::Zero(s.X.rows(), s.X.cols())};
    if (c.reduce == MhcReduce::sum) {
      mix_vjp(s.X, Vec<S>::Ones(c.n), dout, a.X);
      return a;
    }
    head_weights_vjp(s.X, mix_vjp(s.X, scheme.head_weights(s.X), dout, a.X), a.X, gr);
    return a;
  }

  Vec<S> write(const State& before, int l, const Vec<S>& v, Adjoint& a, Grad& gr) const {
    const auto& c = scheme.config();
    const MhcCoefficients<S> k = scheme.coefficients(before.X, l);
    Mat<S> dres;
    Vec<S> dpost, dv;
    Mat<S> dX = update_vjp(before.X, k, v, a.X, dres, dpost, dv);
    // Upstream of layer l's coefficients, kept in the state after this write:
    // they linearize at before.X like the read's and the write's own.
    const MhcCoefficients<S>& up = a.coef;
    if (up.post.size() != 0) dpost += up.post;
    if (up.res.size() != 0) dres += up.res;
    coefficients_vjp(before.X, l, up.pre.size() != 0 ? up.pre : Vec<S>(Vec<S>::Zero(c.n)), dpost, dres, dX, gr, &up,
                     &k);
    a.X = std::move(dX);
    a.coef = {};  // `before` holds layer l-1's coefficients: nothing downstream reads them
    return dv;
  }

  void read(const State& before, int l, const Vec<S>& dh, Adjoint& a, Grad& gr) const {
    const auto& c = scheme.config();
    const MhcCoefficients<S> k = scheme.coefficients(before.X, l);
    const Vec<S> dpre = mix_vjp(before.X, k.pre, dh, a.X);
    coefficients_vjp(before.X, l, dpre, Vec<S>::Zero(c.n), Mat<S>::Zero(c.n, c.n), a.X, gr, nullptr, &k);
  }

  Vec<S> init(const Vec<S>& e, const Adjoint& a, Grad& gr) const {
    const auto& c = scheme.config();
    Vec<S> de = Vec<S>::Zero(e.size());
    for (int j = 0; j < c.n; ++j) {
      const Vec<S> dXj = a.X.row(j).transpose();
      if (c.init_weights.size() == 0) {
        de += dXj;
      } else {
        de += c.init_weights(j) * dXj;
        gr.init_weights(j) += dXj.dot(e);
      }
    }
    return de;
  }
};

}  // namespace dmref
