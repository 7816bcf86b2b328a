// examples/cuda/mhc_launch.hpp: the example's problem (one kernel-level mHC
// stack, tensors as DeepSeek's kernels store them) and the two ways to run it:
// on the host (the kernel body of mhc_pre.cuh compiled for the CPU) and on a
// GPU (mhc_pre.cu). No dmref header here: nvcc compiles this too.
#pragma once

#include <cstddef>
#include <vector>

#include "mhc_pre.cuh"

namespace mhc_example {

struct Problem {
  int T = 0, n = 0, C = 0, L = 0;
  std::vector<float> e_streams;  // [T, n, C]: n copies of e (the streams before layer 0)
  std::vector<float> v;          // [T, L, C]: the layer outputs (given)
  std::vector<float> fn;         // [L, (2 + n) n, nC]: rows [pre | post | comb], comb [in, out]
  std::vector<float> scale;      // [L, 3]
  std::vector<float> base;       // [L, (2 + n) n]
  std::vector<float> v_layer(int l) const {  // [T, C]
    std::vector<float> out(static_cast<size_t>(T) * C);
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) out[size_t(t) * C + c] = v[(size_t(t) * L + l) * C + c];
    return out;
  }
};

struct Result {  // dmref's output names (docs/fixtures.md), H_res / Ht_res stored [in, out]
  std::vector<float> h, H_pre, H_post, H_res, Ht_res, X, out;
  void store_layer(const Problem& p, int l, const std::vector<float>& h_l, const std::vector<Coefficients>& k) {
    const size_t T = p.T, L = p.L, n = p.n, C = p.C;
    h.resize(T * L * C), H_pre.resize(T * L * n), H_post.resize(T * L * n);
    H_res.resize(T * L * n * n), Ht_res.resize(T * L * n * n);
    for (size_t t = 0; t < T; ++t) {
      for (size_t c = 0; c < C; ++c) h[(t * L + l) * C + c] = h_l[t * C + c];
      for (size_t j = 0; j < n; ++j) H_pre[(t * L + l) * n + j] = k[t].pre[j], H_post[(t * L + l) * n + j] = k[t].post[j];
      for (size_t q = 0; q < n * n; ++q)
        H_res[(t * L + l) * n * n + q] = k[t].comb[q], Ht_res[(t * L + l) * n * n + q] = k[t].logits[q];
    }
  }
};

// The same L layers on the host: each token's block of kThreads threads run
// one after the other, in thread order, with the kernel's tree reduction.
inline void run_layers_host(const Problem& p, const Constants& c, Result& r) {
  const size_t T = p.T, n = p.n, C = p.C, nC = n * C, m3 = (2 + n) * n, w = 1 + m3;
  std::vector<float> X = p.e_streams, Xn(T * nC), h(T * C), rows(kThreads * w);
  std::vector<Coefficients> coef(T);
  for (int l = 0; l < p.L; ++l) {
    const Layer layer{p.fn.data() + l * m3 * nC, p.scale.data() + l * 3, p.base.data() + l * m3};
    const std::vector<float> v = p.v_layer(l);
    for (size_t t = 0; t < T; ++t) {
      const float* x = X.data() + t * nC;
      for (int tid = 0; tid < kThreads; ++tid) partial_sums(tid, x, int(nC), layer.fn, int(m3), rows.data() + tid * w);
      for (int s = kThreads / 2; s > 0; s >>= 1)
        for (int tid = 0; tid < s; ++tid) reduce_step(rows.data(), tid, s, int(w));
      coefficients(rows.data(), int(n), int(nC), layer.scale, layer.base, c, coef[t]);
      for (size_t col = 0; col < C; ++col) h[t * C + col] = layer_input(coef[t].pre, x, int(n), int(C), int(col));
      for (size_t e = 0; e < nC; ++e)
        Xn[t * nC + e] = post_element(coef[t].post, coef[t].comb, x, v.data() + t * C, int(n), int(C), int(e / C),
                                      int(e % C));
    }
    r.store_layer(p, l, h, coef);
    X.swap(Xn);
  }
  r.X = X;
}

// The GPU path (mhc_pre.cu; linked only into the harness built with nvcc).
void run_layers_cuda(const Problem& p, const Constants& c, Result& r);

}  // namespace mhc_example
