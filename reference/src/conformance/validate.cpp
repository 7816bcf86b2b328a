// conf::validate (generate.hpp): the whole problem checked before any
// evaluation, by the adapters themselves in layout-only mode at the first
// certification precision. Its own file so that the fuzz target fuzz_run can
// link it without the other certification precisions.
#include "dmref/conformance/evaluate.hpp"
#include "dmref/conformance/generate.hpp"

namespace dmref::conf {

Outputs<mpfi<kZiv0>> validate(const Problem& p) {
  Problem q = p;
  q.layout_only = true;
  Outputs<mpfi<kZiv0>> layout = evaluate<mpfi<kZiv0>>(q);
  q.refuse_unused();
  if (layout.t.empty()) q.fail("scheme", "the problem has no outputs");
  return layout;
}

}  // namespace dmref::conf
