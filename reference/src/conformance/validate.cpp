// conf::validate (generate.hpp): the whole problem checked before any
// evaluation, by the adapters themselves in layout-only mode on Balls at the
// first rung of the ladder (kZivBits[0] bits). Its own file so that the fuzz
// target fuzz_run can link it without the generator.
#include "dmref/conformance/evaluate.hpp"
#include "dmref/conformance/generate.hpp"

#include <algorithm>

namespace dmref::conf {

Outputs<Ball> validate(const Problem& p) {
  Problem q = p;
  q.layout_only = true;
  const BallPrecision bits(kZivBits.at(0));
  Outputs<Ball> layout = evaluate<Ball>(q);
  q.refuse_unused();
  if (layout.t.empty()) q.fail("scheme", "the problem has no outputs");
  // Every token costs its bookkeeping (its certified column, its task)
  // besides its rows: charged as kTokenCharge outputs at least, so many tiny
  // tokens are bounded like few big ones (docs/hardening.md); a backward
  // problem's sums over tokens are held once.
  {
    using O = Outputs<Ball>;
    const std::int64_t T = q.integer("tokens"), per = std::max(layout.per_token, O::kTokenCharge);
    const std::int64_t file = q.limits.max_elements * O::kFileFactor - layout.summed;
    if (T > file / per)
      q.fail("config.tokens", std::to_string(T) + " tokens of " + std::to_string(layout.per_token) +
                                  " outputs each take the outputs of all tokens past " + std::to_string(file) +
                                  " elements (each token counts as at least " + std::to_string(O::kTokenCharge) +
                                  " outputs: its bookkeeping; " + std::to_string(O::kFileFactor) +
                                  "x the resource limit, docs/hardening.md)");
  }
  return layout;
}

}  // namespace dmref::conf
