#include "dmref/conformance/verify.hpp"

#include "dmref/conformance/corpus.hpp"

#include <nlohmann/json.hpp>

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

CaseVerdict verify_case(const io::File& fx, const io::File& cand, const VerifyOptions& opt, bool single,
                        std::size_t keep) {
  CaseVerdict v;
  auto meta = [&](const std::string& k) -> const std::string& {
    const auto it = fx.metadata.find(k);
    if (it == fx.metadata.end()) throw io::BadInput(fx.source, "__metadata__." + k, "missing");
    return it->second;
  };
  v.id = meta("case");
  nlohmann::json base, tol;
  try {
    base = nlohmann::json::parse(meta("baselines"));
    tol = nlohmann::json::parse(meta("tolerance"));
  } catch (const nlohmann::json::exception&) {
    throw io::BadInput(fx.source, "__metadata__", "baselines/tolerance are not valid JSON");
  }
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
    return rule_number(tol[key], std::string("__metadata__.tolerance.") + key);
  };
  const double factor = rule("factor", opt.factor_set, opt.factor);
  const double floor_ulps = rule("floor_ulps", opt.floor_set, opt.floor_ulps);
  if (!base.is_object() || !base.contains(opt.dtype) || !base[opt.dtype].is_object())
    throw io::BadInput(fx.source, "__metadata__.baselines", "no baseline for dtype " + opt.dtype);
  for (const auto& [name, hi] : fx.tensors) {
    // Golden tensors: outputs and gradients (grad.*), each with its .lo twin.
    const bool golden = name.rfind("output.", 0) == 0 || name.rfind("grad.", 0) == 0;
    if (!golden || name.size() > 3 && name.compare(name.size() - 3, 3, ".lo") == 0) continue;
    const auto lo_it = fx.tensors.find(name + ".lo");
    if (lo_it == fx.tensors.end()) throw io::BadInput(fx.source, name + ".lo", "missing tensor");
    const io::Tensor& lo = lo_it->second;
    if (lo.shape != hi.shape) throw io::BadInput(fx.source, name + ".lo", "not the shape of " + name);
    const std::string bfield = "__metadata__.baselines." + opt.dtype + "." + name;
    const nlohmann::json& entry = base[opt.dtype][name];  // null if absent
    if (!entry.is_object() || !entry.contains("max_abs")) throw io::BadInput(fx.source, bfield + ".max_abs", "missing");
    const double b = rule_number(entry["max_abs"], bfield + ".max_abs");
    auto it = cand.tensors.find(v.id + "/" + name);
    if (it == cand.tensors.end() && single) it = cand.tensors.find(name);
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
      ++v.checked;
      v.worst_ratio = std::max(v.worst_ratio, err / t);
      if (!(err <= t)) {
        v.pass = false;
        ++v.failed;
        if (v.failures.size() < keep) v.failures.push_back({name, unflatten(i, hi.shape), obs, y, err, t});
      }
    }
  }
  return v;
}

}  // namespace dmref::conf
