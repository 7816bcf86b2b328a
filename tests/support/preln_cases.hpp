// tests/support/preln_cases.hpp: PreLN problems for the tests and the
// properties (docs/preln.md). So far one: its backward problem of the adjoint
// identity (PreLN has no parameters).
#pragma once

#include "grad_cases.hpp"

#include "dmref/preln_backward.hpp"

namespace dmref::test {

// ------------------------------------------------------------------ backward
// The backward problem of the adjoint identity (grad_cases.hpp's GradProblem;
// tests/test_backward.cpp, properties/grad_properties.cpp).
namespace grad {

struct PrelnSpec {
  PreLN<S> scheme() const { return {}; }
  void add_params(Flat<S>&) {}
  template <class G>
  void add_grads(G&, Flat<S>&) const {}
};

}  // namespace grad

}  // namespace dmref::test
