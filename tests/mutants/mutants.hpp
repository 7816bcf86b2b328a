// tests/mutants/mutants.hpp: the mutant catalogue (docs/fixtures.md, "Mutation
// score"). Each mutant is a plausible wrong implementation of one scheme that
// differs from the reference in exactly ONE convention. Where it can, a mutant
// is the reference with one part swapped: a legitimate config option set to
// the wrong value, a parameter read the wrong way, or a scheme class that
// inherits every operation but one from the reference class. Nothing here is
// reachable from the reference itself (no mutation flags in reference/).
//
// A mutant is evaluated like a float32 candidate implementation: on the
// problem of a fixture (inputs already rounded to the dtype under test),
// at scalar float, through the same adapters as the reference
// (dmref/conformance/evaluate_impl.hpp: <scheme>_config, run_<scheme>).
#pragma once

#include "dmref/conformance/evaluate_impl.hpp"

#include <functional>
#include <string>
#include <vector>

namespace dmref::mutants {

using F = float;
using conf::Outputs;
using conf::Problem;

struct Mutant {
  std::string scheme;  // the Problem scheme whose fixtures must kill it
  std::string name;    // <scheme>.<what>, stable (docs and the CTest table use it)
  std::string what;    // one line: the convention it gets wrong
  std::function<Outputs<F>(const Problem&)> eval;
};

/// Every mutant, in catalogue order.
std::vector<Mutant> catalogue();

}  // namespace dmref::mutants
