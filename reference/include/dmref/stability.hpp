// dmref/stability.hpp: numerical stability at scale (docs/stability.md).
//
// Runs the reference schemes in low precision (float64, float32, and the
// emulated bfloat16 / float16 of dmref/lowp.hpp, pure or as 16-bit storage with
// float32 arithmetic) next to the same scheme at 257 bits, layer by layer, for
// thousands of layers, and writes what diverges, how fast, and where the first
// inf/NaN appears:
//   runs.csv            one row per run: scheme, sweep, formulation, dtype,
//                       configuration, first layer over 1e-3 / 1e-2 / 1e-1
//                       relative error, first non-finite layer, final and
//                       worst error, reference self-check
//   layers_<scheme>.csv per-layer metrics of each run at log-spaced layers
//   report.md           the findings, as numbers
// scripts/plot_stability.py turns the CSVs into the figures of the docs.
//
// Every input (embedding, layer outputs, queries, keys) is on the grid of
// values that bfloat16 and float16 share, and every scalar parameter (lambda,
// omega, alpha, mHC weights) is a float32 number, so each run sees exactly the
// inputs of the reference; a 16-bit run rounds the float32 parameters it
// stores (part of its error, as in a 16-bit kernel).
//
// Conventions: at layer l (0-based) a run has written layers 0..l; "the
// readout" is what the next layer reads, h_{l+1} (the final readout after the
// last layer). Relative errors are normwise, ||x - x*|| / ||x*||, with x* the
// 257-bit reference rounded to double.
#pragma once

#include "dmref/dtype.hpp"
#include "dmref/lowp.hpp"
#include "dmref/random.hpp"

#include <Eigen/Core>

#include <array>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <limits>
#include <map>
#include <stdexcept>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dmref {

struct StabilityOptions {
  bool quick = true;          // the CI sweep (docs/stability.md gives its time); false: the full sweep
  std::string out_dir;        // created if missing
  unsigned jobs = 1;          // configurations run in parallel (output does not depend on it)
  std::string only;           // "", or one of ldm, remedies, preln, attnres, mhc, sinkhorn, gradients ("" runs all but remedies, sinkhorn)
  std::ostream* log = nullptr;  // progress, one line per configuration
};

/// Runs the sweeps and writes runs.csv, layers_<scheme>.csv and report.md to
/// out_dir. Returns 0, or 1 if a reference self-check failed (then report.md
/// says which), 2 for bad options.
int run_stability(const StabilityOptions& opt);
int run_stability(bool quick, const std::string& out_dir);

namespace stability {

/// How a run computes and stores.
enum class Dtype {
  fp64,        // double
  fp32,        // native float
  bf16,        // emulated bfloat16, rounding after every operation
  fp16,        // emulated binary16, rounding after every operation
  bf16_store,  // "bf16:f32": float arithmetic, every stream stored in bfloat16 between layers
  fp16_store,  // "f16:f32": float arithmetic, every stream stored in binary16 between layers
  bf16_x,      // "bf16:f32/x": float arithmetic, only the residual stream (LDM: x and q) in bfloat16
  bf16_M,      // "bf16:f32/M": float arithmetic, only the memory state (LDM: M; B or Z for the closed and QR
               // forms; mHC: the coefficients H_pre, H_post, H_res) in bfloat16
  bf16_P,      // "bf16:f32/P": float arithmetic, only P or its factor (F, S, C, U and D, R) in bfloat16
  bf16_S,      // "bf16:f32/S": float arithmetic, only the statistics one kernel hands to the next in bfloat16
               // (AttnRes: the two-phase softmax's max, denominator and partial output; mHC: the logits)
};
const char* dtype_name(Dtype d);

/// Which state a run stores in a 16-bit format between layers (float
/// arithmetic in between): a bit set of the kStore* values.
/// kStoreStats (bf16:f32/S) is not part of kStoreAll: the 16-bit storage modes
/// store the streams and states, not the intermediate statistics.
inline constexpr unsigned kStoreStream = 1, kStoreMemory = 2, kStoreCovariance = 4, kStoreAll = 7, kStoreStats = 8;
struct Storage {
  const FloatFormat* f = nullptr;  // null: nothing is rounded between layers
  unsigned what = kStoreAll;
  bool has(unsigned w) const { return f != nullptr && (what & w) != 0; }
};

/// Problem sizes of a sweep.
struct Sizes {
  int ldm_layers, ldm_groups, ldm_dk, ldm_dv;
  int preln_layers, preln_d;
  int attnres_full_layers, attnres_block_layers, attnres_block_size, attnres_d;
  int mhc_layers, mhc_n, mhc_C, mhc_bank;  // mhc_bank: distinct layer parameter sets, used cyclically
  int seeds;                               // independent draws (tokens) of every configuration
  int scale_layers;                        // LDM scale sweep (G = 16, dk = 4; dk up to 128)
  int grad_depth;                          // gradient sweep: depths 1, 2, 4, ... up to this
};
Sizes sizes(bool quick);

/// Relative-error thresholds whose first crossing is reported.
inline constexpr std::array<double, 3> kThresholds{1e-3, 1e-2, 1e-1};

/// One run: configuration, per-layer samples and summary.
struct Result {
  std::string scheme, sweep, form, dtype;
  std::map<std::string, std::string> config;  // keys, lambda, omega, values, w, variant, logit_scale, preset
  int layers = 0;
  std::vector<std::string> metrics;  // names; metrics[0] is the readout error, the one thresholds use
  std::vector<std::pair<int, std::vector<double>>> samples;  // (layer, metric values)
  int first_nonfinite = -1;                       // first layer with an inf or NaN in the state
  std::array<int, 3> first_over{-1, -1, -1};      // first layer with readout error > kThresholds[i]
  std::vector<std::string> alarms;                // detector names (Snap::alarms, same order)
  std::vector<int> first_alarm;                   // first layer each detector fired (-1: never)
  double err_final = std::numeric_limits<double>::quiet_NaN();
  double err_max = 0;
  double ref_check = std::numeric_limits<double>::quiet_NaN();  // reference vs independent higher-precision form
  std::string note;
};

/// Layers (0-based) whose metrics are kept: dense: every layer up to the
/// 20th, then l + 1 = round(10^(i / 20)) (20 per decade); sparse: l + 1 in
/// {1, 2, 5} x 10^k. The last layer always. (The CSV files write l + 1.)
std::vector<int> sample_layers(int L, bool dense = true);

/// Normwise relative error ||a - r|| / ||r|| (||a|| if r = 0); +inf if a has
/// an inf or NaN. Scaled, so it does not overflow for huge entries.
double rel_err(const Eigen::VectorXd& a, const Eigen::VectorXd& r);

/// What a run exposes after each layer, in double.
struct Snap {
  Eigen::VectorXd read;   // the readout h_{l+1}
  Eigen::VectorXd mem;    // a second readout-like quantity (LDM: M q; AttnRes: softmax weights; mHC: H_res)
  Eigen::VectorXd state;  // the streams (LDM: M of every group; PreLN: x; AttnRes: sources; mHC: X)
  std::vector<Eigen::MatrixXd> P;  // LDM: P of every group (only when asked for)
  bool finite = true;     // every stored number finite
  std::vector<char> alarms;  // detectors that fire at this layer (Result::alarms names them)
};

/// One run of a scheme, advanced layer by layer.
class Stepper {
 public:
  virtual ~Stepper() = default;
  virtual void step(int l) = 0;                    // write layer l
  virtual void snap(Snap& s, bool full) = 0;       // after step(l); `full`: also the costly parts (P)
};

/// Metric values of a run's snapshot against the reference's (same names as Result::metrics).
using MetricFn = std::function<std::vector<double>(const Snap& run, const Snap& ref, bool full)>;

/// A run to be compared with the reference: its description, and its stepper
/// (null if the scheme rejected the configuration: then `meta.note` says why).
struct Candidate {
  Result meta;
  std::unique_ptr<Stepper> stepper;
};

/// Advances the reference and every candidate in lockstep over L layers,
/// computing the metrics every layer (thresholds, first non-finite layer) and
/// keeping them at sample_layers(L, dense). `after_ref(l)` runs after the reference's
/// step l (self-checks). Appends one Result per candidate to `out`.
void lockstep(Stepper& ref, std::vector<Candidate>& cands, int L, const MetricFn& metric, std::vector<Result>& out,
              const std::function<void(int)>& after_ref = {}, bool dense = true);

/// A stepper of class template St for dtype d: St<T>(args..., store) with T
/// the arithmetic type and `store` what is stored in which format.
template <template <class> class St, class... A>
std::unique_ptr<Stepper> make_stepper(Dtype d, const A&... a) {
  switch (d) {
    case Dtype::fp64: return std::make_unique<St<double>>(a..., Storage{});
    case Dtype::fp32: return std::make_unique<St<float>>(a..., Storage{});
    case Dtype::bf16: return std::make_unique<St<bf16>>(a..., Storage{});
    case Dtype::fp16: return std::make_unique<St<fp16>>(a..., Storage{});
    case Dtype::bf16_store: return std::make_unique<St<float>>(a..., Storage{&bfloat16, kStoreAll});
    case Dtype::fp16_store: return std::make_unique<St<float>>(a..., Storage{&float16, kStoreAll});
    case Dtype::bf16_x: return std::make_unique<St<float>>(a..., Storage{&bfloat16, kStoreStream});
    case Dtype::bf16_M: return std::make_unique<St<float>>(a..., Storage{&bfloat16, kStoreMemory});
    case Dtype::bf16_P: return std::make_unique<St<float>>(a..., Storage{&bfloat16, kStoreCovariance});
    case Dtype::bf16_S: return std::make_unique<St<float>>(a..., Storage{&bfloat16, kStoreStats});
  }
  return nullptr;
}

/// The q-quantile (0 <= q <= 1) of xs by linear interpolation between order
/// statistics (numpy's default); +inf entries count as larger than every
/// number (a quantile that interpolates towards one is +inf); NaN for none.
double quantile(std::vector<double> xs, double q);

/// Builds candidate runs for each dtype: `make(d)` returns the stepper; an
/// std::invalid_argument from it (a configuration the scheme rejects for that
/// type) becomes a run with no stepper and the message as its note.
template <class Make>
std::vector<Candidate> candidates(const Result& meta, const std::vector<Dtype>& dtypes, Make&& make) {
  std::vector<Candidate> c;
  for (Dtype d : dtypes) {
    Candidate k;
    k.meta = meta;
    k.meta.dtype = dtype_name(d);
    try {
      k.stepper = make(d);
    } catch (const std::invalid_argument& e) {
      k.meta.note = std::string("rejected: ") + e.what();
    }
    c.push_back(std::move(k));
  }
  return c;
}

/// A seeded standard normal source (SplitMix64 + Box-Muller), the same on every platform.
class Normal {
 public:
  explicit Normal(std::uint64_t seed) : rng_(seed) {}
  double operator()();
  double uniform() { return rng_.uniform(); }  // in [-1, 1)

 private:
  SplitMix64 rng_;
  double spare_ = 0;
  bool has_spare_ = false;
};

/// One configuration of a sweep: builds its reference and candidates and runs them.
using Task = std::function<std::vector<Result>()>;

/// Each configuration drawn z.seeds times (config "seed" = 0, 1, ...): the
/// report gives the median and the 10th and 90th percentiles over the draws.
template <class Run>
void seeded(std::vector<Task>& t, const Sizes& z, std::uint64_t seed, Run run) {
  for (int i = 0; i < z.seeds; ++i)
    t.push_back([run, i, s = seed + 0x10000 * std::uint64_t(i)] {
      auto r = run(s);
      for (auto& x : r) x.config["seed"] = std::to_string(i);
      return r;
    });
}

std::vector<Task> ldm_tasks(const Sizes& z);
std::vector<Task> remedy_tasks(const Sizes& z);  // LDM remedies (scheme "ldm", sweep "remedies"): --only remedies
std::vector<Task> preln_tasks(const Sizes& z);
std::vector<Task> attnres_tasks(const Sizes& z);
std::vector<Task> mhc_tasks(const Sizes& z);
std::vector<Task> sinkhorn_tasks(const Sizes& z);  // mHC's Sinkhorn alone: rounds and composite gain (--only sinkhorn)
/// Gradient error over depth (scheme "gradients", sweep "depth"): every
/// scheme's backward at L = 1, 2, 4, ... z.grad_depth layers, each point a
/// corpus-style backward problem (conf::make_problem) evaluated in float32 and
/// under the bf16/f16/f64 recipes' rounding model (Perturbed) against float64;
/// metrics grad_input, grad_param (normwise relative error of all input /
/// parameter gradients together), stored at layer L - 1.
std::vector<Task> gradient_tasks(const Sizes& z);
std::vector<int> grad_depths(int max_depth);

/// Inputs: x on the grid shared by bfloat16 and float16 (bfloat16 rounding,
/// magnitudes below 2^-14 flushed to 0), and float32 parameters.
double on_grid(double x);
double on_f32(double x);

}  // namespace stability
}  // namespace dmref
