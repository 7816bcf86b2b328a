// The scheme registry (registry.hpp) and the reference's dispatch through it:
// evaluate<S> for the four scalar types the library instantiates.
#include "dmref/conformance/registry.hpp"

#include <algorithm>
#include <map>
#include <set>


namespace dmref::conf {

const std::vector<SchemeEntry>& registry() {
#define DMREF_ENTRY(s) {#s, &s##_info, &evaluate_##s<float>, &evaluate_##s<double>, &evaluate_##s<Ball>, &evaluate_##s<Perturbed>},
  static const std::vector<SchemeEntry> all = {DMREF_SCHEMES(DMREF_ENTRY)};
#undef DMREF_ENTRY
  return all;
}

const SchemeEntry& scheme_entry(const Problem& p) {
  std::string known;
  for (const auto& e : registry()) {
    if (e.name == p.scheme) return e;
    known += (known.empty() ? "" : ", ") + e.name;
  }
  p.fail("scheme", "unknown scheme \"" + p.scheme + "\" (" + known + ")");
}

const SchemeEntry& scheme_entry(const std::string& scheme) {
  Problem named;  // a problem with only its scheme: the same refusal of an unknown name
  named.scheme = scheme;
  named.source = "scheme";
  return scheme_entry(named);
}

Schema schema_of(const Problem& p, const json& opt) { return scheme_entry(p).info->schema(p, opt); }

template <class S>
Outputs<S> evaluate(const Problem& p) {
  const Evaluator<S> run = scheme_entry(p).evaluator<S>();
  return evaluate_with<S>(p, [run](const Problem& q, const Schema& s, Outputs<S>& o) { run(q, s, o); });
}

template Outputs<float> evaluate<float>(const Problem&);
template Outputs<double> evaluate<double>(const Problem&);
template Outputs<Ball> evaluate<Ball>(const Problem&);
template Outputs<Perturbed> evaluate<Perturbed>(const Problem&);

void fail_parameter(const Problem& p, const ParameterError& e) {
  const std::string base = e.field.substr(0, e.field.find('['));  // "a[1,3]" -> "a"
  if (p.config.is_object() && p.config.contains(base)) p.fail("config." + e.field, e.problem);
  for (const char* family : {"param.", "input."})
    if (p.tensors.count(family + base)) p.fail(family + e.field, e.problem);
  p.fail(p.scheme + "." + e.field, e.problem);  // a value derived from several (named by the scheme)
}

Problem schema_problem(const std::string& scheme, const json& config, bool grad, const std::string& source) {
  Problem p;
  p.source = p.config_source = source;
  p.scheme = scheme;
  p.config = config;
  p.grad = grad;
  if (!p.config.is_object()) p.fail("config", "must be a JSON object");
  return p;
}

namespace {
/// "level=model, dynamic=true": a doc config's keys beyond the sizes ("default" if none).
std::string config_label(const json& c, bool grad) {
  std::string s;
  for (const auto& [k, v] : c.items())
    if (k != "tokens" && k != "layers" && k != "d" && k != "n" && k != "hidden" && k != "groups" && k != "dk")
      s += (s.empty() ? "" : ", ") + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  if (grad) s += std::string(s.empty() ? "" : ", ") + "backward";
  return s.empty() ? "default" : s;
}
std::string md_escape(std::string s) {
  for (std::size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.replace(i, 1, "\\|");
  return s;
}
}  // namespace

json schema_doc(const SchemeEntry& e) {
  json keys = json::array(), tensors = json::array();
  std::vector<std::string> labels;
  std::vector<std::map<std::string, json>> values;  // per doc config: its keys' values (defaults applied)
  std::map<std::string, std::size_t> tensor_at;
  std::set<std::string> key_seen;
  std::map<std::string, std::set<std::size_t>> seen_in;                          // tensor -> doc configs
  std::map<std::string, std::vector<std::pair<std::string, std::set<std::size_t>>>> dims;  // tensor -> (dims, configs)
  std::map<std::string, std::vector<std::pair<std::string, std::set<std::size_t>>>> meanings;  // tensor -> (meaning, configs)
  for (const bool grad : {false, true})
    for (const auto& c : e.info->doc_configs) {
      const std::string label = config_label(c, grad);
      labels.push_back(label);
      const Schema s = e.info->schema(schema_problem(e.name, c, grad, "doc config of " + e.name), json::object());
      values.emplace_back();
      for (const auto& k : s.keys) {
        values.back()[k.key] = k.value;
        if (key_seen.insert(k.key).second)
          keys.push_back({{"key", k.key}, {"type", k.type}, {"range", k.range}, {"default", k.dflt}, {"meaning", k.meaning}});
      }
      for (const auto& t : s.tensors) {
        if (!tensor_at.count(t.name)) {
          tensor_at[t.name] = tensors.size();
          json j = {{"name", t.name}, {"role", role_name(t.role)}, {"meaning", t.meaning}};
          if (t.draw) j["draw"] = t.draw->text;
          tensors.push_back(j);
        }
        seen_in[t.name].insert(labels.size() - 1);
        // (a plain pair, not a structured binding: clang 14 cannot capture a binding in a lambda)
        for (const auto& mt : {std::pair{&dims, t.dims_text()}, std::pair{&meanings, t.meaning}}) {
          auto& ds = (*mt.first)[t.name];
          const std::string& text = mt.second;
          auto it = std::find_if(ds.begin(), ds.end(), [&](const auto& x) { return x.first == text; });
          if (it == ds.end()) it = ds.insert(ds.end(), {text, {}});
          it->second.insert(labels.size() - 1);
        }
      }
    }
  // "key=value" or "key=a|b": the first key (in declaration order) whose values mark exactly the
  // doc configs in `in` among those of `among`: every config in `in` has the key, and none of
  // their values is that of a config outside (where the key may be absent).
  auto condition = [&](const std::set<std::size_t>& in, const std::set<std::size_t>& among) -> std::string {
    auto text = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    for (const auto& k : keys) {
      const std::string key = k["key"];
      std::vector<json> inside, outside;
      bool everywhere = true;  // in every config of `in`
      for (const std::size_t i : among) {
        const bool has = values[i].count(key) != 0;
        if (!has && in.count(i)) {
          everywhere = false;
          break;
        }
        if (!has) continue;
        auto& to = in.count(i) ? inside : outside;
        if (std::find(to.begin(), to.end(), values[i].at(key)) == to.end()) to.push_back(values[i].at(key));
      }
      if (!everywhere) continue;
      bool disjoint = true;
      for (const auto& v : inside) disjoint &= std::find(outside.begin(), outside.end(), v) == outside.end();
      if (!disjoint) continue;
      std::string w;
      for (const auto& v : inside) w += (w.empty() ? "" : "|") + text(v);
      return key + "=" + w;
    }
    return {};
  };
  std::set<std::size_t> forward;  // the forward half of the doc configs
  for (std::size_t i = 0; i < labels.size() / 2; ++i) forward.insert(i);
  // The dims or meaning of a tensor, per config where they differ (mHC's phi_layout; an op-level
  // scheme's output of two ops): "x (key=value); y (key=value)".
  auto per_config = [&](const std::vector<std::pair<std::string, std::set<std::size_t>>>& ds, const char* sep) {
    if (ds.size() == 1) return ds[0].first;
    std::set<std::size_t> among;  // the configs that have the tensor at all
    for (const auto& [y, other] : ds) among.insert(other.begin(), other.end());
    std::string d;
    for (const auto& [x, in] : ds) {
      std::string w = condition(in, among);
      if (w.empty())
        for (const std::size_t i : in) w += (w.empty() ? "" : "; ") + labels[i];
      d += (d.empty() ? "" : sep) + x + " (" + w + ")";
    }
    return d;
  };
  for (auto& t : tensors) {
    const std::string name = t["name"];
    t["dims"] = per_config(dims[name], "; ");
    t["meaning"] = per_config(meanings[name], "; or ");
    if (t["role"] == "upstream") continue;  // backward only: said in the table
    std::set<std::size_t> in;
    for (const std::size_t i : seen_in[name])
      if (forward.count(i)) in.insert(i);
    if (in.size() == forward.size() || in.empty()) continue;
    std::string w = condition(in, forward);
    if (w.empty())
      for (const std::size_t i : in) w += (w.empty() ? "" : "; ") + labels[i];
    t["when"] = w;
  }
  return {{"scheme", e.name}, {"page", e.info->page}, {"summary", e.info->summary}, {"keys", keys}, {"tensors", tensors}};
}

std::string schema_markdown(const json& doc) {
  bool layered = false;  // the layer keys (declare_layers); an op-level scheme names its dims in its keys
  for (const auto& k : doc["keys"]) layered |= k["key"] == "layers";
  std::string s = "Generated from the declared schema (`dmref schema " + doc["scheme"].get<std::string>() +
                  " --format markdown`; checked in CTest `schema_docs`). Dims: " +
                  (layered ? "T tokens, L layers, d width" : "as the keys' meanings name them") + ".\n\n";
  s += "| config key | type | range | default | meaning |\n|---|---|---|---|---|\n";
  for (const auto& k : doc["keys"]) {
    const std::string dflt = k["default"];
    s += "| `" + k["key"].get<std::string>() + "` | " + k["type"].get<std::string>() + " | " +
         md_escape(k["range"]) + " | " + (dflt.empty() ? "required" : "`" + dflt + "`") + " | " +
         md_escape(k["meaning"]) + " |\n";
  }
  s += "\n| tensor | dims | role | how the corpus draws it | meaning |\n|---|---|---|---|---|\n";
  for (const auto& t : doc["tensors"]) {
    std::string meaning = t["meaning"];
    if (t.contains("when")) meaning += " (when " + t["when"].get<std::string>() + ")";
    if (t["role"] == "upstream") meaning += " (backward only)";
    s += "| `" + t["name"].get<std::string>() + "` | " + md_escape(t["dims"]) + " | " + t["role"].get<std::string>() +
         " | " + md_escape(t.value("draw", std::string("-"))) + " | " + md_escape(meaning) + " |\n";
  }
  s += "\nA backward problem (`--grad`) also outputs `grad.<name>` for every input and param tensor read, "
       "in its shape (param gradients summed over tokens).\n";
  return s;
}

std::string schema_text(const Schema& s) {
  std::string out = "scheme " + s.scheme + "\nconfig keys:\n";
  for (const auto& k : s.keys)
    out += "  " + k.key + " = " + (k.value.is_string() ? k.value.get<std::string>() : k.value.dump()) + "  (" + k.type +
           ", " + k.range + (k.dflt.empty() ? ", required" : ", default " + k.dflt) + "): " + k.meaning + "\n";
  out += "tensors:\n";
  for (const auto& t : s.tensors) {
    std::string shape;
    for (auto x : t.shape()) shape += (shape.empty() ? "" : ",") + std::to_string(x);
    out += "  " + t.name + " " + t.dims_text() + " = [" + shape + "]  " + role_name(t.role) + ": " + t.meaning +
           (t.draw ? "; drawn " + t.draw->text : "") + "\n";
  }
  return out;
}

}  // namespace dmref::conf
