// tests/mutants/mutants.hpp: the mutant catalogue (docs/fixtures.md, "Mutation
// score"). Each mutant is a plausible wrong implementation of one scheme that
// differs from the reference in exactly ONE convention. Where it can, a mutant
// is the reference with one part swapped: a legitimate config option set to
// the wrong value, a parameter read the wrong way, or a scheme class that
// inherits every operation but one from the reference class. Nothing here is
// reachable from the reference itself (no mutation flags in reference/).
//
// One file per registered scheme, tests/mutants/<s>.cpp (the registry's
// DMREF_SCHEMES), holding that scheme's mutants of both kinds:
//  * forward mutants: a wrong forward. Judged on the forward
//    fixtures like a float32 candidate implementation (the problem of a
//    fixture, inputs rounded to the dtype under test, evaluated at float
//    through the same adapters as the reference: evaluate_impl.hpp,
//    <scheme>_config, run_<scheme>), and on the gradient fixtures through
//    the gradient of that same wrong forward (fd.hpp: central differences of
//    `forward64`, the mutant at double). A mutant has no hand-written backward.
//  * backward mutants: the reference's forward with a wrong
//    Backward (one adjoint term wrong); `backward64` runs the whole problem
//    with p.grad at double and returns its grad.* tensors. Judged on the
//    gradient fixtures only (their forward is the reference's).
#pragma once

#include "dmref/conformance/evaluate_impl.hpp"
#include "dmref/conformance/registry.hpp"

#include <functional>
#include <string>
#include <vector>

namespace dmref::mutants {

using conf::Outputs;
using conf::Problem;

/// One forward mutant at scalar F (each scheme's are instantiated at float and at double).
template <class F>
struct Variant {
  std::string scheme, name, what;
  std::function<Outputs<F>(const Problem&)> eval;
};
/// Every forward mutant at F, in catalogue order (catalogue.cpp).
template <class F>
std::vector<Variant<F>> variants();

struct Mutant {
  std::string scheme;  // the Problem scheme whose fixtures must kill it
  std::string name;    // <scheme>.<what>, stable (docs and the CTest table use it)
  std::string what;    // one line: the convention it gets wrong
  std::function<Outputs<float>(const Problem&)> eval;        // forward mutant: as a float32 candidate
  std::function<Outputs<double>(const Problem&)> forward64;  // forward mutant: the same at double (its gradient by FD)
  std::function<Outputs<double>(const Problem&)> backward64; // backward mutant: grad.* of a p.grad problem
};

/// What tests/mutants/<s>.cpp defines, for every scheme s of DMREF_SCHEMES:
///   forward_<s><F>()  its forward mutants at F (instantiated at float and double),
///   backward_<s>()    its backward mutants (at double).
/// catalogue.cpp calls both for every scheme, so a registered scheme without
/// its tests/mutants/<s>.cpp (or one missing either function) is a LINK error
/// of dmref_mutants and test_registry, not a scheme that goes unmutated; that
/// neither list is empty is checked by test_registry.
#define DMREF_DECLARE_MUTANTS(s)         \
  template <class F>                     \
  std::vector<Variant<F>> forward_##s(); \
  std::vector<Mutant> backward_##s();
DMREF_SCHEMES(DMREF_DECLARE_MUTANTS)
#undef DMREF_DECLARE_MUTANTS

/// Every mutant, in catalogue order (catalogue.cpp): the forward ones, then
/// the backward ones, each kind in DMREF_SCHEMES order of the schemes.
std::vector<Mutant> catalogue();

}  // namespace dmref::mutants
