// tests/mutants/common.hpp: what several schemes' mutant files
// (tests/mutants/<s>.cpp) share: the helpers that append a mutant to a
// scheme's list, and the config edit.
#pragma once

#include "mutants.hpp"

#include <string>
#include <utility>
#include <vector>

namespace dmref::mutants {

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
