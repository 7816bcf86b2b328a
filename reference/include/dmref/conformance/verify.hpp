// dmref/conformance/verify.hpp: judge a candidate's outputs against golden
// fixtures (docs/fixtures.md, "Tolerance rule"; the rule itself: tolerance.hpp).
//
// For a fixture tensor output.<name> (or grad.<name>) with golden value
// y = hi + lo and the candidate's recipe D (--dtype), element i passes when
//     |observed_i - y_i| <= factor * B_i + floor_ulps * ulp_D(|y_i| + factor * B_i)
// where B_i = bound.<D>.<name>[i], stored in the fixture: the error scale of
// element i for a correct kernel of recipe D (tolerance.hpp, perturbed.hpp).
// NaN or Inf where the golden value is finite fails.
#pragma once

#include "dmref/conformance/tolerance.hpp"
#include "dmref/io/safetensors.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dmref::conf {

struct VerifyOptions {
  std::string dtype = "f32";   // candidate recipe: f32, bf16, f16, f64 (or storage:arithmetic, tolerance.hpp)
  double factor = 0;           // the fixture's (metadata tolerance) unless factor_set
  double floor_ulps = 0;       // the fixture's unless floor_set
  std::string case_glob = "*"; // which fixture cases to judge
  bool factor_set = false, floor_set = false;
  /// Golden tensors to judge ("out" or "output.out"); empty: all of them.
  std::vector<std::string> outputs;
};

/// The problem of a case in which no element was judged: every golden
/// tensor empty, unrepresentable, not judged in the recipe or left out by --outputs. Such a verdict is
/// a FAIL, never a PASS (Python: dmref_fixtures.verify.NOTHING_JUDGED).
inline constexpr const char* kNothingJudged =
    "no element judged (every golden tensor empty, unrepresentable, not judged in this recipe or left out by "
    "--outputs): "
    "a verdict on nothing is not a PASS";

struct ElementFailure {
  std::string tensor;
  std::vector<std::int64_t> index;
  double observed, expected, err, tol;
};

/// One golden tensor's verdict: where its margin is (docs/fixtures.md, "Verdicts").
struct TensorVerdict {
  std::string name;
  std::int64_t checked = 0, failed = 0;
  double worst_ratio = 0;              // max err/tol over the tensor
  std::vector<std::int64_t> worst;     // its index (empty if nothing was judged)
  std::vector<std::string> axes;       // what each index means: token, layer, stream, group, i, ...
  /// max err/tol over (first axis, second axis) cells, row-major, when the
  /// tensor is [token, layer, ...] (or [token, ...]: one column): the map
  /// `verify --report` draws.
  std::vector<double> grid;
  std::int64_t grid_rows = 0, grid_cols = 0;
};

/// "token 1, layer 4, i 3": an index named by its axes.
std::string where(const std::vector<std::string>& axes, const std::vector<std::int64_t>& index);

/// The axes of a golden tensor of a fixture, by its name and rank (the table
/// of docs/fixtures.md, "Tensor names per scheme"): output.h is [token, layer,
/// i], output.X [token, stream, i], output.M [token, group, row, col], ...;
/// an unknown name gets [token, i1, ...] for per-token tensors and [i0, ...]
/// for parameter gradients.
std::vector<std::string> axes_of(const std::string& name, std::size_t rank);

struct CaseVerdict {
  std::string id;
  bool pass = true;
  std::int64_t checked = 0, failed = 0;
  double worst_ratio = 0;  // max err/tol over the case
  std::string problem;     // a missing or misshapen tensor
  std::vector<std::string> left_out;  // golden tensors not judged (VerifyOptions::outputs)
  /// Outputs the fixture has no golden for (metadata "unrepresentable": beyond
  /// double's range), with why: never judged, whatever the candidate holds.
  std::vector<std::pair<std::string, std::string>> not_judged;
  std::vector<ElementFailure> failures;  // the first few
  std::vector<TensorVerdict> tensors;    // every judged tensor, in name order
};

/// The judged tensor with the largest err/tol (the first of equals), or
/// nullptr: the one the case line names (`verify`, dmref_fixtures
/// Verdict.worst_tensor) and report.md shows; with_grid: among the tensors
/// with an err/tol grid (the picture of `verify --report`).
const TensorVerdict* worst_tensor(const CaseVerdict& v, bool with_grid = false);

/// The golden tensors of a fixture: every tensor with a `.lo` twin, and
/// every output.* (whose missing twin check_fixture refuses), in name order.
std::vector<std::string> golden_names(const io::File& fixture);

/// A fixture is sane before it judges anything (BadInput otherwise): a case
/// id, at least one golden tensor, each with a `.lo` twin of its shape,
/// finite golden values.
void check_fixture(const io::File& fixture);

/// The fixture's outputs left out as unrepresentable, name -> why (metadata
/// "unrepresentable", a JSON object of strings; absent: none). BadInput if it
/// is malformed or names a tensor the fixture has.
std::map<std::string, std::string> unrepresentable(const io::File& fixture);

/// One fixture file (as read) against the candidate. For the golden tensor
/// `output.<name>` the candidate tensor is `<case id>/output.<name>` or, for a
/// single fixture, `output.<name>` or the bare `<name>` (as
/// dmref_fixtures.check looks them up). The fixture is checked first
/// (check_fixture) and so is every number of the rule, products included.
CaseVerdict verify_case(const io::File& fixture, const io::File& candidate, const VerifyOptions& opt,
                        bool single, std::size_t keep_failures);

}  // namespace dmref::conf
