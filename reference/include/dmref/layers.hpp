// dmref/layers.hpp: the small deterministic building blocks shared by the
// schemes and the end-to-end models: RMSNorm, activations, the small MLP of
// ldm-math.md and the per-token layer function of schemes-math.md.
// All are scalar-generic and branch-free on data (they run on intervals).
#pragma once

#include "dmref/scalar_traits.hpp"

#include <stdexcept>
#include <string>

namespace dmref {

/// RMSNorm's divisor sqrt(mean(z^2) + eps).
template <class S>
S rms_of(const Vec<S>& z, const S& eps) {
  using std::sqrt;
  return sqrt(z.squaredNorm() / S(z.size()) + eps);
}

/// RMSNorm(z) = g * z / sqrt(mean(z^2) + eps); gain 1 when `g` is empty.
/// `rms`, when given, receives the divisor (rms_norm_vjp can reuse it).
template <class S>
Vec<S> rms_norm(const Vec<S>& z, const S& eps, const Vec<S>& g = Vec<S>(), S* rms = nullptr) {
  const S r = rms_of<S>(z, eps);
  Vec<S> y = z / r;
  if (g.size() != 0) y = y.cwiseProduct(g);
  if (rms) *rms = r;
  return y;
}

template <class S>
S silu(const S& x) {
  using std::exp;
  return x / (S(1) + exp(-x));
}

/// x / s where x / s is a normalised weight: a softmax entry or a Sinkhorn
/// normalisation. A kernel may form it in the log domain, exp(log x - log s)
/// (logsumexp softmax, log-domain Sinkhorn), where the subtraction's relative
/// error u is a relative error u |log(x / s)| of the weight; the tolerance
/// scalar models that (perturbed.hpp), every other scalar divides.
template <class S>
S normalized(const S& x, const S& s) {
  return x / s;
}

template <class S>
S sigmoid(const S& x) {
  using std::exp;
  return S(1) / (S(1) + exp(-x));
}

/// softplus(x) = log(1 + exp(x)), written without overflow for large x:
/// max(x,0) + log1p(exp(-|x|)) needs a branch, so instead the form
/// x + log1p(exp(-x)) is used for the (interval-safe) evaluation; exp(-x)
/// overflows only for x < -709 in double, far outside any weight range here.
template <class S>
S softplus(const S& x) {
  using std::exp;
  using std::log1p;
  return x + log1p(exp(-x));
}

/// The small MLP of ldm-math.md: W2 silu(W1 RMSNorm(z)), or W RMSNorm(z)
/// when there is no hidden layer (W1 empty, W2 is then the single map).
template <class S>
struct SmallMlp {
  Mat<S> W1;  // hidden x in (empty: no hidden layer)
  Mat<S> W2;  // out x hidden (or out x in)
  Vec<S> operator()(const Vec<S>& z) const {
    Vec<S> n = rms_norm<S>(z, S(1) / S(1000000));
    if (W1.size() == 0) return W2 * n;
    Vec<S> a = (W1 * n).unaryExpr([](const S& t) { return silu(t); });
    return W2 * a;
  }
};

/// The deterministic layer function for end-to-end fixtures:
/// F(h) = W2 tanh(W1 RMSNorm(h)), RMSNorm eps 1e-6, gain 1.
template <class S>
struct TanhMlpLayer {
  Mat<S> W1;  // hidden x d
  Mat<S> W2;  // d x hidden
  Vec<S> operator()(const Vec<S>& h) const {
    using std::tanh;
    Vec<S> a = (W1 * rms_norm<S>(h, S(1) / S(1000000))).unaryExpr([](const S& t) { return tanh(t); });
    return W2 * a;
  }
};

/// z / ||z||_2 (for each of the `groups` contiguous slices).
template <class S>
Vec<S> normalize_groups(const Vec<S>& z, int groups) {
  using std::sqrt;
  if (groups <= 0 || z.size() % groups != 0)
    throw std::invalid_argument("normalize_groups: " + std::to_string(groups) +
                                " groups do not divide width " + std::to_string(z.size()));
  const int w = static_cast<int>(z.size()) / groups;
  Vec<S> y(z.size());
  for (int g = 0; g < groups; ++g) y.segment(g * w, w) = z.segment(g * w, w) / sqrt(z.segment(g * w, w).squaredNorm());
  return y;
}

}  // namespace dmref
