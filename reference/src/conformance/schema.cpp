// The declared schema of a problem (schema.hpp).
#include "dmref/conformance/schema.hpp"

#include <stdexcept>

namespace dmref::conf {

const char* role_name(Role r) {
  switch (r) {
    case Role::input: return "input";
    case Role::param: return "param";
    case Role::upstream: return "upstream";
    case Role::output: return "output";
  }
  return "?";
}

Draw uniform(double scale, std::string text) { return {Draw::Kind::uniform, scale, 0, std::move(text)}; }
Draw range(double lo, double hi, std::string text) { return {Draw::Kind::range, lo, hi, std::move(text)}; }
Draw unit_groups(std::int64_t groups, std::string text) {
  return {Draw::Kind::unit_groups, double(groups), 0, std::move(text)};
}

std::vector<std::int64_t> TensorSpec::shape() const {
  std::vector<std::int64_t> v;
  for (const auto& d : dims) v.push_back(d.n);
  return v;
}

std::string TensorSpec::dims_text() const {
  std::string s;
  for (const auto& d : dims) s += (s.empty() ? "" : ", ") + d.s;
  return "[" + s + "]";
}

const TensorSpec* Schema::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const io::Tensor& Schema::read(const Problem& p, const std::string& name) const {
  const TensorSpec* t = find(name);
  if (!t || t->role == Role::output)  // a binding reading what its schema does not declare: a defect here
    throw std::logic_error("schema of " + scheme + ": " + name + " is read but not declared as an input");
  return p.tensor(name, t->shape());
}

std::vector<std::int64_t> Schema::shape(const std::string& name) const {
  const TensorSpec* t = find(name);
  if (!t) throw std::logic_error("schema of " + scheme + ": " + name + " is not declared");
  return t->shape();
}

const json& Schema::value(const std::string& key) const {
  for (const auto& k : keys)
    if (k.key == key) return k.value;
  throw std::logic_error("schema of " + scheme + ": config key " + key + " is used but not declared");
}

json Schema::to_json() const {
  json j;
  j["scheme"] = scheme;
  j["keys"] = json::array();
  for (const auto& k : keys)
    j["keys"].push_back({{"key", k.key}, {"type", k.type}, {"range", k.range}, {"default", k.dflt},
                         {"meaning", k.meaning}, {"value", k.value}});
  j["tensors"] = json::array();
  for (const auto& t : tensors) {
    json e = {{"name", t.name}, {"dims", t.dims_text()}, {"shape", t.shape()}, {"role", role_name(t.role)},
              {"meaning", t.meaning}};
    if (t.draw) e["draw"] = t.draw->text;
    j["tensors"].push_back(e);
  }
  return j;
}

KeySpec& SchemaBuilder::record(const std::string& key, std::string type, std::string range, std::string dflt,
                               std::string meaning, json value) {
  for (auto& k : s.keys)
    if (k.key == key) throw std::logic_error("schema of " + s.scheme + ": config key " + key + " declared twice");
  s.keys.push_back({key, std::move(type), std::move(range), std::move(dflt), std::move(meaning), std::move(value)});
  return s.keys.back();
}

namespace {
std::string int_range(std::int64_t lo, std::int64_t hi) {
  return hi == std::numeric_limits<int>::max() ? ">= " + std::to_string(lo)
                                                : "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}
}  // namespace

std::int64_t SchemaBuilder::integer(const std::string& key, const std::string& meaning, std::int64_t lo,
                                    std::int64_t hi) {
  const std::int64_t x = p.integer(key, lo, hi);
  record(key, "integer", int_range(lo, hi), "", meaning, x);
  return x;
}

std::int64_t SchemaBuilder::integer_or(const std::string& key, std::int64_t dflt, const std::string& meaning,
                                       std::int64_t lo, std::int64_t hi) {
  const std::int64_t x = p.integer_or(key, dflt, lo, hi);
  record(key, "integer", int_range(lo, hi), std::to_string(dflt), meaning, x);
  return x;
}

std::string SchemaBuilder::choice(const std::string& key, const std::vector<std::string>& choices,
                                  const std::string& meaning, std::optional<std::string> dflt) {
  const std::string d = dflt.value_or(choices.at(0));
  const std::string x = p.text(key, d);
  std::string list;
  for (std::size_t i = 0; i < choices.size(); ++i)
    list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  if (std::find(choices.begin(), choices.end(), x) == choices.end())
    p.fail("config." + key, "must be " + list + ", got \"" + x + "\"");
  std::string range;
  for (const auto& c : choices) range += (range.empty() ? "" : " | ") + c;
  record(key, "string", range, d, meaning, x);
  return x;
}

bool SchemaBuilder::flag(const std::string& key, bool dflt, const std::string& meaning) {
  const bool x = p.flag(key, dflt);
  record(key, "boolean", "true | false", dflt ? "true" : "false", meaning, x);
  return x;
}

double SchemaBuilder::number(const std::string& key, const std::string& meaning, const std::string& range) {
  const double x = p.number(key);
  record(key, "number", range, "", meaning, x);
  return x;
}

void SchemaBuilder::real(const std::string& key, const std::string& dflt, const std::string& meaning, bool nonnegative) {
  const json* v = p.find(key);
  const std::string range = nonnegative ? ">= 0 (number or decimal string)" : "number or decimal string";
  if (!v) {  // absent: the default (dflt), or with none the scheme's own (a preset's; value null)
    record(key, "real", range, dflt.empty() ? "the preset's" : dflt, meaning, dflt.empty() ? json(nullptr) : json(dflt));
    return;
  }
  // Problem::real validates (a finite number, or a decimal string); checked at double here.
  const double x = p.real<double>(key, dflt.empty() ? "0" : dflt);
  if (nonnegative && !(x >= 0)) p.fail("config." + key, "must be >= 0");
  record(key, "real", range, dflt.empty() ? "the preset's" : dflt, meaning, *v);
}

void SchemaBuilder::tensor(std::string name, std::vector<Dim> dims, Role role, std::string meaning,
                           std::optional<Draw> draw) {
  if (s.find(name)) throw std::logic_error("schema of " + s.scheme + ": tensor " + name + " declared twice");
  if ((role == Role::output) != !draw)
    throw std::logic_error("schema of " + s.scheme + ": " + name + ": every given tensor has a draw, no output has");
  s.tensors.push_back({std::move(name), std::move(dims), role, std::move(meaning), std::move(draw)});
}

void SchemaBuilder::upstream(const std::string& of) {
  const TensorSpec* t = s.find("output." + of);
  if (!t) throw std::logic_error("schema of " + s.scheme + ": upstream of undeclared output." + of);
  const std::vector<Dim> dims = t->dims;
  tensor("input.grad." + of, dims, Role::upstream, "upstream gradient of output." + of, uniform(1.0, "uniform[-1, 1)"));
}

Layers declare_layers(SchemaBuilder& b) {
  Layers D;
  D.T = {b.integer("tokens", "tokens, each an independent problem"), "T"};
  D.L = {b.integer("layers", "layers (depth)"), "L"};
  D.d = {b.integer("d", "model width"), "d"};
  D.model = b.choice("level", {"kernel", "model"},
                     "kernel: the layer outputs are given (input.v); model: computed by F_l(h) = W2 tanh(W1 RMSNorm(h))") ==
            "model";
  const double e_scale = b.option("e_scale", 1.0);
  b.input("input.e", {D.T, D.d}, "token embeddings h_0", uniform(e_scale, "uniform[-1, 1) x e_scale (1)"));
  if (D.model) {
    b.unread_tensor("input.v", "at level model the layer outputs are computed (param.W1, param.W2), not given");
    const Dim h{b.integer("hidden", "width of the layer MLP (level model)"), "hidden"};
    b.param("param.W1", {D.L, h, D.d}, "layer MLP, first matrix",
            uniform(1.0 / std::sqrt(double(D.d.n)), "uniform[-1, 1) / sqrt(d)"));
    b.param("param.W2", {D.L, D.d, h}, "layer MLP, second matrix",
            uniform(1.0 / std::sqrt(double(h.n)), "uniform[-1, 1) / sqrt(hidden)"));
  } else {
    const std::string why =
        "read only at level model (config.level is " + std::string(b.p.contains("level") ? "kernel" : "missing: kernel") + ")";
    b.unread("hidden", why);
    b.unread_tensor("param.W1", why);
    b.unread_tensor("param.W2", why);
    b.input("input.v", {D.T, D.L, D.d}, "layer outputs v_l = F_l(h_{l-1}), given (level kernel)",
            uniform(1.0, "uniform[-1, 1)"));
  }
  return D;
}

void declare_layer_outputs(SchemaBuilder& b, const Layers& D) {
  b.output("output.h", {D.T, D.L, D.d}, "input of every layer, h_0 included");
  if (D.model) b.output("output.v", {D.T, D.L, D.d}, "output of every layer");
  b.output("output.out", {D.T, D.d}, "final(streams)");
}

void declare_layer_upstream(SchemaBuilder& b, const Layers& D) {
  b.upstream("h");
  b.upstream("out");
  if (D.model) b.upstream("v");
}

}  // namespace dmref::conf
