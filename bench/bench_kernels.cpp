// bench/bench_kernels.cpp: per-kernel costs of the reference (docs/performance.md).
//
//   rls/<impl>/<type>/dk:D/dv:V   one RLS-LDM step of one group (symmetric P
//                                 update), averaged over a fixed sequence of
//                                 steps from M = 0, P = I. impl = loop (the
//                                 in-place rls_step) or expr (the same body on
//                                 the Eigen-expression primitives,
//                                 detail::RlsExprOps);
//                                 type = mpfr128/257/513 (Boost's MPFR types),
//                                 mpfr256/512 (dmref's Real<256>, Real<512>),
//                                 mpfi257, ball256/512.
//                                 Counter vs_floor: cost per multiply-add over
//                                 the floor's, measured interleaved with it
//   floor/<op>/bits:B             the floor: one MPFR (or MPFI) multiply-add
//                                 at B bits, in a dot-product loop on raw
//                                 mpfr_t / mpfi_t with preallocated operands
//   rls_double/<impl>/dk:D/dv:V   the same step in double: Eigen vs a plain loop
//   ldm_kernel/..., mhc/..., attnres/...   scheme kernels at 257 bits
//   rls/anchor/<how>/bits:B/dk:D/dv:V   what careful users write for the same
//                                 step (issue 14 anchors; same inputs): plain
//                                 MPFR C with mpfr_fma and the upper-triangle P
//                                 update (mpfr_c), and FLINT/Arb balls with
//                                 arb_dot, arb_addmul / arb_submul and the
//                                 upper-triangle update (arb; built when Arb
//                                 is found: DMREF_BENCH_ARB)
//
// The step inputs come from SplitMix64 (dmref/random.hpp) as scripts/bench_mpmath.py
// regenerates them; `--dmref-rls-check=BITS,DK,DV,STEPS` prints the state after
// the steps exactly, for the cross-check against mpmath. `--dmref-smoke`
// registers small sizes only (the CI smoke pass).
#include "dmref/attnres.hpp"
#include "dmref/ldm.hpp"
#include "dmref/mhc.hpp"
#include "dmref/random.hpp"
#include "dmref/scalar.hpp"  // Boost's MPFR numbers

#include <benchmark/benchmark.h>
#ifdef DMREF_BENCH_ARB
#include <arb.h>
#endif
#include <gmp.h>
#include <mpfi.h>
#include <mpfr.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

namespace dmref::bench {
void register_conformance(bool smoke);  // bench_conformance.cpp
}

namespace {

using namespace dmref;

using mp128 = mpfr<38>;   // 128 bits
using mp257 = mpfr<77>;   // 257 bits (the suite's mp77)
using mp513 = mpfr<154>;  // 513 bits
using mi257 = mpfi<77>;
// dmref's limb-aligned point types (Boost's MPFR types above have no 256 or 512 bits)
using rp256 = real256;
using rp512 = real512;

// ------------------------------------------------------------------ inputs
/// The step sequence, in double, drawn from SplitMix64(seed) in this order per
/// step: dk uniforms u (k = u / sqrt(sum u^2), summed left to right), dv
/// uniforms (v), one uniform x (w = 1 + x), one uniform y (lambda = 0.95 + 0.05 y).
/// scripts/bench_mpmath.py draws the same numbers.
struct RlsInputs {
  std::vector<std::vector<double>> k, v;
  std::vector<double> w, lambda;
};

RlsInputs rls_inputs(int dk, int dv, int steps, std::uint64_t seed = 2026) {
  SplitMix64 r(seed);
  RlsInputs in;
  for (int s = 0; s < steps; ++s) {
    std::vector<double> k(dk), v(dv);
    double ss = 0;
    for (auto& x : k) {
      x = r.uniform();
      ss += x * x;
    }
    const double nrm = std::sqrt(ss);
    for (auto& x : k) x /= nrm;
    for (auto& x : v) x = r.uniform();
    in.k.push_back(k);
    in.v.push_back(v);
    in.w.push_back(1 + r.uniform());
    in.lambda.push_back(0.95 + 0.05 * r.uniform());
  }
  return in;
}

template <class S>
struct RlsProblem {
  std::vector<Vec<S>> k, v;
  std::vector<S> w, lambda;
  Mat<S> M0, P0;
  RlsProblem(int dk, int dv, int steps) {
    const RlsInputs in = rls_inputs(dk, dv, steps);
    for (int s = 0; s < steps; ++s) {
      Vec<S> k(dk), v(dv);
      for (int i = 0; i < dk; ++i) k(i) = S(in.k[s][i]);
      for (int i = 0; i < dv; ++i) v(i) = S(in.v[s][i]);
      this->k.push_back(k);
      this->v.push_back(v);
      w.push_back(S(in.w[s]));
      lambda.push_back(S(in.lambda[s]));
    }
    M0 = Mat<S>::Zero(dv, dk);
    P0 = Mat<S>::Identity(dk, dk);
  }
};

/// Multiply-adds of one step: P k (dk^2), k^T pi (dk), M k and the M update
/// (dv dk each), the P update (dk^2). Divisions and the symmetrization come on
/// top and are charged to these.
double rls_madds(int dk, int dv) { return 2.0 * dk * dk + 2.0 * dk * dv + dk; }
/// Nominal flops of one symmetric step (both double implementations): P k
/// 2dk^2, dot 2dk, gamma 2, g dk, u 2dvdk, w u dv, M update 2dvdk, w g dk,
/// Q 3dk^2, (Q + Q^T)/2 2dk^2.
double rls_flops(int dk, int dv) { return 7.0 * dk * dk + 4.0 * dk * dv + 4.0 * dk + dv + 2; }

// ------------------------------------------------------------------ the floor
/// n operand pairs with full-precision mantissas (u / 3 and u / 7 at p bits).
struct FloorData {
  int n;
  std::unique_ptr<mpfr_t[]> a, b;
  std::unique_ptr<mpfi_t[]> ia, ib;
  explicit FloorData(mpfr_prec_t p, int n)
      : n(n), a(new mpfr_t[n]), b(new mpfr_t[n]), ia(new mpfi_t[n]), ib(new mpfi_t[n]) {
    SplitMix64 r(7);
    for (int i = 0; i < n; ++i) {
      mpfr_inits2(p, a[i], b[i], (mpfr_ptr)0);
      mpfr_set_d(a[i], r.uniform(), MPFR_RNDN);
      mpfr_div_ui(a[i], a[i], 3, MPFR_RNDN);
      mpfr_set_d(b[i], r.uniform(), MPFR_RNDN);
      mpfr_div_ui(b[i], b[i], 7, MPFR_RNDN);
      mpfi_init2(ia[i], p);
      mpfi_init2(ib[i], p);
      mpfi_set_fr(ia[i], a[i]);
      mpfi_set_fr(ib[i], b[i]);
    }
  }
  ~FloorData() {
    for (int i = 0; i < n; ++i) {
      mpfr_clears(a[i], b[i], (mpfr_ptr)0);
      mpfi_clear(ia[i]);
      mpfi_clear(ib[i]);
    }
  }
};

enum class FloorOp { muladd, fma, mpfi_muladd };

/// The floor loop: `reps` dot products of the n pairs; returns the multiply-adds done.
struct Floor {
  FloorData d;
  mpfr_t acc, t;
  mpfi_t iacc, it;
  Floor(mpfr_prec_t p, int n) : d(p, n) {
    mpfr_inits2(p, acc, t, (mpfr_ptr)0);
    mpfi_init2(iacc, p);
    mpfi_init2(it, p);
  }
  ~Floor() {
    mpfr_clears(acc, t, (mpfr_ptr)0);
    mpfi_clear(iacc);
    mpfi_clear(it);
  }
  Floor(const Floor&) = delete;
  Floor& operator=(const Floor&) = delete;

  double run(FloorOp op, long reps) {
    const int n = d.n;
    for (long r = 0; r < reps; ++r) {
      switch (op) {
        case FloorOp::muladd:
          mpfr_set_ui(acc, 0, MPFR_RNDN);
          for (int i = 0; i < n; ++i) {
            mpfr_mul(t, d.a[i], d.b[i], MPFR_RNDN);
            mpfr_add(acc, acc, t, MPFR_RNDN);
          }
          break;
        case FloorOp::fma:
          mpfr_set_ui(acc, 0, MPFR_RNDN);
          for (int i = 0; i < n; ++i) mpfr_fma(acc, d.a[i], d.b[i], acc, MPFR_RNDN);
          break;
        case FloorOp::mpfi_muladd:
          mpfi_set_ui(iacc, 0);
          for (int i = 0; i < n; ++i) {
            mpfi_mul(it, d.ia[i], d.ib[i]);
            mpfi_add(iacc, iacc, it);
          }
          break;
      }
      benchmark::ClobberMemory();
    }
    return double(reps) * n;
  }
};

void bm_floor(benchmark::State& st, mpfr_prec_t p, FloorOp op) {
  Floor f(p, 1024);
  double madds = 0;
  for (auto _ : st) madds += f.run(op, 1);
  st.SetItemsProcessed(st.iterations() * 1024);
  st.counters["bits"] = double(p);
  st.counters["sec_per_madd"] = benchmark::Counter(madds, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

enum class Impl { loop, expr };

/// After every timed run of the steps, the floor loop (MPFR multiply-adds for
/// MPFR types, MPFI for MPFI) runs untimed for about as many multiply-adds:
/// the step and its floor are measured interleaved, so that the ratio
/// `vs_floor` holds on a machine whose load drifts (thread CPU time of each).
template <class S, Impl I>
void bm_rls(benchmark::State& st, int dk, int dv, int steps) {
  RlsProblem<S> pr(dk, dv, steps);
  Mat<S> M = pr.M0, P = pr.P0;
  RlsWorkspace<S> ws;
  Floor floor(bits<S>(), 1024);
  const FloorOp op = is_interval_v<S> ? FloorOp::mpfi_muladd : FloorOp::muladd;
  const long reps = std::max(1L, long(steps * rls_madds(dk, dv) / 1024));
  double step_cpu = 0, floor_cpu = 0, floor_madds = 0;
  for (auto _ : st) {
    const double t0 = thread_cpu_seconds();
    M = pr.M0;  // same sizes: element-wise assignment, no allocation
    P = pr.P0;
    for (int s = 0; s < steps; ++s) {
      if constexpr (I == Impl::loop)
        rls_step<S>(M, P, pr.k[s], pr.v[s], pr.w[s], pr.lambda[s], PUpdate::symmetric, ws);
      else
        detail::rls_step_with<detail::RlsExprOps>(M, P, pr.k[s], pr.v[s], pr.w[s], pr.lambda[s], PUpdate::symmetric,
                                                  ws);
    }
    benchmark::DoNotOptimize(M.data());
    benchmark::DoNotOptimize(P.data());
    const double t1 = thread_cpu_seconds();
    st.PauseTiming();
    floor_madds += floor.run(op, reps);
    floor_cpu += thread_cpu_seconds() - t1;
    step_cpu += t1 - t0;
    st.ResumeTiming();
  }
  const double step_per_madd = step_cpu / (double(st.iterations()) * steps * rls_madds(dk, dv));
  st.counters["floor_sec_per_madd"] = floor_cpu / floor_madds;
  st.counters["vs_floor"] = step_per_madd / (floor_cpu / floor_madds);
  st.SetItemsProcessed(st.iterations() * steps);
  st.counters["bits"] = bits<S>();
  st.counters["dk"] = dk;
  st.counters["dv"] = dv;
  st.counters["madds_per_step"] = rls_madds(dk, dv);
  st.counters["sec_per_madd"] = benchmark::Counter(double(st.iterations()) * steps * rls_madds(dk, dv),
                                                   benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// ------------------------------------------------------------------ anchors
/// The symmetric step as a careful MPFR C user writes it: every dot product
/// an mpfr_fma chain, P stored and updated in its upper triangle only
/// (P_ij = (P_ij - w g_i pi_j) / lambda for i <= j; pi = P k is the same
/// mathematically either way round, so one triangle is the whole update).
struct MpfrCStep {
  int dk, dv;
  std::vector<mpfr_t> M, P, k, v, w, lambda, pi, g, wg, wu;
  mpfr_t acc, gamma, t;
  MpfrCStep(mpfr_prec_t p, int dk, int dv, const RlsInputs& in)
      : dk(dk), dv(dv), M(dv * dk), P(dk * dk), k(in.k.size() * dk), v(in.v.size() * dv), w(in.w.size()),
        lambda(in.lambda.size()), pi(dk), g(dk), wg(dk), wu(dv) {
    for (auto* vec : {&M, &P, &k, &v, &w, &lambda, &pi, &g, &wg, &wu})
      for (auto& x : *vec) mpfr_init2(x, p);
    mpfr_inits2(p, acc, gamma, t, (mpfr_ptr)0);
    for (std::size_t s = 0; s < in.k.size(); ++s) {
      for (int i = 0; i < dk; ++i) mpfr_set_d(k[s * dk + i], in.k[s][i], MPFR_RNDN);
      for (int i = 0; i < dv; ++i) mpfr_set_d(v[s * dv + i], in.v[s][i], MPFR_RNDN);
      mpfr_set_d(w[s], in.w[s], MPFR_RNDN);
      mpfr_set_d(lambda[s], in.lambda[s], MPFR_RNDN);
    }
  }
  ~MpfrCStep() {
    for (auto* vec : {&M, &P, &k, &v, &w, &lambda, &pi, &g, &wg, &wu})
      for (auto& x : *vec) mpfr_clear(x);
    mpfr_clears(acc, gamma, t, (mpfr_ptr)0);
  }
  MpfrCStep(const MpfrCStep&) = delete;
  MpfrCStep& operator=(const MpfrCStep&) = delete;
  mpfr_ptr Pu(int i, int j) { return i <= j ? P[i * dk + j] : P[j * dk + i]; }  // upper triangle
  double m(int i, int j) { return mpfr_get_d(M[i * dk + j], MPFR_RNDN); }
  void reset() {
    for (auto& x : M) mpfr_set_ui(x, 0, MPFR_RNDN);
    for (int i = 0; i < dk; ++i)
      for (int j = 0; j < dk; ++j) mpfr_set_ui(P[i * dk + j], i == j, MPFR_RNDN);
  }
  void step(int s) {
    mpfr_ptr ws = w[s], ls = lambda[s];
    for (int i = 0; i < dk; ++i) {  // pi = P k
      mpfr_set_ui(pi[i], 0, MPFR_RNDN);
      for (int j = 0; j < dk; ++j) mpfr_fma(pi[i], Pu(i, j), k[s * dk + j], pi[i], MPFR_RNDN);
    }
    mpfr_set_ui(acc, 0, MPFR_RNDN);  // gamma = lambda + w k^T pi
    for (int i = 0; i < dk; ++i) mpfr_fma(acc, k[s * dk + i], pi[i], acc, MPFR_RNDN);
    mpfr_fma(gamma, ws, acc, ls, MPFR_RNDN);
    for (int i = 0; i < dk; ++i) {
      mpfr_div(g[i], pi[i], gamma, MPFR_RNDN);
      mpfr_mul(wg[i], ws, g[i], MPFR_RNDN);
    }
    for (int i = 0; i < dv; ++i) {  // w u = w (v - M k): acc = M k - v, then w u = -w acc
      mpfr_neg(acc, v[s * dv + i], MPFR_RNDN);
      for (int j = 0; j < dk; ++j) mpfr_fma(acc, M[i * dk + j], k[s * dk + j], acc, MPFR_RNDN);
      mpfr_mul(wu[i], ws, acc, MPFR_RNDN);
      mpfr_neg(wu[i], wu[i], MPFR_RNDN);
    }
    for (int i = 0; i < dv; ++i)  // M += (w u) g^T
      for (int j = 0; j < dk; ++j) mpfr_fma(M[i * dk + j], wu[i], g[j], M[i * dk + j], MPFR_RNDN);
    for (int i = 0; i < dk; ++i)  // P_ij = (P_ij - w g_i pi_j) / lambda, i <= j
      for (int j = i; j < dk; ++j) {
        mpfr_fms(t, wg[i], pi[j], P[i * dk + j], MPFR_RNDN);  // w g_i pi_j - P_ij
        mpfr_div(P[i * dk + j], t, ls, MPFR_RNDN);
        mpfr_neg(P[i * dk + j], P[i * dk + j], MPFR_RNDN);
      }
  }
};

#ifdef DMREF_BENCH_ARB
/// The same step as an Arb user writes it: balls, arb_dot for every dot
/// product (one rounding per dot product, exact accumulation), arb_addmul /
/// arb_submul, the upper triangle of P updated and mirrored.
struct ArbStep {
  int dk, dv;
  slong prec;
  arb_ptr M, P, k, v, w, lambda, pi, g, wg, wu;
  arb_t s, gamma;
  std::size_t steps;
  ArbStep(slong p, int dk, int dv, const RlsInputs& in) : dk(dk), dv(dv), prec(p), steps(in.k.size()) {
    M = _arb_vec_init(dv * dk);
    P = _arb_vec_init(dk * dk);
    k = _arb_vec_init(slong(steps) * dk);
    v = _arb_vec_init(slong(steps) * dv);
    w = _arb_vec_init(slong(steps));
    lambda = _arb_vec_init(slong(steps));
    pi = _arb_vec_init(dk);
    g = _arb_vec_init(dk);
    wg = _arb_vec_init(dk);
    wu = _arb_vec_init(dv);
    arb_init(s);
    arb_init(gamma);
    for (std::size_t t = 0; t < steps; ++t) {
      for (int i = 0; i < dk; ++i) arb_set_d(k + t * dk + i, in.k[t][i]);
      for (int i = 0; i < dv; ++i) arb_set_d(v + t * dv + i, in.v[t][i]);
      arb_set_d(w + t, in.w[t]);
      arb_set_d(lambda + t, in.lambda[t]);
    }
  }
  ~ArbStep() {
    _arb_vec_clear(M, dv * dk);
    _arb_vec_clear(P, dk * dk);
    _arb_vec_clear(k, slong(steps) * dk);
    _arb_vec_clear(v, slong(steps) * dv);
    _arb_vec_clear(w, slong(steps));
    _arb_vec_clear(lambda, slong(steps));
    _arb_vec_clear(pi, dk);
    _arb_vec_clear(g, dk);
    _arb_vec_clear(wg, dk);
    _arb_vec_clear(wu, dv);
    arb_clear(s);
    arb_clear(gamma);
  }
  ArbStep(const ArbStep&) = delete;
  ArbStep& operator=(const ArbStep&) = delete;
  double m(int i, int j) { return arf_get_d(arb_midref(M + i * dk + j), ARF_RND_NEAR); }
  void reset() {
    _arb_vec_zero(M, dv * dk);
    for (int i = 0; i < dk; ++i)
      for (int j = 0; j < dk; ++j) arb_set_ui(P + i * dk + j, i == j);
  }
  void step(int t) {
    arb_srcptr kt = k + t * dk;
    for (int i = 0; i < dk; ++i) arb_dot(pi + i, nullptr, 0, P + i * dk, 1, kt, 1, dk, prec);
    arb_dot(s, nullptr, 0, kt, 1, pi, 1, dk, prec);
    arb_mul(s, s, w + t, prec);
    arb_add(gamma, s, lambda + t, prec);
    for (int i = 0; i < dk; ++i) {
      arb_div(g + i, pi + i, gamma, prec);
      arb_mul(wg + i, g + i, w + t, prec);
    }
    for (int i = 0; i < dv; ++i) {
      arb_dot(wu + i, v + t * dv + i, 1, M + i * dk, 1, kt, 1, dk, prec);  // v_i - M_i k
      arb_mul(wu + i, wu + i, w + t, prec);
    }
    for (int i = 0; i < dv; ++i)
      for (int j = 0; j < dk; ++j) arb_addmul(M + i * dk + j, wu + i, g + j, prec);
    for (int i = 0; i < dk; ++i)
      for (int j = i; j < dk; ++j) {
        arb_submul(P + i * dk + j, wg + i, pi + j, prec);
        arb_div(P + i * dk + j, P + i * dk + j, lambda + t, prec);
        if (j != i) arb_set(P + j * dk + i, P + i * dk + j);
      }
  }
};
#endif

/// dmref's certified step on Balls (ldm.hpp rls_step, RlsBallOps) at exactly `bits`
/// (the runtime precision the certification sets per Ziv rung), timed as bm_rls.
void bm_rls_ball(benchmark::State& st, int bits, int dk, int dv, int steps) {
  const BallPrecision prec(bits);
  bm_rls<Ball, Impl::loop>(st, dk, dv, steps);
}

/// One anchor step type at `bits`, timed like bm_rls (the same inputs and
/// step sequence, items = steps), with the MPFR floor interleaved (vs_floor).
template <class Step>
void bm_anchor(benchmark::State& st, int bits, int dk, int dv, int steps) {
  const RlsInputs in = rls_inputs(dk, dv, steps);
  Step step(bits, dk, dv, in);
  Floor floor(bits, 1024);
  const long reps = std::max(1L, long(steps * rls_madds(dk, dv) / 1024));
  double step_cpu = 0, floor_cpu = 0, floor_madds = 0;
  for (auto _ : st) {
    const double t0 = thread_cpu_seconds();
    step.reset();
    for (int s = 0; s < steps; ++s) step.step(s);
    const double t1 = thread_cpu_seconds();
    st.PauseTiming();
    floor_madds += floor.run(FloorOp::muladd, reps);
    floor_cpu += thread_cpu_seconds() - t1;
    step_cpu += t1 - t0;
    st.ResumeTiming();
  }
  // Gross-error guard (a wrong formula, not a rounding): the anchor's M against
  // dmref's step in double on the same inputs. These steps are well
  // conditioned (P from I, lambda >= 0.95, unit k), so double's own error is
  // near 1e-15 relative; 1e-9 leaves six orders of margin.
  {
    RlsProblem<double> pr(dk, dv, steps);
    Mat<double> M = pr.M0, P = pr.P0;
    for (int s = 0; s < steps; ++s) rls_step<double>(M, P, pr.k[s], pr.v[s], pr.w[s], pr.lambda[s], PUpdate::symmetric);
    for (int i = 0; i < dv; ++i)
      for (int j = 0; j < dk; ++j)
        if (!(std::fabs(step.m(i, j) - M(i, j)) <= 1e-9 * (1 + std::fabs(M(i, j))))) {
          st.SkipWithError("anchor step disagrees with dmref's step in double");
          return;
        }
  }
  const double step_per_madd = step_cpu / (double(st.iterations()) * steps * rls_madds(dk, dv));
  st.counters["vs_floor"] = step_per_madd / (floor_cpu / floor_madds);
  st.SetItemsProcessed(st.iterations() * steps);
  st.counters["bits"] = bits;
  st.counters["dk"] = dk;
  st.counters["dv"] = dv;
}

// ------------------------------------------------------------------ double
/// The symmetric step as plain loops on column-major storage (the baseline
/// for Eigen in double): the same formulas as rls_step.
void rls_step_plain(double* M, double* P, const double* k, const double* v, double w, double lambda, int dk, int dv,
                    double* pi, double* g, double* wu) {
  for (int i = 0; i < dk; ++i) pi[i] = 0;
  for (int j = 0; j < dk; ++j)
    for (int i = 0; i < dk; ++i) pi[i] += P[i + j * dk] * k[j];
  double kpi = 0;
  for (int i = 0; i < dk; ++i) kpi += k[i] * pi[i];
  const double gamma = lambda + w * kpi;
  for (int i = 0; i < dk; ++i) g[i] = pi[i] / gamma;
  for (int i = 0; i < dv; ++i) wu[i] = v[i];
  for (int j = 0; j < dk; ++j)
    for (int i = 0; i < dv; ++i) wu[i] -= M[i + j * dv] * k[j];
  for (int i = 0; i < dv; ++i) wu[i] *= w;
  for (int j = 0; j < dk; ++j)
    for (int i = 0; i < dv; ++i) M[i + j * dv] += wu[i] * g[j];
  for (int j = 0; j < dk; ++j)
    for (int i = 0; i < dk; ++i) P[i + j * dk] = (P[i + j * dk] - (w * g[i]) * pi[j]) / lambda;
  for (int j = 0; j < dk; ++j)
    for (int i = 0; i < j; ++i) P[i + j * dk] = P[j + i * dk] = (P[i + j * dk] + P[j + i * dk]) / 2;
}

template <Impl I>
void bm_rls_double(benchmark::State& st, int dk, int dv, int steps) {
  RlsProblem<double> pr(dk, dv, steps);
  Mat<double> M = pr.M0, P = pr.P0;
  std::vector<double> pi(dk), g(dk), wu(dv);
  for (auto _ : st) {
    M = pr.M0;
    P = pr.P0;
    for (int s = 0; s < steps; ++s) {
      if constexpr (I == Impl::expr)
        rls_step<double>(M, P, pr.k[s], pr.v[s], pr.w[s], pr.lambda[s], PUpdate::symmetric);
      else
        rls_step_plain(M.data(), P.data(), pr.k[s].data(), pr.v[s].data(), pr.w[s], pr.lambda[s], dk, dv, pi.data(),
                       g.data(), wu.data());
    }
    benchmark::DoNotOptimize(M.data());
    benchmark::DoNotOptimize(P.data());
  }
  st.SetItemsProcessed(st.iterations() * steps);
  st.counters["dk"] = dk;
  st.counters["dv"] = dv;
  st.counters["GFLOPs"] = benchmark::Counter(double(st.iterations()) * steps * rls_flops(dk, dv) * 1e-9,
                                             benchmark::Counter::kIsRate);
}

// ------------------------------------------------------------------ scheme kernels
template <class S>
Vec<S> uniform_vec(SplitMix64& r, Eigen::Index n, double scale = 1.0) {
  Vec<S> x(n);
  for (Eigen::Index i = 0; i < n; ++i) x(i) = S(r.uniform() * scale);
  return x;
}
template <class S>
Mat<S> uniform_mat(SplitMix64& r, Eigen::Index rows, Eigen::Index cols, double scale = 1.0) {
  Mat<S> x(rows, cols);
  for (Eigen::Index j = 0; j < cols; ++j)
    for (Eigen::Index i = 0; i < rows; ++i) x(i, j) = S(r.uniform() * scale);
  return x;
}

/// LDM at kernel level, one token: d, G, dk, L; q, k, omega, v, lambda seeded.
template <class S>
void bm_ldm_kernel(benchmark::State& st, MemoryWrite write, int d, int G, int dk, int L) {
  SplitMix64 r(11);
  LdmConfig<S> cfg;
  cfg.d = d;
  cfg.groups = G;
  cfg.dk = dk;
  cfg.write = write;
  cfg.lambda = Mat<S>(L, G);
  for (Eigen::Index i = 0; i < cfg.lambda.size(); ++i) cfg.lambda(i) = S(0.85 + 0.15 * 0.5 * (r.uniform() + 1));
  const Vec<S> e = uniform_vec<S>(r, d);
  std::vector<Vec<S>> v;
  std::vector<Address<S>> a;
  for (int l = 0; l < L; ++l) {
    v.push_back(uniform_vec<S>(r, d));
    Vec<S> omega(G);
    for (int g = 0; g < G; ++g) omega(g) = S(r.uniform() + 1);
    a.push_back({normalize_groups<S>(uniform_vec<S>(r, G * dk), G), normalize_groups<S>(uniform_vec<S>(r, G * dk), G),
                 omega});
  }
  const LdmKernel<S> m(cfg, GivenAddresses<S>{a});
  for (auto _ : st) {
    auto t = forward(m, e, L, GivenOutputs<S>{&v}, false);  // as the fixture generator runs it
    benchmark::DoNotOptimize(t.out.data());
  }
  st.SetItemsProcessed(st.iterations() * L);  // layers
  st.counters["bits"] = bits<S>();
  st.counters["layers"] = L;
  st.counters["groups"] = G;
  st.counters["dk"] = dk;
  st.counters["d"] = d;
}

/// mHC coefficients (RMSNorm, three projections, sigmoids, Sinkhorn) of one layer.
template <class S>
void bm_mhc_coefficients(benchmark::State& st, int n, int C, int t_max) {
  SplitMix64 r(12);
  MhcConfig<S> cfg = mhc_config<S>(MhcPreset::paper, n, C);
  cfg.t_max = t_max;
  const double s = 1.0 / std::sqrt(double(n * C));
  MhcLayer<S> p;
  p.phi_pre = uniform_mat<S>(r, n * C, n, s);
  p.phi_post = uniform_mat<S>(r, n * C, n, s);
  p.phi_res = uniform_mat<S>(r, n * C, n * n, 2 * s);
  p.b_pre = uniform_vec<S>(r, n, 0.5);
  p.b_post = uniform_vec<S>(r, n, 0.5);
  p.b_res = uniform_mat<S>(r, n, n);
  const Mat<S> X = uniform_mat<S>(r, n, C);
  for (auto _ : st) {
    auto c = mhc_coefficients<S>(cfg, p, X);
    benchmark::DoNotOptimize(c.res.data());
  }
  st.counters["bits"] = bits<S>();
  st.counters["n"] = n;
  st.counters["C"] = C;
}

template <class S>
void bm_mhc_sinkhorn(benchmark::State& st, int n, int t_max) {
  SplitMix64 r(13);
  const Mat<S> logits = uniform_mat<S>(r, n, n, 2.0);
  for (auto _ : st) {
    auto H = mhc_sinkhorn<S>(logits, t_max);
    benchmark::DoNotOptimize(H.data());
  }
  st.counters["bits"] = bits<S>();
  st.counters["n"] = n;
  st.counters["rounds"] = t_max;
}

/// One AttnRes readout over `sources` sources of width d (the last read of a
/// full-AttnRes stack of sources - 1 layers).
template <class S>
void bm_attnres_read(benchmark::State& st, int d, int sources) {
  SplitMix64 r(14);
  std::vector<Vec<S>> src;
  for (int i = 0; i < sources; ++i) src.push_back(uniform_vec<S>(r, d));
  const Vec<S> w = uniform_vec<S>(r, d, 2.0 / std::sqrt(double(d)));
  Vec<S> g(d);
  for (int i = 0; i < d; ++i) g(i) = S(1 + 0.5 * r.uniform());
  const S eps = S(1) / S(1000000);
  for (auto _ : st) {
    auto h = attnres_mix<S>(src, w, g, eps);
    benchmark::DoNotOptimize(h.data());
  }
  st.counters["bits"] = bits<S>();
  st.counters["d"] = d;
  st.counters["sources"] = sources;
}

// ------------------------------------------------------------------ mpmath cross-check
/// Prints every entry of M then P (column-major) as "M|P i j <mantissa hex> <exponent>"
/// with value = mantissa * 2^exponent exactly.
template <class S>
int rls_check(int dk, int dv, int steps) {
  RlsProblem<S> pr(dk, dv, steps);
  Mat<S> M = pr.M0, P = pr.P0;
  for (int s = 0; s < steps; ++s) rls_step<S>(M, P, pr.k[s], pr.v[s], pr.w[s], pr.lambda[s]);
  mpz_t z;
  mpz_init(z);
  auto put = [&](const char* name, const Mat<S>& X) {
    for (Eigen::Index j = 0; j < X.cols(); ++j)
      for (Eigen::Index i = 0; i < X.rows(); ++i) {
        const mpfr_exp_t e = mpfr_get_z_2exp(z, detail::mpfr_of(X(i, j)));
        gmp_printf("%s %ld %ld %Zx %ld\n", name, long(i), long(j), z, long(e));
      }
  };
  std::printf("bits %d\n", bits<S>());
  put("M", M);
  put("P", P);
  mpz_clear(z);
  return 0;
}

int rls_check(const char* arg) {
  int b = 0, dk = 0, dv = 0, steps = 0;
  if (std::sscanf(arg, "%d,%d,%d,%d", &b, &dk, &dv, &steps) != 4 || dk <= 0 || dv <= 0 || steps <= 0) {
    std::fprintf(stderr, "--dmref-rls-check=BITS,DK,DV,STEPS\n");
    return 2;
  }
  if (b == bits<mp128>()) return rls_check<mp128>(dk, dv, steps);
  if (b == bits<mp257>()) return rls_check<mp257>(dk, dv, steps);
  if (b == bits<mp513>()) return rls_check<mp513>(dk, dv, steps);
  if (b == bits<rp256>()) return rls_check<rp256>(dk, dv, steps);
  if (b == bits<rp512>()) return rls_check<rp512>(dk, dv, steps);
  std::fprintf(stderr, "--dmref-rls-check: bits must be %d, %d, %d, %d or %d\n", bits<mp128>(), bits<rp256>(),
               bits<mp257>(), bits<rp512>(), bits<mp513>());
  return 2;
}

// ------------------------------------------------------------------ registration
void register_kernels(bool smoke) {
  // The short benchmarks run 3 times; scripts/bench takes the fastest (the
  // least disturbed by other load), the same estimator as for mpmath.
  const int reps = smoke ? 1 : 3;
  const int steps = smoke ? 2 : 16;
  const std::vector<int> dims = smoke ? std::vector<int>{4} : std::vector<int>{16, 64};
  auto tag = [](int dk, int dv) { return "/dk:" + std::to_string(dk) + "/dv:" + std::to_string(dv); };
  for (int dk : dims)
    for (int dv : dims) {
      const std::string t = tag(dk, dv);
      benchmark::RegisterBenchmark(("rls/loop/mpfr128" + t).c_str(), bm_rls<mp128, Impl::loop>, dk, dv, steps)
          ->Repetitions(reps);
      benchmark::RegisterBenchmark(("rls/loop/mpfr257" + t).c_str(), bm_rls<mp257, Impl::loop>, dk, dv, steps)
          ->Repetitions(reps);
      benchmark::RegisterBenchmark(("rls/loop/mpfr513" + t).c_str(), bm_rls<mp513, Impl::loop>, dk, dv, steps)
          ->Repetitions(reps);
      benchmark::RegisterBenchmark(("rls/loop/mpfr256" + t).c_str(), bm_rls<rp256, Impl::loop>, dk, dv, steps)
          ->Repetitions(reps);
      benchmark::RegisterBenchmark(("rls/loop/mpfr512" + t).c_str(), bm_rls<rp512, Impl::loop>, dk, dv, steps)
          ->Repetitions(reps);
      benchmark::RegisterBenchmark(("rls/loop/mpfi257" + t).c_str(), bm_rls<mi257, Impl::loop>, dk, dv, steps)
          ->Repetitions(reps);
      for (int b : {256, 512})
        benchmark::RegisterBenchmark(("rls/loop/ball" + std::to_string(b) + t).c_str(), bm_rls_ball, b, dk, dv, steps)
            ->Repetitions(reps);
      for (int b : {256, 257, 512, 513}) {
        const std::string bt = "/bits:" + std::to_string(b) + t;
        benchmark::RegisterBenchmark(("rls/anchor/mpfr_c" + bt).c_str(), bm_anchor<MpfrCStep>, b, dk, dv, steps)
            ->Repetitions(reps);
#ifdef DMREF_BENCH_ARB
        benchmark::RegisterBenchmark(("rls/anchor/arb" + bt).c_str(), bm_anchor<ArbStep>, b, dk, dv, steps)
            ->Repetitions(reps);
#endif
      }
      benchmark::RegisterBenchmark(("rls/expr/mpfr128" + t).c_str(), bm_rls<mp128, Impl::expr>, dk, dv, steps)
          ->Repetitions(reps);
      benchmark::RegisterBenchmark(("rls/expr/mpfr257" + t).c_str(), bm_rls<mp257, Impl::expr>, dk, dv, steps)
          ->Repetitions(reps);
      benchmark::RegisterBenchmark(("rls/expr/mpfr513" + t).c_str(), bm_rls<mp513, Impl::expr>, dk, dv, steps)
          ->Repetitions(reps);
      benchmark::RegisterBenchmark(("rls/expr/mpfi257" + t).c_str(), bm_rls<mi257, Impl::expr>, dk, dv, steps)
          ->Repetitions(reps);
      benchmark::RegisterBenchmark(("rls_double/eigen" + t).c_str(), bm_rls_double<Impl::expr>, dk, dv, steps)
          ->Repetitions(reps);
      benchmark::RegisterBenchmark(("rls_double/plain" + t).c_str(), bm_rls_double<Impl::loop>, dk, dv, steps)
          ->Repetitions(reps);
    }
  for (int b : {bits<mp128>(), bits<mp257>(), bits<mp513>()}) {
    const std::string t = "/bits:" + std::to_string(b);
    benchmark::RegisterBenchmark(("floor/mpfr_mul_add" + t).c_str(), bm_floor, mpfr_prec_t(b), FloorOp::muladd)
        ->Repetitions(reps);
    benchmark::RegisterBenchmark(("floor/mpfr_fma" + t).c_str(), bm_floor, mpfr_prec_t(b), FloorOp::fma)
        ->Repetitions(reps);
    benchmark::RegisterBenchmark(("floor/mpfi_mul_add" + t).c_str(), bm_floor, mpfr_prec_t(b), FloorOp::mpfi_muladd)
        ->Repetitions(reps);
  }
  // Scheme kernels at 257 bits; d = 256, G = 16, L = 48 unless the name says otherwise.
  struct Shape {
    int d, G, dk, L;
  };
  const std::vector<Shape> shapes = smoke ? std::vector<Shape>{{16, 2, 4, 3}}
                                          : std::vector<Shape>{{256, 16, 16, 48}, {256, 16, 16, 12}, {256, 4, 16, 48},
                                                               {256, 16, 64, 48}, {256, 64, 16, 48}};
  for (const auto& s : shapes) {
    const std::string t = "/d:" + std::to_string(s.d) + "/G:" + std::to_string(s.G) + "/dk:" + std::to_string(s.dk) +
                          "/L:" + std::to_string(s.L);
    benchmark::RegisterBenchmark(("ldm_kernel/rls/mpfr257" + t).c_str(), bm_ldm_kernel<mp257>, MemoryWrite::rls, s.d,
                                 s.G, s.dk, s.L)
        ->Unit(benchmark::kMillisecond);
    if ((s.dk == 16 && s.L == 48 && s.G == 16) || smoke) {
      benchmark::RegisterBenchmark(("ldm_kernel/rls/mpfi257" + t).c_str(), bm_ldm_kernel<mi257>, MemoryWrite::rls, s.d,
                                   s.G, s.dk, s.L)
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("ldm_kernel/rls/mpfr128" + t).c_str(), bm_ldm_kernel<mp128>, MemoryWrite::rls, s.d,
                                   s.G, s.dk, s.L)
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("ldm_kernel/rls/mpfr513" + t).c_str(), bm_ldm_kernel<mp513>, MemoryWrite::rls, s.d,
                                   s.G, s.dk, s.L)
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("ldm_kernel/outer_product/mpfr257" + t).c_str(), bm_ldm_kernel<mp257>,
                                   MemoryWrite::outer_product, s.d, s.G, s.dk, s.L)
          ->Unit(benchmark::kMillisecond);
    }
  }
  const int C = smoke ? 8 : 256, L = smoke ? 3 : 48;
  benchmark::RegisterBenchmark(("mhc/coefficients/mpfr257/n:4/C:" + std::to_string(C) + "/rounds:20").c_str(),
                               bm_mhc_coefficients<mp257>, 4, C, 20)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("mhc/sinkhorn/mpfr257/n:4/rounds:20", bm_mhc_sinkhorn<mp257>, 4, 20)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark(
      ("attnres/read/mpfr257/d:" + std::to_string(C) + "/sources:" + std::to_string(L + 1)).c_str(),
      bm_attnres_read<mp257>, C, L + 1)
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--dmref-rls-check=", 18) == 0) return rls_check(argv[i] + 18);
    if (std::strcmp(argv[i], "--dmref-smoke") == 0) {
      smoke = true;
      continue;
    }
    argv[out++] = argv[i];
  }
  argc = out;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("dmref_smoke", smoke ? "1" : "0");
  benchmark::AddCustomContext("mpfr_version", mpfr_get_version());
  benchmark::AddCustomContext("gmp_version", gmp_version);
  register_kernels(smoke);
  dmref::bench::register_conformance(smoke);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
