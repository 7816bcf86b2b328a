// dmref: the command-line front of the library. A thin layer: every command
// parses its arguments, calls the library, and prints or writes the result.
// Exit status: 0 success, 1 check failed, 2 bad input (one line on stderr).
#include "dmref/ldm.hpp"
#include "dmref/preln.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <random>

namespace {

using namespace dmref;

/// The built-in demo: one token, d = 8, G = 2, dk = 4, L = 12 layers with
/// given q, k, omega, v (seeded), through PreLN and both LDM writes, at double
/// and at 257 bits; prints the final outputs and how far double is from 257 bits.
template <class S>
struct DemoRun {
  Vec<S> preln, outer, rls;
};

template <class S>
DemoRun<S> demo_run() {
  const int d = 8, G = 2, dk = 4, L = 12;
  std::mt19937_64 rng(2026);
  std::normal_distribution<double> N(0, 1);
  std::uniform_real_distribution<double> U(0, 1);
  auto vec = [&](int n) {
    Vec<S> x(n);
    for (int i = 0; i < n; ++i) x(i) = S(N(rng));
    return x;
  };
  Vec<S> e = vec(d);
  std::vector<Vec<S>> v;
  std::vector<Address<S>> a;
  for (int l = 0; l < L; ++l) {
    v.push_back(vec(d));
    Address<S> ad{normalize_groups<S>(vec(G * dk), G), normalize_groups<S>(vec(G * dk), G), Vec<S>(G)};
    for (int g = 0; g < G; ++g) ad.omega(g) = S(2 * U(rng));
    a.push_back(ad);
  }
  LdmConfig<S> cfg;
  cfg.d = d;
  cfg.groups = G;
  cfg.dk = dk;
  cfg.alpha = S(1);
  cfg.lambda = Mat<S>::Constant(L, G, S(0.9));
  DemoRun<S> r;
  r.preln = forward(PreLN<S>{}, e, L, GivenOutputs<S>{&v}).out;
  r.rls = ldm_kernel<S>(cfg, e, v, a).out;
  cfg.write = MemoryWrite::outer_product;
  r.outer = ldm_kernel<S>(cfg, e, v, a).out;
  return r;
}

void print(const char* name, const Vec<mp77>& hi, const Vec<double>& lo) {
  const double err = to_double(mp77((lo.cast<mp77>() - hi).norm() / hi.norm()));
  std::printf("%-22s out[0..2] = %+.17f %+.17f %+.17f   double vs 257-bit: %.2e (%.1f eps)\n", name,
              to_double(hi(0)), to_double(hi(1)), to_double(hi(2)), err, err / 0x1p-52);
}

int demo() {
  const auto hi = demo_run<mp77>();
  const auto lo = demo_run<double>();
  std::printf("dmref demo: d=8, G=2, dk=4, L=12, lambda=0.9, alpha=1 (seed 2026)\n");
  print("PreLN", hi.preln, lo.preln);
  print("LDM outer product", hi.outer, lo.outer);
  print("LDM RLS", hi.rls, lo.rls);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dmref: arbitrary-precision reference and conformance suite for depth mixing"};
  app.require_subcommand(1);
  auto* demo_cmd = app.add_subcommand("demo", "run the reference on the built-in demo case");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help (rc 0) or the one-line error
    return rc == 0 ? 0 : 2;
  }
  try {
    if (*demo_cmd) return demo();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dmref: %s\n", e.what());
    return 2;
  }
  return 0;
}
