// `dmref verify --report DIR` (report.hpp).
#include "dmref/conformance/report.hpp"

#include "dmref/conformance/gate.hpp"  // safe, xml_escape: one escaping for every rendering

#include "dmref/io/files.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <system_error>

namespace dmref::conf {

namespace {

std::string num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}

/// err/tol -> colour: 0 white, 0.5 yellow, >= 1 red (past the tolerance).
std::string colour(double r) {
  if (!(r < 1)) return "#c00000";
  const double t = std::clamp(r, 0.0, 1.0);
  const int g = int(255 - 90 * t), b = int(255 * (1 - std::min(2 * t, 1.0)));
  char c[8];
  std::snprintf(c, sizeof c, "#%02x%02x%02x", 255, g, b);
  return c;
}

}  // namespace

std::string grid_svg(const std::string& case_id, const TensorVerdict& t) {
  const std::int64_t R = t.grid_rows, C = t.grid_cols;
  const int cell = int(std::clamp<std::int64_t>(560 / std::max<std::int64_t>(C, 1), 4, 40));
  const int cellh = int(std::clamp<std::int64_t>(320 / std::max<std::int64_t>(R, 1), 4, 40));
  const int left = 70, top = 50, W = std::max(left + int(C) * cell + 120, 600), H = top + int(R) * cellh + 70;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"10\" y=\"18\" font-size=\"14\">" << xml_escape(case_id) << ": " << xml_escape(t.name) << ", max err/tol "
    << num(t.worst_ratio) << " at " << xml_escape(where(t.axes, t.worst)) << "</text>\n"
    << "<text x=\"10\" y=\"36\">err/tol per cell (max over the cell's elements); red: past the tolerance</text>\n";
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t c = 0; c < C; ++c) {
      const double x = t.grid[std::size_t(r * C + c)];
      s << "<rect x=\"" << left + c * cell << "\" y=\"" << top + r * cellh << "\" width=\"" << cell << "\" height=\""
        << cellh << "\" fill=\"" << colour(x) << "\" stroke=\"#888\" stroke-width=\"0.3\"><title>token " << r
        << (C > 1 ? ", layer " + std::to_string(c) : "") << ": " << num(x) << "</title></rect>\n";
    }
  s << "<text x=\"" << left << "\" y=\"" << top + R * cellh + 20 << "\">" << (C > 1 ? "layer 0.." + std::to_string(C - 1) : "")
    << "</text>\n<text x=\"10\" y=\"" << top + 12 << "\">token 0</text>\n<text x=\"10\" y=\"" << top + R * cellh
    << "\">token " << R - 1 << "</text>\n";
  const int lx = left + int(C) * cell + 20;  // the scale
  for (int k = 0; k <= 10; ++k)
    s << "<rect x=\"" << lx << "\" y=\"" << top + k * 14 << "\" width=\"20\" height=\"14\" fill=\"" << colour(k / 10.0)
      << "\"/><text x=\"" << lx + 26 << "\" y=\"" << top + k * 14 + 11 << "\">" << (k == 10 ? ">= 1" : num(k / 10.0))
      << "</text>\n";
  s << "</svg>\n";
  return s.str();
}

std::vector<std::string> write_report(const std::string& dir, const std::vector<CaseVerdict>& verdicts,
                                      const std::string& dtype) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw io::IoError(dir + ": write: cannot create the report directory: " + ec.message());
  std::vector<std::string> written;
  std::ostringstream md;
  std::size_t failed = 0;
  for (const auto& v : verdicts) failed += !v.pass;
  md << "# dmref verify report (" << dtype << ")\n\n" << verdicts.size() - failed << " passed, " << failed
     << " failed.\n\n| case | verdict | worst tensor | worst err/tol | where | picture |\n| --- | --- | --- | --- | --- | --- |\n";
  for (std::size_t n = 0; n < verdicts.size(); ++n) {
    const auto& v = verdicts[n];
    const TensorVerdict* w = worst_tensor(v);
    std::string pic;
    // The picture: the failing or closest-to-failing tensor with a grid.
    if (const TensorVerdict* g = worst_tensor(v, /*with_grid=*/true)) {
      const std::string name = std::to_string(n) + ".svg";
      io::write_atomic(dir + "/" + name, grid_svg(v.id, *g));
      written.push_back(dir + "/" + name);
      pic = "![" + g->name + "](" + name + ")";
    }
    md << "| " << xml_escape(v.id) << " | " << (v.pass ? "PASS" : "FAIL") << (v.problem.empty() ? "" : " (" + xml_escape(v.problem) + ")")
       << " | " << (w ? xml_escape(w->name) : "-") << " | " << (w ? num(w->worst_ratio) : "-") << " | "
       << (w ? xml_escape(where(w->axes, w->worst)) : "-") << " | " << pic << " |\n";
  }
  md << "\nPer tensor:\n\n| case | tensor | elements | failed | worst err/tol | where |\n| --- | --- | --- | --- | --- | --- |\n";
  for (const auto& v : verdicts)
    for (const auto& t : v.tensors)
      md << "| " << xml_escape(v.id) << " | " << xml_escape(t.name) << " | " << t.checked << " | " << t.failed << " | "
         << num(t.worst_ratio) << " | " << xml_escape(where(t.axes, t.worst)) << " |\n";
  io::write_atomic(dir + "/report.md", md.str());
  written.push_back(dir + "/report.md");
  return written;
}

}  // namespace dmref::conf
