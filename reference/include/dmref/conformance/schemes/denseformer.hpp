// dmref/conformance/schemes/denseformer.hpp: the DenseFormer binding.
// Schema, corpus rows and registry entry: src/conformance/schemes/denseformer.cpp.
#pragma once

#include "dmref/conformance/binding.hpp"
#include "dmref/denseformer_backward.hpp"

namespace dmref::conf {

template <class S>
DenseFormerConfig<S> denseformer_config(const Problem& p, const Dims& D) {
  DenseFormerConfig<S> c;
  c.d = int(D.d);
  c.dilation = int(D.sch().integer("dilation"));
  c.period = int(D.sch().integer("period"));
  c.a = mat_at<S>(D.sch().read(p, "param.a"), 0, D.L + 1, D.L + 1);
  return c;
}

/// Runs any scheme with DenseFormer's Backward Grad (d a); grad.param.a as well.
template <class S, class M>
void run_denseformer(const Problem& p, const Dims& D, Outputs<S>& o, const M& scheme) {
  run_plain<S>(p, D, o, scheme,
               [](const Mat<S>& g) { return std::vector<ParamGrad<S>>{ParamGrad<S>{"param.a", {}}.add(g)}; });
}

template <class S>
void evaluate_denseformer(const Problem& p, const Schema& s, Outputs<S>& o) {
  const Dims D = dims(s);
  run_denseformer<S>(p, D, o, DenseFormer<S>(denseformer_config<S>(p, D)));
}

}  // namespace dmref::conf
