// properties/harness.hpp: how a dmref property runs. A property is a named
// relation computed two independent ways, checked by RapidCheck on generated
// cases. Each property is one Catch2 TEST_CASE (so one CTest entry).
//   - The seed is printed on every run, pass or fail; DMREF_SEED=<n> replays it.
//   - DMREF_TEST_MULTIPLIER=<n> scales every case count (default 1 = CI).
//   - A failure prints `FAIL: <relation>` and every input of the case.
#pragma once

#include <rapidcheck.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <sstream>
#include <string>

namespace dmref::prop {

inline int multiplier() {
  const char* m = std::getenv("DMREF_TEST_MULTIPLIER");
  const int k = m ? std::atoi(m) : 1;
  return k > 0 ? k : 1;
}

inline std::uint64_t seed() {
  if (const char* s = std::getenv("DMREF_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}() * 4294967296ull + std::random_device{}();
}

/// Runs `testable` on base_cases * multiplier generated cases.
template <class Testable>
void check(const std::string& relation, int base_cases, Testable&& testable) {
  rc::detail::TestParams params;
  params.seed = seed();
  params.maxSuccess = base_cases * multiplier();
  params.maxSize = 100;
  rc::detail::TestMetadata md;
  md.id = relation;
  md.description = relation;
  const auto result = rc::detail::checkProperty(rc::detail::toProperty(std::forward<Testable>(testable)), md, params);
  if (result.template is<rc::detail::SuccessResult>()) {
    std::cout << "PROPERTY " << relation << ": " << result.template get<rc::detail::SuccessResult>().numSuccess << " cases passed (DMREF_SEED=" << params.seed
              << ")\n";
    return;
  }
  std::ostringstream msg;
  msg << "FAIL: " << relation << " (replay: DMREF_SEED=" << params.seed << ")\n";
  rc::detail::printResultMessage(result, msg);
  std::cout << msg.str() << std::endl;
  FAIL(msg.str());
}

/// lo + (hi - lo) i / 1000 for i in 0..1000: a real parameter on a grid
/// (shrinks toward lo; the end points are hit exactly).
inline rc::Gen<double> grid(double lo, double hi) {
  return rc::gen::map(rc::gen::inRange(0, 1001), [lo, hi](int i) { return lo + (hi - lo) * i / 1000.0; });
}

}  // namespace dmref::prop

/// Inside a property: fail with the relation's name, the numbers, and the inputs.
#define DMREF_PROP_CLOSE(relation, err, tol, inputs)                                                     \
  do {                                                                                                   \
    const double dmref_err_ = (err), dmref_tol_ = (tol);                                                 \
    if (!(std::isfinite(dmref_tol_) && dmref_err_ <= dmref_tol_)) {                                      \
      std::ostringstream dmref_o_;                                                                       \
      dmref_o_ << "FAIL: " << relation << ": err=" << dmref_err_ << " tol=" << dmref_tol_ << "\n  inputs: " \
               << inputs;                                                                                \
      RC_FAIL(dmref_o_.str());                                                                           \
    }                                                                                                    \
  } while (0)

#define DMREF_PROP_TRUE(relation, cond, inputs)                               \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::ostringstream dmref_o_;                                           \
      dmref_o_ << "FAIL: " << relation << ": " #cond "\n  inputs: " << inputs; \
      RC_FAIL(dmref_o_.str());                                               \
    }                                                                        \
  } while (0)
