// libFuzzer target: the config JSON of `dmref run` (tools/dmref.cpp run()),
// through conf::Problem's checked accessors and evaluate<float>. The first
// input byte picks one of the golden fixtures of fuzz/seed_fixtures.txt
// (scheme, tensors); the rest is the config text. As for `dmref run`, a bad config must end in
// BadInput or std::invalid_argument (exit 2), never a crash, a sanitizer
// report or another exception (exit 3). Configs that are valid but merely
// expensive (t_max > 64 Sinkhorn rounds) are skipped.
#include "dmref/conformance/registry.hpp"
#include "seed_problems.hpp"

#include <cstdint>
#include <string>
#include <vector>


namespace {

std::vector<dmref::conf::Problem>& problems() {
  static std::vector<dmref::conf::Problem> ps = dmref::fuzz::seed_problems();
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
