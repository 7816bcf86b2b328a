// dmref/oracles/attnres_ops_flash.hpp: the op-level Block AttnRes ops
// (docs/attnres_ops.md) transcribed the way the public two-phase kernels
// (flash-attn-res phase_1 / phase_2) compute them, independently of the
// reference (attnres.hpp):
//   logits   z_i = ((w * g) . b_i) * rsqrt(sum(b_i^2) / C + eps)   (norm after the projection)
//   phase 1  m = max_i z_i, p_i = exp(z_i - m), l = sum p_i,
//            o = (sum_i p_i b_i) / l, lse = m + log l
//   phase 2  s = sigmoid(z - lse) (the new source's weight), h = o + s (b - o),
//            lse' = max(lse, z) + log(exp(lse - max) + exp(z - max))
//   readout  phase 1's o over the sources (the partial appended when read).
// Point types only (the max).
#pragma once

#include "dmref/scalar_traits.hpp"

#include <cmath>
#include <stdexcept>
#include <vector>

namespace dmref::oracle {

template <class S>
S flash_logit(const Vec<S>& b, const Vec<S>& w, const Vec<S>& g, const S& eps) {
  using std::sqrt;
  S dot = 0, sq = 0;
  for (Eigen::Index c = 0; c < b.size(); ++c) {
    dot += w(c) * g(c) * b(c);
    sq += b(c) * b(c);
  }
  return dot / sqrt(sq / S(b.size()) + eps);
}

template <class S>
struct FlashStats {
  Vec<S> o;
  S lse;
};

template <class S>
FlashStats<S> flash_phase1(const std::vector<Vec<S>>& src, const Vec<S>& w, const Vec<S>& g, const S& eps) {
  using std::exp;
  using std::log;
  if (src.empty()) throw std::invalid_argument("oracle::flash_phase1: no sources");
  std::vector<S> z;
  for (const auto& b : src) z.push_back(flash_logit<S>(b, w, g, eps));
  S m = z[0];
  for (const auto& x : z)
    if (x > m) m = x;
  S l = 0;
  Vec<S> acc = Vec<S>::Zero(w.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    const S p = exp(z[i] - m);
    l += p;
    acc += p * src[i];
  }
  return {Vec<S>(acc / l), S(m + log(l))};
}

template <class S>
FlashStats<S> flash_phase2(const FlashStats<S>& st, const Vec<S>& b, const Vec<S>& w, const Vec<S>& g, const S& eps) {
  using std::exp;
  using std::log;
  const S z = flash_logit<S>(b, w, g, eps);
  const S s = S(1) / (S(1) + exp(st.lse - z));
  const S m = st.lse > z ? st.lse : z;
  return {Vec<S>(st.o + s * (b - st.o)), S(m + log(exp(st.lse - m) + exp(z - m)))};
}

}  // namespace dmref::oracle
