// tests/support/gate.hpp: candidates for the conformance gate's tests
// (verify accepts correct ones, rejects wrong ones): golden values rounded to
// a dtype, the reference itself run in float, and corpus look-up
// (test_fixtures, test_fixtures_grad, tests/mutants).
#pragma once

#include "dmref/conformance/corpus.hpp"
#include "dmref/conformance/evaluate.hpp"
#include "dmref/conformance/verify.hpp"

#include <stdexcept>
#include <string>

namespace dmref::test {

inline conf::CaseSpec find_case(const std::string& id) {
  for (const auto& c : conf::corpus())
    if (c.id == id) return c;
  throw std::runtime_error("no case " + id);
}

/// Whether a fixture tensor is a golden value (output.* or grad.*, not a .lo twin).
inline bool is_golden(const std::string& name) {
  const bool lo = name.size() > 3 && name.compare(name.size() - 3, 3, ".lo") == 0;
  return !lo && (name.rfind("output.", 0) == 0 || name.rfind("grad.", 0) == 0);
}

/// Candidate file from values computed in float or double (rounded as the candidate dtype stores them).
template <class T>
io::File candidate_from(const conf::Outputs<T>& o, const FloatFormat& f) {
  io::File c;
  for (const auto& [name, t] : o.t) {
    io::Tensor x{"F64", t.shape, {}};
    for (T v : t.values) x.values.push_back(round_to(f, double(v)));
    c.tensors[name] = std::move(x);
  }
  return c;
}

/// The golden values (outputs and gradients) rounded to format f.
inline io::File golden_rounded(const io::File& fx, const FloatFormat& f) {
  io::File c;
  for (const auto& [name, t] : fx.tensors) {
    if (!is_golden(name)) continue;
    io::Tensor x = t;
    for (auto& v : x.values) v = round_to(f, v);
    c.tensors[name] = std::move(x);
  }
  return c;
}

/// The problem with every input and parameter rounded to f (as the fixture's
/// baseline for that dtype was computed).
inline conf::Problem rounded(conf::Problem p, const FloatFormat& f) {
  for (auto& [n, t] : p.tensors)
    for (auto& x : t.values) x = round_to(f, x);
  return p;
}

inline conf::VerifyOptions opts(const std::string& dtype) {
  conf::VerifyOptions o;
  o.dtype = dtype;
  return o;
}

}  // namespace dmref::test
