// A kernel repository's C++ test, using an installed dmref (find_package):
// read a golden fixture, run "your kernel" (here: the dmref reference in
// float, standing in for a CUDA kernel's host wrapper), judge the outputs
// with the gate, check that a perturbed output fails, run the reference at
// 168 bits through MPFR, and write the candidate for `dmref verify`.
//   consumer FIXTURE CANDIDATE_OUT
#include <dmref/conformance/verify.hpp>
#include <dmref/io/safetensors.hpp>
#include <dmref/preln.hpp>
#include <dmref/scalar.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  failures += !ok;
}

/// PreLN over the fixture's given layer outputs, at scalar S: output.h, output.out.
template <class S>
dmref::io::File preln(const dmref::io::File& fx) {
  const auto& e = dmref::io::get(fx, "input.e");
  const auto& v = dmref::io::get(fx, "input.v");
  const std::int64_t T = v.shape[0], L = v.shape[1], d = v.shape[2];
  dmref::io::File out;
  auto& h = out.tensors["output.h"] = {"F32", {T, L, d}, {}};
  auto& o = out.tensors["output.out"] = {"F32", {T, d}, {}};
  for (std::int64_t t = 0; t < T; ++t) {
    dmref::Vec<S> x(d);
    for (std::int64_t i = 0; i < d; ++i) x(i) = S(e.values[t * d + i]);
    std::vector<dmref::Vec<S>> given;
    for (std::int64_t l = 0; l < L; ++l) {
      dmref::Vec<S> y(d);
      for (std::int64_t i = 0; i < d; ++i) y(i) = S(v.values[(t * L + l) * d + i]);
      given.push_back(y);
    }
    const auto tr = dmref::forward(dmref::PreLN<S>{}, x, int(L), dmref::GivenOutputs<S>{&given}, false);
    for (const auto& hl : tr.h)
      for (std::int64_t i = 0; i < d; ++i) h.values.push_back(dmref::to_double(hl(i)));
    for (std::int64_t i = 0; i < d; ++i) o.values.push_back(dmref::to_double(tr.out(i)));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: consumer FIXTURE CANDIDATE_OUT\n");
    return 2;
  }
  try {
    const dmref::io::File fx = dmref::io::read(argv[1]);
    dmref::conf::VerifyOptions opt;
    opt.dtype = "f32";

    dmref::io::File cand = preln<float>(fx);
    auto v = dmref::conf::verify_case(fx, cand, opt, true, 5);
    expect(v.pass && v.checked > 0, "float kernel passes the gate (" + std::to_string(v.checked) +
                                        " elements, worst err/tol " + std::to_string(v.worst_ratio) + ")");

    dmref::io::File bad = cand;
    bad.tensors["output.out"].values[3] *= 1.001;
    v = dmref::conf::verify_case(fx, bad, opt, true, 5);
    expect(!v.pass && v.failed == 1, "a perturbed element fails the gate");

    // The multiple-precision reference (MPFR through dmref::dmref) against the golden values.
    const dmref::io::File hi = preln<dmref::mp50>(fx);
    const auto& want = dmref::io::get(fx, "output.out").values;
    const auto& got = hi.tensors.at("output.out").values;
    double worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    expect(worst == 0, "168-bit reference rounds to the golden doubles");

    dmref::io::write(argv[2], cand);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 2;
  }
  std::printf("%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
