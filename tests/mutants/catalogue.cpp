// The mutant catalogue (mutants.hpp, docs/fixtures.md "Mutation score"): the
// concatenation of every registered scheme's mutants (tests/mutants/<s>.cpp),
// over DMREF_SCHEMES. A scheme in the registry without its mutants file is a
// link error here (forward_<s>, backward_<s> undefined).
#include "mutants.hpp"

namespace dmref::mutants {

template <class F>
std::vector<Variant<F>> variants() {
  std::vector<Variant<F>> m;
#define DMREF_APPEND_FORWARD(s)    \
  for (auto& v : forward_##s<F>()) \
    m.push_back(std::move(v));
  DMREF_SCHEMES(DMREF_APPEND_FORWARD)
#undef DMREF_APPEND_FORWARD
  return m;
}
template std::vector<Variant<float>> variants<float>();
template std::vector<Variant<double>> variants<double>();

std::vector<Mutant> catalogue() {
  std::vector<Mutant> m;
  // The forward mutants: judged as float candidates, and through the central
  // differences of the same mutant at double (its gradient).
  const auto f32 = variants<float>();
  const auto f64 = variants<double>();
  for (std::size_t i = 0; i < f32.size(); ++i)
    m.push_back({f32[i].scheme, f32[i].name, f32[i].what, f32[i].eval, f64.at(i).eval, {}});
  // Then the backward mutants.
#define DMREF_APPEND_BACKWARD(s) \
  for (auto& b : backward_##s()) \
    m.push_back(std::move(b));
  DMREF_SCHEMES(DMREF_APPEND_BACKWARD)
#undef DMREF_APPEND_BACKWARD
  return m;
}

}  // namespace dmref::mutants
