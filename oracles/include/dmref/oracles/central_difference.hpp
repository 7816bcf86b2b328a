// dmref/oracles/central_difference.hpp: directional derivatives of any
// forward map by central differences at high precision, the first oracle of
// every backward pass (docs/framework.md, "Backward").
//   J v  ~  (f(x + h v) - f(x - h v)) / (2h)
// Its error is the truncation h^2/6 f'''(x)[v,v,v] plus the rounding of the two
// evaluations divided by 2h: at p bits, about 2^-p |f| / h. At 667 bits
// (mp200) and h = 2^-200 both are below 2^-400 (times f''' resp. |f|): far
// below any error a wrong adjoint makes. It sees only the forward map: it
// never calls backward code.
#pragma once

#include "dmref/scalar_traits.hpp"

#include <cstdint>

namespace dmref::oracle {

/// (f(x + h v) - f(x - h v)) / (2h) for f: Vec<S> -> Vec<S>.
template <class S, class F>
Vec<S> central_difference(F&& f, const Vec<S>& x, const Vec<S>& v, const S& h) {
  const Vec<S> xp = x + h * v, xm = x - h * v;
  return (f(xp) - f(xm)) / (S(2) * h);
}

/// A vector of uniform[-1, 1) entries from a SplitMix64 stream seeded with
/// `seed` (its own copy of the generator: the oracle shares no code with the
/// reference beyond the scalar types).
template <class S>
Vec<S> random_direction(Eigen::Index n, std::uint64_t seed) {
  Vec<S> r(n);
  std::uint64_t z = seed;
  for (Eigen::Index i = 0; i < n; ++i) {
    z += 0x9e3779b97f4a7c15ull;
    std::uint64_t y = z;
    y = (y ^ (y >> 30)) * 0xbf58476d1ce4e5b9ull;
    y = (y ^ (y >> 27)) * 0x94d049bb133111ebull;
    y ^= y >> 31;
    r(i) = S(static_cast<double>(y >> 11) * 0x1.0p-52 - 1.0);
  }
  return r;
}

}  // namespace dmref::oracle
