// dmref: the command-line front of the library. A thin layer: every command
// parses its arguments, calls the library, and prints or writes the result.
// Exit status: 0 success, 1 check failed, 2 bad input (one line on stderr),
// 3 internal failure (a bug, or a value that cannot be certified), 4 an I/O
// failure (a write, a rename, the plotting step) -- docs/hardening.md.
#include "dmref/conformance/generate.hpp"
#include "dmref/conformance/manifest.hpp"
#include "dmref/conformance/report.hpp"
#include "dmref/conformance/sha256.hpp"
#include "dmref/conformance/verify.hpp"
#include "dmref/io/files.hpp"
#include "dmref/ldm.hpp"
#include "dmref/preln.hpp"
#include "dmref/stability.hpp"

#include <CLI/CLI.hpp>

#ifdef DMREF_MPI
#include "run_mpi.hpp"
#endif

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <cstring>
#include <cerrno>
#include <random>
#include <sstream>
#include <thread>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace fs = std::filesystem;
using namespace dmref;
using conf::json;

namespace {

/// Under an MPI launcher only rank 0 prints (every rank reads and validates the same input).
bool quiet_rank = false;

bool show_progress() { return !quiet_rank && isatty(2) && std::getenv("CI") == nullptr; }

// ------------------------------------------------------------------ demo
template <class S>
struct DemoRun {
  Vec<S> preln, outer, rls;
};

/// The built-in demo: one token, d = 8, G = 2, dk = 4, L = 12 layers with
/// given q, k, omega, v (seeded), through PreLN and both LDM writes.
template <class S>
DemoRun<S> demo_run() {
  const int d = 8, G = 2, dk = 4, L = 12;
  std::mt19937_64 rng(2026);
  std::normal_distribution<double> N(0, 1);
  std::uniform_real_distribution<double> U(0, 1);
  auto vec = [&](int n) {
    Vec<S> x(n);
    for (int i = 0; i < n; ++i) x(i) = S(N(rng));
    return x;
  };
  Vec<S> e = vec(d);
  std::vector<Vec<S>> v;
  std::vector<Address<S>> a;
  for (int l = 0; l < L; ++l) {
    v.push_back(vec(d));
    Address<S> ad{normalize_groups<S>(vec(G * dk), G), normalize_groups<S>(vec(G * dk), G), Vec<S>(G)};
    for (int g = 0; g < G; ++g) ad.omega(g) = S(2 * U(rng));
    a.push_back(ad);
  }
  LdmConfig<S> cfg;
  cfg.d = d;
  cfg.groups = G;
  cfg.dk = dk;
  cfg.alpha = S(1);
  cfg.lambda = Mat<S>::Constant(L, G, S(0.9));
  DemoRun<S> r;
  r.preln = forward(PreLN<S>{}, e, L, GivenOutputs<S>{&v}).out;
  r.rls = ldm_kernel<S>(cfg, e, v, a).out;
  cfg.write = MemoryWrite::outer_product;
  r.outer = ldm_kernel<S>(cfg, e, v, a).out;
  return r;
}

void print_demo(const char* name, const Vec<mp77>& hi, const Vec<double>& lo) {
  const double err = to_double(mp77((lo.cast<mp77>() - hi).norm() / hi.norm()));
  std::printf("%-22s out[0..2] = %+.17f %+.17f %+.17f   double vs 257-bit: %.2e (%.1f eps)\n", name,
              to_double(hi(0)), to_double(hi(1)), to_double(hi(2)), err, err / 0x1p-52);
}

int demo() {
  const auto hi = demo_run<mp77>();
  const auto lo = demo_run<double>();
  std::printf("dmref demo: d=8, G=2, dk=4, L=12, lambda=0.9, alpha=1 (seed 2026)\n");
  print_demo("PreLN", hi.preln, lo.preln);
  print_demo("LDM outer product", hi.outer, lo.outer);
  print_demo("LDM RLS", hi.rls, lo.rls);
  return 0;
}

// ------------------------------------------------------------------ generate
struct GenerateArgs {
  std::string glob = "*", out = "fixtures/golden", check, write_manifest;
  bool all = false, ci = false;
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
};

std::string scheme_of(const std::string& id) { return id.substr(0, id.find('.')); }

int generate(const GenerateArgs& a) {
  if (!a.write_manifest.empty()) io::check_output_path(a.write_manifest, "--write-manifest");  // before any work
  // The manifest is read (every field checked, BadInput: exit 2) before any work.
  const auto listed = a.check.empty() ? std::vector<conf::ManifestCase>{} : conf::read_manifest(a.check);
  std::map<std::string, std::string> want;
  for (const auto& c : listed) want[c.id] = c.sha256;
  // And the committed files themselves (fixtures/golden/ next to the
  // manifest), hashed before anything is regenerated (--out may be that
  // directory): an edited committed fixture is a mismatch.
  int bad = 0;
  std::size_t hashed = 0;
  std::string committed_report;
  if (!a.check.empty()) {
    const fs::path golden = fs::path(a.check).parent_path() / "golden";
    for (const auto& c : listed) {
      const fs::path f = golden / c.file;
      std::error_code ec;
      if (!fs::exists(f, ec)) {
        committed_report += "MISMATCH " + c.id + ": committed fixture " + f.string() + " is missing\n";
        ++bad;
        continue;
      }
      ++hashed;
      if (conf::sha256_hex(io::read_bounded(f.string(), "file", std::uint64_t{1} << 40)) != c.sha256) {
        committed_report += "MISMATCH " + c.id + ": committed fixture " + f.string() + " does not match its sha256 in " +
                            a.check + "\n";
        ++bad;
      }
    }
  }
  const auto entries = conf::generate(a.glob, a.out, a.all, a.ci, a.jobs, show_progress());
  if (entries.empty()) {
    std::fprintf(stderr, "dmref generate: --case '%s' matches no case\n", a.glob.c_str());
    return 2;
  }
  // Per-scheme summary.
  std::map<std::string, std::pair<int, int>> bits;  // scheme -> (cases, max precision bits)
  for (const auto& e : entries) {
    auto& b = bits[scheme_of(e.id)];
    ++b.first;
    b.second = std::max(b.second, e.bits);
  }
  std::printf("%-20s %6s %20s\n", "scheme", "cases", "max precision (bits)");
  for (const auto& [s, b] : bits) std::printf("%-20s %6d %20d\n", s.c_str(), b.first, b.second);
  std::printf("generated %zu cases into %s\n", entries.size(), a.out.c_str());
  if (!a.write_manifest.empty()) {
    io::write_atomic(a.write_manifest, conf::manifest_json(entries));  // complete or not at all
    std::printf("wrote %s\n", a.write_manifest.c_str());
  }
  if (a.check.empty()) return 0;
  // Compare with the manifest: every regenerated case must be listed with the same hash.
  std::fputs(committed_report.c_str(), stdout);
  for (const auto& e : entries) {
    const auto it = want.find(e.id);
    if (it == want.end()) {
      std::printf("MISMATCH %s: not in %s\n", e.id.c_str(), a.check.c_str());
      ++bad;
    } else if (it->second != e.sha256) {
      std::printf("MISMATCH %s: sha256 %s, manifest %s\n", e.id.c_str(), e.sha256.c_str(), it->second.c_str());
      ++bad;
    }
  }
  std::printf("manifest check: %zu cases regenerated, %zu committed files hashed, %d mismatches\n", entries.size(),
              hashed, bad);
  return bad ? 1 : 0;
}

// ------------------------------------------------------------------ run
struct RunArgs {
  std::string scheme, config, inputs, out, case_id;
  bool grad = false;  // --grad: the backward too (grad.* goldens for the upstream gradients input.grad.*)
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
};

/// Two names for one file (the same path, or a link to it)?
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

int run(const RunArgs& a) {
  if (!a.case_id.empty() && !conf::valid_case_id(a.case_id))
    throw conf::BadInput("--case-id", "case id", "use 1 to 200 of A-Z a-z 0-9 . _ -");
  io::check_output_path(a.out, "--out");  // before any work: a directory, device or FIFO is refused
  for (const auto& [in, opt] : {std::pair{a.config, "--config"}, std::pair{a.inputs, "--inputs"}})
    if (same_file(a.out, in)) throw conf::BadInput(a.out, "--out", std::string("is the same file as ") + opt + " " + in);
  const auto text = io::read_bounded(a.config, "config", std::uint64_t{16} << 20);
  const conf::Problem p = conf::user_problem(a.scheme, std::string_view(reinterpret_cast<const char*>(text.data()), text.size()),
                                             a.config, io::read(a.inputs).tensors, a.inputs, a.grad);
  const std::string command = conf::run_command(p, a.case_id);
#ifdef DMREF_MPI
  // Started by mpirun: tokens sharded over the ranks, rank 0 writes (byte-identical to one process).
  // A backward problem is certified whole (its parameter gradients sum over
  // tokens), so rank 0 alone runs it.
  if (mpi::launched() && !p.grad) return mpi::run(p, command, a.case_id, a.out, a.jobs);
  if (mpi::launched() && mpi::init().rank != 0) return 0;
#endif
  // A big case takes minutes at the higher Ziv steps: say so on a terminal (quiet in pipes and CI).
  if (show_progress())
    std::fprintf(stderr,
                 "dmref run: certifying %s outputs token by token on %u threads (balls at 128 bits, then 512, 2048 "
                 "and 8192 as needed)...",
                 a.scheme.c_str(), a.jobs);
  io::File f;
  try {
    f = conf::run_problem(p, command, a.case_id, a.jobs);
  } catch (...) {
    if (show_progress()) std::fprintf(stderr, "\n");  // the error gets a line of its own
    throw;
  }
  if (show_progress()) std::fprintf(stderr, " done\n");
  io::write(a.out, f);
  std::printf("wrote %s (case %s, %zu tensors, certified at %s bits)\n", a.out.c_str(), f.metadata.at("case").c_str(),
              f.tensors.size(), f.metadata.at("precision_bits").c_str());
  for (const auto& line : conf::left_out_notes(f, a.out)) std::fprintf(stderr, "%s\n", line.c_str());
  return 0;
}

// ------------------------------------------------------------------ verify
struct VerifyArgs {
  std::string fixtures, candidate, format = "text", manifest, report;
  bool no_manifest = false;
  std::int64_t errors = 20;
  conf::VerifyOptions opt;
};

std::string num3(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}

std::string idx_str(const std::vector<std::int64_t>& idx) {
  std::string s;
  for (std::size_t i = 0; i < idx.size(); ++i) s += (i ? "," : "") + std::to_string(idx[i]);
  return s;
}

/// Names are data: any byte outside printable ASCII (a newline, a quote in
/// XML) is written as \xNN, so no case id or tensor name can start a report
/// line of its own or break the XML.
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

std::string xml_escape(const std::string& raw) {
  std::string r;
  for (char c : safe(raw)) {
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

/// The manifest verify checks the fixtures against: --manifest, else
/// manifest.json in the fixtures' directory, or in its parent when the
/// directory is named golden (the corpus layout: fixtures/manifest.json +
/// fixtures/golden/); none with --no-manifest.
std::string manifest_for(const VerifyArgs& a, bool single) {
  if (a.no_manifest) return {};
  if (!a.manifest.empty()) return a.manifest;
  fs::path dir = single ? fs::path(a.fixtures).parent_path() : fs::path(a.fixtures);
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

int verify(VerifyArgs a) {
  conf::recipe(a.opt.dtype);  // validates --dtype
  if (a.errors < 0) throw std::invalid_argument("verify: --errors must be >= 0");
  std::vector<std::string> files;
  std::error_code ec;
  const bool single = !fs::is_directory(a.fixtures, ec);
  if (single) {
    files.push_back(a.fixtures);
  } else {
    for (const auto& e : fs::directory_iterator(a.fixtures))
      if (conf::is_fixture_name(e.path().filename().string())) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  }
  const std::string mpath = manifest_for(a, single);
  std::map<std::string, conf::ManifestCase> by_file;
  if (!mpath.empty())
    for (auto& c : conf::read_manifest(mpath)) by_file[c.file] = c;
  const io::File cand = io::read(a.candidate);
  std::vector<conf::CaseVerdict> verdicts;
  std::set<std::string> seen;
  std::map<std::string, std::string> file_of_case;
  auto refused = [&](const std::string& id, const std::string& why) {
    conf::CaseVerdict v;
    v.id = id;
    v.pass = false;
    v.problem = why;
    verdicts.push_back(v);
  };
  for (const auto& f : files) {
    const std::string base = fs::path(f).filename().string();
    const auto bytes = io::read_bounded(f, "file", std::uint64_t{1} << 40);
    const io::File fx = io::parse(bytes, f);
    const auto it = fx.metadata.find("case");
    if (it == fx.metadata.end()) throw conf::BadInput(f, "__metadata__.case", "missing");
    // A case is judged once: a second file with the same case id (a copy) is
    // bad input, with or without a manifest.
    if (const auto [d, fresh] = file_of_case.emplace(it->second, f); !fresh)
      throw conf::BadInput(f, "__metadata__.case", "duplicate case id " + safe(it->second) + ", also in " + d->second);
    // Selected when its id, or the id the manifest lists for its file,
    // matches --case: an edited id is reported below, never skipped.
    const auto m = by_file.find(base);
    if (!conf::glob_match(a.opt.case_glob, it->second) &&
        !(m != by_file.end() && conf::glob_match(a.opt.case_glob, m->second.id)))
      continue;
    if (!mpath.empty()) {
      seen.insert(base);
      if (m == by_file.end()) {
        refused(it->second, "fixture " + base + " is not in the manifest " + mpath + " (--no-manifest to skip the check)");
        continue;
      }
      if (m->second.id != it->second) {
        refused(it->second, "fixture " + base + " is case " + m->second.id + " in the manifest " + mpath);
        continue;
      }
      if (conf::sha256_hex(bytes) != m->second.sha256) {
        refused(it->second, "fixture " + base + " does not match the sha256 in the manifest " + mpath + " (edited?)");
        continue;
      }
    }
    verdicts.push_back(conf::verify_case(fx, cand, a.opt, single, std::size_t(a.errors)));
  }
  // Every case of the manifest (that --case selects) must have its fixture.
  if (!mpath.empty() && !single)
    for (const auto& [file, c] : by_file)
      if (!seen.count(file) && conf::glob_match(a.opt.case_glob, c.id))
        refused(c.id, "fixture " + file + " of the manifest " + mpath + " is missing");
  if (verdicts.empty()) throw conf::BadInput(a.fixtures, "fixtures", "no fixture case matches --case '" + safe(a.opt.case_glob) + "'");
  int failed = 0;
  for (const auto& v : verdicts) failed += !v.pass;
  if (a.format == "json") {
    json j;
    j["dtype"] = a.opt.dtype;
    j["manifest"] = mpath;
    j["passed"] = int(verdicts.size()) - failed;
    j["failed"] = failed;
    for (const auto& v : verdicts) {
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
                                {"where", conf::where(t.axes, t.worst)}});
      j["cases"].push_back(c);
    }
    std::printf("%s\n", j.dump(1, ' ', true, json::error_handler_t::replace).c_str());
  } else if (a.format == "junit") {
    std::printf("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"dmref verify\" tests=\"%zu\" failures=\"%d\">\n",
                verdicts.size(), failed);
    for (const auto& v : verdicts) {
      std::printf("  <testcase classname=\"dmref.%s\" name=\"%s\">", a.opt.dtype.c_str(), xml_escape(v.id).c_str());
      if (!v.pass) {
        std::ostringstream m;
        m << v.failed << " of " << v.checked << " elements out of tolerance" << (v.problem.empty() ? "" : "; ") << v.problem;
        std::printf("<failure message=\"%s\">", xml_escape(m.str()).c_str());
        for (const auto& f : v.failures)
          std::printf("%s[%s] observed %.17g expected %.17g err=%.3g tol=%.3g\n", xml_escape(f.tensor).c_str(),
                      idx_str(f.index).c_str(), f.observed, f.expected, f.err, f.tol);
        std::printf("</failure>");
      }
      for (const auto& [name, why] : v.not_judged)
        std::printf("<system-out>%s</system-out>", xml_escape(not_judged_line(v.id, name, why)).c_str());
      std::printf("</testcase>\n");
    }
    std::printf("</testsuite>\n");
  } else {
    std::size_t printed = 0;
    for (const auto& v : verdicts)
      for (const auto& f : v.failures)
        if (printed++ < std::size_t(a.errors))
          std::printf("%s:%s[%s] observed %.17g expected %.17g err=%.3g tol=%.3g\n", safe(v.id).c_str(),
                      safe(f.tensor).c_str(), idx_str(f.index).c_str(), f.observed, f.expected, f.err, f.tol);
    for (const auto& v : verdicts) {
      std::string left;
      for (const auto& n : v.left_out) left += (left.empty() ? "; not judged (--outputs): " : ", ") + safe(n);
      // Where the margin is: the tensor and element of the worst err/tol.
      const conf::TensorVerdict* w = nullptr;
      for (const auto& t : v.tensors)
        if (t.checked && (!w || t.worst_ratio > w->worst_ratio)) w = &t;
      const std::string at = w ? " (" + safe(w->name) + " [" + conf::where(w->axes, w->worst) + "])" : "";
      if (v.pass)
        std::printf("PASS %s: %lld elements, worst err/tol %.3g%s%s\n", safe(v.id).c_str(), (long long)v.checked,
                    v.worst_ratio, at.c_str(), left.c_str());
      else
        std::printf("FAIL %s: %lld of %lld elements out of tolerance%s%s%s%s\n", safe(v.id).c_str(), (long long)v.failed,
                    (long long)v.checked, v.checked ? (", worst err/tol " + num3(v.worst_ratio) + at).c_str() : "",
                    v.problem.empty() ? "" : "; ", safe(v.problem).c_str(), left.c_str());
      for (const auto& [name, why] : v.not_judged) std::printf("%s\n", not_judged_line(v.id, name, why).c_str());
    }
    std::printf("verify (%s): %zu passed, %d failed%s%s\n", a.opt.dtype.c_str(), verdicts.size() - failed, failed,
                mpath.empty() ? "" : "; fixtures checked against ", safe(mpath).c_str());
  }
  if (!a.report.empty())
    for (const auto& path : conf::write_report(a.report, verdicts, a.opt.dtype))
      std::fprintf(stderr, "wrote %s\n", path.c_str());
  return failed ? 1 : 0;
}

/// The plotting step: python3 with an argument vector, never a shell.
int plot(const std::string& out_dir) {
  const std::string py = "/usr/bin/python3", script = DMREF_SOURCE_DIR "/scripts/plot_stability.py";
  std::vector<char*> argv{const_cast<char*>(py.c_str()), const_cast<char*>(script.c_str()),
                          const_cast<char*>(out_dir.c_str()), nullptr};
  pid_t pid;
  if (const int err = posix_spawn(&pid, py.c_str(), nullptr, nullptr, argv.data(), environ))
    throw io::IoError(py + ": plotting: cannot start: " + std::strerror(err));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw io::IoError(py + ": plotting: wait failed: " + std::strerror(errno));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw io::IoError(script + ": plotting: failed (status " + std::to_string(status) + "; --no-plot skips it)");
  return 0;
}

/// A real-valued argument: a decimal number, all of the text (no "", no hex:
/// CLI11 alone reads "" and "0x10"), finite and >= 0. Empty if it is one.
std::string decimal_at_least_zero(const std::string& s) {
  double x = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x, std::chars_format::general);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(x) || x < 0)
    return "'" + safe(s) + "' is not a finite decimal number >= 0";
  return {};
}

/// A comma-separated list of names, appended to `to`: every name non-empty
/// ("a,,b", "a," and "" are refused, never narrowed). Empty if it is one.
std::string comma_list(const std::string& text, std::vector<std::string>& to) {
  std::vector<std::string> names;
  for (std::size_t at = 0;;) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    if (comma == at) return "'" + safe(text) + "' has an empty name (names are comma-separated, none empty)";
    names.push_back(text.substr(at, comma - at));
    if (comma == text.size()) break;
    at = comma + 1;
  }
  to.insert(to.end(), names.begin(), names.end());
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dmref: arbitrary-precision reference and conformance suite for depth mixing"};
  app.require_subcommand(1);
  auto* demo_cmd = app.add_subcommand("demo", "run the reference on the built-in demo case");

  GenerateArgs ga;
  auto* gen_cmd = app.add_subcommand("generate", "regenerate golden fixtures (byte-identical for the same version)");
  gen_cmd->add_option("--case", ga.glob, "case id glob (default: all)");
  gen_cmd->add_option("--out", ga.out, "output directory (default: fixtures/golden)");
  gen_cmd->add_flag("--all", ga.all, "include the large cases that are not committed");
  gen_cmd->add_flag("--ci", ga.ci, "only the fast subset CI regenerates");
  gen_cmd->add_option("--jobs", ga.jobs, "threads, 1 to 256 (output does not depend on it)")->check(CLI::Range(1, 256));
  gen_cmd->add_option("--check", ga.check, "manifest to compare the regenerated hashes with");
  gen_cmd->add_option("--write-manifest", ga.write_manifest, "write the manifest of the generated cases here");

  RunArgs ra;
  auto* run_cmd = app.add_subcommand("run", "a certified golden fixture for your own inputs and parameters");
  run_cmd->add_option("--scheme", ra.scheme, "preln, ldm, attnres, hc, mhc, denseformer")->required();
  run_cmd->add_option("--config", ra.config, "config JSON (docs/fixtures.md)")->required();
  run_cmd->add_option("--inputs", ra.inputs, "inputs and parameters (safetensors)")->required();
  run_cmd->add_option("--out", ra.out, "the fixture to write (safetensors)")->required();
  run_cmd->add_option("--case-id", ra.case_id, "case id (default: user.<scheme>.<hash of config and inputs>)");
  run_cmd->add_option("--jobs", ra.jobs, "threads, 1 to 256: tokens certified in parallel (output does not depend on it)")
      ->check(CLI::Range(1, 256));
  run_cmd->add_flag("--grad", ra.grad,
                    "also the backward: vector-Jacobian products grad.* for the upstream gradients input.grad.* "
                    "(docs/fixtures.md, \"Gradients\")");

  VerifyArgs va;
  auto* ver_cmd = app.add_subcommand("verify", "judge a candidate's outputs against golden fixtures");
  ver_cmd->add_option("--fixtures", va.fixtures, "fixture directory or file")->required();
  ver_cmd->add_option("--candidate", va.candidate, "candidate outputs (safetensors)")->required();
  ver_cmd->add_option("--dtype", va.opt.dtype, "candidate recipe: f32, bf16, f16, f64 (default f32); also as storage:arithmetic: bf16:f32, f16:f32 "
                      "(the 16-bit recipes: 16-bit inputs, streams and outputs, float32 arithmetic)");
  ver_cmd->add_option("--format", va.format, "text, json or junit")->check(CLI::IsMember({"text", "json", "junit"}));
  ver_cmd->add_option("--errors", va.errors, "failing elements to print (default 20)")->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40));
  // One value per occurrence, split below (CLI11's delimiter dropped empty
  // names and, for a lone ",", took the next argument as the list).
  std::vector<std::string> outputs_text;
  ver_cmd->add_option("--outputs", outputs_text, "judge only these golden tensors (out or output.out, comma-separated; "
                                                 "may be repeated)")
      ->allow_extra_args(false);
  ver_cmd->add_option("--manifest", va.manifest, "check the fixtures' sha256 against this manifest (default: manifest.json "
                                                 "next to the fixtures or one directory up)");
  ver_cmd->add_flag("--no-manifest", va.no_manifest, "do not check the fixtures against a manifest");
  ver_cmd->add_option("--report", va.report, "write DIR/report.md and a picture (SVG) per case of err/tol over token x "
                                             "layer for its worst tensor");
  ver_cmd->add_option("--case", va.opt.case_glob, "only fixture cases matching this glob");
  std::string factor_text;  // parsed below: CLI11 alone reads "" and "0x10"
  auto* fopt = ver_cmd->add_option("--factor", factor_text, "multiple of the per-element error bound allowed (default: the fixture's, 2)");

  StabilityOptions so;
  so.quick = false;
  so.out_dir = "stability";
  bool no_plot = false;
  auto* stab_cmd = app.add_subcommand("stability", "low-precision sweeps against the reference: CSV, plots, report");
  stab_cmd->add_flag("--quick", so.quick, "the CI sweep (docs/stability.md: its time)");
  stab_cmd->add_option("--out", so.out_dir, "output directory (default: stability)");
  stab_cmd->add_option("--jobs", so.jobs, "configurations in parallel, 1 to 256 (output does not depend on it)")
      ->check(CLI::Range(1, 256));
  stab_cmd->add_option("--only", so.only, "one scheme: ldm, preln, attnres, mhc, gradients (every scheme's backward over depth); or (run only on request) remedies (LDM remedies), sinkhorn (mHC Sinkhorn rounds, composite gain)");
  stab_cmd->add_flag("--no-plot", no_plot, "skip the PNG plots (scripts/plot_stability.py, matplotlib)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help (rc 0) or the one-line error
    return rc == 0 ? 0 : 2;
  }
  for (const auto& text : outputs_text) {
    if (const std::string why = comma_list(text, va.opt.outputs); !why.empty()) {
      std::fprintf(stderr, "dmref: --outputs: %s\n", why.c_str());
      return 2;
    }
  }
  va.opt.factor_set = fopt->count() > 0;
  if (va.opt.factor_set) {
    if (const std::string why = decimal_at_least_zero(factor_text); !why.empty()) {
      std::fprintf(stderr, "dmref: --factor: %s\n", why.c_str());
      return 2;
    }
    va.opt.factor = std::strtod(factor_text.c_str(), nullptr);
  }
#ifdef DMREF_MPI
  struct Finalize {
    ~Finalize() { mpi::finalize(); }
  } finalize;
  if (mpi::launched()) quiet_rank = mpi::init().rank != 0;
#endif
  io::install_cleanup_handlers();
  try {
    if (*demo_cmd) return demo();
    if (*gen_cmd) return generate(ga);
    if (*run_cmd) return run(ra);
    if (*ver_cmd) return verify(va);
    if (*stab_cmd) {
      if (show_progress()) so.log = &std::cerr;
      const int rc = run_stability(so);
      if (rc != 0 || no_plot) return rc;
      return plot(so.out_dir);
    }
  } catch (const io::BadInput& e) {
    if (!quiet_rank) std::fprintf(stderr, "dmref: %s\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    if (!quiet_rank) std::fprintf(stderr, "dmref: %s\n", e.what());
    return 2;
  } catch (const io::IoError& e) {
    if (!quiet_rank) std::fprintf(stderr, "dmref: %s\n", e.what());
    return 4;
  } catch (const fs::filesystem_error& e) {  // a directory that cannot be listed or created
    if (!quiet_rank) std::fprintf(stderr, "dmref: %s\n", e.what());
    return 4;
  } catch (const std::exception& e) {
    if (!quiet_rank) std::fprintf(stderr, "dmref: error: %s\n", e.what());
    return 3;
  }
  return 0;
}
