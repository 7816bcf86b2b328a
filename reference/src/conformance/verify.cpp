#include "dmref/conformance/verify.hpp"

#include "dmref/conformance/corpus.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

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
  const double factor = opt.factor_set ? opt.factor : tol.value("factor", opt.factor);
  const double floor_ulps = opt.floor_set ? opt.floor_ulps : tol.value("floor_ulps", opt.floor_ulps);
  if (!base.contains(opt.dtype))
    throw io::BadInput(fx.source, "__metadata__.baselines", "no baseline for dtype " + opt.dtype);
  for (const auto& [name, hi] : fx.tensors) {
    if (name.rfind("output.", 0) != 0 || name.size() > 3 && name.compare(name.size() - 3, 3, ".lo") == 0) continue;
    const auto lo_it = fx.tensors.find(name + ".lo");
    if (lo_it == fx.tensors.end()) throw io::BadInput(fx.source, name + ".lo", "missing tensor");
    const io::Tensor& lo = lo_it->second;
    if (!base[opt.dtype].contains(name))
      throw io::BadInput(fx.source, "__metadata__.baselines." + opt.dtype + "." + name, "missing");
    const double b = base[opt.dtype][name].at("max_abs").get<double>();
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
