// Unit tests of Manifold-Constrained Hyper-Connections (reference/include/dmref/mhc.hpp)
// against the independent oracles (oracles/include/dmref/oracles/mhc_*.hpp).
// Expected values are computed at 667 bits (mp200); tolerances: check.hpp (K::mhc)
// times the a priori bounds of oracle::MhcBounds.
#include "check.hpp"
#include "mhc_cases.hpp"

#include "dmref/mhc.hpp"
#include "dmref/oracles/mhc_doubly_stochastic.hpp"
#include "dmref/oracles/mhc_layer.hpp"
#include "dmref/oracles/mhc_sinkhorn.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

using namespace dmref;
using dmref::test::K;
using dmref::test::convert_layer;
using Hi = mp200;

namespace {

/// The oracle's Sinkhorn with the config's rounds and eps, the column max
/// subtracted before the softmax (the overflow-safe form of both presets).
template <class T>
oracle::SinkhornOptions<T> max_subtracted(const MhcConfig<T>& c) {
  oracle::SinkhornOptions<T> o;
  o.rounds = c.t_max;
  o.eps_add = c.res_eps_add;
  o.eps_den = c.res_eps_den;
  o.subtract_max = true;
  return o;
}

struct Shape {
  int n = 4, C = 8, L = 6;
  double scale = 1;  // spread of the residual logits (a_res)
  MhcPreset preset = MhcPreset::paper;
  std::uint64_t seed = 1;
};

std::string describe(const Shape& s) {
  std::ostringstream o;
  o << "n=" << s.n << " C=" << s.C << " L=" << s.L << " scale=" << s.scale
    << " preset=" << (s.preset == MhcPreset::paper ? "paper" : "deepseek-v4") << " seed=" << s.seed;
  return o.str();
}

/// A random problem in doubles: layers, embedding, layer outputs, a tanh MLP.
struct Case {
  Shape shape;
  MhcConfig<double> cfg;  // only the layers, head, init and t_max are used
  Vec<double> e;
  std::vector<Vec<double>> v;
  Mat<double> W1, W2;  // F(h) = W2 tanh(W1 RMSNorm(h))
};

Case make_case(const Shape& s) {
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<double> N(0, 1);
  const int n = s.n, C = s.C, nC = n * C;
  auto rnd = [&](int r, int c, double sd) {
    Mat<double> m(r, c);
    for (Eigen::Index i = 0; i < m.size(); ++i) m(i) = sd * N(rng);
    return m;
  };
  Case k;
  k.shape = s;
  k.cfg.n = n;
  k.cfg.C = C;
  const double sd = 1 / std::sqrt(double(nC));  // x' has RMS 1: logits ~ N(0, 1) before scaling
  for (int l = 0; l < s.L; ++l) {
    MhcLayer<double> p;
    p.phi_pre = rnd(nC, n, sd);
    p.phi_post = rnd(nC, n, sd);
    p.phi_res = rnd(nC, n * n, sd);
    p.a_pre = 0.5 + 0.1 * l;
    p.a_post = 0.75;
    p.a_res = s.scale;
    p.b_pre = rnd(n, 1, 0.5);
    p.b_post = rnd(n, 1, 0.5);
    p.b_res = rnd(n, n, 0.5 * s.scale);
    k.cfg.layers.push_back(p);
    k.v.push_back(rnd(C, 1, 1));
  }
  k.cfg.head.phi = rnd(nC, n, sd);
  k.cfg.head.a = 0.8;
  k.cfg.head.b = rnd(n, 1, 0.5);
  k.e = rnd(C, 1, 1);
  k.W1 = rnd(2 * C, C, 1 / std::sqrt(double(C)));
  k.W2 = rnd(C, 2 * C, 1 / std::sqrt(double(2 * C)));
  return k;
}

/// The case's configuration at S: the preset's constants (rounded once at S),
/// the case's layers.
template <class S>
MhcConfig<S> config(const Case& k, MhcReduce reduce = MhcReduce::sum) {
  MhcConfig<S> c = mhc_config<S>(k.shape.preset, k.shape.n, k.shape.C);
  for (const auto& p : k.cfg.layers) c.layers.push_back(convert_layer<S>(p));
  c.reduce = reduce;
  c.head.phi = convert<S>(k.cfg.head.phi);
  c.head.a = S(k.cfg.head.a);
  c.head.b = convert<S>(k.cfg.head.b);
  return c;
}

/// The oracle's input for layer l, at Hi.
oracle::MhcLayerInput<Hi> oracle_input(const Case& k, int l) { return test::mhc_oracle_input(config<Hi>(k), l); }

template <class S>
TanhMlpLayer<S> layer_fn(const Case& k) {
  return {convert<S>(k.W1), convert<S>(k.W2)};
}

template <class S>
double hd(const S& x) {  // |x| as a double, through Hi
  using std::abs;
  return to_double(Hi(abs(convert<Hi>(x))));
}

/// Worst error / (eps * bound) per checked quantity.
struct Worst {
  double logit = 0, pre = 0, post = 0, res = 0, h = 0, X = 0;
  double res_eps = 0, coef_eps = 0;  // largest relative error of H_res, of H_pre / H_post, in eps
  std::string str() const {
    std::ostringstream o;
    o << "logits " << logit << ", H_pre " << pre << ", H_post " << post << ", H_res " << res << ", h " << h
      << ", X " << X << "; largest relative error of H_res " << res_eps << " eps, of H_pre/H_post " << coef_eps
      << " eps";
    return o.str();
  }
};

/// One layer of the reference (coefficients, h, X after the write) against the
/// oracle applied to the reference's own X before the layer and its own v.
template <class S>
void check_layer(const oracle::MhcLayerInput<Hi>& in, const Mat<S>& Xprev, const Vec<S>& v,
                 const MhcCoefficients<S>& coef, const Vec<S>& h, const Mat<S>& Xnew, Worst& w,
                 const std::string& where) {
  const auto o = oracle::mhc_layer(in, convert<Hi>(Xprev), convert<Hi>(v));
  const auto b = oracle::mhc_bounds(in, o);
  const double eps = to_double(epsilon<S>());
  INFO(where);
  auto check = [&](double err, double bound, double& worst, const char* what, Eigen::Index i) {
    INFO(what << "[" << i << "]: error " << test::in_eps<S>(err) << ", bound " << bound << " eps (k = " << K::mhc
              << ")");
    REQUIRE(std::isfinite(bound));
    CHECK(err <= K::mhc * eps * bound);
    worst = std::max(worst, err / (eps * bound));
  };
  const int n = in.n;
  for (int j = 0; j < n; ++j) {
    check(hd(Hi(convert<Hi>(coef.pre_logits(j)) - o.pre_logits(j))), b.logit(to_double(o.pre_abs(j))), w.logit,
          "pre logit", j);
    check(hd(Hi(convert<Hi>(coef.post_logits(j)) - o.post_logits(j))), b.logit(to_double(o.post_abs(j))), w.logit,
          "post logit", j);
    const double ep = hd(Hi((convert<Hi>(coef.pre(j)) - o.pre(j)) / o.pre(j)));
    const double eq = hd(Hi((convert<Hi>(coef.post(j)) - o.post(j)) / o.post(j)));
    check(ep, b.pre(), w.pre, "H_pre", j);
    check(eq, b.post(), w.post, "H_post", j);
    w.coef_eps = std::max({w.coef_eps, ep / eps, eq / eps});
  }
  for (Eigen::Index i = 0; i < o.res().size(); ++i) {
    check(hd(Hi(convert<Hi>(coef.res_logits(i)) - o.res_logits(i))), b.logit(to_double(o.res_abs(i))), w.logit,
          "res logit", i);
    const double er = hd(Hi((convert<Hi>(coef.res(i)) - o.res()(i)) / o.res()(i)));
    check(er, b.res(), w.res, "H_res", i);
    w.res_eps = std::max(w.res_eps, er / eps);
  }
  for (Eigen::Index c = 0; c < h.size(); ++c)
    check(hd(Hi(convert<Hi>(h(c)) - o.h(c))), b.h() * to_double(o.h_abs(c)), w.h, "h", c);
  for (Eigen::Index i = 0; i < Xnew.size(); ++i)
    check(hd(Hi(convert<Hi>(Xnew(i)) - o.X(i))),
          b.carry() * to_double(o.carry_abs(i)) + b.post_mix() * to_double(o.post_abs_v(i)), w.X, "X", i);
}

std::vector<Shape> shapes() {
  std::vector<Shape> s;
  s.push_back({4, 8, 6, 1, MhcPreset::paper, 11});
  s.push_back({4, 8, 6, 1, MhcPreset::deepseek_v4, 12});
  s.push_back({2, 3, 5, 3, MhcPreset::paper, 13});
  s.push_back({1, 5, 4, 1, MhcPreset::deepseek_v4, 14});
  s.push_back({6, 4, 4, 2, MhcPreset::paper, 15});
  s.push_back({4, 16, 4, 4, MhcPreset::deepseek_v4, 16});
  return s;
}

/// Logits for Sinkhorn-only checks: uniform in [-scale, scale] plus per-column offsets.
Mat<double> random_logits(int n, double scale, double offset, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> U(-1, 1);
  Mat<double> L(n, n);
  for (int j = 0; j < n; ++j) {
    const double off = offset * U(rng);
    for (int i = 0; i < n; ++i) L(i, j) = scale * U(rng) + off;
  }
  return L;
}

/// Slowly converging logits: 0 on and above the diagonal, -drop below it,
/// plus noise in [-1, 1]. exp(L) is then close to triangular, whose only
/// doubly stochastic scaling limit is diagonal: 20 rounds are far from it.
Mat<double> triangular_logits(int n, double drop, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> U(-1, 1);
  Mat<double> L(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) L(i, j) = (i > j ? -drop : 0) + U(rng);
  return L;
}

template <class S>
double max_abs_line_sum_defect(const Mat<S>& H, bool rows) {
  double d = 0;
  for (Eigen::Index a = 0; a < H.rows(); ++a) {
    Hi s = 0;
    for (Eigen::Index b = 0; b < H.cols(); ++b) s += convert<Hi>(rows ? H(a, b) : H(b, a));
    d = std::max(d, hd(Hi(s - 1)));
  }
  return d;
}

}  // namespace

TEMPLATE_TEST_CASE("Every mHC layer equals the 667-bit oracle layer (both presets)", "[mhc]", double, mp50, mp77,
                   mp100) {
  using S = TestType;
  Worst w;
  for (const auto& shape : shapes()) {
    const Case k = make_case(shape);
    Mhc<S> m(config<S>(k));
    const auto F = layer_fn<S>(k);
    const auto t = forward(m, convert<S>(k.e), shape.L, [&](int, const Vec<S>& h) { return F(h); });
    for (int l = 0; l < shape.L; ++l) {
      const Mat<S> Xprev = l == 0 ? m.init(convert<S>(k.e)).X : t.states[l - 1].X;
      check_layer<S>(oracle_input(k, l), Xprev, t.v[l], t.states[l].coef, t.h[l], t.states[l].X, w,
                     describe(shape) + " layer " + std::to_string(l));
    }
  }
  WARN(scalar_name<S>() << ": worst error / (eps bound): " << w.str() << " (k = " << K::mhc << ")");
}

TEST_CASE("mHC on MPFI encloses the 667-bit oracle, layer by layer", "[mhc][interval]") {
  // Inclusion isotonicity: layer l's output box contains the exact layer map
  // of every point of its input box, in particular of the input's midpoint
  // (a 257-bit number inside the box). The oracle evaluates that map at 667
  // bits, within dHi = k eps_Hi * (the oracle's own bound) of exact.
  const double eHi = to_double(epsilon<Hi>());
  for (MhcPreset preset : {MhcPreset::paper, MhcPreset::deepseek_v4}) {
    const Case k = make_case({4, 6, 3, 1.5, preset, 21});
    const auto v = [&] {
      std::vector<Vec<mi77>> r;
      for (const auto& x : k.v) r.push_back(convert<mi77>(x));
      return r;
    }();
    Mhc<mi77> m(config<mi77>(k));
    const auto t = mhc_kernel<mi77>(config<mi77>(k), convert<mi77>(k.e), v);
    double widest_res = 0, widest_X = 0;
    for (int l = 0; l < k.shape.L; ++l) {
      const Mat<mi77> box = l == 0 ? m.init(convert<mi77>(k.e)).X : t.states[l - 1].X;
      const Mat<Hi> mid = box.unaryExpr([](const mi77& x) { return convert<Hi>(mp77(median(x))); });
      const auto in = oracle_input(k, l);
      const auto o = oracle::mhc_layer(in, mid, convert<Hi>(k.v[l]));
      const auto b = oracle::mhc_bounds(in, o);
      auto encloses = [&](const mi77& x, const Hi& y, double dHi, const char* what, Eigen::Index i) {
        INFO("preset " << int(preset) << " layer " << l << " " << what << "[" << i << "] = " << x << ", oracle " << y
                       << " +- " << dHi);
        CHECK(convert<Hi>(mp77(lower(x))) - Hi(dHi) <= y);
        CHECK(y <= convert<Hi>(mp77(upper(x))) + Hi(dHi));
      };
      const auto& coef = t.states[l].coef;
      for (int j = 0; j < k.shape.n; ++j) {
        encloses(coef.pre(j), o.pre(j), K::mhc * eHi * b.oracle_pre() * to_double(o.pre(j)), "H_pre", j);
        encloses(coef.post(j), o.post(j), K::mhc * eHi * b.oracle_post() * to_double(o.post(j)), "H_post", j);
      }
      for (Eigen::Index i = 0; i < o.res().size(); ++i) {
        encloses(coef.res(i), o.res()(i), K::mhc * eHi * b.oracle_res() * to_double(o.res()(i)), "H_res", i);
        widest_res = std::max(widest_res, to_double(mp77(width(coef.res(i)) / median(coef.res(i)))));
      }
      for (Eigen::Index c = 0; c < o.h.size(); ++c)
        encloses(t.h[l](c), o.h(c), K::mhc * eHi * b.oracle_h() * to_double(o.h_abs(c)), "h", c);
      for (Eigen::Index i = 0; i < o.X.size(); ++i) {
        const double dHi =
            K::mhc * eHi * (b.oracle_carry() * to_double(o.carry_abs(i)) + b.oracle_post_mix() * to_double(o.post_abs_v(i)));
        encloses(t.states[l].X(i), o.X(i), dHi, "X", i);
        widest_X = std::max(widest_X, to_double(mp77(width(t.states[l].X(i)))));
      }
    }
    // Each normalization divides by a sum that contains the numerator, so a
    // relative width w becomes ~2w: 2t = 40 normalizations cost ~40 bits per
    // layer, and the next layer's logits inherit it. Three layers stay far
    // below double precision.
    WARN((preset == MhcPreset::paper ? "paper" : "deepseek-v4")
         << ": widest relative H_res enclosure " << widest_res << ", widest X enclosure " << widest_X
         << " after 3 layers at 257 bits");
    CHECK(widest_X < 1e-30);
  }
}

TEST_CASE("Gate multipliers: pre_scale 2 doubles every layer input, leaves the streams, post_scale scales v",
          "[mhc][knobs]") {
  // Paper preset (pre_eps = 0), values given: H_pre = 2 sigmoid is twice the
  // default exactly (a power of 2), so h_l = sum_j H_pre[j] X_j doubles
  // exactly; the write does not use H_pre, so X is bit for bit the default's.
  // post_scale = 1 makes H_post exactly half of the paper's 2 sigmoid (at
  // layer 0, which reads the same streams; it changes X, hence everything after).
  using S = double;
  const Case k = make_case({4, 6, 5, 2, MhcPreset::paper, 41});
  const auto cfg = config<S>(k);
  const std::vector<Vec<S>> v = k.v;
  const Vec<S> e = convert<S>(k.e);
  auto pre = cfg, post = cfg;
  pre.pre_scale = 2;
  post.post_scale = 1;
  const auto t = mhc_kernel<S>(cfg, e, v), tp = mhc_kernel<S>(pre, e, v), tq = mhc_kernel<S>(post, e, v);
  for (int l = 0; l < k.shape.L; ++l) {
    CHECK(tp.h[l] == Vec<S>(2 * t.h[l]));
    CHECK(tp.states[l].X == t.states[l].X);
  }
  // Layer 0 reads the same streams (n copies of e) in both; later layers do not.
  CHECK(Vec<S>(2 * tq.states[0].coef.post) == t.states[0].coef.post);
  CHECK(tq.out != t.out);
}

TEST_CASE("n = 1: mHC is a gated residual", "[mhc][n1]") {
  // n = 1: exp(L) / exp(L) = 1, so the paper's H_res is exactly 1 and
  //   X <- X + 2 sigmoid(a_post x'.phi_post + b_post) F(sigmoid(a_pre x'.phi_pre + b_pre) X),
  // a residual block with a scalar input gate in (0, 1) and output gate in (0, 2),
  // both read from the normalized residual. deepseek-v4: H_res = rho_t with
  //   rho = 1 + eps_add, then 2t - 1 times rho <- rho / (rho + eps_den),
  // whose fixed point is 1 - eps_den: the residual shrinks by 1e-6 per layer.
  using S = mp77;
  for (MhcPreset preset : {MhcPreset::paper, MhcPreset::deepseek_v4}) {
    const Case k = make_case({1, 6, 5, 2, preset, 31});
    const auto cfg = config<S>(k);
    Mhc<S> m(cfg);
    const auto F = layer_fn<S>(k);
    const auto t = forward(m, convert<S>(k.e), k.shape.L, [&](int, const Vec<S>& h) { return F(h); });
    S rho = S(1) + cfg.res_eps_add;
    for (int i = 0; i < 2 * cfg.t_max - 1; ++i) rho = rho / (rho + cfg.res_eps_den);
    Worst w;
    for (int l = 0; l < k.shape.L; ++l) {
      const Mat<S> X = l == 0 ? m.init(convert<S>(k.e)).X : t.states[l - 1].X;
      const auto& c = t.states[l].coef;
      // Same operations in the same order: exact.
      CHECK(c.res(0, 0) == rho);
      if (preset == MhcPreset::paper) CHECK(c.res(0, 0) == 1);
      CHECK(t.h[l] == Vec<S>(c.pre(0) * X.row(0).transpose()));
      CHECK(t.states[l].X == Mat<S>((rho * X.row(0) + c.post(0) * t.v[l].transpose())));
      check_layer<S>(oracle_input(k, l), X, t.v[l], c, t.h[l], t.states[l].X, w, "n = 1 layer " + std::to_string(l));
    }
    // rho_t against the fixed point 1 - e of x -> x / (x + e): the first step
    // maps 1 + a to 1 - e + delta_1, delta_1 = e (a + e) / (1 + a + e); then
    // x = 1 - e + delta maps to 1 - e + e delta / (1 + delta), so
    // |rho_t - (1 - e)| <= e (a + e) e^(2t - 2), checked here at 257 bits.
    const Hi e = convert<Hi>(cfg.res_eps_den), a = convert<Hi>(cfg.res_eps_add);
    const Hi dev = abs(Hi(convert<Hi>(rho) - (1 - e)));
    CHECK(dev <= e * (a + e) * pow(e, Hi(2 * cfg.t_max - 2)) + K::mhc * convert<Hi>(epsilon<S>()) * (2 * cfg.t_max));
    WARN((preset == MhcPreset::paper ? "paper" : "deepseek-v4") << ": n = 1 residual weight 1 - H_res = "
                                                                 << to_double(Hi(1 - convert<Hi>(rho))) << "; worst "
                                                                 << w.str());
  }
}

TEMPLATE_TEST_CASE("Max-subtracted Sinkhorn equals the reference, for both presets", "[mhc][sinkhorn][overflow]",
                   double, mp77) {
  // With DeepSeek's placement (eps_add after the softmax, no eps in its
  // denominator) subtracting each column's max before exp is exact in real
  // arithmetic for both presets: exp(L - m) / sum exp(L - m) = exp(L) / sum exp(L).
  // The two computations differ only by rounding: the max-subtracted one
  // rounds L - m (d0 = 1 + |L - m| eps), the reference only exp (d0 = 1).
  using S = TestType;
  const double eps = to_double(epsilon<S>());
  double worst = 0;
  for (MhcPreset preset : {MhcPreset::paper, MhcPreset::deepseek_v4}) {
    const auto cfg = mhc_config<S>(preset, 4, 1);
    for (std::uint64_t seed = 1; seed <= 8; ++seed) {
      // Column offsets up to +-300: past float32's exp overflow (88.7), within double's (709.78).
      const Mat<double> Ld = random_logits(4, 1 + seed, 300, 40 + seed);
      const Mat<S> L = convert<S>(Ld);
      const Mat<S> H = mhc_sinkhorn<S>(L, cfg.t_max, cfg.res_eps_add, cfg.res_eps_den);
      const Mat<S> Hm = oracle::sinkhorn(L, max_subtracted(cfg)).H;
      oracle::MhcBounds b;
      b.n = 4;
      b.rounds = cfg.t_max;
      const double spread = 2 * (1 + seed);
      const double bound = b.res_given(1) + b.res_given(1 + spread);
      for (Eigen::Index i = 0; i < H.size(); ++i) {
        const double err = hd(Hi((convert<Hi>(H(i)) - convert<Hi>(Hm(i))) / convert<Hi>(Hm(i))));
        INFO("preset " << int(preset) << " seed " << seed << " entry " << i << " err " << test::in_eps<S>(err));
        CHECK(err <= K::mhc * eps * bound);
        worst = std::max(worst, err / (eps * bound));
      }
    }
  }
  WARN(scalar_name<S>() << ": worst |max-subtracted - reference| / (eps bound) = " << worst);
}

TEST_CASE("Beyond double's exp range only the max-subtracted form survives in double", "[mhc][sinkhorn][overflow]") {
  // exp overflows double above 709.78; MPFR's exponent range does not. The
  // reference in double then returns non-finite numbers (no data branches to
  // avoid it), while the max-subtracted oracle in double agrees with the
  // 257-bit reference to its rounding bound (d0 = 1 + |L - m| for the double
  // oracle; the 257-bit side is negligible).
  for (MhcPreset preset : {MhcPreset::paper, MhcPreset::deepseek_v4}) {
    const auto cd = mhc_config<double>(preset, 4, 1);
    const auto c77 = mhc_config<mp77>(preset, 4, 1);
    Mat<double> L = random_logits(4, 5, 0, 51);
    L.array() += 800;
    const Mat<double> Hd = mhc_sinkhorn<double>(L, cd.t_max, cd.res_eps_add, cd.res_eps_den);
    CHECK_FALSE(Hd.allFinite());
    const Mat<mp77> H77 = mhc_sinkhorn<mp77>(convert<mp77>(L), c77.t_max, c77.res_eps_add, c77.res_eps_den);
    const Mat<double> Hm = oracle::sinkhorn(L, max_subtracted(cd)).H;
    oracle::MhcBounds b;
    b.n = 4;
    b.rounds = cd.t_max;
    const double tol = K::mhc * 0x1p-52 * b.res_given(1 + 10);  // |L - m| <= 2 * 5
    double worst = 0;
    for (Eigen::Index i = 0; i < Hm.size(); ++i) {
      const double err = hd(Hi((convert<Hi>(Hm(i)) - convert<Hi>(H77(i))) / convert<Hi>(H77(i))));
      CHECK(err <= tol);
      worst = std::max(worst, err);
    }
    WARN("logits ~ 800: double reference finite: " << Hd.allFinite() << "; max-subtracted double vs 257-bit: "
                                                   << test::in_eps<double>(worst));
  }
}

TEST_CASE("With eps in the softmax denominator, max subtraction is no longer exact", "[mhc][sinkhorn]") {
  // Not DeepSeek's placement, shown so that a kernel which does it is caught:
  //   exp(L - m) / (sum exp(L - m) + e) = exp(L) / (sum exp(L) + e exp(m)),
  // i.e. the effective eps of column j becomes e exp(m_j). The first
  // normalizations of the two variants match these formulas, and differ by far
  // more than rounding.
  using S = mp77;
  const double eps = to_double(epsilon<S>());
  const auto cfg = mhc_config<S>(MhcPreset::deepseek_v4, 4, 1);
  const Mat<double> Ld = random_logits(4, 2, 8, 61);
  const Mat<S> L = convert<S>(Ld);
  oracle::SinkhornOptions<S> o;
  o.rounds = cfg.t_max;
  o.eps_add = cfg.res_eps_add;
  o.eps_den = cfg.res_eps_den;
  o.eps_in_first_denominator = true;
  const auto plain = oracle::sinkhorn(L, o);
  o.subtract_max = true;
  const auto shifted = oracle::sinkhorn(L, o);
  const Hi e = convert<Hi>(cfg.res_eps_den);
  double min_rel_diff = 1;
  for (int j = 0; j < 4; ++j) {
    Hi s = 0, m = convert<Hi>(L(0, j));
    for (int i = 0; i < 4; ++i) {
      s += exp(convert<Hi>(L(i, j)));
      m = std::max<Hi>(m, convert<Hi>(L(i, j)));
    }
    for (int i = 0; i < 4; ++i) {
      const Hi E = exp(convert<Hi>(L(i, j)));
      const Hi want_plain = E / (s + e), want_shifted = E / (s + e * exp(m));
      // Sum of 4, eps add, division, exp: (n + 2) eps; the shifted side's L - m rounding adds |L - m| eps.
      CHECK(hd(Hi((convert<Hi>(plain.first(i, j)) - want_plain) / want_plain)) <= K::mhc * eps * (4 + 2));
      CHECK(hd(Hi((convert<Hi>(shifted.first(i, j)) - want_shifted) / want_shifted)) <=
            K::mhc * eps * (4 + 2 + 2 * 10));
      min_rel_diff = std::min(min_rel_diff, hd(Hi((want_shifted - want_plain) / want_plain)));
    }
  }
  double max_diff = 0;
  for (Eigen::Index i = 0; i < plain.H.size(); ++i)
    max_diff = std::max(max_diff, hd(Hi(convert<Hi>(plain.H(i)) - convert<Hi>(shifted.H(i)))));
  WARN("eps in the first denominator: first-step relative change >= " << min_rel_diff << ", max |dH_res| = "
                                                                      << max_diff);
  // "Far more": 1000 times the rounding bound of the first step above.
  CHECK(min_rel_diff > 1000 * K::mhc * eps * (4 + 2 + 2 * 10));
  CHECK(max_diff > 1000 * K::mhc * eps * (4 + 2 + 2 * 10));
}

TEST_CASE("Column-then-row is not row-then-column", "[mhc][sinkhorn][order]") {
  // The reference normalizes columns, then rows: its rows sum to 1, its
  // columns do not (20 rounds are far from converged for nearly triangular exp(L)).
  // Row-then-column gives the mirror image, rc(E) = cr(E^T)^T exactly, whose
  // columns sum to 1. Column sums differ by the reference's column defect, so
  // max |H_cr - H_rc| >= defect / n: with these logits it is O(1e-2), far
  // above a float32 tolerance (k eps res_given(1) ~ 2.4e-3), so a row-then-column
  // kernel is rejected.
  using S = mp77;
  const double eps = to_double(epsilon<S>());
  const int n = 4;
  const Mat<S> L = convert<S>(triangular_logits(n, 12, 71));
  const Mat<S> H = mhc_sinkhorn<S>(L, 20);
  oracle::SinkhornOptions<S> o;
  const Mat<S> cr = oracle::sinkhorn(L, o).H;
  o.order = oracle::SinkhornOrder::row_first;
  const Mat<S> rc = oracle::sinkhorn(L, o).H;
  o.order = oracle::SinkhornOrder::column_first;
  const Mat<S> crT = oracle::sinkhorn(Mat<S>(L.transpose()), o).H;
  CHECK(rc == Mat<S>(crT.transpose()));  // same operations in mirrored order
  oracle::MhcBounds b;
  b.n = n;
  b.rounds = 20;
  double worst = 0;
  for (Eigen::Index i = 0; i < H.size(); ++i) {
    const double err = hd(Hi((convert<Hi>(H(i)) - convert<Hi>(cr(i))) / convert<Hi>(cr(i))));
    CHECK(err <= K::mhc * eps * 2 * b.res_given(1));
    worst = std::max(worst, err / (eps * b.res_given(1)));
  }
  // A line sum of the last normalization: (n - 1) eps for the sum it divided
  // by, 1 for the division, 1 for the eps add: (n + 1) eps.
  const double line_tol = K::mhc * eps * (n + 1);
  CHECK(max_abs_line_sum_defect(H, true) <= line_tol);
  CHECK(max_abs_line_sum_defect(rc, false) <= line_tol);
  const double defect_cr = max_abs_line_sum_defect(H, false), defect_rc = max_abs_line_sum_defect(rc, true);
  double dist = 0;
  for (Eigen::Index i = 0; i < H.size(); ++i) dist = std::max(dist, hd(Hi(convert<Hi>(H(i)) - convert<Hi>(rc(i)))));
  WARN("float32 tolerance " << K::mhc * 0x1p-23 * b.res_given(1) << "; column defect of column-then-row "
                             << defect_cr << ", row defect of row-then-column " << defect_rc
                             << ", max |H_cr - H_rc| = " << dist << "; reference vs oracle worst " << worst
                             << " eps bound");
  // A float32 kernel would be checked to K::mhc 2^-23 res_given(1) (~2.4e-3
  // relative here); the row-first matrix is farther than that from H in
  // absolute terms, on entries <= 1.
  const double float32_tol = K::mhc * 0x1p-23 * b.res_given(1);
  CHECK(dist >= defect_cr / n - line_tol);  // column sums: H's defect vs rc's ~0
  CHECK(dist >= defect_rc / n - line_tol);  // row sums: rc's defect vs H's ~0
  CHECK(defect_cr / n - line_tol > float32_tol);
}

TEST_CASE("deepseek-v4 storage is the transpose, handled at the boundary", "[mhc][storage]") {
  // DeepSeek's kernel, transcribed on its stored matrix A[in, out], equals the
  // reference's H_res (paper orientation) through mhc_to_storage; its logit
  // columns map through mhc_res_columns_transpose.
  using S = mp77;
  const double eps = to_double(epsilon<S>());
  const auto cfg = mhc_config<S>(MhcPreset::deepseek_v4, 4, 3);
  const auto chi = mhc_config<Hi>(MhcPreset::deepseek_v4, 4, 3);
  oracle::MhcBounds b;
  b.n = 4;
  b.rounds = cfg.t_max;
  double worst = 0;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const Mat<double> A_logits = random_logits(4, 3, 1, 80 + seed);  // as DeepSeek stores them
    const Mat<S> H = mhc_sinkhorn<S>(mhc_from_storage<S>(convert<S>(A_logits)), cfg.t_max, cfg.res_eps_add,
                                     cfg.res_eps_den);
    const Mat<Hi> A = oracle::dsv4_storage_sinkhorn<Hi>(convert<Hi>(A_logits), chi.t_max, chi.res_eps_den);
    const Mat<S> As = mhc_to_storage<S>(H);
    for (Eigen::Index i = 0; i < A.size(); ++i) {
      const double err = hd(Hi((convert<Hi>(As(i)) - A(i)) / A(i)));
      CHECK(err <= K::mhc * eps * b.res_given(1));
      worst = std::max(worst, err / (eps * b.res_given(1)));
    }
    CHECK(mhc_from_storage<S>(As) == H);
  }
  // Logit columns: DeepSeek's fn row 2n + in*n + out is the paper's phi_res column out*n + in.
  std::mt19937_64 rng(91);
  std::normal_distribution<double> N(0, 0.5);
  Mat<S> phi_storage(12, 16);
  for (Eigen::Index i = 0; i < phi_storage.size(); ++i) phi_storage(i) = S(N(rng));
  const Mat<S> phi = mhc_res_columns_transpose<S>(phi_storage, 4);
  CHECK(mhc_res_columns_transpose<S>(phi, 4) == phi_storage);
  for (int in = 0; in < 4; ++in)
    for (int out = 0; out < 4; ++out) CHECK(phi.col(out * 4 + in) == phi_storage.col(in * 4 + out));
  WARN("DeepSeek storage kernel vs reference: worst " << worst << " eps bound");
}

TEST_CASE("Many rounds approach the doubly stochastic scaling (Newton oracle)", "[mhc][sinkhorn][limit]") {
  // Birkhoff: the column scalings contract in Hilbert's metric by kappa per
  // round, so |log(H_t / B*)| <= d_H(c_t, c*) <= kappa^(t-1) d_1 (rows of both
  // sum to 1, so each row of log(H_t / B*) changes sign). With |L| <= 0.5,
  // kappa <= tanh(0.5)^2 = 0.21 and 150 rounds reach 257 bits.
  using S = mp77;
  const double eps = to_double(epsilon<S>());
  const Mat<double> Ld = random_logits(5, 0.5, 0, 101);
  const Mat<Hi> L = convert<Hi>(Ld);
  const auto lim = oracle::doubly_stochastic_limit(L);
  const Hi kappa = oracle::birkhoff_kappa(L);
  oracle::SinkhornOptions<Hi> o;
  o.rounds = 1;
  const Hi d1 = oracle::hilbert_column_distance(oracle::sinkhorn(L, o).H, lim.B);
  const int T = 150;
  const Mat<S> H = mhc_sinkhorn<S>(convert<S>(Ld), T);
  oracle::MhcBounds b;
  b.n = 5;
  b.rounds = T;
  const double bound = to_double(Hi(pow(kappa, T - 1) * d1)) + K::mhc * eps * b.res_given(1);
  double err = 0;
  for (Eigen::Index i = 0; i < H.size(); ++i) err = std::max(err, hd(Hi(log(convert<Hi>(H(i)) / lim.B(i)))));
  WARN("Newton: " << lim.iterations << " steps, residual " << to_double(lim.residual) << "; kappa "
                  << to_double(kappa) << "; 150 rounds: max |log(H/B*)| = " << test::in_eps<S>(err));
  CHECK(to_double(lim.residual) < 1e-190);
  CHECK(err <= bound);
  // ... while 20 rounds on nearly triangular logits are far from it.
  const Mat<double> Ls = triangular_logits(5, 12, 102);
  const auto lim_s = oracle::doubly_stochastic_limit(convert<Hi>(Ls));
  const Mat<S> H20 = mhc_sinkhorn<S>(convert<S>(Ls), 20);
  double far = 0;
  for (Eigen::Index i = 0; i < H20.size(); ++i) far = std::max(far, hd(Hi(convert<Hi>(H20(i)) - lim_s.B(i))));
  WARN("nearly triangular logits: 20 rounds are " << far << " from the limit");
  CHECK(far > 1e-2);
}

TEST_CASE("final: sum of rows, or DeepSeek-V4's learned head, init weights", "[mhc][final]") {
  using S = mp77;
  const double eps = to_double(epsilon<S>());
  const Case k = make_case({4, 5, 3, 1, MhcPreset::deepseek_v4, 111});
  const auto F = layer_fn<S>(k);
  auto run = [&](const MhcConfig<S>& c) {
    Mhc<S> m(c);
    return forward(m, convert<S>(k.e), k.shape.L, [&](int, const Vec<S>& h) { return F(h); });
  };
  const auto t = run(config<S>(k));
  const Mat<S>& X = t.states.back().X;
  CHECK(t.out == Vec<S>(X.row(0).transpose() + X.row(1).transpose() + X.row(2).transpose() + X.row(3).transpose()));
  // Head: y = sum_j pre_j X_j, pre = sigmoid(a x'.phi + b) + eps.
  const auto cfg = config<S>(k, MhcReduce::head);
  const auto th = run(cfg);
  const auto chi = config<Hi>(k, MhcReduce::head);
  Vec<Hi> w, mags;
  const Mat<Hi> Xh = convert<Hi>(Mat<S>(th.states.back().X));
  const Vec<Hi> y = oracle::mhc_head<Hi>(Xh, chi.head.phi, chi.head.a, chi.head.b, chi.rms_eps, chi.head_eps, &w, &mags);
  oracle::MhcBounds b;
  b.n = 4;
  b.C = 5;
  b.logit_pre = to_double(Hi(mags.maxCoeff()));
  for (int c = 0; c < 5; ++c) {
    Hi mag = 0;
    for (int j = 0; j < 4; ++j) mag += w(j) * abs(Xh(j, c));
    CHECK(hd(Hi(convert<Hi>(th.out(c)) - y(c))) <= K::mhc * eps * b.h() * to_double(mag));
  }
  // init_weights: X_j = w_j e (e.g. the embedding in stream 0 only).
  auto c1 = config<S>(k);
  c1.init_weights = Vec<S>::Zero(4);
  c1.init_weights(0) = 1;
  Mhc<S> m1(c1);
  const auto s1 = m1.init(convert<S>(k.e));
  CHECK(s1.X.row(0).transpose() == convert<S>(k.e));
  CHECK(s1.X.bottomRows(3).isZero(0));
}

TEST_CASE("Bad mHC configurations are rejected with the field named", "[mhc][errors]") {
  const Case k = make_case({3, 2, 2, 1, MhcPreset::paper, 121});
  auto expect = [&](const MhcConfig<double>& c, const std::string& field) {
    try {
      Mhc<double> m(c);
      FAIL("no error for " << field);
    } catch (const std::invalid_argument& e) {
      CHECK_THAT(e.what(), Catch::Contains("mhc: " + field));
    }
  };
  auto c = config<double>(k);
  c.t_max = 0;
  expect(c, "t_max");
  c = config<double>(k);
  c.res_eps_den = -1;
  expect(c, "res_eps_den");
  c = config<double>(k);
  c.rms_eps = std::nan("");
  expect(c, "rms_eps");
  c = config<double>(k);
  c.layers[1].phi_res.resize(6, 8);
  expect(c, "phi_res");
  c = config<double>(k);
  c.layers[0].b_res(1, 1) = INFINITY;
  expect(c, "b_res");
  c = config<double>(k);
  c.reduce = MhcReduce::head;
  c.head.phi.resize(0, 0);
  expect(c, "head.phi");
  c = config<double>(k);
  c.init_weights = Vec<double>::Ones(2);
  expect(c, "init_weights");
  c = config<double>(k);
  c.n = 0;
  expect(c, "n");
  Mhc<double> m(config<double>(k));
  auto s = m.init(k.e);
  CHECK_THROWS_WITH(m.write(s, 0, k.v[0]), Catch::Contains("mhc: write") && Catch::Contains("not read"));
  CHECK_THROWS_WITH(m.read(s, 2), Catch::Contains("mhc: layers"));
  CHECK_THROWS_WITH(m.init(Vec<double>::Ones(3)), Catch::Contains("mhc: embedding"));
}
