// tests/mutants/common.hpp: what several schemes' mutant files
// (tests/mutants/<s>.cpp) share: the lists a scheme's mutants are appended
// to, each named <scheme>.<name>, and the frame of a mutant's run.
#pragma once

#include "mutants.hpp"

#include <string>
#include <utility>
#include <vector>

namespace dmref::mutants {

/// The outputs `run(D, o)` writes for problem p, D the dims of p's schema
/// (the schema kept alive through the run: D refers to it).
template <class F, class Run>
Outputs<F> outputs_of(const Problem& p, const Run& run) {
  Outputs<F> o;
  const conf::Schema sch = conf::schema_of(p);
  const conf::Dims D = conf::dims(sch);
  run(D, o);
  return o;
}

/// A scheme's forward mutants at F, appended as <scheme>.<name>.
template <class F>
struct ForwardList {
  std::string scheme;
  std::vector<Variant<F>> m;
  void add(const std::string& name, std::string what, std::function<Outputs<F>(const Problem&)> f) {
    m.push_back({scheme, scheme + "." + name, std::move(what), std::move(f)});
  }
};

/// A scheme's backward mutants (at double), appended as <scheme>.<name>.
struct BackwardList {
  std::string scheme;
  std::vector<Mutant> m;
  void add(const std::string& name, std::string what, std::function<Outputs<double>(const Problem&)> f) {
    m.push_back({scheme, scheme + "." + name, std::move(what), {}, {}, std::move(f)});
  }
};

}  // namespace dmref::mutants

/// In tests/mutants/<s>.cpp, after the definition of forward_<s>: its two
/// instantiations (float, the candidate; double, the forward of the FD gradient).
#define DMREF_INSTANTIATE_MUTANTS(s)                         \
  template std::vector<Variant<float>> forward_##s<float>(); \
  template std::vector<Variant<double>> forward_##s<double>();
