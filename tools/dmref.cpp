// dmref: the command-line front of the library. A thin layer: every command
// parses its arguments, calls the library, and prints or writes the result.
// Exit status: 0 success, 1 check failed, 2 bad input (one line on stderr),
// 3 internal failure (a bug, or a value that cannot be certified), 4 an I/O
// failure (a write, a rename, the plotting step) -- docs/hardening.md.
#include "dmref/conformance/gate.hpp"
#include "dmref/conformance/generate.hpp"
#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/report.hpp"
#include "dmref/io/files.hpp"
#include "dmref/ldm.hpp"
#include "dmref/preln.hpp"
#include "dmref/scalar.hpp"  // mp77 (dmref demo)
#include "dmref/stability.hpp"

#include <CLI/CLI.hpp>

#ifdef DMREF_MPI
#include "run_mpi.hpp"
#endif

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <cstring>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

extern char** environ;

namespace fs = std::filesystem;
using namespace dmref;
using conf::json;

namespace {

/// Under an MPI launcher only rank 0 prints (every rank reads and validates the same input).
bool quiet_rank = false;

bool show_progress() { return !quiet_rank && isatty(2) && std::getenv("CI") == nullptr; }

/// Progress of `dmref run` on stderr, in its two stages (conf::RunStage):
/// the tokens certified, then the tolerance model's samples. On a terminal
/// (show_progress): one line rewritten in place. Elsewhere (a pipe, a CI log,
/// read later): nothing for a short run, then every DMREF_PROGRESS_EVERY
/// seconds (default 30) one line with the stage's count, its rate and the time
/// left in it at that rate, and the time so far, so that a long run is seen to
/// be alive and how long it has to go.
class RunProgress {
 public:
  RunProgress(const std::string& scheme, unsigned threads) : scheme_(scheme), tty_(show_progress()) {
    if (tty_) {
      std::fprintf(stderr,
                   "dmref run: certifying %s outputs token by token on %u threads (balls at 128 bits, then 512, 2048 "
                   "and 8192 as needed), then the tolerance model...",
                   scheme.c_str(), threads);
      return;
    }
    if (quiet_rank) return;
    double every = 30;
    if (const char* e = std::getenv("DMREF_PROGRESS_EVERY")) {
      char* end = nullptr;
      every = std::strtod(e, &end);
      if (end == e || *end != 0 || !(every > 0) || !std::isfinite(every))
        throw conf::BadInput("DMREF_PROGRESS_EVERY", "environment", std::string("\"") + e +
                                                                       "\" is not a number of seconds > 0");
    }
    every_ = std::chrono::duration<double>(every);
    ticker_ = std::thread([this] { run(); });
  }
  ~RunProgress() { finish(false); }
  RunProgress(const RunProgress&) = delete;
  RunProgress& operator=(const RunProgress&) = delete;
  void tick(conf::RunStage stage, std::size_t done, std::size_t total) {
    const std::lock_guard<std::mutex> lock(m_);
    if (stage != stage_ || stage_start_ == std::chrono::steady_clock::time_point{}) {
      stage_ = stage;
      stage_start_ = std::chrono::steady_clock::now();
      stage_first_ = done == 0 ? 0 : done - 1;  // the rate counts from the first tick of the stage
    }
    done_ = done;
    total_ = total;
    if (tty_) std::fprintf(stderr, "\rdmref run: %s: %s   ", scheme_.c_str(), line().c_str());
  }
  void finish(bool ok) {
    {
      const std::lock_guard<std::mutex> lock(m_);
      if (over_) return;
      over_ = true;
    }
    cv_.notify_all();
    if (ticker_.joinable()) ticker_.join();
    if (tty_) std::fprintf(stderr, ok ? " done\n" : "\n");  // an error gets a line of its own
  }

 private:
  /// "tolerance model: 37 of 128 samples, 0.52 a second, about 175 s left" (the lock held).
  std::string line() const {
    const bool tok = stage_ == conf::RunStage::tokens;
    std::string s = std::string(tok ? "certifying: " : "tolerance model: ") + std::to_string(done_) + " of " +
                    std::to_string(total_) + (tok ? " tokens" : " samples");
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - stage_start_).count();
    const std::size_t n = done_ - stage_first_;
    if (n > 0 && t > 0 && done_ < total_) {
      const double rate = double(n) / t;
      char buf[96];
      std::snprintf(buf, sizeof buf, ", %.3g a second, about %.0f s left in this stage", rate,
                    double(total_ - done_) / rate);
      s += buf;
    }
    return s;
  }
  void run() {
    std::unique_lock<std::mutex> lock(m_);
    while (!cv_.wait_for(lock, every_, [this] { return over_; })) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
      const std::string what = total_ ? line() : "starting";
      std::fprintf(stderr, "dmref run: %s: %s; %.0f s so far\n", scheme_.c_str(), what.c_str(), s);
    }
  }
  std::string scheme_;
  bool tty_;
  std::chrono::duration<double> every_{30};
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now(), stage_start_{};
  std::mutex m_;
  std::condition_variable cv_;
  conf::RunStage stage_ = conf::RunStage::tokens;
  std::size_t done_ = 0, total_ = 0, stage_first_ = 0;
  bool over_ = false;
  std::thread ticker_;
};

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
  // The manifest read and the committed files hashed before any work (--out
  // may be the committed directory).
  std::optional<conf::RegenerationCheck> check;
  if (!a.check.empty()) check = conf::check_committed(a.check);
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
    b.second = std::max(b.second, int(e.precision_bits));
  }
  std::printf("%-20s %6s %20s\n", "scheme", "cases", "max precision (bits)");
  for (const auto& [s, b] : bits) std::printf("%-20s %6d %20d\n", s.c_str(), b.first, b.second);
  std::printf("generated %zu cases into %s\n", entries.size(), a.out.c_str());
  if (!a.write_manifest.empty()) {
    io::write_atomic(a.write_manifest, conf::manifest_json(entries));  // complete or not at all
    std::printf("wrote %s\n", a.write_manifest.c_str());
  }
  if (!check) return 0;
  std::fputs(conf::check_regenerated(*check, entries).c_str(), stdout);
  return check->mismatches ? 1 : 0;
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
  // A backward problem runs on rank 0 alone (its tokens on --jobs threads):
  // its parameter gradients are sums of every token's terms as balls, which
  // the ranks do not exchange (they gather certified doubles; docs/performance.md).
  if (mpi::launched() && !p.grad) return mpi::run(p, command, a.case_id, a.out, a.jobs);
  if (mpi::launched() && mpi::init().rank != 0) return 0;
#endif
  // A big case takes minutes at the higher Ziv steps: say so (RunProgress).
  io::File f;
  {
    RunProgress progress(a.scheme, a.jobs);
    f = conf::run_problem(p, command, a.case_id, a.jobs,
                          [&](conf::RunStage st, std::size_t done, std::size_t total) { progress.tick(st, done, total); });
    progress.finish(true);
  }
  io::write(a.out, f);
  std::printf("wrote %s (case %s, %zu tensors, certified at %s bits)\n", a.out.c_str(), f.metadata.at("case").c_str(),
              f.tensors.size(), f.metadata.at("precision_bits").c_str());
  for (const auto& line : conf::left_out_notes(f, a.out)) std::fprintf(stderr, "%s\n", line.c_str());
  return 0;
}

// ------------------------------------------------------------------ verify
struct VerifyArgs {
  conf::GateOptions gate;
  std::string format = "text", report;
  std::int64_t errors = 20;
};

int verify(VerifyArgs a) {
  if (a.errors < 0) throw std::invalid_argument("verify: --errors must be >= 0");
  a.gate.keep_failures = std::size_t(a.errors);
  const conf::Report r = conf::verify_fixtures(a.gate);
  const std::string out = a.format == "json"    ? conf::render_json(r)
                          : a.format == "junit" ? conf::render_junit(r)
                                                : conf::render_text(r);
  std::fputs(out.c_str(), stdout);
  if (!a.report.empty())
    for (const auto& path : conf::write_report(a.report, r.cases, r.dtype)) std::fprintf(stderr, "wrote %s\n", path.c_str());
  return r.failed() ? 1 : 0;
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
    return "'" + conf::safe(s) + "' is not a finite decimal number >= 0";
  return {};
}

/// A comma-separated list of names, appended to `to`: every name non-empty
/// ("a,,b", "a," and "" are refused, never narrowed). Empty if it is one.
std::string comma_list(const std::string& text, std::vector<std::string>& to) {
  std::vector<std::string> names;
  for (std::size_t at = 0;;) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    if (comma == at) return "'" + conf::safe(text) + "' has an empty name (names are comma-separated, none empty)";
    names.push_back(text.substr(at, comma - at));
    if (comma == text.size()) break;
    at = comma + 1;
  }
  to.insert(to.end(), names.begin(), names.end());
  return {};
}

// ------------------------------------------------------------------ schema, inputs
struct SchemaArgs {
  std::string scheme, config, format = "text";
  bool grad = false;
};

conf::Problem schema_problem_of(const std::string& scheme, const std::string& config_path, bool grad) {
  const auto text = io::read_bounded(config_path, "config", std::uint64_t{16} << 20);
  return conf::schema_problem(
      scheme, io::parse_json(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), config_path, "config"),
      grad, config_path);
}

/// `dmref schema <scheme>`: the declared keys and tensors; with --config, that
/// config's (shapes, values) after the same checks `dmref run` makes of it.
int schema(const SchemaArgs& a) {
  if (a.scheme == "list") {
    for (const auto& e : conf::registry()) std::printf("%-12s docs/%-15s %s\n", e.name.c_str(), e.info->page.c_str(), e.info->summary.c_str());
    return 0;
  }
  if (a.config.empty()) {
    const json doc = conf::schema_doc(conf::scheme_entry(a.scheme));
    // Over the documented configs the text form is the markdown table (one rendering).
    if (a.format == "json") std::printf("%s\n", doc.dump(1).c_str());
    else std::fputs(conf::schema_markdown(doc).c_str(), stdout);
    return 0;
  }
  const conf::Problem p = schema_problem_of(a.scheme, a.config, a.grad);
  const conf::Schema s = conf::schema_of(p);
  if (a.format == "json") std::printf("%s\n", s.to_json().dump(1).c_str());
  else std::fputs(conf::schema_text(s).c_str(), stdout);
  return 0;
}

struct InputsArgs {
  std::string scheme, config, out, dtype = "bf16";
  std::vector<std::string> draw;  // KEY=VALUE: the corpus's input options
  std::uint64_t seed = 1;
  bool grad = false;
};

/// `dmref inputs`: a config's inputs and parameters drawn as the corpus draws
/// them (its schema's draws, SplitMix64 from --seed, rounded to --dtype).
int inputs(const InputsArgs& a) {
  io::check_output_path(a.out, "--out");
  const conf::Problem p = schema_problem_of(a.scheme, a.config, a.grad);
  (void)conf::format_of(a.dtype);  // validates --dtype
  conf::CaseSpec c;
  c.id = "inputs";
  c.scheme = a.scheme;
  c.dtype = a.dtype;
  c.config = p.config;
  c.seed = a.seed;
  c.grad = a.grad;
  const conf::Schema declared = conf::schema_of(p);
  for (const auto& kv : a.draw) {  // KEY=VALUE, a finite number, KEY one the scheme's draws read
    const auto eq = kv.find('=');
    const std::string key = kv.substr(0, eq);
    std::string known;
    for (const auto& o : declared.options) known += (known.empty() ? "" : ", ") + o;
    if (eq == std::string::npos || !declared.options.count(key))
      throw conf::BadInput("--draw", kv, "must be KEY=VALUE with KEY one of the draw options of this config: " + known);
    if (const std::string why = decimal_at_least_zero(kv.substr(eq + 1)); !why.empty())
      throw conf::BadInput("--draw", key, why);
    c.inputs[key] = std::strtod(kv.substr(eq + 1).c_str(), nullptr);
  }
  conf::Problem drawn = conf::make_problem(c);
  drawn.source = a.config;
  drawn.config_source = a.config;
  (void)conf::validate(drawn);  // the checks `dmref run` makes, before anything is written
  io::File f;
  f.tensors = drawn.tensors;
  io::write(a.out, f);  // complete or not at all
  if (!quiet_rank) std::fprintf(stderr, "dmref: wrote %zu tensors to %s\n", f.tensors.size(), a.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
#if defined(__GLIBC__)
  // The tolerance model evaluates the whole problem 4 x 32 times, allocating the same large
  // tensors each time (x and dX at M = 256, C = 4096 are 32 MiB each). glibc maps every
  // allocation over its threshold afresh and unmaps it on free, and returns a heap's free top
  // past its trim threshold: every sample's tensors were faulted in and zeroed again. A run keeps
  // its freed memory for the next sample instead (docs/performance.md, "Freed memory kept":
  // the backward's CPU, measured). A thread's chunk larger than its heap (64 MiB) is still mapped.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
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
  ver_cmd->add_option("--fixtures", va.gate.fixtures, "fixture directory or file")->required();
  ver_cmd->add_option("--candidate", va.gate.candidate, "candidate outputs (safetensors)")->required();
  ver_cmd->add_option("--dtype", va.gate.verify.dtype, "candidate recipe: f32, bf16, f16, f64 (default f32); also as storage:arithmetic: bf16:f32, f16:f32 "
                      "(the 16-bit recipes: 16-bit inputs, streams and outputs, float32 arithmetic)");
  ver_cmd->add_option("--format", va.format, "text, json or junit")->check(CLI::IsMember({"text", "json", "junit"}));
  ver_cmd->add_option("--errors", va.errors, "failing elements to print (default 20)")->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40));
  // One value per occurrence, split below (CLI11's delimiter dropped empty
  // names and, for a lone ",", took the next argument as the list).
  std::vector<std::string> outputs_text;
  ver_cmd->add_option("--outputs", outputs_text, "judge only these golden tensors (out or output.out, comma-separated; "
                                                 "may be repeated)")
      ->allow_extra_args(false);
  ver_cmd->add_option("--manifest", va.gate.manifest, "check the fixtures' sha256 against this manifest (default: manifest.json "
                                                 "next to the fixtures or one directory up)");
  ver_cmd->add_flag("--no-manifest", va.gate.no_manifest, "do not check the fixtures against a manifest");
  ver_cmd->add_option("--report", va.report, "write DIR/report.md and a picture (SVG) per case of err/tol over token x "
                                             "layer for its worst tensor");
  ver_cmd->add_option("--case", va.gate.verify.case_glob, "only fixture cases matching this glob");
  std::string factor_text;  // parsed below: CLI11 alone reads "" and "0x10"
  auto* fopt = ver_cmd->add_option("--factor", factor_text, "multiple of the per-element error bound allowed (default: the fixture's tolerance.factor, 8)");

  SchemaArgs sa;
  auto* schema_cmd = app.add_subcommand("schema", "a scheme's declared config keys and tensors (dims, roles, how the corpus draws them)");
  schema_cmd->add_option("scheme", sa.scheme, "scheme name, or list")->required();
  schema_cmd->add_option("--config", sa.config, "config JSON: that config's keys, tensors and shapes (default: every documented config)");
  schema_cmd->add_flag("--grad", sa.grad, "with --config: the backward problem (upstream gradients too)");
  schema_cmd->add_option("--format", sa.format, "text, json or markdown")->check(CLI::IsMember({"text", "json", "markdown"}));

  InputsArgs ia;
  auto* inputs_cmd = app.add_subcommand("inputs", "draw inputs and parameters for a config as the corpus does (for dmref run)");
  inputs_cmd->add_option("--scheme", ia.scheme, "scheme name (dmref schema list)")->required();
  inputs_cmd->add_option("--config", ia.config, "config JSON")->required();
  inputs_cmd->add_option("--out", ia.out, "the inputs file to write (safetensors)")->required();
  inputs_cmd->add_option("--seed", ia.seed, "SplitMix64 seed (default 1)");
  inputs_cmd->add_option("--dtype", ia.dtype, "values rounded to f32, bf16 or f16 (default bf16)")->check(CLI::IsMember({"f32", "bf16", "f16"}));
  inputs_cmd->add_flag("--grad", ia.grad, "also the upstream gradients input.grad.* (for dmref run --grad)");
  inputs_cmd->add_option("--draw", ia.draw, "KEY=VALUE: a draw option of the corpus (e_scale, lambda_min, res_scale, ...: "
                                            "dmref schema <s> shows which draw reads it); may be repeated")
      ->allow_extra_args(false);

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
    if (const std::string why = comma_list(text, va.gate.verify.outputs); !why.empty()) {
      std::fprintf(stderr, "dmref: --outputs: %s\n", why.c_str());
      return 2;
    }
  }
  va.gate.verify.factor_set = fopt->count() > 0;
  if (va.gate.verify.factor_set) {
    if (const std::string why = decimal_at_least_zero(factor_text); !why.empty()) {
      std::fprintf(stderr, "dmref: --factor: %s\n", why.c_str());
      return 2;
    }
    va.gate.verify.factor = std::strtod(factor_text.c_str(), nullptr);
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
    if (*schema_cmd) return schema(sa);
    if (*inputs_cmd) return inputs(ia);
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
