// dmref/conformance/problem.hpp: one conformance problem as it travels in
// files: a scheme name, a JSON config, and named tensors (inputs `input.*`,
// parameters `param.*`), all float64 values exact in the case's input dtype.
// `evaluate<S>` (evaluate.hpp) runs the reference on it at scalar type S and
// returns the named outputs. docs/fixtures.md lists the tensor names per scheme.
#pragma once

#include "dmref/io/safetensors.hpp"
#include "dmref/scalar.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dmref::conf {

using json = nlohmann::json;
using io::BadInput;

struct Problem {
  std::string source;  // file name for error messages
  std::string scheme;  // "preln", "ldm", "attnres", "hc", "mhc", "denseformer"
  json config;
  std::map<std::string, io::Tensor> tensors;
  // Backward asked for (corpus `.grad.` cases, `dmref run --grad`): upstream
  // gradients input.grad.<output> are then required and the goldens include
  // grad.<input> for every input and parameter (docs/fixtures.md, "Gradients").
  bool grad = false;

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw BadInput(source, field, what);
  }

  // ---- config access: every value checked, the field named on error ----
  const json& at(const std::string& key) const {
    if (!config.is_object() || !config.contains(key)) fail("config." + key, "missing");
    return config.at(key);
  }
  std::int64_t integer(const std::string& key, std::int64_t lo = 1) const {
    const json& v = at(key);
    if (!v.is_number_integer()) fail("config." + key, "must be an integer");
    const auto x = v.get<std::int64_t>();
    if (x < lo) fail("config." + key, "must be >= " + std::to_string(lo) + ", got " + std::to_string(x));
    return x;
  }
  std::int64_t integer_or(const std::string& key, std::int64_t dflt, std::int64_t lo = 0) const {
    return config.contains(key) ? integer(key, lo) : dflt;
  }
  double number(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_number()) fail("config." + key, "must be a number");
    const double x = v.get<double>();
    if (!std::isfinite(x)) fail("config." + key, "must be finite");
    return x;
  }
  double number_or(const std::string& key, double dflt) const { return config.contains(key) ? number(key) : dflt; }
  /// A real constant: a JSON number, or a decimal string ("1e-6") which is
  /// then rounded once, at the working precision of S (docs/precision.md).
  template <class S>
  S real(const std::string& key, const std::string& dflt) const {
    std::string txt = dflt;
    if (config.contains(key)) {
      const json& v = config.at(key);
      if (v.is_string()) txt = v.get<std::string>();
      else return S(number(key));
    }
    try {
      std::size_t used = 0;
      const double x = std::stod(txt, &used);
      if (used != txt.size() || !std::isfinite(x)) throw std::invalid_argument(txt);
    } catch (const std::exception&) {
      fail("config." + key, "\"" + txt + "\" is not a finite decimal number");
    }
    if constexpr (std::is_arithmetic_v<S>) return S(std::stod(txt));
    else return S(txt);
  }
  std::string text(const std::string& key, const std::string& dflt) const {
    if (!config.contains(key)) return dflt;
    if (!config.at(key).is_string()) fail("config." + key, "must be a string");
    return config.at(key).get<std::string>();
  }
  bool flag(const std::string& key, bool dflt) const {
    if (!config.contains(key)) return dflt;
    if (!config.at(key).is_boolean()) fail("config." + key, "must be true or false");
    return config.at(key).get<bool>();
  }

  // ---- tensor access: presence, shape and finiteness checked ----
  const io::Tensor& tensor(const std::string& name, const std::vector<std::int64_t>& shape) const {
    const auto it = tensors.find(name);
    if (it == tensors.end()) fail(name, "missing tensor");
    const io::Tensor& t = it->second;
    if (t.shape != shape) {
      std::string want = "[", got = "[";
      for (auto s : shape) want += std::to_string(s) + ",";
      for (auto s : t.shape) got += std::to_string(s) + ",";
      fail(name, "shape " + got + "] expected " + want + "]");
    }
    for (std::size_t i = 0; i < t.values.size(); ++i)
      if (!std::isfinite(t.values[i])) fail(name, "element " + std::to_string(i) + " is not finite");
    return t;
  }
  bool has(const std::string& name) const { return tensors.count(name) != 0; }
};

/// Row-major slices of a tensor as Eigen objects at scalar S.
template <class S>
Vec<S> vec_at(const io::Tensor& t, std::int64_t offset, std::int64_t n) {
  Vec<S> v(n);
  for (std::int64_t i = 0; i < n; ++i) v(i) = S(t.values[offset + i]);
  return v;
}
template <class S>
Mat<S> mat_at(const io::Tensor& t, std::int64_t offset, std::int64_t rows, std::int64_t cols) {
  Mat<S> m(rows, cols);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) m(i, j) = S(t.values[offset + i * cols + j]);
  return m;
}

/// Named outputs at scalar S, row-major.
template <class S>
struct Outputs {
  struct Out {
    std::vector<std::int64_t> shape;
    std::vector<S> values;
  };
  std::map<std::string, Out> t;

  Out& add(const std::string& name, std::vector<std::int64_t> shape) {
    Out& o = t[name];
    o.shape = std::move(shape);
    std::int64_t n = 1;
    for (auto s : o.shape) n *= s;
    o.values.reserve(n);
    return o;
  }
  template <class V>
  static void append(Out& o, const V& v) {  // a vector, or a matrix row by row
    for (Eigen::Index i = 0; i < v.rows(); ++i)
      for (Eigen::Index j = 0; j < v.cols(); ++j) o.values.push_back(v(i, j));
  }
};

}  // namespace dmref::conf
