// dmref/conformance/report.hpp: `dmref verify --report DIR`: a short markdown
// summary of the verdicts and, per case, a picture (SVG) of err/tol over
// token x layer for its failing or closest-to-failing tensor
// (docs/fixtures.md, "Verdicts").
#pragma once

#include "dmref/conformance/verify.hpp"

#include <string>
#include <vector>

namespace dmref::conf {

/// The SVG of one tensor's grid: a cell per (token, layer), coloured by
/// max err/tol in it (1 = at the tolerance), with the scale and the axes named.
std::string grid_svg(const std::string& case_id, const TensorVerdict& t);

/// Writes DIR/report.md and DIR/<n>.svg (one per case, n its position) for
/// the verdicts of one `verify` run; creates DIR. Files are written whole
/// (temporary file, then rename). Returns the paths written.
std::vector<std::string> write_report(const std::string& dir, const std::vector<CaseVerdict>& verdicts,
                                      const std::string& dtype);

}  // namespace dmref::conf
