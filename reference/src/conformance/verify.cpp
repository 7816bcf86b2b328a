#include "dmref/conformance/verify.hpp"

#include "dmref/conformance/tolerance.hpp"
#include "dmref/io/files.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace dmref::conf {

using io::unflatten;

std::vector<std::string> axes_of(const std::string& name, std::size_t rank) {
  static const std::map<std::string, std::vector<std::string>> known = {
      {"output.h", {"token", "layer", "i"}},          {"output.v", {"token", "layer", "i"}},
      {"output.out", {"token", "i"}},                 {"output.H", {"token", "stream", "i"}},
      {"output.X", {"token", "stream", "i"}},         {"output.M", {"token", "group", "row", "col"}},
      {"output.P", {"token", "group", "row", "col"}}, {"output.H_pre", {"token", "layer", "stream"}},
      {"output.H_post", {"token", "layer", "stream"}}, {"output.H_res", {"token", "layer", "row", "col"}},
      {"output.Ht_res", {"token", "layer", "row", "col"}}, {"grad.input.e", {"token", "i"}},
      {"grad.input.v", {"token", "layer", "i"}},      {"grad.input.q", {"token", "layer", "i"}},
      {"grad.input.k", {"token", "layer", "i"}},      {"grad.input.omega", {"token", "layer", "group"}},
      {"grad.param.lambda", {"layer", "group"}},      {"grad.param.beta", {"layer", "group"}},
      {"grad.param.w", {"layer", "i"}},               {"grad.param.g", {"layer", "i"}},
      {"grad.param.am", {"layer", "stream"}},         {"grad.param.b", {"layer", "stream"}},
      {"grad.param.ar", {"layer", "row", "col"}},     {"grad.param.a", {"row", "col"}},
      {"grad.param.W1", {"layer", "row", "col"}},     {"grad.param.W2", {"layer", "row", "col"}},
      {"grad.param.b_pre", {"layer", "stream"}},      {"grad.param.b_post", {"layer", "stream"}},
      {"grad.param.b_res", {"layer", "row", "col"}},  {"grad.param.phi_pre", {"layer", "row", "col"}},
      {"grad.param.phi_post", {"layer", "row", "col"}}, {"grad.param.phi_res", {"layer", "row", "col"}},
  };
  const auto it = known.find(name);
  if (it != known.end() && it->second.size() == rank) return it->second;
  std::vector<std::string> axes;
  const bool per_token = name.rfind("output.", 0) == 0 || name.rfind("grad.input.", 0) == 0;
  for (std::size_t k = 0; k < rank; ++k) axes.push_back(k == 0 && per_token ? "token" : "i" + std::to_string(k));
  return axes;
}

const TensorVerdict* worst_tensor(const CaseVerdict& v, bool with_grid) {
  const TensorVerdict* w = nullptr;
  for (const auto& t : v.tensors)
    if (t.checked && (!with_grid || !t.grid.empty()) && (!w || t.worst_ratio > w->worst_ratio)) w = &t;
  return w;
}

std::string where(const std::vector<std::string>& axes, const std::vector<std::int64_t>& index) {
  std::string s;
  for (std::size_t k = 0; k < index.size(); ++k)
    s += (k ? ", " : "") + (k < axes.size() ? axes[k] : "i" + std::to_string(k)) + " " + std::to_string(index[k]);
  return s;
}

std::vector<std::string> golden_names(const io::File& fx) {
  std::vector<std::string> names;
  for (const auto& [name, t] : fx.tensors) {
    (void)t;
    const bool is_lo = name.size() > 3 && name.compare(name.size() - 3, 3, ".lo") == 0;
    if (is_lo || name.rfind("bound.", 0) == 0) continue;
    if (fx.tensors.count(name + ".lo") || name.rfind("output.", 0) == 0) names.push_back(name);
  }
  return names;
}

void check_fixture(const io::File& fx) {
  if (!fx.metadata.count("case")) throw io::BadInput(fx.source, "__metadata__.case", "missing");
  const auto names = golden_names(fx);
  if (names.empty()) throw io::BadInput(fx.source, "fixture", "no golden tensor (output.* with a .lo twin)");
  for (const auto& name : names) {
    const io::Tensor& hi = fx.tensors.at(name);
    const auto lo_it = fx.tensors.find(name + ".lo");
    if (lo_it == fx.tensors.end()) throw io::BadInput(fx.source, name + ".lo", "missing tensor");
    const io::Tensor& lo = lo_it->second;
    if (lo.shape != hi.shape) throw io::BadInput(fx.source, name + ".lo", "not the shape of " + name);
    for (const io::Tensor* t : {&hi, &lo})
      for (std::size_t i = 0; i < t->values.size(); ++i)
        if (!std::isfinite(t->values[i]))
          throw io::BadInput(fx.source, (t == &hi ? name : name + ".lo"),
                             "golden element " + std::to_string(i) + " is not finite");
  }
}

std::map<std::string, std::string> unrepresentable(const io::File& fx) {
  std::map<std::string, std::string> out;
  const auto it = fx.metadata.find("unrepresentable");
  if (it == fx.metadata.end()) return out;
  const std::string field = "__metadata__.unrepresentable";
  const nlohmann::json j = io::parse_json(it->second, fx.source, field);
  if (!j.is_object() || j.empty()) throw io::BadInput(fx.source, field, "not a JSON object of tensor name -> reason");
  for (const auto& [name, why] : j.items()) {
    if (!why.is_string()) throw io::BadInput(fx.source, field + "." + name, "not a string");
    if (name.rfind("output.", 0) != 0 && name.rfind("grad.", 0) != 0)
      throw io::BadInput(fx.source, field + "." + name, "not an output name (output.* or grad.*)");
    if (fx.tensors.count(name) || fx.tensors.count(name + ".lo"))
      throw io::BadInput(fx.source, field + "." + name, "the fixture has this tensor: it is not left out");
    out[name] = why.get<std::string>();
  }
  return out;
}

CaseVerdict verify_case(const io::File& fx, const io::File& cand, const VerifyOptions& opt, bool single,
                        std::size_t keep) {
  CaseVerdict v;
  auto meta = [&](const std::string& k) -> const std::string& {
    const auto it = fx.metadata.find(k);
    if (it == fx.metadata.end()) throw io::BadInput(fx.source, "__metadata__." + k, "missing");
    return it->second;
  };
  v.id = meta("case");
  check_fixture(fx);
  // Strictly, as every JSON dmref reads: a duplicate key or deep nesting is
  // refused (the Python gate refuses the same).
  const Recipe& rec = recipe(opt.dtype);  // invalid_argument for an unknown --dtype
  const nlohmann::json tol = io::parse_json(meta("tolerance"), fx.source, "__metadata__.tolerance");
  // Every number of the rule is checked (docs/hardening.md): a malformed
  // fixture is BadInput, never another exception nor a rule that passes anything.
  auto rule_number = [&](const nlohmann::json& j, const std::string& field) {
    if (!j.is_number() || !std::isfinite(j.get<double>()) || j.get<double>() < 0)
      throw io::BadInput(fx.source, field, "not a finite number >= 0");
    return j.get<double>();
  };
  if (!tol.is_object()) throw io::BadInput(fx.source, "__metadata__.tolerance", "not a JSON object");
  if ((opt.factor_set && !(std::isfinite(opt.factor) && opt.factor >= 0)) ||
      (opt.floor_set && !(std::isfinite(opt.floor_ulps) && opt.floor_ulps >= 0)))
    throw std::invalid_argument("verify: --factor and the ulp floor must be finite and >= 0");
  // The rule's constants come from the fixture (the generator wrote them from
  // tolerance.hpp); there is no default: a fixture without them is refused.
  auto rule = [&](const char* key, bool set, double given) {
    if (set) return given;
    if (!tol.contains(key)) throw io::BadInput(fx.source, std::string("__metadata__.tolerance.") + key, "missing");
    return rule_number(tol.at(key), std::string("__metadata__.tolerance.") + key);
  };
  const double factor = rule("factor", opt.factor_set, opt.factor);
  const double floor_ulps = rule("floor_ulps", opt.floor_set, opt.floor_ulps);
  std::string no_bound;  // why the fixture has no bounds for this recipe
  if (tol.contains("no_bound")) {
    const auto& nb = tol.at("no_bound");
    if (!nb.is_object()) throw io::BadInput(fx.source, "__metadata__.tolerance.no_bound", "not a JSON object");
    if (nb.contains(rec.name)) {
      if (!nb.at(rec.name).is_string())
        throw io::BadInput(fx.source, std::string("__metadata__.tolerance.no_bound.") + rec.name, "not a string");
      no_bound = nb.at(rec.name).get<std::string>();
    }
  }
  // --outputs: each name must be a golden tensor of this fixture.
  const auto names = golden_names(fx);
  // Tensors this recipe cannot judge (generate.cpp add_bounds: an
  // ill-conditioned problem): reported NOT JUDGED, never passed or failed.
  std::map<std::string, std::string> recipe_not_judged;
  if (tol.contains("not_judged")) {
    const auto& nj = tol.at("not_judged");
    const std::string field = "__metadata__.tolerance.not_judged";
    if (!nj.is_object()) throw io::BadInput(fx.source, field, "not a JSON object");
    if (nj.contains(rec.name)) {
      const auto& per = nj.at(rec.name);
      if (!per.is_object()) throw io::BadInput(fx.source, field + "." + rec.name, "not a JSON object");
      for (const auto& [name, why] : per.items()) {
        if (!why.is_string()) throw io::BadInput(fx.source, field + "." + rec.name + "." + name, "not a string");
        if (std::find(names.begin(), names.end(), name) == names.end())
          throw io::BadInput(fx.source, field + "." + rec.name + "." + name, "not a golden tensor of this fixture");
        recipe_not_judged[name] = why.get<std::string>();
      }
    }
  }
  const auto beyond = unrepresentable(fx);
  std::vector<std::string> wanted;
  for (const auto& w : opt.outputs) {
    for (const auto& n : {w, "output." + w})
      if (beyond.count(n))
        throw io::BadInput(fx.source, "--outputs", n + " has no golden in case " + v.id + ": " + beyond.at(n));
    const std::string full = fx.tensors.count(w + ".lo") ? w : "output." + w;
    if (!fx.tensors.count(full + ".lo"))
      throw io::BadInput(fx.source, "--outputs", "no golden tensor " + w + " in case " + v.id);
    wanted.push_back(full);
  }
  // Never judged, whatever the candidate holds (a candidate's P is neither passed nor failed).
  for (const auto& [name, why] : beyond) v.not_judged.emplace_back(name, why);
  for (const auto& name : names) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), name) == wanted.end()) {
      v.left_out.push_back(name);
      continue;
    }
    if (const auto nj = recipe_not_judged.find(name); nj != recipe_not_judged.end()) {
      v.not_judged.emplace_back(name, "not judged in recipe " + std::string(rec.name) + ": " + nj->second);
      continue;
    }
    const io::Tensor& hi = fx.tensors.at(name);
    const io::Tensor& lo = fx.tensors.at(name + ".lo");
    const std::string bname = bound_name(rec, name);
    const auto bit = fx.tensors.find(bname);
    if (bit == fx.tensors.end())
      throw io::BadInput(fx.source, bname,
                         no_bound.empty() ? "missing tensor (a fixture from before the per-element tolerance "
                                            "bounds: regenerate it with this dmref)"
                                          : "no bound for dtype " + std::string(rec.name) + ": " + no_bound);
    const io::Tensor& B = bit->second;
    if (B.shape != hi.shape) throw io::BadInput(fx.source, bname, "not the shape of " + name);
    auto it = cand.tensors.find(v.id + "/" + name);
    if (it == cand.tensors.end() && single) it = cand.tensors.find(name);
    if (it == cand.tensors.end() && single && name.rfind("output.", 0) == 0) it = cand.tensors.find(name.substr(7));
    if (it == cand.tensors.end()) {
      v.pass = false;
      v.problem += (v.problem.empty() ? "" : "; ") + ("candidate has no tensor " + v.id + "/" + name);
      continue;
    }
    const io::Tensor& c = it->second;
    if (c.shape != hi.shape) {
      v.pass = false;
      v.problem += (v.problem.empty() ? "" : "; ") + ("candidate tensor " + it->first + " has the wrong shape");
      continue;
    }
    TensorVerdict tv;
    tv.name = name;
    tv.axes = axes_of(name, hi.shape.size());
    const bool has_token = !tv.axes.empty() && tv.axes[0] == "token";
    if (has_token) {
      tv.grid_rows = hi.shape[0];
      tv.grid_cols = tv.axes.size() > 1 && tv.axes[1] == "layer" ? hi.shape[1] : 1;
      tv.grid.assign(std::size_t(tv.grid_rows * tv.grid_cols), 0.0);
    }
    const std::int64_t per_row = hi.shape.empty() || hi.shape[0] == 0 ? 1 : std::int64_t(hi.values.size()) / hi.shape[0];
    const std::int64_t per_cell = tv.grid_cols > 0 ? std::max<std::int64_t>(per_row / tv.grid_cols, 1) : 1;
    std::size_t worst_at = 0;
    for (std::size_t i = 0; i < hi.values.size(); ++i) {
      const double y = hi.values[i], obs = c.values[i];
      const double err = std::isfinite(obs) ? std::fabs((obs - y) - lo.values[i])
                                            : std::numeric_limits<double>::infinity();
      const double b = B.values[i];
      if (!(std::isfinite(b) && b >= 0))
        throw io::BadInput(fx.source, bname + "[" + std::to_string(i) + "]", "not a finite number >= 0");
      // The rule's product must be finite too: a bound of 1e308 x factor 2
      // would make a tolerance of inf that passes NaN.
      const double t = tolerance(factor, b, floor_ulps, rec.name, y);
      if (!std::isfinite(t)) throw io::BadInput(fx.source, bname + "[" + std::to_string(i) + "]", "factor x bound is not finite");
      ++v.checked;
      ++tv.checked;
      const double ratio = err / t;  // t > 0 (the ulp floor), so never NaN
      v.worst_ratio = std::max(v.worst_ratio, ratio);
      if (tv.checked == 1 || ratio > tv.worst_ratio) {
        tv.worst_ratio = ratio;
        worst_at = i;
      }
      if (!tv.grid.empty()) {
        double& cell = tv.grid[std::size_t(std::int64_t(i) / per_row * tv.grid_cols +
                                           std::min(std::int64_t(i) % per_row / per_cell, tv.grid_cols - 1))];
        cell = std::max(cell, ratio);
      }
      if (!(err <= t)) {
        v.pass = false;
        ++v.failed;
        ++tv.failed;
        if (v.failures.size() < keep) v.failures.push_back({name, unflatten(i, hi.shape), obs, y, err, t});
      }
    }
    if (tv.checked) tv.worst = unflatten(std::int64_t(worst_at), hi.shape);
    v.tensors.push_back(std::move(tv));
  }
  if (v.checked == 0 && v.pass) {  // a verdict on nothing is never a PASS (Python check: the same words)
    v.pass = false;
    v.problem = kNothingJudged;
  }
  return v;
}

}  // namespace dmref::conf
