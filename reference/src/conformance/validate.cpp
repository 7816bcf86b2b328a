// conf::validate (generate.hpp): the whole problem checked before any
// evaluation, by the adapters themselves in layout-only mode on Balls at the
// first rung of the ladder (kZivBits[0] bits). Its own file so that the fuzz
// target fuzz_run can link it without the generator.
#include "dmref/conformance/evaluate.hpp"
#include "dmref/conformance/generate.hpp"

namespace dmref::conf {

Outputs<Ball> validate(const Problem& p) {
  Problem q = p;
  q.layout_only = true;
  const BallPrecision bits(kZivBits.at(0));
  Outputs<Ball> layout = evaluate<Ball>(q);
  q.refuse_unused();
  if (layout.t.empty()) q.fail("scheme", "the problem has no outputs");
  return layout;
}

}  // namespace dmref::conf
