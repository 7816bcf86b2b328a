// libFuzzer target: `dmref run` from arbitrary configs, with small resource
// limits (Problem::limits: 512 output elements, 64 iterations). The first
// input byte picks one of the golden fixtures of fuzz/seed_fixtures.txt
// (scheme and tensors); the rest is the config text. What `dmref run` does with it:
//   1. conf::validate: the layout-only pass on 128-bit Balls and the
//      unknown-key / unused-tensor check. BadInput or std::invalid_argument
//      (exit 2) is a valid answer.
//   2. If it accepts: evaluate<Ball> at kZivBits[0] (the first rung) and
//      evaluate<float> (the f32 baseline run).
// A finding is a crash or sanitizer report, an exception other than those
// two, a BadInput from step 2 after validation accepted (validation must be
// complete: the adapters raise nothing later), or outputs whose names,
// shapes or element counts differ from the layout validation promised.
#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/generate.hpp"
#include "seed_problems.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>


namespace {

std::vector<dmref::conf::Problem>& problems() {
  static std::vector<dmref::conf::Problem> ps = [] {
    auto v = dmref::fuzz::seed_problems();
    for (auto& p : v) {
      p.limits.max_elements = 512;
      p.limits.max_iterations = 64;
    }
    return v;
  }();
  return ps;
}

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_run: %s: %s\n", what, detail.c_str());
  std::abort();
}

template <class S, class L>
void same_layout(const dmref::conf::Outputs<S>& o, const L& layout, const char* step) {
  if (o.t.size() != layout.t.size()) finding(step, "output count differs from validate()");
  for (const auto& [name, out] : o.t) {
    const auto it = layout.t.find(name);
    if (it == layout.t.end() || it->second.shape != out.shape) finding(step, "output " + name + " not as validated");
    if (std::int64_t(out.values.size()) != dmref::io::element_count(out.shape))
      finding(step, "output " + name + " has the wrong number of values");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  using namespace dmref::conf;
  Problem p = problems()[data[0] % problems().size()];
  try {
    p.config = json::parse(data + 1, data + size);
  } catch (const json::exception&) {
    return 0;  // `dmref run`: BadInput "config: not valid JSON"
  }
  if (!p.config.is_object()) return 0;  // BadInput "config: must be a JSON object"
  const dmref::BallPrecision bits(kZivBits.at(0));
  Outputs<dmref::Ball> layout;
  try {
    layout = validate(p);
  } catch (const dmref::io::BadInput&) {
    return 0;
  } catch (const std::invalid_argument&) {
    return 0;
  }
  try {
    same_layout(evaluate<dmref::Ball>(p), layout, "evaluate<Ball>");
  } catch (const dmref::io::BadInput& e) {
    finding("BadInput after validate() accepted", e.what());
  } catch (const std::invalid_argument&) {
    // a scheme's own check during the forward pass (docs/hardening.md): exit 2
  }
  try {
    same_layout(evaluate<float>(p), layout, "evaluate<float>");
  } catch (const dmref::io::BadInput&) {
    // A value valid at 128 bits may leave float's range (alpha 1e-50 is 0 in
    // float): the scheme's check names the config field (docs/hardening.md) and
    // that dtype gets no baseline and no bounds (generate.cpp), as below.
  } catch (const std::invalid_argument&) {
    // float's range: that dtype gets no baseline
  }
  return 0;
}
