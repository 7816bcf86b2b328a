// tests/support/denseformer_cases.hpp: DenseFormer problems for the tests and
// the properties (docs/denseformer.md). So far one: its backward problem of
// the adjoint identity, the DWA weights free where the pattern has them.
#pragma once

#include "grad_cases.hpp"

#include "dmref/denseformer_backward.hpp"

namespace dmref::test {

// ------------------------------------------------------------------ backward
// The backward problem of the adjoint identity (grad_cases.hpp's GradProblem;
// tests/test_backward.cpp, properties/grad_properties.cpp).
namespace grad {

struct DenseFormerSpec {
  DenseFormerConfig<S> c;
  DenseFormerSpec(int d, int L, int k, int p) {
    c.d = d;
    c.dilation = k;
    c.period = p;
    c.a = Mat<S>::Identity(L + 1, L + 1);
    for (int i = 1; i <= L; ++i)
      for (int j = 0; j <= i; ++j)
        if (free(i, j)) c.a(i, j) += rnd(1, 0.3)(0);
  }
  bool free(int i, int j) const { return i > 0 && i % c.period == 0 && c.in_pattern(i, j); }
  DenseFormer<S> scheme() const { return DenseFormer<S>(c); }
  template <class A>
  void pairs(A& a, Flat<S>& f) const {
    for (int i = 0; i < a.rows(); ++i)
      for (int j = 0; j < a.cols(); ++j)
        if (free(i, j)) f.add(a(i, j));
  }
  void add_params(Flat<S>& f) { pairs(c.a, f); }
  void add_grads(Mat<S>& g, Flat<S>& f) const { pairs(g, f); }
};

}  // namespace grad

}  // namespace dmref::test
