// dmref/conformance/problem.hpp: one conformance problem as it travels in
// files: a scheme name, a JSON config, and named tensors (inputs `input.*`,
// parameters `param.*`), all float64 values exact in the case's input dtype.
// `evaluate<S>` (evaluate.hpp) runs the reference on it at scalar type S and
// returns the named outputs. docs/fixtures.md lists the tensor names per scheme.
#pragma once

#include "dmref/diagnostics.hpp"
#include "dmref/io/safetensors.hpp"
#include "dmref/matrix.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dmref::conf {

using json = nlohmann::json;
using io::BadInput;

/// Resource bounds of one problem, checked before any work or allocation
/// (docs/hardening.md): a config asking for more is BadInput, never a
/// bad_alloc or a run of days. The fuzz target lowers them.
struct Limits {
  /// Output elements of one evaluation, all outputs together: one token of a
  /// forward problem, a whole backward problem (Outputs::add). At the top
  /// rung (8192 bits) a ball is ~1.1 KiB, so 2^22 outputs hold ~4.5 GiB:
  /// about the most one evaluation may take on the 24 GiB development machine.
  std::int64_t max_elements = std::int64_t{1} << 22;
  std::int64_t max_iterations = 10'000;  // iteration counts (mHC Sinkhorn t_max)
};

using dmref::show;  // the shortest decimal that reads back (diagnostics.hpp)

/// A shape as "[8,64]" (every message prints shapes this way).
inline std::string show_shape(const std::vector<std::int64_t>& shape) {
  std::string s;
  for (auto x : shape) s += (s.empty() ? "" : ",") + std::to_string(x);
  return "[" + s + "]";
}

/// Levenshtein distance, for "did you mean" hints.
inline std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

/// The element of `names` closest to `s` ("" if none).
inline std::string nearest(const std::string& s, const std::set<std::string>& names) {
  std::string best;
  std::size_t bd = SIZE_MAX;
  for (const auto& n : names)
    if (const std::size_t d = edit_distance(s, n); d < bd) bd = d, best = n;
  return best;
}

struct Problem {
  std::string source;         // inputs file, for error messages
  std::string config_source;  // config file, named for config.* fields (default: source)
  std::string scheme;         // "preln", "ldm", "attnres", "hc", "mhc", "denseformer"
  json config;
  std::map<std::string, io::Tensor> tensors;
  Limits limits;
  /// Set by validate() (generate.hpp): the adapters parse and check the whole
  /// problem and name and shape its outputs, but evaluate nothing.
  bool layout_only = false;
  /// Every config key and tensor an adapter asked for, present or not, in
  /// the layout-only pass: what the problem uses is declared once, where it is
  /// read; validate() refuses any key or tensor outside these (docs/fixtures.md,
  /// "Strict configs"). Recorded only when layout_only is set, so that
  /// evaluations of one Problem on several threads never write to it.
  mutable std::set<std::string> keys_asked, tensors_used, tensors_asked;
  /// Keys and tensors the scheme knows but this config does not read (a knob
  /// of another variant: HC's tanh without dynamic, LDM's p_update without
  /// the rls write), with why: declared where the variant is chosen
  /// (unread, unread_tensor), so refuse_unused names the key and the reason
  /// instead of calling it unknown, and never lets it pass.
  mutable std::map<std::string, std::string> keys_unread, tensors_unread;
  // Backward asked for (corpus `.grad.` cases, `dmref run --grad`): upstream
  // gradients input.grad.<output> are then required and the goldens include
  // grad.<input> for every input and parameter (docs/fixtures.md, "Gradients").
  bool grad = false;

  /// Every field but the tensors (and the strictness records): a per-token
  /// copy starts from it (generate.cpp, token_problem). A new field goes here too.
  Problem without_tensors() const {
    Problem q;
    q.source = source;
    q.config_source = config_source;
    q.scheme = scheme;
    q.config = config;
    q.limits = limits;
    q.layout_only = layout_only;
    q.grad = grad;
    return q;
  }

  /// Whether tensor `name` (x) has one row per token: input.*, leading
  /// dimension T = config.tokens (docs/fixtures.md). token_problem
  /// (generate.cpp) takes its row, and a backward problem's grad.<name> is
  /// per token, not summed.
  static bool per_token_tensor(const std::string& name, const io::Tensor& x, std::int64_t T) {
    return name.rfind("input.", 0) == 0 && !x.shape.empty() && x.shape[0] == T;
  }
  /// Whether output `name` has a row per token (output.*, and the grad.<name>
  /// of a per-token input); else (a backward problem's grad.param.*,
  /// grad.config.alpha) it is a sum over tokens.
  bool row_output(const std::string& name) const {
    if (!grad || name.rfind("grad.", 0) != 0) return true;
    const auto it = tensors.find(name.substr(5));
    return it != tensors.end() && per_token_tensor(it->first, it->second, integer("tokens"));
  }

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    const bool cfg = field == "config" || field.rfind("config.", 0) == 0;
    throw BadInput(cfg && !config_source.empty() ? config_source : source, field, what);
  }

  // ---- config access: every value checked, the field named on error ----
  const json* find(const std::string& key) const {
    if (layout_only) keys_asked.insert(key);
    if (!config.is_object()) return nullptr;
    const auto it = config.find(key);
    return it == config.end() ? nullptr : &*it;
  }
  bool contains(const std::string& key) const { return find(key) != nullptr; }
  const json& at(const std::string& key) const {
    const json* v = find(key);
    if (!v) fail("config." + key, "missing");
    return *v;
  }
  /// An integer in [lo, hi], never narrowed: every consumer stores it in an int.
  std::int64_t integer(const std::string& key, std::int64_t lo = 1,
                       std::int64_t hi = std::numeric_limits<int>::max()) const {
    const json& v = at(key);
    if (!v.is_number_integer()) fail("config." + key, "must be an integer, got " + v.dump());
    if (v.is_number_unsigned() ? v.get<std::uint64_t>() > std::uint64_t(hi) : v.get<std::int64_t>() > hi)
      fail("config." + key, "must be <= " + std::to_string(hi) + ", got " + v.dump());
    const auto x = v.get<std::int64_t>();
    if (x < lo) fail("config." + key, "must be >= " + std::to_string(lo) + ", got " + std::to_string(x));
    return x;
  }
  std::int64_t integer_or(const std::string& key, std::int64_t dflt, std::int64_t lo = 0,
                          std::int64_t hi = std::numeric_limits<int>::max()) const {
    return contains(key) ? integer(key, lo, hi) : dflt;
  }
  double number(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_number()) fail("config." + key, "must be a number");
    const double x = v.get<double>();
    if (!std::isfinite(x)) fail("config." + key, "must be finite");
    return x;
  }
  double number_or(const std::string& key, double dflt) const { return contains(key) ? number(key) : dflt; }
  /// A real constant: a JSON number, or a decimal string ("1e-6", "-2.5E+3";
  /// no hex, inf or nan; exponent of at most 4 digits) which is then rounded
  /// once, at the working precision of S (docs/precision.md).
  template <class S>
  S real(const std::string& key, const std::string& dflt) const {
    std::string txt = dflt;
    if (const json* v = find(key)) {
      if (!v->is_string()) return S(number(key));
      txt = v->get<std::string>();
    }
    if (!is_decimal(txt)) fail("config." + key, json(txt).dump() + " is not a decimal number (such as \"1e-6\")");
    if constexpr (std::is_arithmetic_v<S>) return S(std::strtod(txt.c_str(), nullptr));
    else return S(txt);
  }
  static bool is_decimal(const std::string& s) {
    std::size_t i = 0, digits = 0;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) ++digits;
    if (i < s.size() && s[i] == '.')
      for (++i; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) ++digits;
    if (digits == 0) return false;
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      ++i;
      if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
      std::size_t e = 0;
      for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) ++e;
      if (e == 0 || e > 4) return false;
    }
    return i == s.size();
  }
  std::string text(const std::string& key, const std::string& dflt) const {
    const json* v = find(key);
    if (!v) return dflt;
    if (!v->is_string()) fail("config." + key, "must be a string");
    return v->get<std::string>();
  }
  bool flag(const std::string& key, bool dflt) const {
    const json* v = find(key);
    if (!v) return dflt;
    if (!v->is_boolean()) fail("config." + key, "must be true or false");
    return v->get<bool>();
  }

  // ---- tensor access: presence, shape and finiteness checked ----
  const io::Tensor& tensor(const std::string& name, const std::vector<std::int64_t>& shape) const {
    if (layout_only) tensors_used.insert(name);
    const auto it = tensors.find(name);
    if (it == tensors.end()) fail(name, "missing tensor");
    const io::Tensor& t = it->second;
    if (t.shape != shape) fail(name, "shape " + show_shape(t.shape) + " expected " + show_shape(shape));
    for (std::size_t i = 0; i < t.values.size(); ++i)
      if (!std::isfinite(t.values[i])) fail(name, "element " + std::to_string(i) + " is not finite");
    return t;
  }
  /// `key` has no effect in this config, because `why` ("read only with
  /// dynamic: true"): present in the config, it is an error naming both.
  void unread(const std::string& key, const std::string& why) const {
    if (layout_only) keys_unread.emplace(key, why);
  }
  void unread_tensor(const std::string& name, const std::string& why) const {
    if (layout_only) tensors_unread.emplace(name, why);
  }
  bool has(const std::string& name) const {
    if (layout_only) tensors_asked.insert(name);
    return tensors.count(name) != 0;
  }

  /// After the adapter ran: a config key or tensor it never asked for is an
  /// error naming it and the nearest name it did ask for; one the scheme
  /// knows but this config does not read (unread) is an error naming it and
  /// why. Unknown keys first: a misspelled "varaint" is reported as such,
  /// not the "block_size" it left without a block variant.
  void refuse_unused() const {
    std::set<std::string> keys = keys_asked;
    for (const auto& [k, why] : keys_unread) keys.insert(k);
    if (config.is_object()) {
      for (const auto& [k, v] : config.items()) {
        (void)v;
        if (keys.count(k)) continue;
        const std::string near = nearest(k, keys);
        fail("config." + k, "unknown key for scheme " + scheme + (near.empty() ? "" : " (did you mean \"" + near + "\"?)"));
      }
      for (const auto& [k, v] : config.items()) {
        (void)v;
        if (!keys_asked.count(k)) fail("config." + k, "has no effect in this config: " + keys_unread.at(k));
      }
    }
    std::set<std::string> known = tensors_used;
    known.insert(tensors_asked.begin(), tensors_asked.end());
    for (const auto& [name, t] : tensors) {
      (void)t;
      if (tensors_used.count(name)) continue;
      if (const auto it = tensors_unread.find(name); it != tensors_unread.end())
        fail(name, "tensor not used by this config: " + it->second);
      const std::string near = nearest(name, known);
      fail(name, "tensor not used by this config (scheme " + scheme + "; an option that is off, or a misspelled name" +
                     (near.empty() ? "" : "? nearest used: " + near) + ")");
    }
  }
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
  const Problem* problem = nullptr;  // during evaluate() only: its limits, layout_only and messages

  /// The file bound over the bound of one evaluation: all tokens' outputs
  /// are held as double-doubles (16 bytes; about 48 with the assembled
  /// tensors and the write buffer), one token's as balls (~1.1 KiB each at
  /// the 8192-bit rung), so the whole file may have 16x the elements of one
  /// evaluation and still take less memory than it.
  static constexpr std::int64_t kFileFactor = 16;
  /// The least a token counts for in that bound (validate): its bookkeeping
  /// costs about as much as kTokenCharge outputs (docs/hardening.md, "Memory
  /// per output", measured).
  static constexpr std::int64_t kTokenCharge = 8;
  std::int64_t total = 0;      // elements of all outputs so far
  std::int64_t per_token = 0;  // of one token's rows (outputs [T, ...], a backward problem's grad.input.*)
  std::int64_t summed = 0;     // of a backward problem's sums over tokens (grad.param.*, grad.config.*)

  /// A new output, bounded before anything is allocated (BadInput past a
  /// bound; docs/hardening.md). Every problem is certified one token at a
  /// time (generate.cpp, token_problem; a backward problem's sums over tokens
  /// are added from each token's terms): one token's evaluation -- its rows
  /// and, in a backward problem, every sum whole (each token's terms) -- is
  /// bounded by problem->limits.max_elements, all outputs of all tokens by
  /// kFileFactor times it.
  Out& add(const std::string& name, std::vector<std::int64_t> shape) {
    Out& o = t[name];
    o.shape = std::move(shape);
    if (!problem) {
      std::int64_t n = 1;
      for (auto s : o.shape) {
        if (s < 0 || (s != 0 && n > std::numeric_limits<std::int64_t>::max() / s))
          throw std::invalid_argument("outputs: " + name + ": too many elements");
        n *= s;
      }
      total += n;
      o.values.reserve(n);
      return o;
    }
    const std::int64_t limit = problem->limits.max_elements;
    auto refuse = [&](const std::string& what, std::int64_t bound, const std::string& why) {
      problem->fail("config", "output " + name + " " + show_shape(o.shape) + " takes " + what + " past " + std::to_string(bound) +
                                  " elements (" + why + ", docs/hardening.md)");
    };
    // product of shape[first..] if it stays <= max, else -1
    auto product = [&](std::size_t first, std::int64_t max) {
      std::int64_t n = 1;
      for (std::size_t i = first; i < o.shape.size(); ++i) {
        const std::int64_t s = o.shape[i];
        if (s < 0 || (s != 0 && n > max / s)) return std::int64_t{-1};
        n *= s;
      }
      return n > max ? std::int64_t{-1} : n;
    };
    const std::int64_t file = limit * kFileFactor;
    std::int64_t n;
    if (!problem->row_output(name)) {  // a sum over tokens: each token's evaluation holds it whole
      n = product(0, limit - per_token - summed);
      if (n < 0)
        refuse("one token's outputs", limit,
               "the resource limit of one evaluation, which holds a backward problem's sums over tokens whole");
      if (n > file - total) refuse("the outputs of all tokens", file, std::to_string(kFileFactor) + "x the resource limit");
      summed += n;
    } else {
      const std::int64_t row = product(o.shape.empty() ? 0 : 1, limit - per_token - summed);
      if (row < 0) refuse("one token's outputs", limit, "the resource limit of one evaluation");
      n = product(0, file - total);
      if (n < 0) refuse("the outputs of all tokens", file, std::to_string(kFileFactor) + "x the resource limit");
      per_token += row;
    }
    total += n;
    if (!problem->layout_only) o.values.reserve(n);
    return o;
  }
  template <class V>
  static void append(Out& o, const V& v) {  // a vector, or a matrix row by row
    for (Eigen::Index i = 0; i < v.rows(); ++i)
      for (Eigen::Index j = 0; j < v.cols(); ++j) o.values.push_back(v(i, j));
  }
};

/// An op-level backward problem's gradients of its per-token inputs
/// (grad.input.<name>), appended token after token, then moved into the
/// outputs (`into`, which bounds them as Outputs::add does). Each is reserved
/// whole when its first row arrives, at the element count of input.<name>: a
/// vector grown by doubling copies itself and faults fresh pages in at every
/// step, and at M = 1024, n = 4, C = 4096 mhc_ops' grad.input.residual is
/// 128 MiB, grown again in each of the tolerance model's samples
/// (docs/performance.md, "Input gradients reserved whole").
template <class S>
struct InputGrads {
  const Problem& problem;
  std::map<std::string, typename Outputs<S>::Out> t;
  typename Outputs<S>::Out& operator[](const std::string& name) {  // "grad.input.<name>"
    auto [it, fresh] = t.try_emplace(name);
    if (fresh) {
      std::size_t n = 1;
      for (auto d : problem.tensors.at(name.substr(5)).shape) n *= std::size_t(d);
      it->second.values.reserve(n);
    }
    return it->second;
  }
  void into(Outputs<S>& o) {
    for (auto& [name, g] : t) o.add(name, problem.tensors.at(name.substr(5)).shape).values = std::move(g.values);
  }
};

}  // namespace dmref::conf
