// dmref/conformance/schema.hpp: what one scheme's problem is made of, declared
// once (issue 21). A scheme's schema function reads the config of a Problem
// (every key with its type, range, default and meaning; each validation rule
// once, naming its field) and declares every tensor: name, dims, role (input,
// param, upstream, output) and, for what a problem gives, how the corpus
// draws it. Everything else reads the problem through it:
//   - the binding (conformance/schemes/<s>.hpp) takes its config values from
//     the Schema and its tensors through Schema::read (shape from the
//     declaration, checked);
//   - the corpus (corpus.cpp) draws the declared input, param and upstream
//     tensors in declaration order (draw());
//   - `dmref schema <scheme>` and Python's `dmref.schema(...)` print it
//     (to_json), and the "Files" section of each scheme page is generated
//     from it (scripts/schema_docs.py, checked in CTest `schema_docs`).
// A scheme's schema function is its entry in the registry (registry.hpp).
#pragma once

#include "dmref/conformance/problem.hpp"

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace dmref::conf {

/// A dimension: its value in this config and its symbol ("T", "L+1", "n*d").
struct Dim {
  std::int64_t n = 0;
  std::string s;
};
inline std::string dim_factor(const std::string& s) {  // parenthesised when it is a sum
  return s.find_first_of("+-") == std::string::npos ? s : "(" + s + ")";
}
inline Dim operator+(const Dim& a, std::int64_t k) { return {a.n + k, a.s + "+" + std::to_string(k)}; }
inline Dim operator+(const Dim& a, const Dim& b) { return {a.n + b.n, a.s + "+" + b.s}; }
inline Dim operator*(const Dim& a, const Dim& b) { return {a.n * b.n, dim_factor(a.s) + "*" + dim_factor(b.s)}; }
inline Dim operator/(const Dim& a, const Dim& b) { return {b.n ? a.n / b.n : 0, dim_factor(a.s) + "/" + dim_factor(b.s)}; }

enum class Role { input, param, upstream, output };
const char* role_name(Role r);

/// How the corpus draws a tensor (docs/fixtures.md, "How inputs are
/// generated"): each value from the case's SplitMix64 stream, rounded to the
/// case's input dtype. uniform: uniform[-1, 1) x a; range: uniform on [a, b);
/// unit_groups: the last dimension cut into a slices, each scaled to unit L2
/// norm (in double) before rounding. `adjust` then edits the drawn values (HC's
/// identity initialisation, DenseFormer's sparsity pattern): it draws nothing.
struct Draw {
  enum class Kind { uniform, range, unit_groups } kind = Kind::uniform;
  double a = 1, b = 0;
  std::string text;  // the same in words, for `dmref schema` and the docs
  std::function<void(std::vector<double>& values, const std::function<double(double)>& round)> adjust = {};
};
Draw uniform(double scale, std::string text);
Draw range(double lo, double hi, std::string text);
Draw unit_groups(std::int64_t groups, std::string text);

struct TensorSpec {
  std::string name;
  std::vector<Dim> dims;
  Role role = Role::input;
  std::string meaning;
  std::optional<Draw> draw;  // every input, param and upstream tensor; none for an output
  std::vector<std::int64_t> shape() const;
  std::string dims_text() const;  // "[T, L+1, d]"
};

struct KeySpec {
  std::string key, type, range, dflt, meaning;  // dflt "" = required
  json value;                                  // as given, or the default
};

struct Schema {
  std::string scheme;
  std::vector<KeySpec> keys;
  std::vector<TensorSpec> tensors;  // declaration order = the corpus's draw order
  std::set<std::string> options;    // the corpus input options its draws read (e_scale, res_scale, ...)

  const TensorSpec* find(const std::string& name) const;
  /// A declared input/param/upstream tensor of p, its shape checked against
  /// the declaration (Problem::tensor: presence, shape, finiteness).
  const io::Tensor& read(const Problem& p, const std::string& name) const;
  /// A declared output's shape.
  std::vector<std::int64_t> shape(const std::string& name) const;
  // Config values as the schema read them (validated, defaults applied).
  const json& value(const std::string& key) const;
  std::int64_t integer(const std::string& key) const { return value(key).get<std::int64_t>(); }
  std::string text(const std::string& key) const { return value(key).get<std::string>(); }
  bool flag(const std::string& key) const { return value(key).get<bool>(); }
  double number(const std::string& key) const { return value(key).get<double>(); }
  /// A real constant rounded once at S (Problem::real: a number, or a decimal string).
  template <class S>
  S real(const std::string& key) const {
    const json& v = value(key);
    if (!v.is_string()) return S(v.get<double>());
    if constexpr (std::is_arithmetic_v<S>) return S(std::strtod(v.get<std::string>().c_str(), nullptr));
    else return S(v.get<std::string>());
  }
  bool has(const std::string& name) const { return find(name) != nullptr; }
  /// Whether key has a value (given, or a default: a real knob whose default
  /// is the scheme's own, such as a preset's, has none unless given).
  bool has_key(const std::string& key) const {
    for (const auto& k : keys)
      if (k.key == key) return !k.value.is_null();
    return false;
  }
  json to_json() const;
};

/// Reads a Problem's config into a Schema, recording every key (Problem's
/// accessors: strict configs, docs/fixtures.md) and every tensor declared.
/// `opt` is the corpus's input options (CaseSpec::inputs: scales of the
/// draws, never part of the problem); {} outside the corpus.
struct SchemaBuilder {
  const Problem& p;
  const json& opt;
  Schema s;

  SchemaBuilder(const Problem& problem, const json& options) : p(problem), opt(options) { s.scheme = problem.scheme; }

  std::int64_t integer(const std::string& key, const std::string& meaning, std::int64_t lo = 1,
                       std::int64_t hi = std::numeric_limits<int>::max());
  std::int64_t integer_or(const std::string& key, std::int64_t dflt, const std::string& meaning, std::int64_t lo = 0,
                          std::int64_t hi = std::numeric_limits<int>::max());
  /// One of `choices` (the first is the default unless `dflt` is given).
  std::string choice(const std::string& key, const std::vector<std::string>& choices, const std::string& meaning,
                     std::optional<std::string> dflt = std::nullopt);
  bool flag(const std::string& key, bool dflt, const std::string& meaning);
  /// A finite number (required).
  double number(const std::string& key, const std::string& meaning, const std::string& range = "finite");
  /// A real constant: a number or a decimal string; `dflt` a decimal string
  /// ("" = its default is the scheme's own, a preset's: value null unless given).
  void real(const std::string& key, const std::string& dflt, const std::string& meaning, bool nonnegative = false);
  void unread(const std::string& key, const std::string& why) const { p.unread(key, why); }
  void unread_tensor(const std::string& name, const std::string& why) const { p.unread_tensor(name, why); }
  /// A corpus input option (CaseSpec::inputs), for a draw's scale.
  double option(const char* key, double dflt) {
    s.options.insert(key);
    return opt.is_object() ? opt.value(key, dflt) : dflt;
  }

  void tensor(std::string name, std::vector<Dim> dims, Role role, std::string meaning, std::optional<Draw> draw = {});
  void input(std::string name, std::vector<Dim> dims, std::string meaning, Draw draw) {
    tensor(std::move(name), std::move(dims), Role::input, std::move(meaning), std::move(draw));
  }
  void param(std::string name, std::vector<Dim> dims, std::string meaning, Draw draw) {
    tensor(std::move(name), std::move(dims), Role::param, std::move(meaning), std::move(draw));
  }
  void output(std::string name, std::vector<Dim> dims, std::string meaning) {
    tensor(std::move(name), std::move(dims), Role::output, std::move(meaning));
  }
  /// The upstream gradient input.grad.<of> of output.<of> (backward problems
  /// only): uniform[-1, 1), shaped like the output.
  void upstream(const std::string& of);

 private:
  KeySpec& record(const std::string& key, std::string type, std::string range, std::string dflt, std::string meaning,
                  json value);
};

// ---- the part every scheme shares: the layer keys and tensors ----
/// tokens, layers, d, level, hidden; input.e, and input.v (kernel level) or
/// param.W1, param.W2 (model level). T, L, d as Dims.
struct Layers {
  Dim T, L, d;
  bool model = false;
};
Layers declare_layers(SchemaBuilder& b);
/// The outputs every scheme has (output.h, output.v at model level, output.out).
void declare_layer_outputs(SchemaBuilder& b, const Layers& D);
/// The upstream gradients of those outputs (backward problems).
void declare_layer_upstream(SchemaBuilder& b, const Layers& D);

}  // namespace dmref::conf
