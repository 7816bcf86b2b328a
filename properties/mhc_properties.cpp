// Properties of Manifold-Constrained Hyper-Connections (docs/mhc.md). The
// reference runs at 257 bits (mp77); oracles at 667 bits (mp200). Generated
// cases cover n = 1..6 streams, widths C = 1..8, residual logits spread up to
// +-6 (Sinkhorn far from converged) with column offsets up to +-40, and both
// presets (paper, deepseek-v4).
#include "check.hpp"
#include "harness.hpp"
#include "mhc_cases.hpp"

#include "dmref/mhc.hpp"
#include "dmref/oracles/mhc_doubly_stochastic.hpp"
#include "dmref/oracles/mhc_layer.hpp"
#include "dmref/oracles/mhc_sinkhorn.hpp"

#include <algorithm>
#include <cmath>
#include <random>

using namespace dmref;
using dmref::test::K;
using S = mp77;
using Hi = mp200;

namespace {

const double eps = to_double(epsilon<S>());

const char* name(MhcPreset p) { return p == MhcPreset::paper ? "paper" : "deepseek-v4"; }

/// A Sinkhorn-level case: n x n logits, uniform in [-scale, scale] plus a
/// per-column offset in [-offset, offset], minus `drop` below the diagonal
/// (drop ~ 10 makes exp(L) nearly triangular: 20 rounds are then far from
/// the doubly stochastic limit).
struct LogitCase {
  int n = 4;
  double scale = 1, offset = 0, drop = 0;
  std::uint64_t seed = 1;
  Mat<double> logits() const {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> U(-1, 1);
    Mat<double> L(n, n);
    for (int j = 0; j < n; ++j) {
      const double off = offset * U(rng);
      for (int i = 0; i < n; ++i) L(i, j) = scale * U(rng) + off - (i > j ? drop : 0);
    }
    return L;
  }
  /// max_j (max_i L_ij - min_i L_ij) <= 2 scale + drop: bounds |L - colmax|.
  double spread() const { return 2 * scale + drop; }
  std::string str() const {
    std::ostringstream o;
    o << "n=" << n << " scale=" << scale << " offset=" << offset << " drop=" << drop << " seed=" << seed;
    return o.str();
  }
};

rc::Gen<double> grid(double lo, double hi) {
  return rc::gen::map(rc::gen::inRange(0, 1001), [lo, hi](int i) { return lo + (hi - lo) * i / 1000.0; });
}

rc::Gen<LogitCase> gen_logits(int n_lo, int n_hi, double scale_lo, double scale_hi, double offset_hi,
                              bool triangular = true) {
  return rc::gen::build<LogitCase>(
      rc::gen::set(&LogitCase::n, rc::gen::inRange(n_lo, n_hi + 1)),
      rc::gen::set(&LogitCase::scale, grid(scale_lo, scale_hi)),
      rc::gen::set(&LogitCase::offset, grid(0, offset_hi)),
      rc::gen::set(&LogitCase::drop, triangular ? rc::gen::element(0.0, 0.0, 8.0, 12.0) : rc::gen::just(0.0)),
      rc::gen::set(&LogitCase::seed, rc::gen::arbitrary<std::uint64_t>()));
}

/// A one-layer case: parameters, streams X (arbitrary, not n copies) and v.
struct LayerCase {
  int n = 4, C = 4;
  double scale = 1;
  bool dsv4 = false;
  std::uint64_t seed = 1;
  MhcPreset preset() const { return dsv4 ? MhcPreset::deepseek_v4 : MhcPreset::paper; }
  std::string str() const {
    std::ostringstream o;
    o << "n=" << n << " C=" << C << " scale=" << scale << " preset=" << name(preset()) << " seed=" << seed;
    return o.str();
  }
};

rc::Gen<LayerCase> gen_layer(int n_lo = 1, int n_hi = 6) {
  return rc::gen::build<LayerCase>(rc::gen::set(&LayerCase::n, rc::gen::inRange(n_lo, n_hi + 1)),
                                   rc::gen::set(&LayerCase::C, rc::gen::inRange(1, 9)),
                                   rc::gen::set(&LayerCase::scale, grid(0, 6)),
                                   rc::gen::set(&LayerCase::dsv4, rc::gen::arbitrary<bool>()),
                                   rc::gen::set(&LayerCase::seed, rc::gen::arbitrary<std::uint64_t>()));
}

struct LayerData {
  MhcLayer<double> p;
  Mat<double> X;
  Vec<double> v;
};

LayerData make_layer(const LayerCase& c) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<double> N(0, 1);
  const int n = c.n, nC = n * c.C;
  auto rnd = [&](int r, int k, double sd) {
    Mat<double> m(r, k);
    for (Eigen::Index i = 0; i < m.size(); ++i) m(i) = sd * N(rng);
    return m;
  };
  const double sd = 1 / std::sqrt(double(nC));
  LayerData d;
  d.p.phi_pre = rnd(nC, n, sd);
  d.p.phi_post = rnd(nC, n, sd);
  d.p.phi_res = rnd(nC, n * n, sd);
  d.p.a_pre = 1 + N(rng) / 4;
  d.p.a_post = 1 + N(rng) / 4;
  d.p.a_res = c.scale;
  d.p.b_pre = rnd(n, 1, 1);
  d.p.b_post = rnd(n, 1, 1);
  d.p.b_res = rnd(n, n, c.scale / 2);
  d.X = rnd(n, c.C, 1);
  d.v = rnd(c.C, 1, 1);
  return d;
}

template <class T>
MhcConfig<T> layer_config(const LayerCase& c, const LayerData& d) {
  MhcConfig<T> cfg = mhc_config<T>(c.preset(), c.n, c.C);
  MhcLayer<T> q;
  q.phi_pre = convert<T>(d.p.phi_pre);
  q.phi_post = convert<T>(d.p.phi_post);
  q.phi_res = convert<T>(d.p.phi_res);
  q.a_pre = T(d.p.a_pre);
  q.a_post = T(d.p.a_post);
  q.a_res = T(d.p.a_res);
  q.b_pre = convert<T>(d.p.b_pre);
  q.b_post = convert<T>(d.p.b_post);
  q.b_res = convert<T>(d.p.b_res);
  cfg.layers.push_back(q);
  return cfg;
}

oracle::MhcLayerInput<Hi> oracle_input(const MhcConfig<Hi>& c) { return test::mhc_oracle_input(c, 0); }

template <class T>
double ad(const T& x) {  // |x| as a double, through Hi
  using std::abs;
  return to_double(Hi(abs(convert<Hi>(x))));
}

double rel(const S& x, const Hi& y) { return ad(Hi((convert<Hi>(x) - y) / y)); }

/// Sinkhorn bound helper for n x n logits given exactly (d0 = 1: the exp).
oracle::MhcBounds sink_bounds(int n, int rounds) {
  oracle::MhcBounds b;
  b.n = n;
  b.rounds = rounds;
  return b;
}

template <class T>
Mat<T> ref_sinkhorn(const Mat<double>& L, MhcPreset p, int rounds) {
  const auto c = mhc_config<T>(p, static_cast<int>(L.rows()), 1);
  return mhc_sinkhorn<T>(convert<T>(L), rounds, c.res_eps_add, c.res_eps_den);
}

inline void showValue(const LogitCase& c, std::ostream& os) { os << c.str(); }
inline void showValue(const LayerCase& c, std::ostream& os) { os << c.str(); }

}  // namespace

TEST_CASE("one layer: reference (257 bits) == oracle (667 bits)", "[property][mhc]") {
  static double worst = 0;
  prop::check("one layer: reference (257 bits) == oracle (667 bits)", 300, [] {
    const LayerCase c = *gen_layer();
    const LayerData d = make_layer(c);
    const auto cfg = layer_config<S>(c, d);
    const auto in = oracle_input(layer_config<Hi>(c, d));
    Mhc<S> m(cfg);
    typename Mhc<S>::State st;
    st.X = convert<S>(d.X);
    const Vec<S> h = m.read(st, 0);
    const auto coef = st.coef;
    m.write(st, 0, convert<S>(d.v));
    const auto o = oracle::mhc_layer(in, convert<Hi>(d.X), convert<Hi>(d.v));
    const auto b = oracle::mhc_bounds(in, o);
    const std::string where = c.str();
    auto close = [&](const char* what, double err, double bound) {
      DMREF_PROP_CLOSE(what, err, K::mhc * eps * bound, where);
      worst = std::max(worst, err / (eps * bound));
    };
    for (int j = 0; j < c.n; ++j) {
      close("H_pre == sigmoid(a_pre x'.phi_pre + b_pre) (+ eps)", rel(coef.pre(j), o.pre(j)), b.pre());
      close("H_post == 2 sigmoid(a_post x'.phi_post + b_post)", rel(coef.post(j), o.post(j)), b.post());
    }
    for (Eigen::Index i = 0; i < o.res().size(); ++i)
      close("H_res == Sinkhorn_t(exp(Ht_res))", rel(coef.res(i), o.res()(i)), b.res());
    for (int k = 0; k < c.C; ++k)
      close("h == sum_j H_pre[j] X_j", ad(Hi(convert<Hi>(h(k)) - o.h(k))), b.h() * to_double(o.h_abs(k)));
    for (Eigen::Index i = 0; i < o.X.size(); ++i)
      close("X_i <- sum_j H_res[i,j] X_j + H_post[i] v", ad(Hi(convert<Hi>(st.X(i)) - o.X(i))),
            b.carry() * to_double(o.carry_abs(i)) + b.post_mix() * to_double(o.post_abs_v(i)));
  });
  std::cout << "  worst one-layer error / (eps bound) at 257 bits: " << worst << " (k = " << K::mhc << ")\n";
}

TEST_CASE("rows of H_res sum to 1 (paper) or to s/(s + eps) (deepseek-v4)", "[property][mhc]") {
  // The last normalization divides row i by s_i + eps_den: the computed row
  // sum is s'/(s' + e) up to (n + 2) eps (the sum, the eps add, the division),
  // and the reference's s' is within res() eps of the exact s (the oracle's):
  // d[s/(s+e)] = e s ds / (s+e)^2, so  tol = k eps (n + 2 + res() e / (s + e)).
  static double worst = 0;
  prop::check("rows of H_res sum to 1 (paper) or to s/(s + eps) (deepseek-v4)", 200, [] {
    const LogitCase c = *gen_logits(1, 8, 0, 6, 40);
    const bool dsv4 = *rc::gen::arbitrary<bool>();
    const MhcPreset p = dsv4 ? MhcPreset::deepseek_v4 : MhcPreset::paper;
    const Mat<double> L = c.logits();
    const Mat<S> H = ref_sinkhorn<S>(L, p, 20);
    const auto chi = mhc_config<Hi>(p, c.n, 1);
    oracle::SinkhornOptions<Hi> o;
    o.eps_add = chi.res_eps_add;
    o.eps_den = chi.res_eps_den;
    o.subtract_max = true;
    const auto run = oracle::sinkhorn(convert<Hi>(L), o);
    const Vec<Hi>& s = run.sums.back();
    const double res = sink_bounds(c.n, 20).res_given(1);
    for (int i = 0; i < c.n; ++i) {
      Hi sum = 0;
      for (int j = 0; j < c.n; ++j) sum += convert<Hi>(H(i, j));
      const Hi want = s(i) / (s(i) + chi.res_eps_den);
      const double bound = c.n + 2 + res * to_double(Hi(chi.res_eps_den / (s(i) + chi.res_eps_den)));
      DMREF_PROP_CLOSE((dsv4 ? "row sum == s/(s + eps_den)" : "row sum == 1"), ad(Hi(sum - want)), K::mhc * eps * bound,
                       c.str() + " preset " + name(p) + " row " + std::to_string(i));
      worst = std::max(worst, ad(Hi(sum - want)) / (eps * bound));
    }
  });
  std::cout << "  worst row-sum error / (eps bound): " << worst << "\n";
}

TEST_CASE("Sinkhorn rounds contract toward the doubly stochastic limit by Birkhoff's kappa", "[property][mhc]") {
  // B* = diag(r) exp(L) diag(c) from the Newton oracle. The computed H_t has
  // entrywise relative error <= k eps res_given(1) (t rounds), so the measured
  // d_t = d_H(c_t, c*) is within 2 k eps res_given(1) of the exact one, and
  //   d_{t+1} <= kappa d_t  (exact)  =>  measured d_{t+1} <= kappa d_t + tol_{t+1} + kappa tol_t.
  // kappa <= 1, so d_t is non-increasing up to tol; d_20 > 0 shows the
  // finite recurrence, not the limit.
  static double worst_ratio = 0;
  prop::check("Sinkhorn rounds contract toward the doubly stochastic limit by Birkhoff's kappa", 80, [] {
    const LogitCase c = *gen_logits(2, 6, 0.5, 6, 10);
    const Mat<double> L = c.logits();
    const Mat<Hi> Lh = convert<Hi>(L);
    const auto lim = oracle::doubly_stochastic_limit(Lh);
    const Hi kappa = oracle::birkhoff_kappa(Lh);
    const auto b = sink_bounds(c.n, 1);
    auto tol = [&](int t) {
      auto bt = b;
      bt.rounds = t;
      return Hi(2 * K::mhc * eps * bt.res_given(1));
    };
    // In Hi: for n = 2 the bound is attained asymptotically (the rate is
    // sigma_2(B*)^2 = tanh(Delta/4)^2 = kappa), closer than double rounding.
    Hi prev = oracle::hilbert_column_distance(ref_sinkhorn<S>(L, MhcPreset::paper, 1), lim.B);
    for (int t = 2; t <= 20; ++t) {
      const Hi d = oracle::hilbert_column_distance(ref_sinkhorn<S>(L, MhcPreset::paper, t), lim.B);
      const Hi bound = kappa * prev + tol(t) + kappa * tol(t - 1);
      DMREF_PROP_TRUE("d_H(c_t, c*) <= kappa d_H(c_{t-1}, c*)", d <= bound,
                      c.str() + " t=" + std::to_string(t) + " kappa=" + std::to_string(to_double(kappa)) +
                          " d_t=" + std::to_string(to_double(d)) + " bound=" + std::to_string(to_double(bound)));
      if (prev > 1e6 * tol(t)) worst_ratio = std::max(worst_ratio, to_double(Hi(d / prev / kappa)));
      prev = d;
    }
    DMREF_PROP_TRUE("20 rounds are not the limit: d_20 > 0", prev > 0, c.str());
  });
  std::cout << "  largest observed (d_t / d_{t-1}) / kappa: " << worst_ratio << " (<= 1: Birkhoff)\n";
}

TEST_CASE("many rounds: H_res -> diag(r) exp(Ht) diag(c) (Newton oracle)", "[property][mhc]") {
  // |log(H_T / B*)| <= d_T <= kappa^(T-1) d_1 (+ rounding): with |L| <= 0.5,
  // kappa <= tanh(0.5)^2 < 0.22 and 150 rounds are below 257 bits.
  static double worst = 0;
  prop::check("many rounds: H_res -> diag(r) exp(Ht) diag(c) (Newton oracle)", 40, [] {
    const LogitCase c = *gen_logits(1, 6, 0, 0.25, 0.25, false);
    const Mat<double> L = c.logits();
    const Mat<Hi> Lh = convert<Hi>(L);
    const auto lim = oracle::doubly_stochastic_limit(Lh);
    DMREF_PROP_TRUE("Newton converged to 667 bits", to_double(lim.residual) < 1e-190, c.str());
    const Hi kappa = oracle::birkhoff_kappa(Lh);
    oracle::SinkhornOptions<Hi> o;
    o.rounds = 1;
    const Hi d1 = oracle::hilbert_column_distance(oracle::sinkhorn(Lh, o).H, lim.B);
    const int T = 150;
    const Mat<S> H = ref_sinkhorn<S>(L, MhcPreset::paper, T);
    const double bound = to_double(Hi(pow(kappa, Hi(T - 1)) * d1)) + K::mhc * eps * sink_bounds(c.n, T).res_given(1);
    double err = 0;
    for (Eigen::Index i = 0; i < H.size(); ++i) err = std::max(err, ad(Hi(log(convert<Hi>(H(i)) / lim.B(i)))));
    DMREF_PROP_CLOSE("|log(H_150 / B*)| <= kappa^149 d_1 + rounding", err, bound, c.str());
    worst = std::max(worst, err / eps);
  });
  std::cout << "  worst |log(H_150 / B*)| at 257 bits: " << worst << " eps\n";
}

TEST_CASE("paper vs deepseek-v4: differ by >= eps/(n+eps) per row sum, <= the first-order bound per entry",
          "[property][mhc]") {
  // deepseek-v4's first step is P1 + e_a = E' diag(c_1) with E' = E (1 + e_a / P1):
  // a perturbation of log E in [0, delta], delta = log(1 + e_a / min P1); its
  // eps_den divisions scale a line by s/(s + e_d) (log within e_d / s). In
  // scaling form the oscillation of the log scalings grows by at most delta
  // plus that per normalization, so exactly (not only to first order)
  //   |log(H_dsv4 / H_paper)| <= Lambda = (2t - 1) delta + sum_k log(1 + e_d / min s_k)
  //                          ~= (2t - 1) e_a / min P1 + e_d sum_k 1 / min s_k,
  // s_k the sums of deepseek-v4's 2t - 1 eps_den normalizations (oracle).
  // Lower bound: a deepseek-v4 row sums to s/(s + e_d) with s <= n (after a
  // column normalization every column sums to <= 1), so 1 - row sum >= e_d / (n + e_d).
  static double worst_ratio = 0, smallest_gap = 1;
  prop::check("paper vs deepseek-v4: differ by >= eps/(n+eps) per row sum, <= the first-order bound per entry", 100,
              [] {
                const LogitCase c = *gen_logits(1, 6, 0, 3, 20, false);
                const Mat<double> L = c.logits();
                const int t = 20, n = c.n;
                const Mat<S> Hp = ref_sinkhorn<S>(L, MhcPreset::paper, t);
                const Mat<S> Hd = ref_sinkhorn<S>(L, MhcPreset::deepseek_v4, t);
                const auto chi = mhc_config<Hi>(MhcPreset::deepseek_v4, n, 1);
                oracle::SinkhornOptions<Hi> o;
                o.rounds = t;
                o.subtract_max = true;
                const auto paper = oracle::sinkhorn(convert<Hi>(L), o);
                o.eps_add = chi.res_eps_add;
                o.eps_den = chi.res_eps_den;
                const auto dsv4 = oracle::sinkhorn(convert<Hi>(L), o);
                Hi lambda = (2 * t - 1) * log1p(chi.res_eps_add / paper.first.minCoeff());
                for (std::size_t k = 1; k < dsv4.sums.size(); ++k)
                  lambda += log1p(chi.res_eps_den / dsv4.sums[k].minCoeff());
                const Hi growth = expm1(lambda);
                const double res = sink_bounds(n, t).res_given(1);
                for (Eigen::Index i = 0; i < Hp.size(); ++i) {
                  const Hi hp = convert<Hi>(Hp(i)), hdv = convert<Hi>(Hd(i));
                  const double diff = ad(Hi(hdv - hp));
                  const double bound = to_double(Hi(hp * growth)) + K::mhc * eps * res * to_double(Hi(hp + hdv));
                  DMREF_PROP_CLOSE("|H_dsv4 - H_paper| <= H_paper (exp(Lambda) - 1)", diff, bound,
                                   c.str() + " entry " + std::to_string(i) + " Lambda=" + std::to_string(to_double(lambda)));
                  worst_ratio = std::max(worst_ratio, diff / to_double(Hi(hp * growth)));
                }
                const double e = to_double(chi.res_eps_den);
                for (int i = 0; i < n; ++i) {
                  Hi sp = 0, sd = 0;
                  for (int j = 0; j < n; ++j) {
                    sp += convert<Hi>(Hp(i, j));
                    sd += convert<Hi>(Hd(i, j));
                  }
                  const double gap = ad(Hi(sp - sd));
                  // Each row sum is within k eps (n + 2 + res) of its exact value (previous property).
                  DMREF_PROP_TRUE("row sums differ by >= e_d / (n + e_d)",
                                  gap >= e / (n + e) - 2 * K::mhc * eps * (n + 2 + res), c.str());
                  smallest_gap = std::min(smallest_gap, gap / (e / (n + e)));
                }
              });
  std::cout << "  largest |H_dsv4 - H_paper| / (H_paper (exp(Lambda) - 1)): " << worst_ratio
            << "; smallest row-sum gap / (e/(n+e)): " << smallest_gap << "\n";
}

TEST_CASE("max-subtracted Sinkhorn == reference (both presets)", "[property][mhc]") {
  // DeepSeek adds eps after the softmax, so subtracting the column max is
  // exact in real arithmetic for both presets; the computations differ by the
  // rounding of L - m: tol = k eps (res_given(1) + res_given(1 + max |L - m|)).
  static double worst = 0;
  prop::check("max-subtracted Sinkhorn == reference (both presets)", 200, [] {
    const LogitCase c = *gen_logits(1, 8, 0, 6, 40);
    const bool dsv4 = *rc::gen::arbitrary<bool>();
    const MhcPreset p = dsv4 ? MhcPreset::deepseek_v4 : MhcPreset::paper;
    const Mat<double> L = c.logits();
    const Mat<S> H = ref_sinkhorn<S>(L, p, 20);
    const auto cs = mhc_config<S>(p, c.n, 1);
    oracle::SinkhornOptions<S> o;
    o.eps_add = cs.res_eps_add;
    o.eps_den = cs.res_eps_den;
    o.subtract_max = true;
    const Mat<S> Hm = oracle::sinkhorn(convert<S>(L), o).H;
    const auto b = sink_bounds(c.n, 20);
    const double bound = b.res_given(1) + b.res_given(1 + c.spread());
    for (Eigen::Index i = 0; i < H.size(); ++i) {
      const double err = rel(H(i), convert<Hi>(Hm(i)));
      DMREF_PROP_CLOSE("Sinkhorn(exp(L)) == Sinkhorn(exp(L - colmax))", err, K::mhc * eps * bound,
                       c.str() + " preset " + name(p));
      worst = std::max(worst, err / eps);
    }
  });
  std::cout << "  worst |max-subtracted - reference| relative: " << worst << " eps\n";
}

TEST_CASE("row-then-column: columns sum to 1, it is the mirror of column-then-row, a gate sees the difference",
          "[property][mhc]") {
  // rc(L) == cr(L^T)^T exactly (mirrored operations); the paper's rc has
  // columns summing to 1 to (n + 1) eps; and since sum_i (cr - rc)_ij =
  // (colsum_j(cr) - 1) - (colsum_j(rc) - 1), n max |cr - rc| >= max_j (|colsum_j(cr) - 1|
  // - |colsum_j(rc) - 1|): a kernel normalizing rows first is off by at least that
  // (O(1e-2) for nearly triangular exp(L), drop >= 8).
  static double largest = 0;
  prop::check("row-then-column: columns sum to 1, it is the mirror of column-then-row, a gate sees the difference",
              100, [] {
                const LogitCase c = *gen_logits(1, 8, 0, 6, 10);
                const bool dsv4 = *rc::gen::arbitrary<bool>();
                const MhcPreset p = dsv4 ? MhcPreset::deepseek_v4 : MhcPreset::paper;
                const auto cs = mhc_config<S>(p, c.n, 1);
                const Mat<S> L = convert<S>(c.logits());
                oracle::SinkhornOptions<S> o;
                o.eps_add = cs.res_eps_add;
                o.eps_den = cs.res_eps_den;
                o.order = oracle::SinkhornOrder::row_first;
                const Mat<S> Hrc = oracle::sinkhorn(L, o).H;
                o.order = oracle::SinkhornOrder::column_first;
                const Mat<S> HcrT = oracle::sinkhorn(Mat<S>(L.transpose()), o).H;
                const std::string where = c.str() + " preset " + name(p);
                DMREF_PROP_TRUE("rc(L) == cr(L^T)^T", Hrc == Mat<S>(HcrT.transpose()), where);
                const Mat<S> H = mhc_sinkhorn<S>(L, cs.t_max, cs.res_eps_add, cs.res_eps_den);
                Hi dist = 0, lower = 0;
                for (Eigen::Index i = 0; i < H.size(); ++i)
                  dist = std::max<Hi>(dist, abs(Hi(convert<Hi>(H(i)) - convert<Hi>(Hrc(i)))));
                for (int j = 0; j < c.n; ++j) {
                  Hi sr = 0, sh = 0;
                  for (int i = 0; i < c.n; ++i) {
                    sr += convert<Hi>(Hrc(i, j));
                    sh += convert<Hi>(H(i, j));
                  }
                  if (!dsv4) DMREF_PROP_CLOSE("rc: column sums == 1", ad(Hi(sr - 1)), K::mhc * eps * (c.n + 1), where);
                  lower = std::max<Hi>(lower, Hi(abs(Hi(sh - 1)) - abs(Hi(sr - 1))));
                }
                // Sums, differences and small multiples of 257-bit numbers are exact at 667 bits: no slack.
                DMREF_PROP_TRUE("n max |cr - rc| >= max_j (|colsum_j(cr) - 1| - |colsum_j(rc) - 1|)",
                                Hi(c.n * dist) >= lower, where);
                largest = std::max(largest, to_double(dist));
              });
  std::cout << "  largest max |cr - rc| seen: " << largest << "\n";
}

TEST_CASE("n = 1: mHC == gated residual X + H_post F(H_pre X)", "[property][mhc]") {
  // H_res = rho_t exactly (paper: 1), the scalar recurrence of test_mhc.cpp;
  // the gates match the oracle's sigmoids.
  prop::check("n = 1: mHC == gated residual X + H_post F(H_pre X)", 100, [] {
    const LayerCase c = *gen_layer(1, 1);
    const LayerData d = make_layer(c);
    const auto cfg = layer_config<S>(c, d);
    Mhc<S> m(cfg);
    typename Mhc<S>::State st;
    st.X = convert<S>(d.X);
    const Vec<S> h = m.read(st, 0);
    const auto coef = st.coef;
    m.write(st, 0, convert<S>(d.v));
    S rho = S(1) + cfg.res_eps_add;
    for (int i = 0; i < 2 * cfg.t_max - 1; ++i) rho = rho / (rho + cfg.res_eps_den);
    const Mat<S> X = convert<S>(d.X);
    DMREF_PROP_TRUE("H_res == rho_t", coef.res(0, 0) == rho, c.str());
    DMREF_PROP_TRUE("paper: H_res == 1", c.dsv4 || coef.res(0, 0) == 1, c.str());
    DMREF_PROP_TRUE("h == H_pre X", h == Vec<S>(coef.pre(0) * X.row(0).transpose()), c.str());
    DMREF_PROP_TRUE("X' == rho X + H_post v", st.X == Mat<S>(rho * X.row(0) + coef.post(0) * convert<S>(d.v).transpose()),
                    c.str());
    const auto in = oracle_input(layer_config<Hi>(c, d));
    const auto o = oracle::mhc_layer(in, convert<Hi>(d.X), convert<Hi>(d.v));
    const auto b = oracle::mhc_bounds(in, o);
    DMREF_PROP_CLOSE("H_pre == sigmoid(.) (+ eps)", rel(coef.pre(0), o.pre(0)), K::mhc * eps * b.pre(), c.str());
    DMREF_PROP_CLOSE("H_post == 2 sigmoid(.)", rel(coef.post(0), o.post(0)), K::mhc * eps * b.post(), c.str());
  });
}
