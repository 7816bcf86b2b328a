// The stability sweeps' driver (dmref/stability.hpp): the lockstep engine, the
// task runner, the CSV files and the Markdown report.
#include "dmref/dtype.hpp"
#include "dmref/stability.hpp"
#include "dmref/thread_pool.hpp"

#include <algorithm>
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

namespace dmref {
namespace stability {

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::fp64: return "float64";
    case Dtype::fp32: return "float32";
    case Dtype::bf16: return "bfloat16";
    case Dtype::fp16: return "float16";
    case Dtype::bf16_store: return "bf16:f32";
    case Dtype::fp16_store: return "f16:f32";
    case Dtype::bf16_x: return "bf16:f32/x";
    case Dtype::bf16_M: return "bf16:f32/M";
    case Dtype::bf16_P: return "bf16:f32/P";
    case Dtype::bf16_S: return "bf16:f32/S";
  }
  return "?";
}

Sizes sizes(bool quick) {
  Sizes z{};
  // The quick sweep has the full sweep's configurations (LDM: dk = dv = 32,
  // G = 2, the same lambdas, forms and dtypes) at smaller depth, one draw.
  if (quick) {
    z.ldm_layers = 150, z.ldm_groups = 2, z.ldm_dk = 32, z.ldm_dv = 32;
    z.preln_layers = 2000, z.preln_d = 256;
    z.attnres_full_layers = 200, z.attnres_block_layers = 500, z.attnres_block_size = 16, z.attnres_d = 64;
    z.mhc_layers = 200, z.mhc_n = 4, z.mhc_C = 64, z.mhc_bank = 16;
    z.seeds = 1, z.scale_layers = 40, z.grad_depth = 16;
  } else {
    z.ldm_layers = 1000, z.ldm_groups = 2, z.ldm_dk = 32, z.ldm_dv = 32;
    z.preln_layers = 10000, z.preln_d = 256;
    z.attnres_full_layers = 1000, z.attnres_block_layers = 4000, z.attnres_block_size = 16, z.attnres_d = 64;
    z.mhc_layers = 2000, z.mhc_n = 4, z.mhc_C = 64, z.mhc_bank = 16;
    z.seeds = 5, z.scale_layers = 300, z.grad_depth = 512;
  }
  return z;
}

std::vector<int> sample_layers(int L, bool dense) {
  std::set<int> s;
  if (dense) {
    for (int l = 1; l <= std::min(L, 20); ++l) s.insert(l - 1);
    for (int i = 20;; ++i) {
      const long n = std::lround(std::pow(10.0, i / 20.0));
      if (n > L) break;
      s.insert(static_cast<int>(n - 1));
    }
  } else {
    for (long p = 1; p <= L; p *= 10)
      for (int m : {1, 2, 5})
        if (m * p <= L) s.insert(static_cast<int>(m * p - 1));
  }
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

double quantile(std::vector<double> xs, double q) {
  xs.erase(std::remove_if(xs.begin(), xs.end(), [](double x) { return std::isnan(x); }), xs.end());
  if (xs.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(xs.begin(), xs.end());
  const double h = q * static_cast<double>(xs.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(std::floor(h)), hi = std::min(lo + 1, xs.size() - 1);
  const double f = h - static_cast<double>(lo);
  if (f == 0 || xs[lo] == xs[hi]) return xs[lo];
  if (std::isinf(xs[hi])) return xs[hi];
  return xs[lo] + f * (xs[hi] - xs[lo]);
}

void lockstep(Stepper& ref, std::vector<Candidate>& cands, int L, const MetricFn& metric, std::vector<Result>& out,
              const std::function<void(int)>& after_ref, bool dense) {
  std::vector<char> sampled(std::max(L, 0), 0);
  for (int l : sample_layers(L, dense)) sampled[l] = 1;
  std::vector<Result> res;
  std::vector<char> alive;
  for (auto& c : cands) {
    res.push_back(c.meta);
    res.back().layers = L;
    res.back().first_alarm.assign(c.meta.alarms.size(), -1);
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
      for (std::size_t a = 0; a < r.first_alarm.size() && a < cs.alarms.size(); ++a)
        if (cs.alarms[a] && r.first_alarm[a] < 0) r.first_alarm[a] = l;
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
// Layers are 0-based inside, counted from 1 in every file.
std::string layer_str(int l) { return l < 0 ? "" : std::to_string(l + 1); }

const std::vector<std::string> kConfigKeys{"keys",    "lambda",      "omega",  "G",         "dk",  "values", "w",
                                           "variant", "logit_scale", "preset", "max_logit", "seed"};

template <class Rs>
std::vector<std::string> alarm_names(const Rs& rs) {
  std::vector<std::string> n;
  auto of = [](const auto& r) -> const Result& {
    if constexpr (std::is_pointer_v<std::decay_t<decltype(r)>>) return *r;
    else return r;
  };
  for (const auto& r : rs)
    for (const auto& a : of(r).alarms)
      if (std::find(n.begin(), n.end(), a) == n.end()) n.push_back(a);
  return n;
}

/// First layer (0-based) detector `name` fired in r, -1 if never or not a detector of r.
int alarm_at(const Result& r, const std::string& name) {
  for (std::size_t i = 0; i < r.alarms.size() && i < r.first_alarm.size(); ++i)
    if (r.alarms[i] == name) return r.first_alarm[i];
  return -1;
}

void write_csv(const std::filesystem::path& dir, const std::vector<Result>& rs) {
  std::ofstream o(dir / "runs.csv");
  const auto alarms = alarm_names(rs);
  o << "id,scheme,sweep,form,dtype";
  for (const auto& k : kConfigKeys) o << ',' << k;
  o << ",layers,first_nonfinite,first_over_1e-3,first_over_1e-2,first_over_1e-1";
  for (const auto& a : alarms) o << ",alarm_" << a;
  o << ",err_final,err_max,ref_check,note\n";
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const Result& r = rs[i];
    o << i << ',' << r.scheme << ',' << r.sweep << ',' << r.form << ',' << r.dtype;
    for (const auto& k : kConfigKeys) {
      const auto it = r.config.find(k);
      o << ',' << (it == r.config.end() ? "" : it->second);
    }
    o << ',' << r.layers << ',' << layer_str(r.first_nonfinite);
    for (int t : r.first_over) o << ',' << layer_str(t);
    for (const auto& a : alarms) o << ',' << layer_str(alarm_at(r, a));
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
    if (r.metrics != std::find_if(rs.begin(), rs.end(), [&](const Result& x) { return x.scheme == r.scheme; })->metrics)
      throw std::logic_error("stability: runs of scheme " + r.scheme + " have different metrics (one layers file)");
    for (const auto& [l, m] : r.samples) {
      it->second << i << ',' << (l + 1);
      for (double x : m) it->second << ',' << fmt(x);
      it->second << '\n';
    }
  }
}

std::string cfg(const Result& r, const std::string& k) {
  const auto it = r.config.find(k);
  return it == r.config.end() ? "" : it->second;
}

using Runs = std::vector<const Result*>;
using Cell = std::function<std::string(const Runs&)>;

/// A Markdown pivot table: rows and columns are keys of the selected results;
/// a cell gets every result with its row and column (the draws of one
/// configuration: statistics over seeds); a missing combination is "-".
void pivot(std::ostream& o, const Runs& sel, const std::string& corner,
           const std::function<std::string(const Result&)>& row, const std::function<std::string(const Result&)>& col,
           const Cell& cell) {
  std::vector<std::string> rows, cols;
  std::map<std::pair<std::string, std::string>, Runs> cells;
  for (const Result* r : sel) {
    const std::string a = row(*r), b = col(*r);
    if (std::find(rows.begin(), rows.end(), a) == rows.end()) rows.push_back(a);
    if (std::find(cols.begin(), cols.end(), b) == cols.end()) cols.push_back(b);
    cells[{a, b}].push_back(r);
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
      o << " | " << (it == cells.end() ? "-" : cell(it->second));
    }
    o << " |\n";
  }
  o << '\n';
}

Runs select(const std::vector<Result>& rs, const std::function<bool(const Result&)>& f) {
  Runs s;
  for (const auto& r : rs)
    if (f(r)) s.push_back(&r);
  return s;
}

bool ran(const Result& r) { return !(r.note.rfind("rejected", 0) == 0 && r.samples.empty()); }

/// "median [10th, 90th percentile]" of xs (just the value for one draw).
std::string spread(const std::vector<double>& xs, const std::function<std::string(double)>& f) {
  if (xs.empty()) return "n/a";
  if (xs.size() == 1) return f(xs[0]);
  return f(quantile(xs, 0.5)) + " [" + f(quantile(xs, 0.1)) + ", " + f(quantile(xs, 0.9)) + "]";
}

/// First layer over threshold t (from 1; "> L": never), over the draws, with
/// the number of draws that held an inf or NaN.
std::string crossing(const Runs& rs, int t) {
  std::vector<double> xs;
  int dead = 0, L = 0;
  for (const Result* r : rs) {
    if (!ran(*r)) continue;
    L = r->layers;
    xs.push_back(r->first_over[t] < 0 ? std::numeric_limits<double>::infinity() : r->first_over[t] + 1.0);
    dead += r->first_nonfinite >= 0;
  }
  if (xs.empty()) return "n/a";
  std::string s = spread(xs, [L](double x) { return std::isinf(x) ? "> " + std::to_string(L) : fmt(std::round(x)); });
  if (dead) s += " (inf/NaN in " + std::to_string(dead) + "/" + std::to_string(xs.size()) + ")";
  return s;
}

/// Readout error after the last layer over the draws (inf: the run died).
std::string final_err(const Runs& rs) {
  std::vector<double> xs;
  for (const Result* r : rs)
    if (ran(*r)) xs.push_back(r->first_nonfinite >= 0 && !std::isfinite(r->err_final) ? std::numeric_limits<double>::infinity()
                                                                                       : r->err_final);
  return spread(xs, fmt);
}

/// Metric m at the sampled layer `layer` (from 1; 0: the last), over the draws.
std::string metric_at(const Runs& rs, std::size_t m, int layer) {
  std::vector<double> xs;
  for (const Result* r : rs) {
    if (!ran(*r)) continue;
    const int want = layer > 0 ? layer - 1 : r->layers - 1;
    bool found = false;
    for (const auto& [l, v] : r->samples)
      if (l == want && m < v.size()) xs.push_back(v[m]), found = true;
    if (!found && r->first_nonfinite >= 0 && r->first_nonfinite <= want) xs.push_back(std::numeric_limits<double>::infinity());
  }
  return xs.empty() ? "-" : spread(xs, fmt);
}

bool is_lowp16(const Result& r) { return r.dtype != "float64" && r.dtype != "float32"; }
int threshold_of(const Result& r) { return is_lowp16(r) ? 2 : 0; }

/// Detector `name` over the draws that crossed their threshold: the lead
/// (crossing layer - firing layer) of those where it fired no later, "k/n
/// ahead", and its false alarms (fired in a draw that never crossed).
std::string lead(const Runs& rs, const std::string& name) {
  std::vector<double> leads;
  int crossed = 0, quiet = 0, false_alarms = 0;
  for (const Result* r : rs) {
    if (!ran(*r)) continue;
    const int c = r->first_over[threshold_of(*r)], a = alarm_at(*r, name);
    if (c < 0) {
      ++quiet;
      false_alarms += a >= 0;
      continue;
    }
    ++crossed;
    if (a >= 0 && a <= c) leads.push_back(c - a);
  }
  std::string s;
  if (crossed) s = (leads.empty() ? std::string("never ahead") : spread(leads, [](double x) { return fmt(std::round(x)); })) +
                   " (" + std::to_string(leads.size()) + "/" + std::to_string(crossed) + " ahead)";
  if (quiet) s += (s.empty() ? "" : "; ") + std::to_string(false_alarms) + "/" + std::to_string(quiet) + " false";
  return s;
}

/// Least squares y = a + b x; returns {a, b, max |residual|}.
std::array<double, 3> fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
  const double b = (n * sxy - sx * sy) / (n * sxx - sx * sx), a = (sy - b * sx) / n;
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(y[i] - a - b * x[i]));
  return {a, b, worst};
}

std::string lambda_col(const Result& r) { return "lambda = " + cfg(r, "lambda"); }
std::string form_dtype(const Result& r) { return r.form + ", " + r.dtype; }

/// The report's closing section: per scheme, what to do, each with the cells
/// of this run that back it and the figure (scripts/plot_stability.py) that
/// shows them; a recommendation whose runs are not in this sweep is left out.
void write_recommendations(std::ostream& o, const std::vector<Result>& rs, const Sizes& z) {
  using Pred = std::function<bool(const Result&)>;
  auto has = [&](const Pred& f) { return !select(rs, f).empty(); };
  auto at = [&](const Pred& f, const Cell& c) {
    const Runs g = select(rs, f);
    return g.empty() ? std::string("n/a") : c(g);
  };
  auto ldm = [](std::string sweep, std::string form, std::string dt, std::string lam, std::string keys = "random") -> Pred {
    return [=](const Result& r) {
      return r.scheme == "ldm" && r.sweep == sweep && r.form == form && r.dtype == dt && cfg(r, "lambda") == lam &&
             cfg(r, "keys") == keys;
    };
  };
  auto cross = [](int t) { return [t](const Runs& g) { return crossing(g, t); }; };
  std::ostringstream b;
  if (has(ldm("forms", "symmetric", "float32", "0.5"))) {
    b << "- **LDM (RLS): use a factor form updated by rotations or Bierman's update (inverse QR-RLS, QR-RLS, U-D).** "
         "float32, lambda 0.5, random keys, error after layer "
      << z.ldm_layers << ": inverse QR " << at(ldm("forms", "inverse-qr", "float32", "0.5"), final_err) << ", QR "
      << at(ldm("forms", "qr", "float32", "0.5"), final_err) << ", U-D " << at(ldm("forms", "ud", "float32", "0.5"), final_err)
      << "; the symmetric form passes 1e-3 at layer " << at(ldm("forms", "symmetric", "float32", "0.5"), cross(0))
      << ", Potter at " << at(ldm("forms", "potter", "float32", "0.5"), cross(0))
      << ". Figure `ldm_forms_32.png`; section *Linear Depth Memory*.\n";
    b << "- **LDM: keep P (or its factor) in float32; M may be bfloat16.** lambda 0.9, error after the last layer: M "
         "alone in bfloat16 (`bf16:f32/M`) symmetric "
      << at(ldm("forms", "symmetric", "bf16:f32/M", "0.9"), final_err) << ", U-D "
      << at(ldm("forms", "ud", "bf16:f32/M", "0.9"), final_err) << "; P alone in bfloat16 (`bf16:f32/P`) symmetric "
      << at(ldm("forms", "symmetric", "bf16:f32/P", "0.9"), final_err) << ", U-D "
      << at(ldm("forms", "ud", "bf16:f32/P", "0.9"), final_err) << ". Figure `ldm_storage.png`.\n";
    b << "- **LDM: never the naive update, no pure bfloat16 RLS step.** The naive update in float64 at lambda 0.5 "
         "passes 1e-3 at layer "
      << at(ldm("forms", "naive", "float64", "0.5"), cross(0)) << "; pure bfloat16 at lambda 0.9 ends at "
      << at(ldm("forms", "symmetric", "bfloat16", "0.9"), final_err) << " (symmetric), "
      << at(ldm("forms", "ud", "bfloat16", "0.9"), final_err) << " (U-D). Figures `ldm_forms_32.png`, `ldm_forms_16.png`.\n";
  }
  if (has(ldm("remedies", "symmetric", "float32", "0.7"))) {
    b << "- **LDM: a remedy is no substitute for a factor form.** Error against exact RLS after the last layer, "
         "float32, lambda 0.7: symmetric "
      << at(ldm("remedies", "symmetric", "float32", "0.7"), final_err) << ", +reset "
      << at(ldm("remedies", "symmetric+reset", "float32", "0.7"), final_err) << ", +trace-cap "
      << at(ldm("remedies", "symmetric+trace-cap", "float32", "0.7"), final_err) << ", +leakage "
      << at(ldm("remedies", "symmetric+leakage", "float32", "0.7"), final_err) << ", +directional "
      << at(ldm("remedies", "symmetric+directional", "float32", "0.7"), final_err) << "; inverse QR "
      << at(ldm("remedies", "inverse-qr", "float32", "0.7"), final_err)
      << ". Under wind-up (rank-deficient keys, lambda 0.9): symmetric "
      << at(ldm("remedies", "symmetric", "float32", "0.9", "rank-deficient"), final_err) << ", +directional "
      << at(ldm("remedies", "symmetric+directional", "float32", "0.9", "rank-deficient"), final_err) << ", inverse QR "
      << at(ldm("remedies", "inverse-qr", "float32", "0.9", "rank-deficient"), final_err)
      << ". Figure `ldm_remedies.png`.\n";
  }
  auto attn = [](std::string variant, std::string w, std::string dt) -> Pred {
    return [=](const Result& r) { return r.scheme == "attnres" && cfg(r, "variant") == variant && cfg(r, "w") == w && r.dtype == dt; };
  };
  if (has(attn("full", "0", "bfloat16"))) {
    b << "- **AttnRes: accumulate the softmax denominator and the weighted sum in float32.** Full AttnRes, uniform "
         "weights (w = 0), after layer "
      << z.attnres_full_layers << ": bfloat16 " << at(attn("full", "0", "bfloat16"), final_err)
      << " (passes 10% at layer " << at(attn("full", "0", "bfloat16"), cross(2)) << "), float16 "
      << at(attn("full", "0", "float16"), final_err) << ", float32 " << at(attn("full", "0", "float32"), final_err)
      << ". Block AttnRes with the block sums stored in bfloat16 (`bf16:f32`, w = 0): "
      << at(attn("block", "0", "bf16:f32"), final_err)
      << ". Storing only the statistics one kernel hands the next in bfloat16 (the two-phase algorithm's max, "
         "denominator and normalised partial output: `bf16:f32/S`, w = 0) costs full "
      << at(attn("full", "0", "bf16:f32/S"), final_err) << ", block " << at(attn("block", "0", "bf16:f32/S"), final_err)
      << ": store the statistics in 16 bits if you must, never accumulate in them. Figure `attnres.png`.\n";
  }
  auto mhc = [](std::string sc, std::string dt) -> Pred {
    return [=](const Result& r) { return r.scheme == "mhc" && cfg(r, "preset") == "paper" && cfg(r, "logit_scale") == sc && r.dtype == dt; };
  };
  if (has(mhc("1", "bfloat16"))) {
    b << "- **mHC: coefficients and Sinkhorn in float32, streams may be stored in 16 bits.** Paper preset, logit "
         "scale 1, after layer "
      << z.mhc_layers << ": pure bfloat16 " << at(mhc("1", "bfloat16"), final_err) << ", bf16:f32 "
      << at(mhc("1", "bf16:f32"), final_err) << ", f16:f32 " << at(mhc("1", "f16:f32"), final_err) << ", float32 "
      << at(mhc("1", "float32"), final_err) << "; only the coefficients H_pre, H_post, H_res in bfloat16 "
      << "(`bf16:f32/M`) " << at(mhc("1", "bf16:f32/M"), final_err)
      << "; only the logits in bfloat16, as a kernel that stores its projection's output before the sigmoids and "
         "Sinkhorn (`bf16:f32/S`) "
      << at(mhc("1", "bf16:f32/S"), final_err)
      << ". Figure `mhc.png` (and `sinkhorn.png` from `--only sinkhorn`).\n";
  }
  auto preln = [](std::string values, std::string dt) -> Pred {
    return [=](const Result& r) { return r.scheme == "preln" && cfg(r, "values") == values && r.dtype == dt; };
  };
  if (has(preln("correlated", "bfloat16"))) {
    b << "- **PreLN: keep the residual stream in float32 for deep stacks.** Correlated layer outputs, bfloat16 passes "
         "10% at layer "
      << at(preln("correlated", "bfloat16"), cross(2)) << " and ends at " << at(preln("correlated", "bfloat16"), final_err)
      << " after layer " << z.preln_layers << " (independent outputs: " << at(preln("random", "bfloat16"), final_err)
      << "; float16 " << at(preln("correlated", "float16"), final_err) << "; float32 "
      << at(preln("correlated", "float32"), final_err) << "). Figure `preln.png`.\n";
  }
  auto grad = [](std::string form, std::string dt) -> Pred {
    return [=](const Result& r) { return r.scheme == "gradients" && r.form == form && r.dtype == dt; };
  };
  if (has(grad("preln", "float32"))) {
    const int L = z.grad_depth;
    b << "- **Gradients: a float32 backward stays accurate over depth; with 16-bit stored streams its error grows "
         "with depth, as the forward's does.** Input-gradient error at L = "
      << L << ", float32 / bf16:f32:";
    for (const char* f : {"ldm/symmetric", "mhc/deepseek-v4", "hc/dynamic", "attnres/full", "attnres/block", "denseformer",
                          "preln"})
      b << " " << f << " " << at(grad(f, "float32"), [L](const Runs& g) { return metric_at(g, 0, L); }) << " / "
        << at(grad(f, "bf16:f32"), [L](const Runs& g) { return metric_at(g, 0, L); }) << ";";
    // The reference's own error: the largest median of the f64 recipe's model at L over the schemes.
    double worst = 0;
    std::string worst_form;
    for (const Result* r : select(rs, [](const Result& r) { return r.scheme == "gradients" && r.dtype == "float64 (model)"; })) {
      std::vector<double> xs;
      for (const Result* q : select(rs, [&](const Result& x) { return x.scheme == "gradients" && x.dtype == r->dtype && x.form == r->form; }))
        for (const auto& [l, v] : q->samples)
          if (l == L - 1) xs.push_back(v[0]);
      const double m = quantile(xs, 0.5);
      if (m > worst) worst = m, worst_form = r->form;
    }
    b << " the float64 reference's own error (the f64 recipe's model) is at most " << fmt(worst) << " (median, "
      << worst_form << "), far below what it judges. Figure `gradients.png`; section *Gradients over depth*.\n";
  }
  if (b.str().empty()) return;
  o << "## Recommendations\n\nWhat to do, per scheme, with the cells of this run behind each (median [10th, 90th "
       "percentile] over the draws) and the figure that shows them (`python3 scripts/plot_stability.py DIR`).\n\n"
    << b.str() << '\n';
}

void write_report(const std::filesystem::path& dir, const std::vector<Result>& rs, bool quick, const Sizes& z,
                  double seconds, int failed_checks) {
  std::ofstream o(dir / "report.md");
  o << "# dmref stability report (" << (quick ? "quick" : "full") << " sweep)\n\n";
  o << "Generated by `dmref stability" << (quick ? " --quick" : "") << "` in " << fmt(seconds)
    << " s (wall clock, all jobs). Relative errors are normwise against the same scheme run at 257 bits on the "
       "same inputs; layers are counted from 1. Every configuration is drawn "
    << z.seeds << (z.seeds == 1 ? " time" : " times (independent inputs: tokens)")
    << "; a cell with several draws gives the median and, in brackets, the 10th and 90th percentiles "
       "(linear interpolation). A crossing cell gives the first layer whose readout error exceeds the "
       "threshold (\"> L\": never within the sweep) and how many draws held an inf or NaN.\n\n";
  o << "Reference self-check: " << (failed_checks ? std::to_string(failed_checks) + " FAILED" : std::string("passed"))
    << " (LDM: the 257-bit symmetric recursion against the 667-bit information-form closed form, group 0, "
       "required below 1e-20).\n\n";
  o << "Dtypes: `float64`, `float32` native; `bfloat16`, `float16` every operation rounded; `bf16:f32` and `f16:f32` "
       "float32 arithmetic with every state stored in the 16-bit format between layers; `bf16:f32/x`, `/M`, `/P` "
       "the same with only the residual stream (x, q), only the memory (M; the closed form's B, QR's Z), only P or "
       "its factor stored in bfloat16; `bf16:f32/S` float32 streams with only the statistics one kernel hands the next "
       "stored in bfloat16 (AttnRes: the two-phase algorithm's max, denominator and partial output; mHC: the "
       "logits before the sigmoids and Sinkhorn).\n\n";
  // ---------------------------------------------------------------- LDM
  auto ldm = select(rs, [](const Result& r) { return r.scheme == "ldm"; });
  if (!ldm.empty()) {
    o << "## Linear Depth Memory (RLS)\n\n";
    o << "L = " << z.ldm_layers << " layers, G = " << z.ldm_groups << " groups, dk = " << z.ldm_dk
      << ", dv = " << z.ldm_dv << ", alpha = 1, omega = 10^U(-1, 1) unless said otherwise. Readout: the memory "
         "readout M q.\n\n";
    double worst_ref = 0;
    for (const Result* r : ldm)
      if (std::isfinite(r->ref_check)) worst_ref = std::max(worst_ref, r->ref_check);
    o << "Worst reference self-check difference: " << fmt(worst_ref) << ".\n\n";
    for (const std::string dt : {"float64", "float32", "bfloat16", "float16", "bf16:f32", "f16:f32", "bf16:f32/x",
                                 "bf16:f32/M", "bf16:f32/P"}) {
      auto sel = select(rs, [&](const Result& r) { return r.scheme == "ldm" && r.sweep == "forms" && r.dtype == dt; });
      if (sel.empty()) continue;
      const int t = threshold_of(*sel.front());
      o << "### " << dt << ", random keys\n\nFirst layer with readout error > " << fmt(kThresholds[t]) << ":\n\n";
      pivot(o, sel, "formulation", [](const Result& r) { return r.form; }, lambda_col,
            [t](const Runs& g) { return crossing(g, t); });
      o << "Readout error after layer " << z.ldm_layers << ":\n\n";
      pivot(o, sel, "formulation", [](const Result& r) { return r.form; }, lambda_col, final_err);
    }
    for (const std::string keys : {"collinear", "rank-deficient"}) {
      auto sel = select(rs, [&](const Result& r) { return r.scheme == "ldm" && r.sweep == "keys" && cfg(r, "keys") == keys; });
      if (sel.empty()) continue;
      o << "### " << keys << " keys\n\nFirst layer with readout error > 1e-3 (float32) or > 0.1 (16-bit):\n\n";
      pivot(o, sel, "formulation, dtype", form_dtype, lambda_col,
            [](const Runs& g) { return crossing(g, threshold_of(*g.front())); });
      o << "First layer holding an inf or NaN:\n\n";
      pivot(o, sel, "formulation, dtype", form_dtype, lambda_col, [](const Runs& g) {
        std::vector<double> xs;
        for (const Result* r : g) xs.push_back(r->first_nonfinite < 0 ? std::numeric_limits<double>::infinity() : r->first_nonfinite + 1.0);
        const int L = g.front()->layers;
        return spread(xs, [L](double x) { return std::isinf(x) ? "> " + std::to_string(L) : fmt(std::round(x)); });
      });
      o << "Readout error after the last layer:\n\n";
      pivot(o, sel, "formulation, dtype", form_dtype, lambda_col, final_err);
    }
    auto om = select(rs, [](const Result& r) {
      return r.scheme == "ldm" && (r.sweep == "omega" || (r.sweep == "forms" && cfg(r, "lambda") == "0.9" &&
                                                          (r.dtype == "float32" || r.dtype == "bf16:f32")));
    });
    if (!om.empty()) {
      o << "### omega spread (random keys, lambda = 0.9): readout error after the last layer\n\n"
           "omega = 10^U(-s, s); s = 0 is omega = 1.\n\n";
      pivot(o, om, "formulation, dtype", form_dtype, [](const Result& r) { return "s = " + cfg(r, "omega"); }, final_err);
    }
    auto sc = select(rs, [](const Result& r) { return r.scheme == "ldm" && r.sweep == "scale"; });
    if (!sc.empty()) {
      o << "### Scale: the paper's G = 16, dk = 4 and one group of dk = 64, 128 (L = " << z.scale_layers
        << ", dv = dk)\n\nFirst layer with readout error > 1e-3 (float32) or > 0.1 (16-bit):\n\n";
      auto col = [](const Result& r) { return "G = " + cfg(r, "G") + ", dk = " + cfg(r, "dk") + ", lambda = " + cfg(r, "lambda"); };
      pivot(o, sc, "formulation, dtype", form_dtype, col, [](const Runs& g) { return crossing(g, threshold_of(*g.front())); });
      o << "Readout error after the last layer:\n\n";
      pivot(o, sc, "formulation, dtype", form_dtype, col, final_err);
    }
    auto cd = select(rs, [](const Result& r) { return r.scheme == "ldm" && r.sweep == "cond"; });
    if (!cd.empty()) {
      o << "### Conditioning: cond(P) of the exact P after layer " << z.scale_layers
        << " (random unit keys, one group)\n\n";
      const std::size_t m = std::find(ldm.front()->metrics.begin(), ldm.front()->metrics.end(), "cond_P_ref") -
                            ldm.front()->metrics.begin();
      pivot(o, cd, "dk", [](const Result& r) { return cfg(r, "dk"); }, lambda_col,
            [m](const Runs& g) { return metric_at(g, m, 0); });
      std::vector<double> x, y;
      for (const Result* r : cd)
        for (const auto& [l, v] : r->samples)
          if (l == r->layers - 1 && std::isfinite(v[m]) && v[m] > 0) {
            x.push_back(std::stod(cfg(*r, "dk")) * std::log10(1 / std::stod(cfg(*r, "lambda"))));
            y.push_back(std::log10(v[m]));
          }
      if (x.size() >= 2) {
        const auto f = fit_line(x, y);
        o << "Least-squares fit over all " << x.size() << " draws: log10 cond(P) = " << fmt(f[0]) << " + " << fmt(f[1])
          << " dk log10(1/lambda), i.e. cond(P) ~ " << fmt(std::pow(10.0, f[0])) << " lambda^(-" << fmt(f[1])
          << " dk); worst residual a factor " << fmt(std::pow(10.0, f[2])) << ".\n\n";
      }
    }
    auto rem = select(rs, [](const Result& r) { return r.scheme == "ldm" && r.sweep == "remedies"; });
    if (!rem.empty()) {
      o << "### Remedies: the symmetric form with reset, trace cap or leakage, against exact RLS\n\n"
           "First layer with readout error > 1e-3 (float32) or > 0.1 (bf16:f32):\n\n";
      auto col = [](const Result& r) { return cfg(r, "keys") + ", lambda = " + cfg(r, "lambda"); };
      pivot(o, rem, "formulation, dtype", form_dtype, col, [](const Runs& g) { return crossing(g, threshold_of(*g.front())); });
      o << "Readout error after the last layer:\n\n";
      pivot(o, rem, "formulation, dtype", form_dtype, col, final_err);
    }
    const auto alarms = alarm_names(ldm);
    auto det = select(rs, [](const Result& r) {
      return r.scheme == "ldm" && (r.sweep == "forms" || r.sweep == "keys") && cfg(r, "lambda") != "1" &&
             (r.dtype == "float32" || r.dtype == "bf16:f32" || r.dtype == "bf16:f32/P");
    });
    if (!det.empty() && !alarms.empty()) {
      o << "### Detectors: lead time over the draws that crossed 1e-3 (float32) or 0.1 (16-bit)\n\n"
           "A cell: the lead in layers (crossing layer - firing layer) of the draws in which the detector fired "
           "no later than the crossing, how many of the crossing draws that is, and its false alarms (draws that "
           "never crossed in which it fired anyway). Detectors: conv (conversion factor lambda / (lambda + w k^T P k) "
           "outside (0, 1], i.e. k^T P k < 0), diag (a diagonal entry of P <= 0), chol (Cholesky of P fails), "
           "trace (trace(P) > 100 dk alpha), PR (||P R - I||_F / sqrt(dk) > 0.1 with R accumulated beside the run).\n\n";
      for (const std::string keys : {"random", "collinear", "rank-deficient"}) {
        auto sel = select(rs, [&](const Result& r) {
          return std::find(det.begin(), det.end(), &r) != det.end() && cfg(r, "keys") == keys;
        });
        if (sel.empty()) continue;
        o << "#### " << keys << " keys\n\n";
        for (const auto& a : alarms) {
          o << "Detector `" << a << "`:\n\n";
          pivot(o, sel, "formulation, dtype", form_dtype, lambda_col, [a](const Runs& g) { return lead(g, a); });
        }
      }
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
        {"LDM inverse QR, lambda 0.9", [](const Result& r) { return r.scheme == "ldm" && r.sweep == "forms" && r.form == "inverse-qr" && cfg(r, "lambda") == "0.9"; }},
    };
    Runs sel;
    std::map<const Result*, std::string> label;
    for (const auto& p : picks)
      for (const auto& r : rs)
        if (p.f(r) && (r.dtype == "float32" || r.dtype == "bfloat16" || r.dtype == "bf16:f32")) {
          sel.push_back(&r);
          label[&r] = p.label;
        }
    if (!sel.empty()) {
      o << "## The schemes side by side\n\nReadout error after 100 layers / after 1000 layers (\"-\": the scheme's "
           "sweep is shallower) / after the last layer (each scheme's own depth, see its section).\n\n";
      pivot(o, sel, "scheme", [&](const Result& r) { return label[&r]; }, [](const Result& r) { return r.dtype; },
            [&](const Runs& g) { return metric_at(g, 0, 100) + " / " + metric_at(g, 0, 1000) + " / " + final_err(g); });
    }
  }
  // ---------------------------------------------------------------- others
  struct Section {
    const char* scheme;
    const char* title;
    std::string sizes;
    const char* colkey;
    const char* collabel;
  };
  const std::vector<Section> secs{
      {"preln", "PreLN", "d = " + std::to_string(z.preln_d) + ", L = " + std::to_string(z.preln_layers), "values",
       "layer outputs"},
      {"attnres", "Attention Residuals",
       "d = " + std::to_string(z.attnres_d) + ", full: L = " + std::to_string(z.attnres_full_layers) +
           ", block: L = " + std::to_string(z.attnres_block_layers) + " with S = " + std::to_string(z.attnres_block_size),
       "w", "logit sd"},
      {"mhc", "mHC",
       "n = " + std::to_string(z.mhc_n) + ", C = " + std::to_string(z.mhc_C) + ", L = " + std::to_string(z.mhc_layers) +
           ", " + std::to_string(z.mhc_bank) + " parameter sets used cyclically, 20 Sinkhorn rounds",
       "logit_scale", "logit scale"},
  };
  auto sk = select(rs, [](const Result& r) { return r.scheme == "sinkhorn"; });
  if (!sk.empty()) {
    o << "## mHC's Sinkhorn alone\n\n16 random 4 x 4 logit matrices per draw, entries N(0, (scale/2)^2). Variants: paper "
         "(eps = 0), eps=1e-6 (DeepSeek-V4's eps_add = eps_den), log-domain (log-sum-exp with the max subtracted). "
         "bf16:f32: logits (and the composite) stored in bfloat16, float32 arithmetic.\n\n";
    auto rounds = select(rs, [](const Result& r) { return r.scheme == "sinkhorn" && r.sweep == "rounds"; });
    auto col = [](const Result& r) { return "logit scale " + cfg(r, "logit_scale"); };
    for (int t : {1, 3, 5, 10, 20, 50}) {
      o << "### Distance from doubly stochastic (max |row or column sum - 1|) after " << t << " rounds\n\n";
      pivot(o, rounds, "variant, dtype", form_dtype, col, [t](const Runs& g) { return metric_at(g, 1, t); });
    }
    auto comp = select(rs, [](const Result& r) { return r.scheme == "sinkhorn" && r.sweep == "composite"; });
    if (!comp.empty()) {
      for (int l : {10, 100, 0}) {
        o << "### Composite mapping H_l ... H_1 (20 rounds each): gain (largest absolute row sum; exact: 1) after "
          << (l ? std::to_string(l) + " layers" : std::string("the last layer")) << "\n\n";
        pivot(o, comp, "variant, dtype", form_dtype, col, [l](const Runs& g) { return metric_at(g, 2, l); });
      }
    }
  }
  auto gr = select(rs, [](const Result& r) { return r.scheme == "gradients"; });
  if (!gr.empty()) {
    o << "## Gradients over depth\n\nEvery scheme's backward at L = 1, 2, 4, ... " << z.grad_depth
      << " layers (d = 16, one token; LDM G = 2, dk = 8, lambda ~ U(0.5, 1) per layer; mHC n = 4, DeepSeek-V4 "
         "preset; HC n = 4 dynamic; AttnRes block size 4): each depth a corpus-style backward problem "
         "(conf::make_problem: inputs, parameters and upstream gradients drawn from the seed), its gradients "
         "against the same problem in float64. `float32`: native float arithmetic; `bf16:f32`, `f16:f32`, "
         "`float64 (model)`: one sample of the recipe's rounding model (Perturbed: inputs and the streams of "
         "both passes stored in the 16-bit format, float32 arithmetic; the f64 row bounds the reference's own "
         "error). Normwise relative error of all input gradients (grad.input.*) together, and of all "
         "parameter gradients (grad.param.*) together.\n\n";
    for (std::size_t m : {0u, 1u}) {
      o << "### " << (m == 0 ? "Input" : "Parameter") << " gradients: relative error at depth L\n\n";
      std::vector<std::string> rows;
      std::map<std::string, Runs> by;
      for (const Result* r : gr) {
        const std::string k = form_dtype(*r);
        if (!by.count(k)) rows.push_back(k);
        by[k].push_back(r);
      }
      const auto depths = grad_depths(z.grad_depth);
      o << "| scheme, dtype \\ L |";
      for (int L : depths) o << ' ' << L << " |";
      o << "\n| --- |";
      for (std::size_t i = 0; i < depths.size(); ++i) o << " --- |";
      o << '\n';
      for (const auto& k : rows) {
        if (m == 1 && metric_at(by[k], 1, 1).find("nan") != std::string::npos) continue;  // no parameters
        o << "| " << k << " |";
        for (int L : depths) o << ' ' << metric_at(by[k], m, L) << " |";
        o << '\n';
      }
      o << '\n';
    }
    std::set<std::string> notes;
    for (const Result* r : gr)
      if (!r->note.empty()) notes.insert("- " + r->form + ", " + r->dtype + ": " + r->note);
    for (const auto& n : notes) o << n << "\n";
    o << '\n';
  }
  for (const auto& s : secs) {
    auto sel = select(rs, [&](const Result& r) { return r.scheme == s.scheme; });
    if (sel.empty()) continue;
    auto col = [&](const Result& r) {
      return std::string(s.collabel) + " " + cfg(r, s.colkey) + (cfg(r, "preset").empty() ? "" : ", " + cfg(r, "preset"));
    };
    o << "## " << s.title << "\n\n" << s.sizes << ". Readout: the layer input h.\n\n";
    o << "### Readout error after the last layer\n\n";
    pivot(o, sel, "variant, dtype", form_dtype, col, final_err);
    o << "### First layer with readout error > 1e-3 (float32) or > 0.1 (16-bit)\n\n";
    pivot(o, sel, "variant, dtype", form_dtype, col, [](const Runs& g) { return crossing(g, threshold_of(*g.front())); });
    std::set<std::string> notes;
    for (const Result* r : sel)
      if (!r->note.empty()) notes.insert("- " + r->form + ", " + r->dtype + ", " + col(*r) + ": " + r->note);
    for (const auto& n : notes) o << n << "\n";
    o << '\n';
  }
  write_recommendations(o, rs, z);
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
  if (!opt.only.empty() && opt.only != "ldm" && opt.only != "remedies" && opt.only != "preln" &&
      opt.only != "attnres" && opt.only != "mhc" && opt.only != "sinkhorn" && opt.only != "gradients")
    throw std::invalid_argument("stability: only: '" + opt.only +
                                "' is not one of ldm, remedies, preln, attnres, mhc, sinkhorn, gradients");
  const auto t0 = std::chrono::steady_clock::now();
  const Sizes z = sizes(opt.quick);
  std::vector<std::pair<std::string, Task>> tasks;
  auto add = [&](const std::string& name, std::vector<Task> ts) {
    if (opt.only.empty() ? (name == "remedies" || name == "sinkhorn") : opt.only != name) return;  // only on request
    for (auto& t : ts) tasks.emplace_back(name, std::move(t));
  };
  add("ldm", ldm_tasks(z));
  add("remedies", remedy_tasks(z));
  add("preln", preln_tasks(z));
  add("attnres", attnres_tasks(z));
  add("mhc", mhc_tasks(z));
  add("sinkhorn", sinkhorn_tasks(z));
  add("gradients", gradient_tasks(z));
  fs::create_directories(opt.out_dir);

  std::vector<std::vector<Result>> slots(tasks.size());
  std::mutex log_mutex;
  parallel_for(tasks.size(), opt.jobs, [&](std::size_t i) {
    const auto s = std::chrono::steady_clock::now();
    slots[i] = tasks[i].second();
    if (opt.log) {
      std::lock_guard<std::mutex> g(log_mutex);
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
      const Result& r0 = slots[i].front();
      std::string c;
      for (const auto& [k, v] : r0.config) c += " " + k + "=" + v;
      *opt.log << "stability: [" << (i + 1) << "/" << tasks.size() << "] " << r0.scheme << " " << r0.sweep << c << ": "
               << slots[i].size() << " runs, " << fmt(sec) << " s" << std::endl;
    }
  });

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
