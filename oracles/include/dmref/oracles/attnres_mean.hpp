// dmref/oracles/attnres_mean.hpp: the readout of Attention Residuals at the
// paper's initialization (pseudo-query w = 0): every logit is 0, the softmax
// is uniform, and the readout is the plain mean of the sources,
//   h = (1/n) sum_i b_i,  b_i = sum of the columns of terms[i].
// Independent of the reference and of attnres_direct.hpp: no norm, no exp.
#pragma once

#include "dmref/scalar_traits.hpp"

#include <stdexcept>
#include <vector>

namespace dmref::oracle {

template <class S>
Vec<S> attnres_mean(const std::vector<Mat<S>>& terms) {
  if (terms.empty()) throw std::invalid_argument("attnres_mean: no sources");
  Vec<S> sum = Vec<S>::Zero(terms.front().rows());
  for (const auto& t : terms) sum += t.rowwise().sum();
  return sum / S(static_cast<int>(terms.size()));
}

}  // namespace dmref::oracle
