// `dmref verify` as a library call (gate.hpp): the manifest policy, the
// verdicts, the renderings.
#include "dmref/conformance/gate.hpp"

#include "dmref/conformance/sha256.hpp"
#include "dmref/io/files.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <system_error>

namespace dmref::conf {

namespace fs = std::filesystem;

namespace {

/// printf onto a string.
[[gnu::format(printf, 2, 3)]] void put(std::string& s, const char* f, ...) {
  va_list a, b;
  va_start(a, f);
  va_copy(b, a);
  const int n = std::vsnprintf(nullptr, 0, f, a);
  va_end(a);
  const std::size_t at = s.size();
  s.resize(at + std::size_t(n) + 1);
  std::vsnprintf(s.data() + at, std::size_t(n) + 1, f, b);
  va_end(b);
  s.resize(at + std::size_t(n));
}

std::string num3(double x) {
  std::string s;
  put(s, "%.3g", x);
  return s;
}

std::string idx_str(const std::vector<std::int64_t>& idx) {
  std::string s;
  for (std::size_t i = 0; i < idx.size(); ++i) s += (i ? "," : "") + std::to_string(idx[i]);
  return s;
}

/// The five XML specials as entities (of a line already made safe()).
std::string xml_chars(const std::string& line) {
  std::string r;
  for (char c : line) {
    if (c == '<') r += "&lt;";
    else if (c == '>') r += "&gt;";
    else if (c == '&') r += "&amp;";
    else if (c == '"') r += "&quot;";
    else if (c == '\'') r += "&apos;";
    else r += c;
  }
  return r;
}


/// The report line of an output the fixture has no golden for (as
/// dmref_fixtures.Verdict.report writes it).
std::string not_judged_line(const std::string& id, const std::string& name, const std::string& why) {
  return "NOT JUDGED " + safe(id) + ":" + safe(name) + ": the fixture has no golden for it (" + safe(why) + ")";
}

}  // namespace

std::string safe(const std::string& s) {
  std::string r;
  for (const unsigned char c : s) {
    if (c < 0x20 || c >= 0x7f || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      r += buf;
    } else {
      r += char(c);
    }
  }
  return r;
}

std::string xml_escape(const std::string& s) { return xml_chars(safe(s)); }

std::size_t Report::failed() const {
  std::size_t n = 0;
  for (const auto& v : cases) n += !v.pass;
  return n;
}

std::string find_manifest(const std::string& fixtures, bool single) {
  fs::path dir = single ? fs::path(fixtures).parent_path() : fs::path(fixtures);
  if (dir.empty()) dir = ".";
  std::vector<fs::path> where{dir / "manifest.json"};
  fs::path norm = fs::absolute(dir).lexically_normal();
  if (norm.filename().empty()) norm = norm.parent_path();  // "fixtures/golden/"
  if (norm.filename() == "golden") where.push_back(dir / ".." / "manifest.json");
  for (const fs::path& m : where) {
    std::error_code ec;
    if (fs::is_regular_file(m, ec)) return m.lexically_normal().string();
  }
  return {};
}

std::vector<std::string> fixture_paths(const std::string& fixtures, bool single) {
  if (single) return {fixtures};
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(fixtures))
    if (is_fixture_name(e.path().filename().string())) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

Corpus load_corpus(const GateOptions& o) {
  Corpus c;
  std::error_code ec;
  c.single = !fs::is_directory(o.fixtures, ec);
  c.manifest = o.no_manifest ? "" : !o.manifest.empty() ? o.manifest : find_manifest(o.fixtures, c.single);
  std::map<std::string, ManifestCase> by_file;
  if (!c.manifest.empty())
    for (auto& m : read_manifest(c.manifest)) by_file[m.file] = m;
  const std::string& glob = o.verify.case_glob;
  std::optional<io::BadInput> problem;  // the first mismatch with the manifest
  auto mismatch = [&](const std::string& path, const std::string& field, const std::string& why) {
    if (!problem) problem.emplace(path, field, why);
  };
  std::set<std::string> seen;
  std::map<std::string, std::string> file_of_case;
  for (const auto& f : fixture_paths(o.fixtures, c.single)) {
    const std::string base = fs::path(f).filename().string();
    const auto bytes = io::read_bounded(f, "file", std::uint64_t{1} << 40);
    io::File fx = io::parse(bytes, f);
    const auto it = fx.metadata.find("case");
    if (it == fx.metadata.end()) throw io::BadInput(f, "__metadata__.case", "missing");
    const std::string id = it->second;
    // A case is judged once: a second file with the same case id (a copy) is
    // bad input, with or without a manifest.
    if (const auto [d, fresh] = file_of_case.emplace(id, f); !fresh)
      throw io::BadInput(f, "__metadata__.case", "duplicate case id " + safe(id) + ", also in " + d->second);
    // Selected when its id, or the id the manifest lists for its file,
    // matches --case: an edited id is refused, never skipped.
    const auto m = by_file.find(base);
    if (!glob_match(glob, id) && !(m != by_file.end() && glob_match(glob, m->second.id))) continue;
    if (!c.manifest.empty()) {
      seen.insert(base);
      if (m == by_file.end())
        mismatch(f, "file", "fixture " + base + " is not in the manifest " + c.manifest + " (--no-manifest to skip the check)");
      else if (m->second.id != id)
        mismatch(f, "__metadata__.case", "fixture " + base + " is case " + m->second.id + " in the manifest " + c.manifest);
      else if (sha256_hex(bytes) != m->second.sha256)
        mismatch(f, "sha256", "fixture " + base + " does not match the sha256 in the manifest " + c.manifest + " (edited?)");
    }
    c.fixtures.push_back(std::move(fx));
  }
  // Every case of the manifest (that --case selects) must have its fixture.
  if (!c.manifest.empty() && !c.single)
    for (const auto& [file, m] : by_file)
      if (!seen.count(file) && glob_match(glob, m.id))
        mismatch((fs::path(o.fixtures) / file).string(), "file", "fixture " + file + " of the manifest " + c.manifest + " is missing");
  if (problem) throw *problem;
  if (c.fixtures.empty())
    throw io::BadInput(o.fixtures, "fixtures", "no fixture case matches --case '" + safe(glob) + "'");
  return c;
}

Report verify_fixtures(const GateOptions& o) {
  recipe(o.verify.dtype);  // validates --dtype before any file is read
  Report r;
  r.dtype = o.verify.dtype;
  r.keep_failures = o.keep_failures;
  const io::File cand = io::read(o.candidate);
  const Corpus c = load_corpus(o);
  r.manifest = c.manifest;
  for (const auto& fx : c.fixtures) r.cases.push_back(verify_case(fx, cand, o.verify, c.single, o.keep_failures));
  return r;
}

std::string render_json(const Report& r) {
  using json = nlohmann::json;
  json j;
  const std::size_t failed = r.failed();
  j["dtype"] = r.dtype;
  j["manifest"] = r.manifest;
  j["passed"] = int(r.cases.size() - failed);
  j["failed"] = int(failed);
  for (const auto& v : r.cases) {
    json c = {{"id", v.id}, {"pass", v.pass}, {"checked", v.checked}, {"failed", v.failed},
              {"worst_err_over_tol", v.worst_ratio}, {"problem", v.problem}, {"left_out", v.left_out},
              {"failures", json::array()}, {"not_judged", json::array()}};
    for (const auto& [name, why] : v.not_judged) c["not_judged"].push_back({{"tensor", name}, {"why", why}});
    for (const auto& f : v.failures)
      c["failures"].push_back({{"tensor", f.tensor}, {"index", f.index}, {"observed", f.observed},
                               {"expected", f.expected}, {"err", f.err}, {"tol", f.tol}});
    c["tensors"] = json::array();
    for (const auto& t : v.tensors)
      c["tensors"].push_back({{"tensor", t.name}, {"checked", t.checked}, {"failed", t.failed},
                              {"worst_err_over_tol", t.worst_ratio}, {"worst_index", t.worst}, {"axes", t.axes},
                              {"where", where(t.axes, t.worst)}});
    j["cases"].push_back(c);
  }
  return j.dump(1, ' ', true, json::error_handler_t::replace) + "\n";
}

std::string render_junit(const Report& r) {
  std::string s;
  put(s, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"dmref verify\" tests=\"%zu\" failures=\"%zu\">\n",
      r.cases.size(), r.failed());
  for (const auto& v : r.cases) {
    put(s, "  <testcase classname=\"dmref.%s\" name=\"%s\">", r.dtype.c_str(), xml_escape(v.id).c_str());
    if (!v.pass) {
      const std::string m = std::to_string(v.failed) + " of " + std::to_string(v.checked) + " elements out of tolerance" +
                            (v.problem.empty() ? "" : "; ") + v.problem;
      put(s, "<failure message=\"%s\">", xml_escape(m).c_str());
      for (const auto& f : v.failures)
        put(s, "%s[%s] observed %.17g expected %.17g err=%.3g tol=%.3g\n", xml_escape(f.tensor).c_str(),
            idx_str(f.index).c_str(), f.observed, f.expected, f.err, f.tol);
      s += "</failure>";
    }
    for (const auto& [name, why] : v.not_judged)
      put(s, "<system-out>%s</system-out>", xml_chars(not_judged_line(v.id, name, why)).c_str());  // safe() once
    s += "</testcase>\n";
  }
  s += "</testsuite>\n";
  return s;
}

std::string render_text(const Report& r) {
  std::string s;
  std::size_t printed = 0;
  for (const auto& v : r.cases)
    for (const auto& f : v.failures)
      if (printed++ < r.keep_failures)
        put(s, "%s:%s[%s] observed %.17g expected %.17g err=%.3g tol=%.3g\n", safe(v.id).c_str(), safe(f.tensor).c_str(),
            idx_str(f.index).c_str(), f.observed, f.expected, f.err, f.tol);
  for (const auto& v : r.cases) {
    std::string left;
    for (const auto& n : v.left_out) left += (left.empty() ? "; not judged (--outputs): " : ", ") + safe(n);
    // Where the margin is: the tensor and element of the worst err/tol.
    const TensorVerdict* w = worst_tensor(v);
    const std::string at = w ? " (" + safe(w->name) + " [" + where(w->axes, w->worst) + "])" : "";
    if (v.pass)
      put(s, "PASS %s: %lld elements, worst err/tol %.3g%s%s\n", safe(v.id).c_str(), (long long)v.checked, v.worst_ratio,
          at.c_str(), left.c_str());
    else
      put(s, "FAIL %s: %lld of %lld elements out of tolerance%s%s%s%s\n", safe(v.id).c_str(), (long long)v.failed,
          (long long)v.checked, v.checked ? (", worst err/tol " + num3(v.worst_ratio) + at).c_str() : "",
          v.problem.empty() ? "" : "; ", safe(v.problem).c_str(), left.c_str());
    for (const auto& [name, why] : v.not_judged) s += not_judged_line(v.id, name, why) + "\n";
  }
  const std::size_t failed = r.failed();
  put(s, "verify (%s): %zu passed, %zu failed%s%s\n", r.dtype.c_str(), r.cases.size() - failed, failed,
      r.manifest.empty() ? "" : "; fixtures checked against ", safe(r.manifest).c_str());
  return s;
}

RegenerationCheck check_committed(const std::string& manifest) {
  RegenerationCheck c;
  c.manifest = manifest;
  c.listed = read_manifest(manifest);
  const fs::path golden = fs::path(manifest).parent_path() / "golden";
  for (const auto& m : c.listed) {
    const fs::path f = golden / m.file;
    std::error_code ec;
    if (!fs::exists(f, ec)) {
      c.committed += "MISMATCH " + m.id + ": committed fixture " + f.string() + " is missing\n";
      ++c.mismatches;
      continue;
    }
    ++c.hashed;
    if (sha256_hex(io::read_bounded(f.string(), "file", std::uint64_t{1} << 40)) != m.sha256) {
      c.committed += "MISMATCH " + m.id + ": committed fixture " + f.string() + " does not match its sha256 in " +
                     manifest + "\n";
      ++c.mismatches;
    }
  }
  return c;
}

std::string check_regenerated(RegenerationCheck& c, const std::vector<ManifestCase>& generated) {
  std::map<std::string, std::string> want;
  for (const auto& m : c.listed) want[m.id] = m.sha256;
  std::string s = c.committed;
  for (const auto& e : generated) {
    const auto it = want.find(e.id);
    if (it == want.end()) {
      put(s, "MISMATCH %s: not in %s\n", e.id.c_str(), c.manifest.c_str());
      ++c.mismatches;
    } else if (it->second != e.sha256) {
      put(s, "MISMATCH %s: sha256 %s, manifest %s\n", e.id.c_str(), e.sha256.c_str(), it->second.c_str());
      ++c.mismatches;
    }
  }
  put(s, "manifest check: %zu cases regenerated, %zu committed files hashed, %d mismatches\n", generated.size(), c.hashed,
      c.mismatches);
  return s;
}

}  // namespace dmref::conf
