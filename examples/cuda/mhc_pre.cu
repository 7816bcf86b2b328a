// examples/cuda/mhc_pre.cu: the CUDA kernels of the example (one thread block
// of kThreads threads per token) and their launcher. The arithmetic is in
// mhc_pre.cuh, shared with the host build (docs/kernels.md, "A CUDA example").
#include <cuda_runtime.h>

#include <cstdio>
#include <utility>
#include <vector>
#include <stdexcept>
#include <string>

#include "mhc_pre.cuh"
#include "mhc_launch.hpp"

namespace mhc_example {
namespace {

__global__ void pre_kernel(const float* X, int n, int C, Layer layer, Constants c, float* h, Coefficients* coef) {
  extern __shared__ float rows[];  // [kThreads][1 + m3]
  __shared__ Coefficients k;
  const int t = blockIdx.x, tid = threadIdx.x, nC = n * C, m3 = (2 + n) * n, w = 1 + m3;
  const float* x = X + static_cast<size_t>(t) * nC;
  float acc[kWidth];
  partial_sums(tid, x, nC, layer.fn, m3, acc);
  for (int q = 0; q < w; ++q) rows[tid * w + q] = acc[q];
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (tid < s) reduce_step(rows, tid, s, w);
    __syncthreads();
  }
  if (tid == 0) {
    coefficients(rows, n, nC, layer.scale, layer.base, c, k);
    coef[t] = k;
  }
  __syncthreads();
  for (int col = tid; col < C; col += kThreads) h[static_cast<size_t>(t) * C + col] = layer_input(k.pre, x, n, C, col);
}

__global__ void post_kernel(const float* X, const float* v, int n, int C, const Coefficients* coef, float* Xnext) {
  const int t = blockIdx.x;
  const size_t nC = static_cast<size_t>(n) * C;
  for (int e = threadIdx.x; e < n * C; e += blockDim.x)
    Xnext[t * nC + e] = post_element(coef[t].post, coef[t].comb, X + t * nC, v + static_cast<size_t>(t) * C, n, C,
                                     e / C, e % C);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}

template <class T>
T* upload(const T* host, size_t count) {
  T* d = nullptr;
  check(cudaMalloc(&d, count * sizeof(T)), "cudaMalloc");
  if (host) check(cudaMemcpy(d, host, count * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to device");
  return d;
}

}  // namespace

void run_layers_cuda(const Problem& p, const Constants& c, Result& r) {
  const size_t T = p.T, n = p.n, C = p.C, nC = n * C, m3 = (2 + n) * n;
  float* X = upload(p.e_streams.data(), T * nC);
  float* Xn = upload<float>(nullptr, T * nC);
  float* h = upload<float>(nullptr, T * C);
  float* v = upload<float>(nullptr, T * C);
  Coefficients* coef = upload<Coefficients>(nullptr, T);
  const size_t shared = kThreads * (1 + m3) * sizeof(float);
  for (int l = 0; l < p.L; ++l) {
    float* fn = upload(p.fn.data() + l * m3 * nC, m3 * nC);
    float* sc = upload(p.scale.data() + l * 3, 3);
    float* bs = upload(p.base.data() + l * m3, m3);
    check(cudaMemcpy(v, p.v_layer(l).data(), T * C * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy v");
    pre_kernel<<<T, kThreads, shared>>>(X, int(n), int(C), Layer{fn, sc, bs}, c, h, coef);
    check(cudaGetLastError(), "pre_kernel");
    post_kernel<<<T, kThreads>>>(X, v, int(n), int(C), coef, Xn);
    check(cudaGetLastError(), "post_kernel");
    std::vector<float> hh(T * C);
    std::vector<Coefficients> kk(T);
    check(cudaMemcpy(hh.data(), h, T * C * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy h");
    check(cudaMemcpy(kk.data(), coef, T * sizeof(Coefficients), cudaMemcpyDeviceToHost), "cudaMemcpy coef");
    r.store_layer(p, l, hh, kk);
    std::swap(X, Xn);
    cudaFree(fn), cudaFree(sc), cudaFree(bs);
  }
  r.X.resize(T * nC);
  check(cudaMemcpy(r.X.data(), X, T * nC * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy X");
  cudaFree(X), cudaFree(Xn), cudaFree(h), cudaFree(v), cudaFree(coef);
}

}  // namespace mhc_example
