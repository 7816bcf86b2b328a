// dmref/model.hpp: the deterministic end-to-end model (docs/framework.md).
// T tokens, an embedding per token, L layers with the per-token layer function
// F_l(h) = W2_l tanh(W1_l RMSNorm(h)) of schemes-math.md, and any scheme
// plugged in. Tokens are independent in depth mixing, so the model is the
// framework's `forward` once per token; every layer input h_l, output v_l,
// the streams after each write and the final output are recorded.
#pragma once

#include "dmref/framework.hpp"
#include "dmref/layers.hpp"
#include "dmref/random.hpp"

#include <cmath>
#include <stdexcept>
#include <vector>

namespace dmref {

template <class S>
struct TanhMlpStack {
  std::vector<TanhMlpLayer<S>> layers;

  int depth() const { return static_cast<int>(layers.size()); }

  /// Weights from SplitMix64(seed), in this order: for l = 0..L-1, W1_l
  /// row-major then W2_l row-major; each entry uniform[-1,1) * scale / sqrt(fan_in)
  /// where scale is applied in double (exact: scale and 1/sqrt(fan_in) are
  /// combined first, one rounding per entry, documented in docs/fixtures.md).
  static TanhMlpStack random(int d, int hidden, int L, std::uint64_t seed, double scale = 1.0) {
    if (d <= 0 || hidden <= 0 || L < 0) throw std::invalid_argument("model: d, hidden must be > 0 and L >= 0");
    SplitMix64 rng(seed);
    TanhMlpStack m;
    auto fill = [&](int r, int c) {
      const double f = scale / std::sqrt(static_cast<double>(c));
      Mat<S> w(r, c);
      for (int i = 0; i < r; ++i)
        for (int j = 0; j < c; ++j) w(i, j) = S(rng.uniform() * f);
      return w;
    };
    for (int l = 0; l < L; ++l) {
      TanhMlpLayer<S> layer;
      layer.W1 = fill(hidden, d);
      layer.W2 = fill(d, hidden);
      m.layers.push_back(std::move(layer));
    }
    return m;
  }

  Vec<S> operator()(int l, const Vec<S>& h) const { return layers.at(l)(h); }
};

/// Runs every token (row of E, T x d) through the scheme and the stack.
template <Scheme M>
std::vector<Trace<typename M::Scalar, typename M::State>> run_model(const M& scheme, const Mat<typename M::Scalar>& E,
                                                                    const TanhMlpStack<typename M::Scalar>& stack,
                                                                    bool record_states = true) {
  using S = typename M::Scalar;
  std::vector<Trace<S, typename M::State>> out;
  out.reserve(E.rows());
  for (Eigen::Index t = 0; t < E.rows(); ++t)
    out.push_back(forward(scheme, Vec<S>(E.row(t).transpose()), stack.depth(), stack, record_states));
  return out;
}

}  // namespace dmref
