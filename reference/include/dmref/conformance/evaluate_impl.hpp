// dmref/conformance/evaluate_impl.hpp: every scheme's binding
// (conformance/schemes/<s>.hpp), for code that runs a binding at a scalar
// type the library does not instantiate or with a mutated scheme class
// (tests/mutants, test_real). The reference itself goes through the registry
// (registry.hpp): evaluate<S> for float, double, Ball and Perturbed.
#pragma once

#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/schemes/attnres.hpp"
#include "dmref/conformance/schemes/attnres_ops.hpp"
#include "dmref/conformance/schemes/denseformer.hpp"
#include "dmref/conformance/schemes/hc.hpp"
#include "dmref/conformance/schemes/hc_ops.hpp"
#include "dmref/conformance/schemes/ldm.hpp"
#include "dmref/conformance/schemes/ldm_ops.hpp"
#include "dmref/conformance/schemes/mhc.hpp"
#include "dmref/conformance/schemes/mhc_ops.hpp"
#include "dmref/conformance/schemes/preln.hpp"

namespace dmref::conf {

/// The reference at any scalar type S, dispatched by name over DMREF_SCHEMES
/// (the registry's list): what evaluate<S> does for the four library types.
template <class S>
Outputs<S> evaluate_at(const Problem& p) {
  return evaluate_with<S>(p, [](const Problem& q, const Schema& s, Outputs<S>& o) {
#define DMREF_AT(name) \
  if (s.scheme == #name) evaluate_##name<S>(q, s, o);
    DMREF_SCHEMES(DMREF_AT)
#undef DMREF_AT
  });
}

}  // namespace dmref::conf
