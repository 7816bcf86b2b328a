// dmref/random.hpp: a portable, seeded source of parameters. SplitMix64
// (Steele, Lea, Flood 2014) is specified bit for bit, unlike the standard
// library's distributions, so the same seed gives the same numbers on every
// platform and in every language (docs/fixtures.md gives the algorithm).
#pragma once

#include <cstdint>

namespace dmref {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform on [-1, 1) with 2^-52 spacing: (next() >> 11) * 2^-52 - 1, exact in double.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-52 - 1.0; }

 private:
  std::uint64_t s_;
};

}  // namespace dmref
