// tests/support/candidates.hpp: what a float implementation in dtype D feeds
// and writes, for tests that judge candidates with conf::verify_case
// (test_fixtures, tests/mutants).
#pragma once

#include "dmref/conformance/problem.hpp"
#include "dmref/dtype.hpp"
#include "dmref/io/safetensors.hpp"

namespace dmref::test {

/// The problem with every input and parameter rounded to f (as the fixture's
/// baseline for that dtype was computed).
inline conf::Problem rounded(conf::Problem p, const FloatFormat& f) {
  for (auto& [n, t] : p.tensors)
    for (auto& x : t.values) x = round_to(f, x);
  return p;
}

/// Candidate file from outputs computed in float, rounded as the candidate
/// dtype would store them.
inline io::File candidate_from(const conf::Outputs<float>& o, const FloatFormat& f) {
  io::File c;
  for (const auto& [name, t] : o.t) {
    io::Tensor x{"F64", t.shape, {}};
    for (float v : t.values) x.values.push_back(round_to(f, double(v)));
    c.tensors[name] = std::move(x);
  }
  return c;
}

}  // namespace dmref::test
