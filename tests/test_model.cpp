// The end-to-end model: the seeded generator, the layer function and the
// per-token driver (reference/include/dmref/model.hpp).
#include "check.hpp"

#include "dmref/ldm.hpp"
#include "dmref/model.hpp"
#include "dmref/preln.hpp"

#include <catch2/catch.hpp>

using namespace dmref;

TEST_CASE("SplitMix64 reproduces the published reference sequence", "[model][random]") {
  // First outputs for seed 1234567 as given with the reference C
  // implementation (Vigna, splitmix64.c) and reproduced by many ports.
  SplitMix64 r(1234567);
  CHECK(r.next() == 6457827717110365317ull);
  CHECK(r.next() == 3203168211198807973ull);
  CHECK(r.next() == 9817491932198370423ull);
}

TEST_CASE("uniform() lies in [-1, 1) on a 2^-52 grid", "[model][random]") {
  SplitMix64 r(7);
  for (int i = 0; i < 10000; ++i) {
    const double u = r.uniform();
    REQUIRE(u >= -1.0);
    REQUIRE(u < 1.0);
    REQUIRE(std::ldexp(u + 1.0, 52) == std::floor(std::ldexp(u + 1.0, 52)));
  }
}

TEST_CASE("The model runs each token independently, recording every layer", "[model]") {
  using S = mp50;
  const int d = 6, hidden = 4, L = 5, T = 3;
  const auto stack = TanhMlpStack<S>::random(d, hidden, L, 42);
  Mat<S> E(T, d);
  SplitMix64 rng(43);
  for (Eigen::Index i = 0; i < E.size(); ++i) E(i) = S(rng.uniform());
  const auto traces = run_model(PreLN<S>{}, E, stack);
  REQUIRE(traces.size() == T);
  for (int t = 0; t < T; ++t) {
    const auto one = forward(PreLN<S>{}, Vec<S>(E.row(t).transpose()), L, stack);
    CHECK(one.out == traces[t].out);  // same operations: equal to the last bit
    REQUIRE(traces[t].h.size() == L);
    REQUIRE(traces[t].states.size() == L);
    for (int l = 0; l < L; ++l) CHECK(traces[t].v[l] == stack.layers[l](traces[t].h[l]));
  }
  // Same seed, same weights; a different seed, different weights.
  CHECK(TanhMlpStack<S>::random(d, hidden, L, 42).layers[3].W2 == stack.layers[3].W2);
  CHECK(TanhMlpStack<S>::random(d, hidden, L, 44).layers[3].W2 != stack.layers[3].W2);
}
