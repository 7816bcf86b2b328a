#include "dmref/conformance/verify.hpp"

#include "dmref/conformance/corpus.hpp"
#include "dmref/io/files.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace dmref::conf {

double ulp_in(const std::string& dtype, double x) {
  const FloatFormat& f = format_of(dtype);
  const double ax = std::fabs(x);
  int e = std::ilogb(ax == 0 ? std::ldexp(1.0, f.emin) : ax);
  if (e < f.emin) e = f.emin;
  return std::ldexp(1.0, e - (f.precision - 1));
}

namespace {

std::vector<std::int64_t> unflatten(std::int64_t i, const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t k = shape.size(); k-- > 0;) {
    idx[k] = shape[k] ? i % shape[k] : 0;
    i = shape[k] ? i / shape[k] : 0;
  }
  return idx;
}

}  // namespace

std::vector<std::string> golden_names(const io::File& fx) {
  std::vector<std::string> names;
  for (const auto& [name, t] : fx.tensors) {
    (void)t;
    const bool is_lo = name.size() > 3 && name.compare(name.size() - 3, 3, ".lo") == 0;
    if (is_lo) continue;
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
  const nlohmann::json base = io::parse_json(meta("baselines"), fx.source, "__metadata__.baselines");
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
  auto rule = [&](const char* key, bool set, double given) {
    if (set || !tol.contains(key)) return given;
    return rule_number(tol.at(key), std::string("__metadata__.tolerance.") + key);
  };
  const double factor = rule("factor", opt.factor_set, opt.factor);
  const double floor_ulps = rule("floor_ulps", opt.floor_set, opt.floor_ulps);
  if (!base.is_object()) throw io::BadInput(fx.source, "__metadata__.baselines", "not a JSON object");
  if (!base.contains(opt.dtype) || !base.at(opt.dtype).is_object())
    throw io::BadInput(fx.source, "__metadata__.baselines." + opt.dtype,
                       "no baseline for dtype " + opt.dtype +
                           (base.contains(opt.dtype) && base.at(opt.dtype).is_null()
                                ? " (the reference run in " + opt.dtype + " refuses or overflows on this problem)"
                                : ""));
  // --outputs: each name must be a golden tensor of this fixture.
  const auto names = golden_names(fx);
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
    const io::Tensor& hi = fx.tensors.at(name);
    const io::Tensor& lo = fx.tensors.at(name + ".lo");
    const std::string bfield = "__metadata__.baselines." + opt.dtype + "." + name;
    // base is const: look up, never operator[] (which asserts on a missing key).
    const nlohmann::json& per = base.at(opt.dtype);
    const auto entry = per.find(name);
    if (entry == per.end() || !entry->is_object() || !entry->contains("max_abs"))
      throw io::BadInput(fx.source, bfield + ".max_abs", "missing");
    const double b = rule_number(entry->at("max_abs"), bfield + ".max_abs");
    // The products of the rule must be finite too: max_abs 1e308 x factor 2
    // would make a tolerance of inf that passes NaN.
    if (!std::isfinite(factor * b)) throw io::BadInput(fx.source, bfield + ".max_abs", "factor x max_abs is not finite");
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
    for (std::size_t i = 0; i < hi.values.size(); ++i) {
      const double y = hi.values[i], obs = c.values[i];
      const double err = std::isfinite(obs) ? std::fabs((obs - y) - lo.values[i])
                                            : std::numeric_limits<double>::infinity();
      const double t = factor * b + floor_ulps * ulp_in(opt.dtype, y);
      if (!std::isfinite(t)) throw io::BadInput(fx.source, "__metadata__.tolerance", "the tolerance of " + name + " is not finite");
      ++v.checked;
      v.worst_ratio = std::max(v.worst_ratio, err / t);
      if (!(err <= t)) {
        v.pass = false;
        ++v.failed;
        if (v.failures.size() < keep) v.failures.push_back({name, unflatten(i, hi.shape), obs, y, err, t});
      }
    }
  }
  if (v.checked == 0 && v.pass) {  // a verdict on nothing is never a PASS (Python check: the same words)
    v.pass = false;
    v.problem = kNothingJudged;
  }
  return v;
}

}  // namespace dmref::conf
