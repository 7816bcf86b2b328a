// The stability sweeps' driver (dmref/stability.hpp): the lockstep engine, the
// task runner, the CSV files and the Markdown report.
#include "dmref/dtype.hpp"
#include "dmref/stability.hpp"

#include <mpfr.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace dmref {
namespace stability {

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::fp64: return "float64";
    case Dtype::fp32: return "float32";
    case Dtype::bf16: return "bfloat16";
    case Dtype::fp16: return "float16";
    case Dtype::bf16_store: return "bf16-store";
    case Dtype::fp16_store: return "fp16-store";
  }
  return "?";
}

Sizes sizes(bool quick) {
  Sizes z{};
  if (quick) {
    z.ldm_layers = 500, z.ldm_groups = 2, z.ldm_dk = 16, z.ldm_dv = 16;
    z.preln_layers = 2000, z.preln_d = 64;
    z.attnres_full_layers = 200, z.attnres_block_layers = 500, z.attnres_block_size = 8, z.attnres_d = 32;
    z.mhc_layers = 300, z.mhc_n = 4, z.mhc_C = 32, z.mhc_bank = 8;
  } else {
    z.ldm_layers = 4000, z.ldm_groups = 2, z.ldm_dk = 32, z.ldm_dv = 32;
    z.preln_layers = 10000, z.preln_d = 256;
    z.attnres_full_layers = 1000, z.attnres_block_layers = 4000, z.attnres_block_size = 16, z.attnres_d = 64;
    z.mhc_layers = 2000, z.mhc_n = 4, z.mhc_C = 64, z.mhc_bank = 16;
  }
  return z;
}

std::vector<int> sample_layers(int L, bool dense) {
  std::set<int> s;
  const std::vector<int> mantissas = dense ? std::vector<int>{1, 2, 3, 5, 7} : std::vector<int>{1, 2, 5};
  for (long p = 1; p <= L; p *= 10)
    for (int m : mantissas)
      if (m * p <= L) s.insert(static_cast<int>(m * p - 1));
  if (L > 0) s.insert(L - 1);
  return {s.begin(), s.end()};
}

double rel_err(const Eigen::VectorXd& a, const Eigen::VectorXd& r) {
  if (!a.allFinite()) return std::numeric_limits<double>::infinity();
  if (!r.allFinite() || a.size() != r.size()) return std::numeric_limits<double>::quiet_NaN();
  const double s = std::max(a.size() ? a.cwiseAbs().maxCoeff() : 0.0, r.size() ? r.cwiseAbs().maxCoeff() : 0.0);
  if (s == 0) return 0;
  const double nd = (a / s - r / s).norm(), nr = (r / s).norm();
  return nr == 0 ? nd * s : nd / nr;
}

double Normal::operator()() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = static_cast<double>((rng_.next() >> 11) + 1) * 0x1p-53;  // (0, 1]
  const double u2 = static_cast<double>(rng_.next() >> 11) * 0x1p-53;        // [0, 1)
  const double r = std::sqrt(-2 * std::log(u1)), t = 6.283185307179586 * u2;
  spare_ = r * std::sin(t);
  has_spare_ = true;
  return r * std::cos(t);
}

double on_grid(double x) {
  const double y = round_to(bfloat16, x);
  return std::fabs(y) < 0x1p-14 ? 0.0 : y;
}
double on_f32(double x) { return round_to(float32, x); }

void lockstep(Stepper& ref, std::vector<Candidate>& cands, int L, const MetricFn& metric, std::vector<Result>& out,
              const std::function<void(int)>& after_ref, bool dense) {
  std::vector<char> sampled(std::max(L, 0), 0);
  for (int l : sample_layers(L, dense)) sampled[l] = 1;
  std::vector<Result> res;
  std::vector<char> alive;
  for (auto& c : cands) {
    res.push_back(c.meta);
    res.back().layers = L;
    alive.push_back(c.stepper != nullptr);
    if (!c.stepper) res.back().err_final = std::numeric_limits<double>::quiet_NaN();
  }
  Snap rs, cs;
  for (int l = 0; l < L; ++l) {
    ref.step(l);
    if (after_ref) after_ref(l);
    const bool full = sampled[l];
    ref.snap(rs, full);
    for (std::size_t i = 0; i < cands.size(); ++i) {
      if (!alive[i]) continue;
      Result& r = res[i];
      cands[i].stepper->step(l);
      cands[i].stepper->snap(cs, full);
      const std::vector<double> m = metric(cs, rs, full);
      const double e = m.at(0);
      if (!cs.finite && r.first_nonfinite < 0) r.first_nonfinite = l;
      const bool dead = !std::isfinite(e) && !std::isnan(e);  // +inf: the readout itself is no longer finite
      for (std::size_t t = 0; t < kThresholds.size(); ++t)
        if (r.first_over[t] < 0 && (dead || e > kThresholds[t])) r.first_over[t] = l;
      if (!std::isnan(e)) r.err_max = std::max(r.err_max, e);
      r.err_final = e;
      if (full || dead) r.samples.emplace_back(l, m);
      if (dead) {
        if (r.first_nonfinite < 0) r.first_nonfinite = l;
        alive[i] = 0;  // NaN/inf stays: stop here
        cands[i].stepper.reset();
      }
    }
  }
  for (auto& r : res) out.push_back(std::move(r));
}

}  // namespace stability

namespace {

using namespace stability;

std::string fmt(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}
std::string layer_str(int l) { return l < 0 ? "" : std::to_string(l); }

const std::vector<std::string> kConfigKeys{"keys",    "lambda",      "omega",  "values",   "w",
                                           "variant", "logit_scale", "preset", "max_logit"};

void write_csv(const std::filesystem::path& dir, const std::vector<Result>& rs) {
  std::ofstream o(dir / "runs.csv");
  o << "id,scheme,sweep,form,dtype";
  for (const auto& k : kConfigKeys) o << ',' << k;
  o << ",layers,first_nonfinite,first_over_1e-3,first_over_1e-2,first_over_1e-1,err_final,err_max,ref_check,note\n";
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const Result& r = rs[i];
    o << i << ',' << r.scheme << ',' << r.sweep << ',' << r.form << ',' << r.dtype;
    for (const auto& k : kConfigKeys) {
      const auto it = r.config.find(k);
      o << ',' << (it == r.config.end() ? "" : it->second);
    }
    o << ',' << r.layers << ',' << layer_str(r.first_nonfinite);
    for (int t : r.first_over) o << ',' << layer_str(t);
    std::string note = r.note;
    std::replace(note.begin(), note.end(), ',', ';');
    std::replace(note.begin(), note.end(), '\n', ' ');
    o << ',' << fmt(r.err_final) << ',' << fmt(r.err_max) << ',' << fmt(r.ref_check) << ",\"" << note << "\"\n";
  }
  std::map<std::string, std::ofstream> layer_files;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const Result& r = rs[i];
    auto it = layer_files.find(r.scheme);
    if (it == layer_files.end()) {
      it = layer_files.emplace(r.scheme, std::ofstream(dir / ("layers_" + r.scheme + ".csv"))).first;
      it->second << "id,layer";
      for (const auto& m : r.metrics) it->second << ',' << m;
      it->second << '\n';
    }
    for (const auto& [l, m] : r.samples) {
      it->second << i << ',' << l;
      for (double x : m) it->second << ',' << fmt(x);
      it->second << '\n';
    }
  }
}

std::string cfg(const Result& r, const std::string& k) {
  const auto it = r.config.find(k);
  return it == r.config.end() ? "" : it->second;
}

std::string never_or(int l, int L) { return l < 0 ? "> " + std::to_string(L) : std::to_string(l + 1); }

/// A Markdown pivot table: rows and columns are keys of the selected results,
/// cells `cell(result)`; a missing combination is "-".
void pivot(std::ostream& o, const std::vector<const Result*>& sel, const std::string& corner,
           const std::function<std::string(const Result&)>& row, const std::function<std::string(const Result&)>& col,
           const std::function<std::string(const Result&)>& cell) {
  std::vector<std::string> rows, cols;
  std::map<std::pair<std::string, std::string>, std::string> cells;
  for (const Result* r : sel) {
    const std::string a = row(*r), b = col(*r);
    if (std::find(rows.begin(), rows.end(), a) == rows.end()) rows.push_back(a);
    if (std::find(cols.begin(), cols.end(), b) == cols.end()) cols.push_back(b);
    cells[{a, b}] = cell(*r);
  }
  o << "| " << corner;
  for (const auto& c : cols) o << " | " << c;
  o << " |\n|---";
  for (std::size_t i = 0; i < cols.size(); ++i) o << "|---";
  o << "|\n";
  for (const auto& a : rows) {
    o << "| " << a;
    for (const auto& b : cols) {
      const auto it = cells.find({a, b});
      o << " | " << (it == cells.end() ? "-" : it->second);
    }
    o << " |\n";
  }
  o << '\n';
}

std::vector<const Result*> select(const std::vector<Result>& rs, const std::function<bool(const Result&)>& f) {
  std::vector<const Result*> s;
  for (const auto& r : rs)
    if (f(r)) s.push_back(&r);
  return s;
}

/// First layer over threshold t (1-based), or "> L", with "(NaN at n)" when the run died.
std::string crossing(const Result& r, int t) {
  if (!r.note.empty() && r.samples.empty()) return "n/a";
  std::string s = never_or(r.first_over[t], r.layers);
  if (r.first_nonfinite >= 0) s += " (inf/NaN " + std::to_string(r.first_nonfinite + 1) + ")";
  return s;
}

std::string final_err(const Result& r) {
  if (!r.note.empty() && r.samples.empty()) return "n/a";
  if (r.first_nonfinite >= 0 && !std::isfinite(r.err_final)) return "NaN at " + std::to_string(r.first_nonfinite + 1);
  return fmt(r.err_final);
}

bool is_lowp16(const Result& r) { return r.dtype != "float64" && r.dtype != "float32"; }

void write_report(const std::filesystem::path& dir, const std::vector<Result>& rs, bool quick, const Sizes& z,
                  double seconds, int failed_checks) {
  std::ofstream o(dir / "report.md");
  o << "# dmref stability report (" << (quick ? "quick" : "full") << " sweep)\n\n";
  o << "Generated by `dmref stability" << (quick ? " --quick" : "") << "` in " << fmt(seconds)
    << " s. Relative errors are normwise against the same scheme run at 257 bits on the same inputs; "
       "layers are counted from 1. A crossing column gives the first layer whose readout error exceeds the "
       "threshold (\"> L\": never within the sweep), with the first layer holding an inf or NaN in brackets.\n\n";
  o << "Reference self-check: " << (failed_checks ? std::to_string(failed_checks) + " FAILED" : std::string("passed"))
    << " (LDM: the 257-bit symmetric recursion against the 667-bit information-form closed form, group 0, "
       "required below 1e-20).\n\n";
  // ---------------------------------------------------------------- LDM
  auto ldm = select(rs, [](const Result& r) { return r.scheme == "ldm"; });
  if (!ldm.empty()) {
    o << "## Linear Depth Memory (RLS)\n\n";
    o << "L = " << z.ldm_layers << " layers, G = " << z.ldm_groups << " groups, dk = " << z.ldm_dk
      << ", dv = " << z.ldm_dv << ", alpha = 1. Readout: the memory readout M q.\n\n";
    double worst_ref = 0;
    for (const Result* r : ldm)
      if (std::isfinite(r->ref_check)) worst_ref = std::max(worst_ref, r->ref_check);
    o << "Worst reference self-check difference: " << fmt(worst_ref) << ".\n\n";
    for (const std::string dt : {"float64", "float32", "bfloat16", "float16", "bf16-store", "fp16-store"}) {
      const int t = (dt == "float64" || dt == "float32") ? 0 : 2;
      auto sel = select(rs, [&](const Result& r) {
        return r.scheme == "ldm" && r.sweep == "forms" && r.dtype == dt;
      });
      if (sel.empty()) continue;
      o << "### " << dt << ", random keys: first layer with readout error > " << fmt(kThresholds[t]) << "\n\n";
      pivot(o, sel, "formulation \\ lambda", [](const Result& r) { return r.form; },
            [](const Result& r) { return cfg(r, "lambda"); }, [t](const Result& r) { return crossing(r, t); });
    }
    for (const std::string keys : {"collinear", "rank-deficient"}) {
      auto sel = select(rs, [&](const Result& r) { return r.scheme == "ldm" && r.sweep == "keys" && cfg(r, "keys") == keys; });
      if (sel.empty()) continue;
      o << "### " << keys << " keys: first layer with readout error > 1e-3 (float64/float32) or > 0.1 (16-bit)\n\n";
      pivot(o, sel, "formulation, dtype \\ lambda", [](const Result& r) { return r.form + ", " + r.dtype; },
            [](const Result& r) { return cfg(r, "lambda"); },
            [](const Result& r) { return crossing(r, is_lowp16(r) ? 2 : 0); });
    }
    auto om = select(rs, [](const Result& r) { return r.scheme == "ldm" && (r.sweep == "omega" || (r.sweep == "forms" && cfg(r, "lambda") == "0.9")); });
    if (!om.empty()) {
      o << "### omega spread (random keys, lambda = 0.9): readout error after the last layer\n\n";
      pivot(o, om, "formulation, dtype \\ omega", [](const Result& r) { return r.form + ", " + r.dtype; },
            [](const Result& r) { return cfg(r, "omega"); }, final_err);
    }
  }
  // ---------------------------------------------------------------- side by side
  {
    struct Pick {
      const char* label;
      std::function<bool(const Result&)> f;
    };
    const std::vector<Pick> picks{
        {"PreLN, random v", [](const Result& r) { return r.scheme == "preln" && cfg(r, "values") == "random"; }},
        {"PreLN, correlated v", [](const Result& r) { return r.scheme == "preln" && cfg(r, "values") == "correlated"; }},
        {"AttnRes full, logit sd 3", [](const Result& r) { return r.scheme == "attnres" && cfg(r, "variant") == "full" && cfg(r, "w") == "3"; }},
        {"AttnRes block, logit sd 3", [](const Result& r) { return r.scheme == "attnres" && cfg(r, "variant") == "block" && cfg(r, "w") == "3"; }},
        {"mHC paper, logit scale 4", [](const Result& r) { return r.scheme == "mhc" && cfg(r, "preset") == "paper" && cfg(r, "logit_scale") == "4"; }},
        {"LDM symmetric, lambda 0.9", [](const Result& r) { return r.scheme == "ldm" && r.sweep == "forms" && r.form == "symmetric" && cfg(r, "lambda") == "0.9"; }},
        {"LDM Potter, lambda 0.9", [](const Result& r) { return r.scheme == "ldm" && r.sweep == "forms" && r.form == "potter" && cfg(r, "lambda") == "0.9"; }},
    };
    auto at = [](const Result& r, int layer) {  // readout error at a sampled layer (1-based), or "-"
      for (const auto& [l, m] : r.samples)
        if (l == layer - 1) return fmt(m[0]);
      return std::string("-");
    };
    std::vector<const Result*> sel;
    std::map<const Result*, std::string> label;
    for (const auto& p : picks)
      for (const auto& r : rs)
        if (p.f(r) && r.dtype != "float64") {
          sel.push_back(&r);
          label[&r] = p.label;
        }
    if (!sel.empty()) {
      o << "## The schemes side by side\n\nReadout error after 100 / 1000 layers / the last layer (each scheme's "
           "own depth, see its section).\n\n";
      pivot(o, sel, "scheme \\ dtype", [&](const Result& r) { return label[&r]; }, [](const Result& r) { return r.dtype; },
            [&](const Result& r) { return at(r, 100) + " / " + at(r, 1000) + " / " + final_err(r); });
    }
  }
  // ---------------------------------------------------------------- others
  struct Section {
    const char* scheme;
    const char* title;
    std::string sizes;
    const char* colkey;
  };
  const std::vector<Section> secs{
      {"preln", "PreLN", "d = " + std::to_string(z.preln_d) + ", L = " + std::to_string(z.preln_layers), "values"},
      {"attnres", "Attention Residuals",
       "d = " + std::to_string(z.attnres_d) + ", full: L = " + std::to_string(z.attnres_full_layers) +
           ", block: L = " + std::to_string(z.attnres_block_layers) + " with S = " + std::to_string(z.attnres_block_size),
       "w"},
      {"mhc", "mHC",
       "n = " + std::to_string(z.mhc_n) + ", C = " + std::to_string(z.mhc_C) + ", L = " + std::to_string(z.mhc_layers) +
           ", " + std::to_string(z.mhc_bank) + " parameter sets used cyclically, 20 Sinkhorn rounds",
       "logit_scale"},
  };
  for (const auto& s : secs) {
    auto sel = select(rs, [&](const Result& r) { return r.scheme == s.scheme; });
    if (sel.empty()) continue;
    o << "## " << s.title << "\n\n" << s.sizes << ". Readout: the layer input h.\n\n";
    o << "### Readout error after the last layer\n\n";
    pivot(o, sel, "variant, dtype", [](const Result& r) { return r.form + ", " + r.dtype; },
          [&](const Result& r) { return cfg(r, s.colkey) + (cfg(r, "preset").empty() ? "" : " " + cfg(r, "preset")); },
          final_err);
    o << "### First layer with readout error > 1e-3 (float32) or > 0.1 (16-bit)\n\n";
    pivot(o, sel, "variant, dtype", [](const Result& r) { return r.form + ", " + r.dtype; },
          [&](const Result& r) { return cfg(r, s.colkey) + (cfg(r, "preset").empty() ? "" : " " + cfg(r, "preset")); },
          [](const Result& r) { return crossing(r, is_lowp16(r) ? 2 : 0); });
    for (const Result* r : sel)
      if (!r->note.empty()) o << "- " << r->form << ", " << r->dtype << ", " << s.colkey << " " << cfg(*r, s.colkey) << ": " << r->note << "\n";
    o << '\n';
  }
}

}  // namespace

int run_stability(bool quick, const std::string& out_dir) {
  StabilityOptions o;
  o.quick = quick;
  o.out_dir = out_dir;
  o.log = &std::cerr;
  return run_stability(o);
}

int run_stability(const StabilityOptions& opt) {
  namespace fs = std::filesystem;
  if (opt.out_dir.empty()) throw std::invalid_argument("stability: out_dir: must not be empty");
  if (!opt.only.empty() && opt.only != "ldm" && opt.only != "preln" && opt.only != "attnres" && opt.only != "mhc")
    throw std::invalid_argument("stability: only: '" + opt.only + "' is not one of ldm, preln, attnres, mhc");
  const auto t0 = std::chrono::steady_clock::now();
  const Sizes z = sizes(opt.quick);
  std::vector<std::pair<std::string, Task>> tasks;
  auto add = [&](const std::string& name, std::vector<Task> ts) {
    if (!opt.only.empty() && opt.only != name) return;
    for (auto& t : ts) tasks.emplace_back(name, std::move(t));
  };
  add("ldm", ldm_tasks(z));
  add("preln", preln_tasks(z));
  add("attnres", attnres_tasks(z));
  add("mhc", mhc_tasks(z));
  fs::create_directories(opt.out_dir);

  std::vector<std::vector<Result>> slots(tasks.size());
  std::atomic<std::size_t> next{0};
  std::mutex log_mutex;
  std::exception_ptr error;
  auto worker = [&] {
    for (std::size_t i; (i = next++) < tasks.size();) {
      const auto s = std::chrono::steady_clock::now();
      try {
        slots[i] = tasks[i].second();
      } catch (...) {
        std::lock_guard<std::mutex> g(log_mutex);
        if (!error) error = std::current_exception();
        return;
      }
      if (opt.log) {
        std::lock_guard<std::mutex> g(log_mutex);
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
        const Result& r0 = slots[i].front();
        std::string c;
        for (const auto& [k, v] : r0.config) c += " " + k + "=" + v;
        *opt.log << "stability: [" << (i + 1) << "/" << tasks.size() << "] " << r0.scheme << " " << r0.sweep << c << ": "
                 << slots[i].size() << " runs, " << fmt(sec) << " s" << std::endl;
      }
    }
  };
  const unsigned jobs = std::max(1u, std::min<unsigned>(opt.jobs, static_cast<unsigned>(tasks.size())));
  std::vector<std::thread> pool;
  for (unsigned j = 1; j < jobs; ++j)
    pool.emplace_back([&] {
      worker();
      // MPFR's per-thread caches (constants used by exp, log) are freed only by their thread.
      mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE);
    });
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);

  int failed = 0;  // configurations whose reference failed its self-check (set on every run of the configuration)
  for (const auto& s : slots)
    if (!s.empty() && s.front().scheme == "ldm" && !(s.front().ref_check <= 1e-20)) ++failed;
  std::vector<Result> all;
  for (auto& s : slots)
    for (auto& r : s) all.push_back(std::move(r));
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_csv(opt.out_dir, all);
  write_report(opt.out_dir, all, opt.quick, z, sec, failed);
  if (opt.log)
    *opt.log << "stability: " << all.size() << " runs in " << fmt(sec) << " s; wrote " << opt.out_dir
             << "/{runs.csv,layers_*.csv,report.md}" << std::endl;
  return failed ? 1 : 0;
}

}  // namespace dmref
