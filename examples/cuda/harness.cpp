// examples/cuda/harness.cpp: reads a captured mHC problem (safetensors, the
// tensor names of docs/fixtures.md, DeepSeek's storage: phi_layout = out_in,
// res_layout = in_out), runs the example kernel for every layer and writes the
// candidate for `dmref verify` (docs/kernels.md, "A CUDA example").
//
//   mhc_harness --inputs captured.safetensors --out cand.safetensors
//               [--device host|cuda] [--repeat 20] [--pre-eps 1e-6] [--sinkhorn-eps 1e-6]
//               [--rms-eps 1e-6] [--post-mult 2]
//
// The constants default to DeepSeek-V4's; the options exist to seed bugs. A
// bad file or argument: one line naming it, exit 2, nothing written.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "dmref/io/safetensors.hpp"
#include "mhc_launch.hpp"

namespace io = dmref::io;
using namespace mhc_example;

namespace {

struct Usage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::vector<float> floats(const io::Tensor& t) { return std::vector<float>(t.values.begin(), t.values.end()); }

Problem load(const std::string& path) {
  const io::File f = io::read(path);
  const io::Tensor& v = io::get(f, "input.v");
  if (v.shape.size() != 3) throw io::BadInput(path, "\"input.v\".shape", "expected [T, L, C]");
  const std::int64_t T = v.shape[0], L = v.shape[1], C = v.shape[2];
  const io::Tensor& pre = io::get(f, "param.phi_pre");
  if (pre.shape.size() != 3 || pre.shape[0] != L || pre.shape[1] < 1 || pre.shape[1] > kMaxN)
    throw io::BadInput(path, "\"param.phi_pre\".shape", "expected [L, n, nC] with 1 <= n <= " + std::to_string(kMaxN));
  const std::int64_t n = pre.shape[1], nC = n * C, m3 = (2 + n) * n;
  Problem p;
  p.T = int(T), p.n = int(n), p.C = int(C), p.L = int(L);
  const std::vector<float> e = floats(io::get(f, "input.e", {T, C}));
  p.e_streams.resize(T * nC);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t c = 0; c < C; ++c) p.e_streams[(t * n + j) * C + c] = e[t * C + c];
  p.v = floats(v);
  const io::Tensor& post = io::get(f, "param.phi_post", {L, n, nC});
  const io::Tensor& res = io::get(f, "param.phi_res", {L, n * n, nC});
  const io::Tensor& b_pre = io::get(f, "param.b_pre", {L, n});
  const io::Tensor& b_post = io::get(f, "param.b_post", {L, n});
  const io::Tensor& b_res = io::get(f, "param.b_res", {L, n, n});
  p.scale = floats(io::get(f, "param.a", {L, 3}));
  p.fn.resize(L * m3 * nC), p.base.resize(L * m3);
  for (std::int64_t l = 0; l < L; ++l) {
    for (std::int64_t k = 0; k < m3; ++k) {  // rows [pre | post | comb]
      const double* src = k < n ? &pre.values[(l * n + k) * nC]
                          : k < 2 * n ? &post.values[(l * n + k - n) * nC]
                                      : &res.values[(l * n * n + k - 2 * n) * nC];
      for (std::int64_t i = 0; i < nC; ++i) p.fn[(l * m3 + k) * nC + i] = float(src[i]);
      p.base[l * m3 + k] = float(k < n ? b_pre.values[l * n + k]
                                 : k < 2 * n ? b_post.values[l * n + k - n]
                                             : b_res.values[l * n * n + k - 2 * n]);
    }
  }
  return p;
}

void save(const std::string& path, const Problem& p, const Result& r) {
  const std::int64_t T = p.T, L = p.L, n = p.n, C = p.C;
  io::File f;
  auto put = [&](const std::string& name, std::vector<std::int64_t> shape, const std::vector<float>& x) {
    f.tensors[name] = io::Tensor{"F32", std::move(shape), std::vector<double>(x.begin(), x.end())};
  };
  std::vector<float> out(T * C, 0.0f);  // final: the sum of the streams, in stream order
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t c = 0; c < C; ++c) out[t * C + c] += r.X[(t * n + j) * C + c];
  put("output.h", {T, L, C}, r.h);
  put("output.H_pre", {T, L, n}, r.H_pre);
  put("output.H_post", {T, L, n}, r.H_post);
  put("output.H_res", {T, L, n, n}, r.H_res);
  put("output.Ht_res", {T, L, n, n}, r.Ht_res);
  put("output.X", {T, n, C}, r.X);
  put("output.out", {T, C}, out);
  io::write(path, f);
}

double number(const std::string& opt, const char* s) {
  char* end = nullptr;
  const double x = std::strtod(s, &end);
  if (!*s || *end) throw Usage(opt + ": not a number: \"" + s + "\"");
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string inputs, out, device = "host";
    Constants c;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (i + 1 >= argc) throw Usage(a + ": missing value");
      const char* val = argv[++i];
      if (a == "--inputs") inputs = val;
      else if (a == "--out") out = val;
      else if (a == "--device") device = val;
      else if (a == "--repeat") {
        const double x = number(a, val);
        if (x < 1 || x > 1000 || x != int(x)) throw Usage(a + ": an integer in [1, 1000], got " + val);
        c.repeat = int(x);
      } else if (a == "--pre-eps") c.pre_eps = float(number(a, val));
      else if (a == "--sinkhorn-eps") c.sinkhorn_eps = float(number(a, val));
      else if (a == "--rms-eps") c.rms_eps = float(number(a, val));
      else if (a == "--post-mult") c.post_mult = float(number(a, val));
      else throw Usage("unknown option " + a);
    }
    if (inputs.empty() || out.empty()) throw Usage("--inputs and --out are required");
    if (device != "host" && device != "cuda") throw Usage("--device: host or cuda, got \"" + device + "\"");
    const Problem p = load(inputs);
    Result r;
#if defined(MHC_EXAMPLE_CUDA)
    if (device == "cuda") run_layers_cuda(p, c, r);
    else run_layers_host(p, c, r);
#else
    if (device == "cuda") throw Usage("--device cuda: this harness was built without CUDA (host build)");
    run_layers_host(p, c, r);
#endif
    save(out, p, r);
    std::printf("wrote %s (%s, T=%d n=%d C=%d L=%d, repeat %d)\n", out.c_str(), device.c_str(), p.T, p.n, p.C, p.L,
                c.repeat);
    return 0;
  } catch (const io::BadInput& e) {
    std::fprintf(stderr, "mhc_harness: %s\n", e.what());
    return 2;
  } catch (const Usage& e) {
    std::fprintf(stderr, "mhc_harness: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mhc_harness: %s\n", e.what());
    return 1;
  }
}
