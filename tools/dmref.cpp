// dmref: the command-line front of the library. A thin layer: every command
// parses its arguments, calls the library, and prints or writes the result.
// Exit status: 0 success, 1 check failed, 2 bad input (one line on stderr),
// 3 internal failure (e.g. a value that cannot be certified).
#include "dmref/conformance/generate.hpp"
#include "dmref/conformance/manifest.hpp"
#include "dmref/conformance/sha256.hpp"
#include "dmref/conformance/verify.hpp"
#include "dmref/ldm.hpp"
#include "dmref/preln.hpp"
#include "dmref/stability.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace dmref;
using conf::json;

namespace {

bool show_progress() { return isatty(2) && std::getenv("CI") == nullptr; }

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
  // The manifest is read (every field checked, BadInput: exit 2) before any work.
  std::map<std::string, std::string> want;
  if (!a.check.empty())
    for (const auto& c : conf::read_manifest(a.check)) want[c.id] = c.sha256;
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
    // Complete or not at all: a failed write never renames a truncated manifest into place.
    const std::string tmp = a.write_manifest + ".tmp";
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << conf::manifest_json(entries);
    out.close();
    std::error_code ec;
    if (out) fs::rename(tmp, a.write_manifest, ec);
    if (!out || ec) {
      fs::remove(tmp, ec);
      throw std::runtime_error(a.write_manifest + ": write: cannot write or rename " + tmp);
    }
    std::printf("wrote %s\n", a.write_manifest.c_str());
  }
  if (a.check.empty()) return 0;
  // Compare with the manifest: every regenerated case must be listed with the same hash.
  int bad = 0;
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
  std::printf("manifest check: %zu cases regenerated, %d mismatches\n", entries.size(), bad);
  return bad ? 1 : 0;
}

// ------------------------------------------------------------------ run
int run(const std::string& scheme, const std::string& config, const std::string& inputs, const std::string& out,
        bool grad) {
  conf::Problem p;
  p.source = inputs;
  p.scheme = scheme;
  p.grad = grad;
  std::ifstream in(config);
  if (!in) throw conf::BadInput(config, "config", "cannot open");
  try {
    p.config = json::parse(in);
  } catch (const json::exception& e) {
    std::string why = e.what();
    for (auto& c : why)
      if (c == '\n') c = ' ';
    throw conf::BadInput(config, "config", "not valid JSON: " + why);
  }
  if (!p.config.is_object()) throw conf::BadInput(config, "config", "must be a JSON object");
  p.tensors = io::read(inputs).tensors;
  std::string command = std::string("dmref run") + (grad ? " --grad" : "") + " --scheme " + scheme + " --config " + config +
                        " --inputs " + inputs;
  // A big case takes minutes at the higher Ziv steps: say so on a terminal (quiet in pipes and CI).
  if (show_progress())
    std::fprintf(stderr, "dmref run: certifying %s outputs (MPFI at 134 bits, then 533 and 2128 as needed)...",
                 scheme.c_str());
  io::File f;
  try {
    f = conf::run_problem(p, command);
  } catch (...) {
    if (show_progress()) std::fprintf(stderr, "\n");  // the error gets a line of its own
    throw;
  }
  if (show_progress()) std::fprintf(stderr, " done\n");
  io::write(out, f);
  std::printf("wrote %s (%zu tensors, certified at %s bits)\n", out.c_str(), f.tensors.size(),
              f.metadata.at("precision_bits").c_str());
  return 0;
}

// ------------------------------------------------------------------ verify
struct VerifyArgs {
  std::string fixtures, candidate, format = "text";
  std::size_t errors = 20;
  conf::VerifyOptions opt;
};

std::string idx_str(const std::vector<std::int64_t>& idx) {
  std::string s;
  for (std::size_t i = 0; i < idx.size(); ++i) s += (i ? "," : "") + std::to_string(idx[i]);
  return s;
}

std::string xml_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '<') r += "&lt;";
    else if (c == '>') r += "&gt;";
    else if (c == '&') r += "&amp;";
    else if (c == '"') r += "&quot;";
    else r += c;
  }
  return r;
}

int verify(VerifyArgs a) {
  conf::format_of(a.opt.dtype);  // validates --dtype
  std::vector<std::string> files;
  const bool single = !fs::is_directory(a.fixtures);
  if (single) {
    files.push_back(a.fixtures);
  } else {
    for (const auto& e : fs::directory_iterator(a.fixtures))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  }
  const io::File cand = io::read(a.candidate);
  std::vector<conf::CaseVerdict> verdicts;
  for (const auto& f : files) {
    const io::File fx = io::read(f);
    const auto it = fx.metadata.find("case");
    if (it == fx.metadata.end()) throw conf::BadInput(f, "__metadata__.case", "missing");
    if (!conf::glob_match(a.opt.case_glob, it->second)) continue;
    verdicts.push_back(conf::verify_case(fx, cand, a.opt, single, a.errors));
  }
  if (verdicts.empty()) throw conf::BadInput(a.fixtures, "fixtures", "no fixture case matches --case '" + a.opt.case_glob + "'");
  int failed = 0;
  for (const auto& v : verdicts) failed += !v.pass;
  if (a.format == "json") {
    json j;
    j["dtype"] = a.opt.dtype;
    j["passed"] = int(verdicts.size()) - failed;
    j["failed"] = failed;
    for (const auto& v : verdicts) {
      json c = {{"id", v.id}, {"pass", v.pass}, {"checked", v.checked}, {"failed", v.failed},
                {"worst_err_over_tol", v.worst_ratio}, {"problem", v.problem}, {"failures", json::array()}};
      for (const auto& f : v.failures)
        c["failures"].push_back({{"tensor", f.tensor}, {"index", f.index}, {"observed", f.observed},
                                 {"expected", f.expected}, {"err", f.err}, {"tol", f.tol}});
      j["cases"].push_back(c);
    }
    std::printf("%s\n", j.dump(1).c_str());
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
      std::printf("</testcase>\n");
    }
    std::printf("</testsuite>\n");
  } else {
    std::size_t printed = 0;
    for (const auto& v : verdicts)
      for (const auto& f : v.failures)
        if (printed++ < a.errors)
          std::printf("%s:%s[%s] observed %.17g expected %.17g err=%.3g tol=%.3g\n", v.id.c_str(), f.tensor.c_str(),
                      idx_str(f.index).c_str(), f.observed, f.expected, f.err, f.tol);
    for (const auto& v : verdicts) {
      if (v.pass)
        std::printf("PASS %s: %lld elements, worst err/tol %.3g\n", v.id.c_str(), (long long)v.checked, v.worst_ratio);
      else
        std::printf("FAIL %s: %lld of %lld elements out of tolerance%s%s\n", v.id.c_str(), (long long)v.failed,
                    (long long)v.checked, v.problem.empty() ? "" : "; ", v.problem.c_str());
    }
    std::printf("verify (%s): %zu passed, %d failed\n", a.opt.dtype.c_str(), verdicts.size() - failed, failed);
  }
  return failed ? 1 : 0;
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
  gen_cmd->add_option("--jobs", ga.jobs, "threads (output does not depend on it)")->check(CLI::PositiveNumber);
  gen_cmd->add_option("--check", ga.check, "manifest to compare the regenerated hashes with");
  gen_cmd->add_option("--write-manifest", ga.write_manifest, "write the manifest of the generated cases here");

  std::string scheme, config, inputs, out;
  auto* run_cmd = app.add_subcommand("run", "certified golden outputs for your own inputs and parameters");
  run_cmd->add_option("--scheme", scheme, "preln, ldm, attnres, hc, mhc, denseformer")->required();
  run_cmd->add_option("--config", config, "config JSON (docs/fixtures.md)")->required();
  run_cmd->add_option("--inputs", inputs, "inputs and parameters (safetensors)")->required();
  run_cmd->add_option("--out", out, "output safetensors")->required();
  bool run_grad = false;
  run_cmd->add_flag("--grad", run_grad,
                    "also the backward: vector-Jacobian products grad.* for the upstream gradients input.grad.* "
                    "(docs/fixtures.md, \"Gradients\")");

  VerifyArgs va;
  auto* ver_cmd = app.add_subcommand("verify", "judge a candidate's outputs against golden fixtures");
  ver_cmd->add_option("--fixtures", va.fixtures, "fixture directory or file")->required();
  ver_cmd->add_option("--candidate", va.candidate, "candidate outputs (safetensors)")->required();
  ver_cmd->add_option("--dtype", va.opt.dtype, "candidate dtype: f32, bf16, f16 (default f32)");
  ver_cmd->add_option("--format", va.format, "text, json or junit")->check(CLI::IsMember({"text", "json", "junit"}));
  ver_cmd->add_option("--errors", va.errors, "failing elements to print (default 20)");
  ver_cmd->add_option("--case", va.opt.case_glob, "only fixture cases matching this glob");
  auto* fopt = ver_cmd->add_option("--factor", va.opt.factor, "multiple of the dtype baseline error allowed (default: fixture's, 2)");

  StabilityOptions so;
  so.quick = false;
  so.out_dir = "stability";
  bool no_plot = false;
  auto* stab_cmd = app.add_subcommand("stability", "low-precision sweeps against the reference: CSV, plots, report");
  stab_cmd->add_flag("--quick", so.quick, "the CI sweep (about a minute)");
  stab_cmd->add_option("--out", so.out_dir, "output directory (default: stability)");
  stab_cmd->add_option("--jobs", so.jobs, "configurations in parallel (output does not depend on it)")
      ->check(CLI::PositiveNumber);
  stab_cmd->add_option("--only", so.only, "one scheme: ldm, preln, attnres, mhc");
  stab_cmd->add_flag("--no-plot", no_plot, "skip the PNG plots (scripts/plot_stability.py, matplotlib)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help (rc 0) or the one-line error
    return rc == 0 ? 0 : 2;
  }
  va.opt.factor_set = fopt->count() > 0;
  try {
    if (*demo_cmd) return demo();
    if (*gen_cmd) return generate(ga);
    if (*run_cmd) return run(scheme, config, inputs, out, run_grad);
    if (*ver_cmd) return verify(va);
    if (*stab_cmd) {
      if (show_progress()) so.log = &std::cerr;
      const int rc = run_stability(so);
      if (rc != 0 || no_plot) return rc;
      const std::string cmd = "/usr/bin/python3 " DMREF_SOURCE_DIR "/scripts/plot_stability.py '" + so.out_dir + "'";
      return std::system(cmd.c_str()) == 0 ? 0 : 3;
    }
  } catch (const io::BadInput& e) {
    std::fprintf(stderr, "dmref: %s\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "dmref: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dmref: error: %s\n", e.what());
    return 3;
  }
  return 0;
}
