// examples/cuda/mhc_pre.cuh: a small mHC `pre` (and `post`) kernel, DeepSeek-V4
// preset, f32 storage and arithmetic (docs/kernels.md, "A CUDA example").
//
// The kernel body is written once, as __host__ __device__ functions: the CUDA
// kernels of mhc_pre.cu call them with one thread block per token, and the
// host build (harness.cpp compiled by g++, no GPU) calls the same functions,
// emulating the block's threads in order. Both do the same arithmetic in the
// same order (the block's tree reduction included), up to the compiler's FMA
// contraction (nvcc contracts a * b + c by default; g++ for x86-64 without
// -mfma does not).
//
// One token, n streams of C values, x = vec(X) stream-major [nC]; DeepSeek's
// fused projection fn [(2 + n) n, nC] with rows [pre | post | comb], comb
// stored [in, out] (docs/mhc.md):
//   r = 1 / sqrt(sum(x^2) / nC + rms_eps),  m_k = r * (fn_k . x)
//   pre_j  = sigmoid(scale0 m_j + base_j) + pre_eps
//   post_j = post_mult * sigmoid(scale1 m_{n+j} + base_{n+j})
//   A      = Sinkhorn(scale2 m_comb + base_comb): softmax over out, + eps, then
//            columns / (sum + eps); repeat - 1 times rows, columns / (sum + eps)
//   h      = sum_j pre_j X_j                                   (the layer input)
// and `post`: X'_o = post_o v + sum_i A[i, o] X_i.
#pragma once

#include <math.h>

#if defined(__CUDACC__)
#define MHC_HD __host__ __device__
#else
#define MHC_HD
#endif

namespace mhc_example {

constexpr int kMaxN = 8;                                // streams (shared memory: 128 x 81 floats at n = 8)
constexpr int kThreads = 128;                           // threads per token (the block)
constexpr int kMaxMix = (2 + kMaxN) * kMaxN;            // projections per token
constexpr int kWidth = 1 + kMaxMix;                     // per thread: sum of squares, then the projections

struct Constants {  // DeepSeek-V4 (hc_eps, norm_eps, hc_sinkhorn_iters; docs/mhc.md)
  float rms_eps = 1e-6f, pre_eps = 1e-6f, sinkhorn_eps = 1e-6f, post_mult = 2.0f;
  int repeat = 20;
};

struct Coefficients {
  float pre[kMaxN], post[kMaxN], logits[kMaxN * kMaxN], comb[kMaxN * kMaxN];  // logits, comb: [in, out]
};

// Thread `tid`'s partial sums over x[tid], x[tid + kThreads], ...: acc[0] the
// sum of squares, acc[1 + k] the projection fn_k . x.
MHC_HD inline void partial_sums(int tid, const float* x, int nC, const float* fn, int m3, float* acc) {
  for (int k = 0; k <= m3; ++k) acc[k] = 0.0f;
  for (int i = tid; i < nC; i += kThreads) {
    const float xi = x[i];
    acc[0] += xi * xi;
    for (int k = 0; k < m3; ++k) acc[1 + k] += fn[k * nC + i] * xi;
  }
}

// One step of the block's tree reduction: row tid += row tid + s (tid < s).
MHC_HD inline void reduce_step(float* rows, int tid, int s, int width) {
  for (int k = 0; k < width; ++k) rows[tid * width + k] += rows[(tid + s) * width + k];
}

MHC_HD inline float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

// The coefficients from the reduced sums (sums[0] = sum x^2, sums[1 + k] = fn_k . x).
MHC_HD inline void coefficients(const float* sums, int n, int nC, const float* scale, const float* base,
                                const Constants& c, Coefficients& out) {
  const float r = 1.0f / sqrtf(sums[0] / float(nC) + c.rms_eps);
  const float* m = sums + 1;
  for (int j = 0; j < n; ++j) {
    out.pre[j] = sigmoid(scale[0] * (r * m[j]) + base[j]) + c.pre_eps;
    out.post[j] = c.post_mult * sigmoid(scale[1] * (r * m[n + j]) + base[n + j]);
  }
  float* A = out.comb;
  for (int k = 0; k < n * n; ++k) out.logits[k] = scale[2] * (r * m[2 * n + k]) + base[2 * n + k];
  for (int i = 0; i < n; ++i) {                       // softmax over out (row i of the stored [in, out]) + eps
    float mx = out.logits[i * n];
    for (int o = 1; o < n; ++o) mx = fmaxf(mx, out.logits[i * n + o]);
    float s = 0.0f;
    for (int o = 0; o < n; ++o) s += (A[i * n + o] = expf(out.logits[i * n + o] - mx));
    for (int o = 0; o < n; ++o) A[i * n + o] = A[i * n + o] / s + c.sinkhorn_eps;
  }
  for (int round = 0; round < c.repeat; ++round) {
    if (round > 0)
      for (int i = 0; i < n; ++i) {                   // rows / (sum + eps)
        float s = 0.0f;
        for (int o = 0; o < n; ++o) s += A[i * n + o];
        for (int o = 0; o < n; ++o) A[i * n + o] /= s + c.sinkhorn_eps;
      }
    for (int o = 0; o < n; ++o) {                     // columns / (sum + eps)
      float s = 0.0f;
      for (int i = 0; i < n; ++i) s += A[i * n + o];
      for (int i = 0; i < n; ++i) A[i * n + o] /= s + c.sinkhorn_eps;
    }
  }
}

// Element c of the layer input h = sum_j pre_j X_j.
MHC_HD inline float layer_input(const float* pre, const float* x, int n, int C, int col) {
  float s = 0.0f;
  for (int j = 0; j < n; ++j) s += pre[j] * x[j * C + col];
  return s;
}

// Element (o, col) of the next residual X'_o = post_o v + sum_i A[i, o] X_i.
MHC_HD inline float post_element(const float* post, const float* comb, const float* x, const float* v, int n, int C,
                                 int o, int col) {
  float s = post[o] * v[col];
  for (int i = 0; i < n; ++i) s += comb[i * n + o] * x[i * C + col];
  return s;
}

// What one launch computes, for T tokens: X [T, n, C] -> h [T, C] and the
// coefficients; then post: X, v [T, C] -> Xnext [T, n, C].
struct Layer {
  const float* fn;     // [(2 + n) n, nC]
  const float* scale;  // [3]
  const float* base;   // [(2 + n) n]
};

}  // namespace mhc_example
