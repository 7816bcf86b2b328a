// properties/ops_harness.hpp: what the op-level properties (<op>_ops_properties.cpp)
// share: hand-built tensors, and one op's output fed to the next as an input.
#pragma once

#include "dmref/conformance/problem.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dmref::prop {

/// A float64 tensor of the given shape and values.
inline io::Tensor tensor(std::vector<std::int64_t> shape, std::vector<double> v) {
  return {"F64", std::move(shape), std::move(v)};
}

/// Output `name` of an evaluation, as a tensor (the input of the next op).
inline io::Tensor from(const conf::Outputs<double>& o, const std::string& name) {
  const auto& t = o.t.at(name);
  return tensor(t.shape, t.values);
}

}  // namespace dmref::prop
