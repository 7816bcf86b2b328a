// dmref/conformance/schemes/preln.hpp: the PreLN binding (the residual
// baseline: no scheme parameters, no state outputs). Schema, corpus rows and
// registry entry: src/conformance/schemes/preln.cpp.
#pragma once

#include "dmref/conformance/binding.hpp"
#include "dmref/preln_backward.hpp"

namespace dmref::conf {

template <class S>
void evaluate_preln(const Problem& p, const Schema& s, Outputs<S>& o) {
  run_plain<S>(p, dims(s), o, PreLN<S>{});
}

}  // namespace dmref::conf
