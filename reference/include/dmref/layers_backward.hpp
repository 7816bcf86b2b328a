// dmref/layers_backward.hpp: vector-Jacobian products of the building blocks
// in layers.hpp (docs/framework.md, "Backward"), and the layer-function VJP
// of the end-to-end model (model.hpp). Branch-free on data: they run on
// intervals like the forward.
#pragma once

#include "dmref/layers.hpp"
#include "dmref/model.hpp"

#include <vector>

namespace dmref {

/// y = g * z / r with r = sqrt(mean(z^2) + eps) (g empty: gain 1). Given dy,
/// returns dz and adds dg += dy * z / r (when g is not empty):
///   dn = g * dy,  dz = dn / r - z (z . dn) / (d r^3).
template <class S>
Vec<S> rms_norm_vjp(const Vec<S>& z, const S& eps, const Vec<S>& g, const Vec<S>& dy, Vec<S>* dg = nullptr,
                    const S* rms = nullptr) {  // rms: the forward's divisor rms_of(z, eps), if it has it
  const S r = rms ? *rms : rms_of<S>(z, eps);
  Vec<S> dn = dy;
  if (g.size() != 0) {
    if (dg) *dg += dy.cwiseProduct(Vec<S>(z / r));
    dn = dy.cwiseProduct(g);
  }
  return dn / r - z * (z.dot(dn) / (S(z.size()) * r * r * r));
}

/// y = g * (z - mean(z)) / sigma + b with sigma = sqrt(mean((z - mean z)^2) + eps),
/// PyTorch's LayerNorm. It is RMSNorm of the centred z, plus the bias, so its
/// VJP is rms_norm_vjp at zc = z - mean(z) followed by the transpose of the
/// centring (itself: subtract the mean); adds dg += dy * xhat and db += dy.
template <class S>
Vec<S> layer_norm_vjp(const Vec<S>& z, const S& eps, const Vec<S>& g, const Vec<S>& dy, Vec<S>* dg = nullptr,
                      Vec<S>* db = nullptr) {
  const Vec<S> zc = z.array() - S(z.sum() / S(z.size()));
  if (db) *db += dy;
  const Vec<S> c = rms_norm_vjp<S>(zc, eps, g, dy, dg);
  return c.array() - S(c.sum() / S(c.size()));
}

/// F(h) = W2 tanh(W1 RMSNorm(h)): with u = W1 n, a = tanh(u),
///   dW2 += dv a^T,  du = (W2^T dv) * (1 - a^2),  dW1 += du n^T,  dh = RMSNorm^T(W1^T du).
/// Returns dh; adds the weight gradients into `grad` (same shapes as the layer).
template <class S>
Vec<S> tanh_mlp_layer_vjp(const TanhMlpLayer<S>& f, const Vec<S>& h, const Vec<S>& dv, TanhMlpLayer<S>& grad) {
  using std::tanh;
  const S eps = S(1) / S(1000000);
  const Vec<S> n = rms_norm<S>(h, eps);
  const Vec<S> a = (f.W1 * n).unaryExpr([](const S& t) { return S(tanh(t)); });
  grad.W2 += dv * a.transpose();
  const Vec<S> du = (f.W2.transpose() * dv).cwiseProduct(Vec<S>(Vec<S>::Ones(a.size()) - a.cwiseProduct(a)));
  grad.W1 += du * n.transpose();
  return rms_norm_vjp<S>(h, eps, Vec<S>(), Vec<S>(f.W1.transpose() * du));
}

/// The layer VJP of a TanhMlpStack for `backward`: accumulates dW1_l, dW2_l
/// over every call (every token) into `grad`.
template <class S>
struct TanhMlpStackVjp {
  const TanhMlpStack<S>* stack;
  std::vector<TanhMlpLayer<S>> grad;

  explicit TanhMlpStackVjp(const TanhMlpStack<S>& s) : stack(&s) {
    for (const auto& l : s.layers)
      grad.push_back({Mat<S>::Zero(l.W1.rows(), l.W1.cols()), Mat<S>::Zero(l.W2.rows(), l.W2.cols())});
  }
  Vec<S> operator()(int l, const Vec<S>& h, const Vec<S>& dv) {
    return tanh_mlp_layer_vjp<S>(stack->layers.at(l), h, dv, grad.at(l));
  }
};

/// y = z / ||z|| per group: dz = (dy - y (y . dy)) / ||z|| per group.
template <class S>
Vec<S> normalize_groups_vjp(const Vec<S>& z, int groups, const Vec<S>& dy) {
  using std::sqrt;
  const int w = static_cast<int>(z.size()) / groups;
  Vec<S> dz(z.size());
  for (int g = 0; g < groups; ++g) {
    const S r = sqrt(z.segment(g * w, w).squaredNorm());
    const Vec<S> y = z.segment(g * w, w) / r;
    const Vec<S> d = dy.segment(g * w, w);
    dz.segment(g * w, w) = (d - y * y.dot(d)) / r;
  }
  return dz;
}

/// The small MLP W2 silu(W1 RMSNorm(z)) (or W RMSNorm(z)): with n = RMSNorm(z),
/// u = W1 n, a = silu(u): dW2 += dy a^T, du = (W2^T dy) silu'(u) with
/// silu'(u) = s (1 + u (1 - s)), s = sigmoid(u), dW1 += du n^T, dz = RMSNorm^T(W1^T du).
/// Returns dz; adds the weight gradients into `grad` (same shapes as f).
template <class S>
Vec<S> small_mlp_vjp(const SmallMlp<S>& f, const Vec<S>& z, const Vec<S>& dy, SmallMlp<S>& grad) {
  const S eps = S(1) / S(1000000);
  const Vec<S> n = rms_norm<S>(z, eps);
  Vec<S> dn;
  if (f.W1.size() == 0) {
    grad.W2 += dy * n.transpose();
    dn = f.W2.transpose() * dy;
  } else {
    const Vec<S> u = f.W1 * n;
    const Vec<S> a = u.unaryExpr([](const S& t) { return silu(t); });
    grad.W2 += dy * a.transpose();
    Vec<S> du = f.W2.transpose() * dy;
    for (Eigen::Index i = 0; i < u.size(); ++i) {
      const S s = sigmoid(u(i));
      du(i) *= s * (S(1) + u(i) * (S(1) - s));
    }
    grad.W1 += du * n.transpose();
    dn = f.W1.transpose() * du;
  }
  return rms_norm_vjp<S>(z, eps, Vec<S>(), dn);
}

}  // namespace dmref
