// mHC on Balls: the centred (mean-value) Sinkhorn enclosure of
// mhc_sinkhorn_centred (mhc.hpp, docs/precision.md "Centred form"), against
// 667-bit MPFR points and against the naive ball evaluation; and where one
// model-level mHC layer widens its enclosures, sub-step by sub-step.
//
// Independent values: oracle::sinkhorn (oracles/.../mhc_sinkhorn.hpp) and
// oracle::mhc_layer at 667 bits (Hi), never the reference.
#include "check.hpp"
#include "mhc_cases.hpp"

#include "dmref/ball_jet.hpp"
#include "dmref/layers.hpp"
#include "dmref/mhc.hpp"
#include "dmref/oracles/mhc_layer.hpp"
#include "dmref/oracles/mhc_sinkhorn.hpp"

#include <catch2/catch.hpp>

#include <mpfr.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace dmref;
using dmref::test::convert_layer;
using Hi = mp200;
using dmref::test::K;

namespace {

Hi to_hi(const arf_t x) {
  Hi r;
  arf_get_mpfr(r.backend().data(), x, MPFR_RNDN);
  return r;
}
Hi mid_hi(const Ball& b) { return to_hi(arb_midref(b.get())); }
Hi rad_hi(const Ball& b) {
  arf_t r;
  arf_init(r);
  arf_set_mag(r, arb_radref(b.get()));
  Hi x = to_hi(r);
  arf_clear(r);
  return x;
}
double rad_d(const Ball& b) { return mag_get_d(arb_radref(b.get())); }
double log2_hi(const Hi& x) { return to_double(Hi(log(x) / log(Hi(2)))); }

/// A ball with midpoint m (exact) and radius rel * |m| (rounded up by Arb's mag).
Ball ball(double m, double rel) {
  Ball b(m);
  mag_set_d(arb_radref(b.get()), std::abs(m) * rel);
  return b;
}

/// |mid(b) - x| <= rad(b) + tol: b contains x up to the error tol of x.
bool contains(const Ball& b, const Hi& x, const Hi& tol) {
  using std::abs;
  return abs(mid_hi(b) - x) <= rad_hi(b) + tol;
}

struct SinkCase {
  int n;
  double scale, offset;
  bool dsv4;  // DeepSeek-V4 epsilons (1e-6 after the first normalization and in later denominators)
  std::uint64_t seed;
};

}  // namespace

TEST_CASE("Centred Sinkhorn on Balls: encloses 667-bit points of the ball, at the image's own width",
          "[mhc][ball][sinkhorn]") {
  // Logits: n x n balls, midpoints doubles, radius r_j = 2^-200 |m_j|, at
  // p = 512 bits. A point L* of the ball is m + t r (t a double in [-1, 1]
  // or a corner t = +-1): exact in Hi (667 bits span 2^0 .. 2^-512 of m).
  //
  // Containment tolerance (the error of the Hi point value): oracle::sinkhorn
  // is the same recurrence; a line sum of n positive terms with relative
  // errors <= e has error <= e + (n - 1) u, the quotient <= 2e + n u, so after
  // the 2 t normalizations |error| <= 2^(2t+1) n u |x| (u = 2^-667, the exp
  // adds u, inside the bound) -- 2^-620 for t = 20, n = 6, against a
  // radius of about 2^-200.
  //
  // Tightness: to first order the image of the box is the box of half-widths
  // sum_j |J_kj(m)| r_j, which any enclosure must contain. J(m) by central
  // differences in Hi with step h_j = 2^-120 |m_j|: truncation O(h^2) ~ 2^-240
  // relative, rounding ~ 2^-620 / 2^-120: both below 2^-200. The centred radius
  // may exceed it by: J's enclosure width (~2^-58 relative, mhc.hpp), Arb's
  // 30-bit radius arithmetic rounded up (N + 2 <= 38 roundings of 2^-29:
  // < 2^-23), the second-order term (J's spread over the ball, ~2^46 r ~
  // 2^-154 relative); plus rad S(m) and the rounding to p, <= 2^(1-p) |S_k|.
  // Hence
  //   rad <= (1 + 2^-16) sum_j |J_kj| r_j + 2^(1-p) |S_k|.
  // The naive evaluation (mhc_sinkhorn<Ball>) is also run: the centred radius
  // must be no larger, and the ratio is reported (~2^(2t) expected).
  const BallPrecision guard(512);
  const double rel = std::ldexp(1.0, -200);
  const std::vector<SinkCase> cases = {
      {4, 1.0, 0.0, false, 1}, {4, 3.0, 2.0, false, 2}, {4, 2.0, 1.0, true, 3},
      {2, 2.0, 0.0, false, 4}, {6, 1.5, 1.0, true, 5},
  };
  for (const auto& sc : cases) {
    const int n = sc.n, N = n * n, t = 20;
    std::mt19937_64 rng(sc.seed);
    std::uniform_real_distribution<double> U(-1, 1);
    Mat<double> m(n, n);
    for (int j = 0; j < n; ++j) {
      const double off = sc.offset * U(rng);
      for (int i = 0; i < n; ++i) m(i, j) = sc.scale * U(rng) + off;
    }
    Mat<Ball> L(n, n);
    for (int i = 0; i < N; ++i) L(i) = ball(m(i), rel);
    const Ball eps = sc.dsv4 ? Ball(1) / Ball(1000000) : Ball(0);
    const Hi eps_hi = sc.dsv4 ? Hi(1) / Hi(1000000) : Hi(0);
    oracle::SinkhornOptions<Hi> o;
    o.rounds = t;
    o.eps_add = o.eps_den = eps_hi;

    const Mat<Ball> C = mhc_sinkhorn_centred(L, t, eps, eps);
    const Mat<Ball> naive = mhc_sinkhorn<Ball>(L, t, eps, eps);
    INFO("n=" << n << " scale=" << sc.scale << " offset=" << sc.offset << " dsv4=" << sc.dsv4);

    // Points: the midpoint, 64 random corners, 64 random interior points.
    const Hi tol_rel = Hi(n) * pow(Hi(2), 2 * t + 1 - 667);
    auto point = [&](const std::vector<double>& tt) {
      Mat<Hi> P(n, n);
      for (int i = 0; i < N; ++i) P(i) = Hi(m(i)) + Hi(tt[i]) * Hi(std::abs(m(i)) * rel);
      return oracle::sinkhorn<Hi>(P, o).H;
    };
    int checked = 0;
    for (int s = 0; s < 129; ++s) {
      std::vector<double> tt(N, 0.0);
      if (s > 0)
        for (auto& x : tt) x = s <= 64 ? (U(rng) < 0 ? -1.0 : 1.0) : U(rng);
      const Mat<Hi> H = point(tt);
      for (int k = 0; k < N; ++k) {
        INFO("point " << s << " entry " << k);
        REQUIRE(contains(C(k), H(k), tol_rel * abs(H(k))));
        ++checked;
      }
    }
    CHECK(checked == 129 * N);

    // Tightness against the first-order image width, and against naive.
    const Mat<Hi> Hm = point(std::vector<double>(N, 0.0));
    Mat<Hi> Jfd(N, N);
    for (int j = 0; j < N; ++j) {
      const double hrel = std::ldexp(1.0, -120) / rel;  // h_j = 2^-120 |m_j| in units of r_j
      std::vector<double> tp(N, 0.0), tm(N, 0.0);
      tp[j] = hrel;
      tm[j] = -hrel;
      const Mat<Hi> Sp = point(tp), Sn = point(tm);
      const Hi h = Hi(std::abs(m(j))) * Hi(rel) * Hi(hrel);
      for (int k = 0; k < N; ++k) Jfd(k, j) = (Sp(k) - Sn(k)) / (2 * h);
    }
    double worst_ratio_naive = 1e300, worst_tight = 0;
    for (int k = 0; k < N; ++k) {
      Hi first_order = 0;
      for (int j = 0; j < N; ++j) first_order += abs(Jfd(k, j)) * Hi(std::abs(m(j)) * rel);
      const Hi bound = (1 + pow(Hi(2), -16)) * first_order + pow(Hi(2), 1 - 512) * abs(Hm(k));
      INFO("entry " << k << ": centred radius " << rad_d(C(k)) << ", first-order image half-width "
                    << to_double(first_order) << ", naive radius " << rad_d(naive(k)));
      CHECK(rad_hi(C(k)) <= bound);
      CHECK(rad_hi(C(k)) <= rad_hi(naive(k)));
      worst_ratio_naive = std::min(worst_ratio_naive, to_double(Hi(rad_hi(naive(k)) / rad_hi(C(k)))));
      worst_tight = std::max(worst_tight, to_double(Hi(rad_hi(C(k)) / first_order)));
    }
    WARN("n=" << n << " scale=" << sc.scale << (sc.dsv4 ? " dsv4" : " paper") << ": centred radius <= "
              << worst_tight << " x the image's first-order half-width; naive radius >= " << worst_ratio_naive
              << " x centred (2^" << std::log2(worst_ratio_naive) << ")");
  }
}

TEST_CASE("BallJet: exact derivative rules enclose the derivative at every point of the ball", "[ball][jet]") {
  // f(x, y) = exp(x) / (x + y) - x * y at a ball around (0.75, 1.5):
  // df/dx = exp(x)/(x+y) - exp(x)/(x+y)^2 - y, df/dy = -exp(x)/(x+y)^2 - x,
  // evaluated in Hi at the corners and the midpoint (error < 2^-660 relative).
  const BallPrecision guard(256);
  const double r = std::ldexp(1.0, -60);
  const BallJet x = BallJet::variable(ball(0.75, r), 0, 2), y = BallJet::variable(ball(1.5, r), 1, 2);
  const BallJet f = exp(x) / (x + y) - x * y;
  REQUIRE(f.d.size() == 2);
  for (double sx : {-1.0, 0.0, 1.0})
    for (double sy : {-1.0, 0.0, 1.0}) {
      const Hi X = Hi(0.75) * (1 + Hi(sx) * Hi(r)), Y = Hi(1.5) * (1 + Hi(sy) * Hi(r));
      const Hi e = exp(X), s = X + Y;
      const Hi tol = pow(Hi(2), -650);
      INFO("corner " << sx << ", " << sy);
      CHECK(contains(f.v, e / s - X * Y, tol));
      CHECK(contains(f.d[0], e / s - e / (s * s) - Y, tol));
      CHECK(contains(f.d[1], -e / (s * s) - X, tol));
    }
  // A constant has no gradient; mixing it in keeps the variable's.
  const BallJet c = BallJet(2.0) * x + 3;
  REQUIRE(c.d.size() == 2);
  CHECK(contains(c.d[0], Hi(2), Hi(0)));
  CHECK(contains(c.d[1], Hi(0), Hi(0)));
  CHECK(BallJet(2.0).d.empty());
}

namespace {

/// A model-level mHC layer drawn as bench/make_inputs.py draws it (paper
/// preset, n = 4, d = C: phi ~ U(-1,1)/sqrt(nC), phi_res twice that,
/// a ~ U(0.5, 1.5), b_pre/b_post ~ U(-0.5, 0.5), b_res ~ U(-1, 1); the layer
/// MLP W1 ~ U(-1,1)/sqrt(C), W2 ~ U(-1,1)/sqrt(hidden)), rounded to bf16 there;
/// here doubles (bf16 rounding changes no width).
struct ModelLayer {
  MhcLayer<double> p;
  Mat<double> W1, W2;
};

ModelLayer model_layer(int n, int C, int hidden, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> U(-1, 1), A(0.5, 1.5);
  auto rnd = [&](int r, int c, double s) {
    Mat<double> x(r, c);
    for (Eigen::Index i = 0; i < x.size(); ++i) x(i) = s * U(rng);
    return x;
  };
  const double s = 1 / std::sqrt(double(n * C));
  ModelLayer m;
  m.p.phi_pre = rnd(n * C, n, s);
  m.p.phi_post = rnd(n * C, n, s);
  m.p.phi_res = rnd(n * C, n * n, 2 * s);
  m.p.a_pre = A(rng);
  m.p.a_post = A(rng);
  m.p.a_res = A(rng);
  m.p.b_pre = rnd(n, 1, 0.5);
  m.p.b_post = rnd(n, 1, 0.5);
  m.p.b_res = rnd(n, n, 1.0);
  m.W1 = rnd(hidden, C, 1 / std::sqrt(double(C)));
  m.W2 = rnd(C, hidden, 1 / std::sqrt(double(hidden)));
  return m;
}

/// Norm-wise relative radius of a set of balls: max rad / max |mid|.
template <class M>
double rel_width(const M& x) {
  double r = 0, a = 0;
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    r = std::max(r, rad_d(x(i)));
    a = std::max(a, std::abs(to_double(x(i))));
  }
  return r / a;
}

}  // namespace

TEST_CASE("Where one model-level mHC layer widens its enclosures (naive vs centred Sinkhorn)",
          "[mhc][ball][widths]") {
  // Streams X (n = 4, C = 64) as balls of relative radius 2^-1000 at 2048
  // bits, after a few layers (so X is a realistic state); then one more
  // layer's sub-steps, each reported as log2(relative width / input's). The
  // naive Sinkhorn rows come from mhc_sinkhorn<Ball> after t rounds; the
  // centred row is what Mhc<Ball> computes. Then 12 layers each way: the
  // growth per layer. Checked: every centred layer's H_res and X agree with
  // the 667-bit oracle layer (oracle::mhc_layer) at the input's midpoint to
  // the oracle's own accuracy (the radii here, ~2^-1000, are below it: that
  // the radius encloses is the Sinkhorn test's job, at 2^-200); and the
  // centred growth per layer is below the naive one. Reported: the widths.
  const BallPrecision guard(2048);
  const int n = 4, C = 64, hidden = 64, t = 20;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> U(-1, 1);
  MhcConfig<Ball> cfg = mhc_config<Ball>(MhcPreset::paper, n, C);
  MhcConfig<Hi> cfg_hi = mhc_config<Hi>(MhcPreset::paper, n, C);
  std::vector<ModelLayer> layers;
  const int depth = 12;
  for (int l = 0; l < depth; ++l) {
    layers.push_back(model_layer(n, C, hidden, rng));
    cfg.layers.push_back(convert_layer<Ball>(layers.back().p));
    cfg_hi.layers.push_back(convert_layer<Hi>(layers.back().p));
  }
  const Mhc<Ball> mhc(cfg);
  auto F = [&](int l) { return TanhMlpLayer<Ball>{convert<Ball>(layers[l].W1), convert<Ball>(layers[l].W2)}; };
  Vec<double> e(C);
  for (auto& x : e) x = U(rng);

  // Sub-steps of layer 0 from point streams widened to 2^-1000.
  const double r0 = std::ldexp(1.0, -1000);
  auto State0 = mhc.init(convert<Ball>(e));
  for (Eigen::Index i = 0; i < State0.X.size(); ++i)
    mag_set_d(arb_radref(State0.X(i).get()), std::abs(to_double(State0.X(i))) * r0);
  const Mat<Ball>& X = State0.X;
  const auto& p = cfg.layers[0];
  std::ostringstream table;
  auto row = [&](const std::string& what, double w) {
    table << "  " << what << ": " << (w > 0 ? std::log2(w / r0) : -9999) << " bits\n";
  };
  row("X (input)", rel_width(X));
  const Vec<Ball> xn = rms_norm<Ball>(mhc_vec<Ball>(X), cfg.rms_eps);
  row("RMSNorm x'", rel_width(xn));
  const Vec<Ball> pre_l = p.a_pre * Vec<Ball>(p.phi_pre.transpose() * xn) + p.b_pre;
  const Vec<Ball> post_l = p.a_post * Vec<Ball>(p.phi_post.transpose() * xn) + p.b_post;
  const Vec<Ball> rr = p.phi_res.transpose() * xn;
  Mat<Ball> res_l(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) res_l(i, j) = p.a_res * rr(i * n + j) + p.b_res(i, j);
  row("phi projection (pre, post logits)", std::max(rel_width(pre_l), rel_width(post_l)));
  row("phi projection (res logits)", rel_width(res_l));
  row("sigmoid gates H_pre, H_post", std::max(rel_width(pre_l.unaryExpr([](const Ball& z) { return sigmoid(z); })),
                                              rel_width(post_l.unaryExpr([](const Ball& z) { return sigmoid(z); }))));
  row("exp(res logits)", rel_width(res_l.unaryExpr([](const Ball& z) { return exp(z); })));
  for (int k = 1; k <= t; ++k)
    if (k <= 3 || k % 5 == 0) row("naive Sinkhorn, round " + std::to_string(k), rel_width(mhc_sinkhorn<Ball>(res_l, k)));
  const Mat<Ball> Hc = mhc_sinkhorn_centred(res_l, t, Ball(0), Ball(0));
  row("centred Sinkhorn, 20 rounds", rel_width(Hc));
  const auto coef = mhc.coefficients(X, 0);
  const Vec<Ball> h = mhc_mix<Ball>(X, coef.pre);
  row("read h = sum H_pre X", rel_width(h));
  const Vec<Ball> v = F(0)(h);
  row("layer MLP v = F(h)", rel_width(v));
  row("write X' (centred H_res)", rel_width(mhc_update<Ball>(X, coef, v)));
  MhcCoefficients<Ball> coef_naive = coef;
  coef_naive.res = mhc_sinkhorn<Ball>(res_l, t);
  row("write X' (naive H_res)", rel_width(mhc_update<Ball>(X, coef_naive, v)));

  // Layer by layer: centred (Mhc<Ball>) and naive (its H_res replaced), each
  // layer checked (centred) against the oracle at its input's midpoint.
  const double eHi = to_double(epsilon<Hi>());
  Mat<Ball> Xc = X, Xn = X;
  std::vector<double> wc{rel_width(Xc)}, wn{rel_width(Xn)};
  for (int l = 0; l < depth; ++l) {
    auto kc = mhc.coefficients(Xc, l);
    const Vec<Ball> vc = F(l)(mhc_mix<Ball>(Xc, kc.pre));
    const Mat<Hi> mid = Xc.unaryExpr([](const Ball& b) { return mid_hi(b); });
    const Mat<Ball> Xc_next = mhc_update<Ball>(Xc, kc, vc);
    // The oracle's layer at the midpoint, with v = the MLP at the midpoint's h
    // (the ball vc contains it: v is a function of X alone).
    oracle::MhcLayerInput<Hi> in;
    in.n = n;
    in.C = C;
    in.phi_pre = cfg_hi.layers[l].phi_pre;
    in.phi_post = cfg_hi.layers[l].phi_post;
    in.phi_res = cfg_hi.layers[l].phi_res;
    in.a_pre = cfg_hi.layers[l].a_pre;
    in.a_post = cfg_hi.layers[l].a_post;
    in.a_res = cfg_hi.layers[l].a_res;
    in.b_pre = cfg_hi.layers[l].b_pre;
    in.b_post = cfg_hi.layers[l].b_post;
    in.b_res = cfg_hi.layers[l].b_res;
    in.rms_eps = cfg_hi.rms_eps;
    in.post_scale = cfg_hi.post_scale;
    in.rounds = t;
    // h at the midpoint in Hi, then v = F(h) in Hi (same MLP formula as layers.hpp).
    const auto o0 = oracle::mhc_layer(in, mid, Vec<Hi>(Vec<Hi>::Zero(C)));
    const Vec<Hi> vhi = TanhMlpLayer<Hi>{convert<Hi>(layers[l].W1), convert<Hi>(layers[l].W2)}(o0.h);
    const auto o = oracle::mhc_layer(in, mid, vhi);
    const auto b = oracle::mhc_bounds(in, o);
    for (Eigen::Index i = 0; i < o.res().size(); ++i) {
      INFO("layer " << l << " H_res[" << i << "]");
      CHECK(contains(kc.res(i), o.res()(i), Hi(K::mhc * eHi * b.oracle_res()) * abs(o.res()(i))));
    }
    // X' also depends on v through F, whose Hi value differs from exact by far
    // less than the 2^-1000 input width (a few hundred roundings at 2^-667).
    for (Eigen::Index i = 0; i < o.X.size(); ++i) {
      INFO("layer " << l << " X[" << i << "]");
      CHECK(contains(Xc_next(i), o.X(i), pow(Hi(2), -600) * (1 + abs(o.X(i)))));
    }
    Xc = Xc_next;
    auto kn = mhc.coefficients(Xn, l);
    Mat<Ball> rl(n, n);
    for (Eigen::Index i = 0; i < rl.size(); ++i) rl(i) = kn.res_logits(i);
    kn.res = mhc_sinkhorn<Ball>(rl, t);
    const Vec<Ball> vn = F(l)(mhc_mix<Ball>(Xn, kn.pre));
    Xn = mhc_update<Ball>(Xn, kn, vn);
    wc.push_back(rel_width(Xc));
    wn.push_back(rel_width(Xn));
  }
  table << "  per layer, X after layer l (bits over the input's 2^-1000), centred / naive:";
  for (int l = 1; l <= depth; ++l)
    table << " " << std::lround(std::log2(wc[l] / r0)) << "/" << std::lround(std::log2(wn[l] / r0));
  const double per_c = std::log2(wc[depth] / wc[2]) / (depth - 2), per_n = std::log2(wn[depth] / wn[2]) / (depth - 2);
  table << "\n  growth per layer (layers 3.." << depth << "): centred " << per_c << " bits, naive " << per_n << " bits";
  WARN("mHC layer on Balls at 2048 bits, n = 4, C = 64, input relative radius 2^-1000:\n" << table.str());
  // The centred Sinkhorn must remove the naive one's ~2 bits per normalization.
  CHECK(per_c < per_n);
}
