// Gradient error over depth (dmref/stability.hpp, sweep "gradients"): the
// backward pass of every scheme, run in low precision next to float64, as a
// curve over the depth L. Built on the conformance layer: each point is a
// corpus-style backward problem (conf::CaseSpec with grad = true: inputs,
// parameters and upstream gradients drawn from the seed by the corpus
// generator) at L layers, evaluated by conf::evaluate, the reference the
// same problem in double. Metrics: the normwise relative error of all input
// gradients (grad.input.*) together and of all parameter gradients
// (grad.param.*) together.
#include "dmref/conformance/corpus.hpp"
#include "dmref/conformance/evaluate.hpp"
#include "dmref/conformance/tolerance.hpp"
#include "dmref/stability.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace dmref::stability {
namespace {

/// One scheme variant of the sweep: a corpus backward config (tokens 1,
/// layers set per depth) and its scheme name in the conformance layer.
struct GradScheme {
  std::string name;    // form column: "<scheme>/<variant>"
  std::string scheme;  // conf scheme
  std::string preset;
  conf::json config;
};

std::vector<GradScheme> grad_schemes() {
  const conf::json base = {{"tokens", 1}, {"d", 16}};
  auto with = [&](conf::json extra) {
    conf::json c = base;
    for (auto& [k, v] : extra.items()) c[k] = v;
    return c;
  };
  return {
      {"ldm/symmetric", "ldm", "default", with({{"d", 16}, {"groups", 2}, {"dk", 8}, {"alpha", 1.0}, {"write", "rls"}})},
      {"ldm/joseph", "ldm", "default",
       with({{"d", 16}, {"groups", 2}, {"dk", 8}, {"alpha", 1.0}, {"write", "rls"}, {"p_update", "joseph"}})},
      {"mhc/deepseek-v4", "mhc", "deepseek-v4", with({{"n", 4}, {"preset", "deepseek-v4"}})},
      {"hc/dynamic", "hc", "default", with({{"n", 4}, {"dynamic", true}})},
      {"attnres/full", "attnres", "default", with({{"variant", "full"}})},
      {"attnres/block", "attnres", "default", with({{"variant", "block"}, {"block_size", 4}})},
      {"denseformer", "denseformer", "default", base},
      {"preln", "preln", "default", base},
  };
}

/// The precision modes: how the candidate is evaluated (its reference is
/// float64 on the same, possibly rounded, problem).
struct GradMode {
  const char* name;      // dtype column
  const char* recipe;    // conf recipe for a Perturbed sample ("" : native float)
};
const std::vector<GradMode> kGradModes{
    {"float32", ""},               // native float arithmetic (evaluate<float>), f32 inputs
    {"bf16:f32", "bf16"},          // the bf16 recipe's model: inputs and streams in bfloat16, float32 arithmetic
    {"f16:f32", "f16"},            // the same with binary16
    {"float64 (model)", "f64"},    // the f64 recipe's model: the reference's own error level
};

/// ||a - r|| / ||r|| over every grad.<role>.* tensor together (NaN if none).
template <class S>
double grad_err(const conf::Outputs<S>& a, const conf::Outputs<double>& r, const std::string& role) {
  double num = 0, den = 0;
  bool any = false;
  for (const auto& [name, t] : r.t) {
    if (name.rfind("grad." + role + ".", 0) != 0) continue;
    const auto& x = a.t.at(name).values;
    for (std::size_t i = 0; i < t.values.size(); ++i) {
      const double y = t.values[i], e = to_double(x[i]) - y;
      if (!std::isfinite(e)) return std::numeric_limits<double>::infinity();
      num += e * e, den += y * y;
      any = true;
    }
  }
  if (!any) return std::numeric_limits<double>::quiet_NaN();
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

conf::Problem rounded_to(conf::Problem p, const FloatFormat& f) {
  for (auto& [name, t] : p.tensors)
    for (auto& x : t.values) x = round_to(f, x);
  return p;
}

}  // namespace

std::vector<int> grad_depths(int max_depth) {
  std::vector<int> d;
  for (int L = 1; L <= max_depth; L *= 2) d.push_back(L);
  return d;
}

std::vector<Task> gradient_tasks(const Sizes& z) {
  std::vector<Task> t;
  for (const GradScheme& s : grad_schemes())
    seeded(t, z, 0x67ad0000, [s, z](std::uint64_t seed) {
      std::vector<Result> out;
      for (const GradMode& m : kGradModes) {
        Result r;
        r.scheme = "gradients";
        r.sweep = "depth";
        r.form = s.name;
        r.dtype = m.name;
        r.metrics = {"grad_input", "grad_param"};
        out.push_back(r);
      }
      for (int L : grad_depths(z.grad_depth)) {
        conf::CaseSpec c;
        c.id = "stability.gradients." + s.name + ".L" + std::to_string(L);
        c.scheme = s.scheme;
        c.preset = s.preset;
        c.dtype = "f32";
        c.config = s.config;
        c.config["layers"] = L;
        c.seed = seed;
        c.grad = true;
        const conf::Problem p = conf::make_problem(c);
        for (std::size_t i = 0; i < kGradModes.size(); ++i) {
          const GradMode& m = kGradModes[i];
          Result& r = out[i];
          try {
            std::vector<double> v;
            if (*m.recipe == 0) {
              const auto ref = conf::evaluate<double>(p);
              const auto got = conf::evaluate<float>(p);
              v = {grad_err(got, ref, "input"), grad_err(got, ref, "param")};
            } else {
              const conf::Recipe& rc = conf::recipe(m.recipe);
              const conf::Problem q = rc.storage->precision == 53 ? p : rounded_to(p, *rc.storage);
              const auto ref = conf::evaluate<double>(q);
              RoundingModel rm = conf::rounding_model_of(rc);
              rm.state = seed;
              const ScopedRoundingModel scope(rm);
              const auto got = conf::evaluate<Perturbed>(q);
              v = {grad_err(got, ref, "input"), grad_err(got, ref, "param")};
            }
            r.samples.emplace_back(L - 1, v);
            r.layers = L;
            if (!std::isfinite(v[0]) && r.first_nonfinite < 0) r.first_nonfinite = L - 1;
            for (std::size_t k = 0; k < kThresholds.size(); ++k)
              if (r.first_over[k] < 0 && !(v[0] <= kThresholds[k])) r.first_over[k] = L - 1;
            r.err_final = v[0];
            r.err_max = std::fmax(r.err_max, v[0]);
          } catch (const std::exception& e) {
            if (r.note.empty()) r.note = std::string("rejected at L = ") + std::to_string(L) + ": " + e.what();
          }
        }
      }
      return out;
    });
  return t;
}

}  // namespace dmref::stability
