// libFuzzer target: the config JSON of `dmref run` (tools/dmref.cpp run()),
// through conf::Problem's checked accessors and evaluate<float>. The first
// input byte picks one of the golden fixtures below (scheme, tensors); the
// rest is the config text. As for `dmref run`, a bad config must end in
// BadInput or std::invalid_argument (exit 2), never a crash, a sanitizer
// report or another exception (exit 3). Configs that are valid but merely
// expensive (t_max > 64 Sinkhorn rounds) are skipped.
#include "dmref/conformance/evaluate_impl.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dmref::conf {
template Outputs<float> evaluate<float>(const Problem&);
}  // namespace dmref::conf

namespace {

const char* const kFixtures[] = {
    "preln.kernel.d8.L6.f32.s1",           "preln.model.d8_h8.L6.f32.s1",
    "ldm_rls.kernel.g2_dk4_d8.L8.f32.s1",  "ldm_rls.model.g2_dk4_d8_h8.L8.f32.s1",
    "ldm_delta.kernel.g2_dk4_d8.L8.f32.s1", "ldm_outer.kernel.g2_dk4_d8.L8.f32.s1",
    "attnres_block.kernel.d8_S3.L8.f32.s1", "attnres_full.kernel.d8.L8.f32.s1",
    "hc_dynamic.kernel.n4_d8.L6.f32.s1",   "hc_static.kernel.n4_d8.L6.f32.s1",
    "mhc.kernel.n4_d8.L6.paper.f32.s1",    "mhc.model.n4_d8_h8.L6.deepseek-v4.f32.s1",
    "denseformer.kernel.d8.L6.f32.s1",     "denseformer.model.d8_h8.L6.f32.s1",
};

std::vector<dmref::conf::Problem>& problems() {
  static std::vector<dmref::conf::Problem> ps = [] {
    std::vector<dmref::conf::Problem> v;
    for (const char* id : kFixtures) {
      const auto f = dmref::io::read(std::string(DMREF_SOURCE_DIR) + "/fixtures/golden/" + id + ".safetensors");
      dmref::conf::Problem p;
      p.source = "inputs.safetensors";
      p.scheme = f.metadata.at("scheme");
      for (const auto& [name, t] : f.tensors)
        if (name.rfind("input.", 0) == 0 || name.rfind("param.", 0) == 0) p.tensors[name] = t;
      v.push_back(std::move(p));
    }
    return v;
  }();
  return ps;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  dmref::conf::Problem p = problems()[data[0] % problems().size()];
  using dmref::conf::json;
  try {
    p.config = json::parse(data + 1, data + size);
  } catch (const json::exception&) {
    return 0;  // `dmref run`: BadInput "config: not valid JSON"
  }
  if (!p.config.is_object()) return 0;  // BadInput "config: must be a JSON object"
  if (const auto t = p.config.find("t_max"); t != p.config.end() && t->is_number() && t->get<double>() > 64) return 0;
  try {
    (void)dmref::conf::evaluate<float>(p);
  } catch (const dmref::io::BadInput&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
