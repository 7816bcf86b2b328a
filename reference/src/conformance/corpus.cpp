// The golden-fixture corpus: case list and seeded input generation.
#include "dmref/conformance/corpus.hpp"
#include "dmref/conformance/registry.hpp"

#include "dmref/random.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>

namespace dmref::conf {

namespace {

/// Draws the declared input, param and upstream tensors of a schema from one
/// SplitMix64 stream, in declaration order, each value rounded to the case's
/// input dtype (docs/fixtures.md, "How inputs are generated").
void draw(const Schema& s, SplitMix64& rng, const FloatFormat& fmt, Problem& p) {
  const std::function<double(double)> round = [&fmt](double x) { return round_to(fmt, x); };
  for (const TensorSpec& t : s.tensors) {
    if (!t.draw) continue;
    io::Tensor& x = p.tensors[t.name];
    x.dtype = "F64";
    x.shape = t.shape();
    std::int64_t count = 1;
    for (auto d : x.shape) count *= d;
    x.values.assign(count, 0.0);
    const Draw& d = *t.draw;
    switch (d.kind) {
      case Draw::Kind::uniform:  // uniform[-1, 1) * a
        for (auto& v : x.values) v = round_to(fmt, rng.uniform() * d.a);
        break;
      case Draw::Kind::range:  // uniform on [a, b)
        for (auto& v : x.values) v = round_to(fmt, d.a + (d.b - d.a) * 0.5 * (rng.uniform() + 1));
        break;
      case Draw::Kind::unit_groups: {  // last dimension cut into a slices, each of unit L2 norm (in double)
        const std::int64_t w = x.shape.back() / std::int64_t(d.a);
        for (std::size_t i = 0; i < x.values.size(); i += w) {
          double ss = 0;
          for (std::int64_t j = 0; j < w; ++j) ss += (x.values[i + j] = rng.uniform()) * x.values[i + j];
          for (std::int64_t j = 0; j < w; ++j) x.values[i + j] = round_to(fmt, x.values[i + j] / std::sqrt(ss));
        }
        break;
      }
    }
    if (d.adjust) d.adjust(x.values, round);
  }
}

}  // namespace

CaseSpec forward_case(std::string id, std::string scheme, std::string preset, std::string dtype, json config,
                      bool committed, bool ci, json inputs) {
  CaseSpec c;
  c.inputs = std::move(inputs);
  c.id = std::move(id);
  c.scheme = std::move(scheme);
  c.preset = std::move(preset);
  c.dtype = std::move(dtype);
  c.config = std::move(config);
  c.committed = committed;
  c.ci = ci;
  return c;
}

/// mHC backward goldens take seconds per case (the ball replay of the
/// Sinkhorn rounds widens fast, and exact zeros need the 2048-bit rung,
/// docs/precision.md), so they are committed but outside the CI regeneration
/// subset (scripts/fixtures checks them).
CaseSpec grad_case(const std::string& id, std::string scheme, std::string preset, const std::string& dt, json config,
                   json inputs) {
  const bool ci = scheme != "mhc";
  CaseSpec c = forward_case(id + "." + dt + ".s1", std::move(scheme), std::move(preset), dt, std::move(config), true, ci,
                            std::move(inputs));
  c.grad = true;
  return c;
}

std::vector<CaseSpec> corpus() {
  std::vector<CaseSpec> v;
  for (const auto& e : registry()) e.info->corpus(v);
  std::sort(v.begin(), v.end(), [](const CaseSpec& a, const CaseSpec& b) { return a.id < b.id; });
  return v;
}

Problem make_problem(const CaseSpec& c) {
  Problem p;
  p.source = c.id;
  p.scheme = c.scheme;
  p.config = c.config;
  p.grad = c.grad;  // the upstream gradients are declared (and drawn, after every input) only then
  SplitMix64 rng(c.seed);
  draw(schema_of(p, c.inputs), rng, format_of(c.dtype), p);
  return p;
}

}  // namespace dmref::conf
