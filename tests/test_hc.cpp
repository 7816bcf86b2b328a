// Unit tests of Hyper-Connections (reference/include/dmref/hc.hpp) against the
// independent matrix form (oracles/include/dmref/oracles/hc_matrix.hpp).
// Expected values are computed at 667 bits (mp200); every tolerance is
// K::hc * eps(S) * bound, where `bound` is the oracle's first-order running
// error bound (units of eps, computed from the problem; check.hpp).
#include "check.hpp"
#include "hc_cases.hpp"

#include "dmref/hc.hpp"
#include "dmref/model.hpp"
#include "dmref/oracles/hc_matrix.hpp"
#include "dmref/preln.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <vector>

using namespace dmref;
using dmref::test::K;
using Hi = mp200;

namespace {

using test::HcCase;
using test::HcShape;
using test::make_hc_case;

HcCase hc_case(int n, int d, int L, bool dynamic, bool tanh, double spread, double wscale, std::uint64_t seed,
               double smax = 0.1) {
  HcShape s;
  s.smax = smax;
  s.n = n;
  s.d = d;
  s.layers = L;
  s.dynamic = dynamic;
  s.tanh = tanh;
  s.spread = spread;
  s.wscale = wscale;
  s.seed = seed;
  return make_hc_case(s);
}

std::vector<HcCase> cases() {
  // Dynamic scales s ~ U[0.01, smax] (paper init 0.01); the last-but-one case
  // has strong dynamics (s up to 1, wscale 3) and is kept shallow, since the
  // worst-case error bound grows by about n s g ||w|| sqrt(d) per layer.
  return {hc_case(1, 6, 12, false, true, 0.2, 1, 11), hc_case(4, 8, 24, false, true, 0.2, 1, 12),
          hc_case(4, 8, 24, true, true, 0.2, 1, 13),  hc_case(3, 16, 16, true, false, 0.2, 1, 14),
          hc_case(2, 5, 10, true, true, 0.1, 3, 15, 1), hc_case(1, 7, 20, true, true, 0.3, 2, 16)};
}

struct Worst {
  double ratio = 0;  // err / (eps bound)
  double rel = 0;    // err / ||value|| in eps
};

template <class S, class A>
void check_close(const A& got, const Mat<Hi>& want, double bound, const std::string& what, Worst* w) {
  const double eps = to_double(epsilon<S>());
  const double err = to_double(Hi((got.template cast<Hi>() - want).norm()));
  const double tol = K::hc * eps * bound;
  const double norm = to_double(Hi(want.norm()));
  INFO(what << ": err " << test::in_eps<S>(err) << ", tol " << test::in_eps<S>(tol) << ", ||value|| " << norm);
  REQUIRE(std::isfinite(tol));
  REQUIRE(tol < 1e-3 * norm);  // the check must mean something at this type
  CHECK(err <= tol);
  w->ratio = std::max(w->ratio, err / (eps * bound));
  w->rel = std::max(w->rel, err / norm / eps);
}

template <class S>
void check_against_matrix_form(const HcCase& c, Worst* w) {
  const auto t = hc_kernel<S>(c.config<S>(), c.embedding<S>(), c.values<S>());
  const auto o = oracle::hc_matrix_solve(c.problem<Hi, S>());
  for (int l = 0; l < c.shape.layers; ++l) {
    const std::string at = describe(c.shape) + " layer " + std::to_string(l);
    check_close<S>(Mat<S>(t.h[l]), Mat<Hi>(o.h[l]), o.bound_h[l], at + " h", w);
    check_close<S>(t.states[l].H, o.H[l], o.bound_H[l], at + " H", w);
  }
  check_close<S>(Mat<S>(t.out), Mat<Hi>(o.out), o.bound_out, describe(c.shape) + " final", w);
}

}  // namespace

TEMPLATE_TEST_CASE("HC equals the paper's matrix form at every layer (static, dynamic, W/O tanh)", "[hc]", double,
                   mp50, mp77, mp100) {
  Worst w;
  for (const auto& c : cases()) check_against_matrix_form<TestType>(c, &w);
  WARN(scalar_name<TestType>() << ": worst HC error / (eps bound) = " << w.ratio << " (k = " << K::hc
                               << "); worst relative error " << w.rel << " eps");
}

TEST_CASE("HC on MPFI encloses the 667-bit matrix form", "[hc][interval]") {
  // The MPFI inputs e/3, v/3 enclose the exact thirds; the oracle rounds them
  // once at 667 bits (one more rounding per path, inside the factor K::hc) and
  // is within K::hc eps(Hi) bound of the exact value.
  for (const auto& c : {hc_case(3, 6, 10, true, true, 0.2, 1, 21), hc_case(2, 6, 10, false, true, 0.2, 1, 22)}) {
    const auto t = hc_kernel<mi77>(c.config<mi77>(), c.embedding<mi77>(), c.values<mi77>());
    const auto o = oracle::hc_matrix_solve(c.problem<Hi>());
    double widest = 0;
    for (int l = 0; l < c.shape.layers; ++l) {
      const Hi dHi = Hi(K::hc) * epsilon<Hi>() * Hi(o.bound_H[l]);
      const auto& H = t.states[l].H;
      for (Eigen::Index i = 0; i < H.size(); ++i) {
        INFO(describe(c.shape) << " layer " << l << " H[" << i << "] = " << H(i) << " oracle " << o.H[l](i));
        CHECK(Hi(lower(H(i))) - dHi <= o.H[l](i));
        CHECK(o.H[l](i) <= Hi(upper(H(i))) + dHi);
        widest = std::max(widest, to_double(width(H(i))) / to_double(Hi(abs(o.H[l](i)))));
      }
    }
    const Hi dOut = Hi(K::hc) * epsilon<Hi>() * Hi(o.bound_out);
    for (Eigen::Index i = 0; i < t.out.size(); ++i) {
      CHECK(Hi(lower(t.out(i))) - dOut <= o.out(i));
      CHECK(o.out(i) <= Hi(upper(t.out(i))) + dOut);
    }
    WARN(describe(c.shape) << ": widest relative enclosure of H at 257 bits: " << widest);
    CHECK(widest < 1e-60);  // tight enough to certify a double-double
  }
}

TEMPLATE_TEST_CASE("HC with n = 1 and A_m = A_r = B = 1 is PreLN, bit for bit", "[hc][preln]", double, mp77) {
  using S = TestType;
  const int d = 8, L = 16;
  const auto stack = TanhMlpStack<S>::random(d, 12, L, 2026);
  Vec<S> e(d);
  for (int i = 0; i < d; ++i) e(i) = S(std::ldexp(double(3 * i - 11), -3));
  for (bool dynamic : {false, true}) {
    const auto cfg = hc_paper_init<S>(1, d, L, dynamic);  // n = 1: A_m = A_r = B = 1
    const auto t = forward(HyperConnections<S>(cfg), e, L, stack);
    const auto p = forward(PreLN<S>{}, e, L, stack);
    for (int l = 0; l < L; ++l) CHECK(t.h[l] == p.h[l]);
    CHECK(t.out == p.out);
  }
}

TEMPLATE_TEST_CASE("HC at the paper's init is PreLN on every stream, final is n times PreLN's", "[hc][preln]", double,
                   mp77) {
  using S = TestType;
  const int d = 6, L = 13;
  const auto stack = TanhMlpStack<S>::random(d, 10, L, 7);
  Vec<S> e = Vec<S>::LinSpaced(d, S(-1), S(2));
  const auto p = forward(PreLN<S>{}, e, L, stack);
  for (int n : {2, 3, 4})
    for (bool dynamic : {false, true}) {
      // A_r = I, B = 1: every stream is e + sum v (adding 0 * H_j is exact);
      // A_m = e_{l mod n} reads one of them.
      const auto t = forward(HyperConnections<S>(hc_paper_init<S>(n, d, L, dynamic)), e, L, stack);
      for (int l = 0; l < L; ++l) {
        CHECK(t.h[l] == p.h[l]);
        for (int j = 0; j < n; ++j) CHECK(Vec<S>(t.states[l].H.row(j).transpose()) == p.states[l].x);
      }
      // Sum of n equal rows: n-1 additions, each rounding by at most eps n ||x||.
      const double err = to_double(Hi((t.out.template cast<Hi>() - Hi(n) * p.out.template cast<Hi>()).norm()));
      CHECK(err <= K::sum * to_double(epsilon<S>()) * (n - 1) * n * to_double(Hi(p.out.template cast<Hi>().norm())));
    }
}

TEST_CASE("Dynamic HC with zero dynamic weights is static HC, bit for bit", "[hc]") {
  using S = mp77;
  for (bool tanh : {true, false}) {
    auto c = hc_case(3, 8, 12, true, tanh, 0.3, 1, 31);
    for (auto& q : c.p) {
      q.wm.setZero();
      q.wr.setZero();
      q.wb.setZero();
    }
    auto cs = c;
    cs.shape.dynamic = false;
    const int L = c.shape.layers;
    const auto stack = TanhMlpStack<S>::random(c.shape.d, 9, L, 32);
    const auto td = forward(HyperConnections<S>(c.config<S>()), c.embedding<S>(), L, stack);
    const auto ts = forward(HyperConnections<S>(cs.config<S>()), c.embedding<S>(), L, stack);
    for (int l = 0; l < L; ++l) {
      CHECK(td.h[l] == ts.h[l]);
      CHECK(td.states[l].H == ts.states[l].H);
    }
    CHECK(td.out == ts.out);
  }
}

TEST_CASE("HC with RMSNorm equals HC with LayerNorm (bias 0) on zero-mean streams, bit for bit", "[hc][norm]") {
  // Streams whose entries come in pairs (a, -a): every linear combination the
  // scheme forms keeps the pairs exactly (rounding is symmetric), so the
  // LayerNorm mean is exactly 0, x - mean = x, and LayerNorm with bias 0 is
  // g * x / sqrt(||x||^2/d + eps): RMSNorm with gain g, the same operations.
  // Off zero mean the two differ (the option is not a no-op).
  const int n = 3, d = 8, L = 6;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> U(-1, 1);
  auto paired = [&] {
    Vec<double> x(d);
    for (int i = 0; i < d; i += 2) x(i) = U(rng), x(i + 1) = -x(i);
    return x;
  };
  HcConfig<double> c = hc_paper_init<double>(n, d, L, true);
  for (auto& p : c.layers) {
    for (int i = 0; i < d; ++i) p.ln_gain(i) = 1 + U(rng) / 2;
    p.wm = paired();
    for (int i = 0; i < n; ++i) p.wr.col(i) = paired();
    p.wb = paired();
    p.s_a = p.s_b = 0.5;
  }
  std::vector<Vec<double>> v;
  for (int l = 0; l < L; ++l) v.push_back(paired());
  const Vec<double> e = paired();
  HcConfig<double> r = c;
  r.norm = HcNorm::rms;
  const auto tl = hc_kernel<double>(c, e, v), tr = hc_kernel<double>(r, e, v);
  for (int l = 0; l < L; ++l) CHECK(tl.h[l] == tr.h[l]);
  CHECK(tl.last.H == tr.last.H);
  Vec<double> shifted = e.array() + 0.25;
  CHECK(hc_kernel<double>(c, shifted, v).out != hc_kernel<double>(r, shifted, v).out);
}

TEST_CASE("Model-level dynamic HC equals the matrix form fed with its own layer outputs", "[hc][model]") {
  // The coefficients of layer l come from the streams before layer l: the
  // oracle recomputes them from H_{l-1}, so agreement shows the write used
  // the coefficients of its read, not ones recomputed after the update.
  using S = mp50;
  auto c = hc_case(4, 8, 16, true, true, 0.2, 2, 41);
  const auto stack = TanhMlpStack<S>::random(c.shape.d, 16, c.shape.layers, 42);
  const auto t = forward(HyperConnections<S>(c.config<S>()), c.embedding<S>(), c.shape.layers, stack);
  for (int l = 0; l < c.shape.layers; ++l) CHECK(t.v[l] == stack(l, t.h[l]));
  auto prob = c.problem<Hi, S>();
  for (int l = 0; l < c.shape.layers; ++l) prob.v[l] = t.v[l].template cast<Hi>();
  const auto o = oracle::hc_matrix_solve(prob);
  Worst w;
  for (int l = 0; l < c.shape.layers; ++l) {
    check_close<S>(Mat<S>(t.h[l]), Mat<Hi>(o.h[l]), o.bound_h[l], "h " + std::to_string(l), &w);
    check_close<S>(t.states[l].H, o.H[l], o.bound_H[l], "H " + std::to_string(l), &w);
    // The stored coefficients are the oracle's, to the coefficient bound.
    const auto& cf = t.states[l].coef;
    Mat<S> alpha(c.shape.n, c.shape.n + 1);
    alpha.col(0) = cf.am;
    alpha.rightCols(c.shape.n) = cf.ar;
    check_close<S>(alpha, o.alpha[l], o.bound_alpha[l], "alpha " + std::to_string(l), &w);
    check_close<S>(Mat<S>(cf.b), Mat<Hi>(o.beta[l]), o.bound_beta[l], "B " + std::to_string(l), &w);
  }
  WARN("model-level dynamic HC at " << bits<S>() << " bits: worst error / (eps bound) = " << w.ratio);
}

TEST_CASE("HC writes only a layer that was read, with that read's coefficients", "[hc][errors]") {
  using S = double;
  const auto c = hc_case(2, 4, 3, true, true, 0.2, 1, 51);
  HyperConnections<S> m(c.config<S>());
  auto s = m.init(c.e);
  CHECK_THROWS_WITH(m.write(s, 0, c.v[0]), Catch::Contains("hc: write") && Catch::Contains("layer 0"));
  m.read(s, 0);
  CHECK_THROWS_WITH(m.write(s, 1, c.v[0]), Catch::Contains("hc: write") && Catch::Contains("layer 1"));
  const auto coef = s.coef;
  m.write(s, 0, c.v[0]);
  CHECK_THROWS_WITH(m.write(s, 0, c.v[1]), Catch::Contains("hc: write"));  // each read serves one write
  CHECK(coef.am == m.coefficients(m.init(c.e).H, 0).am);
  CHECK_THROWS_WITH(m.read(s, 3), Catch::Contains("hc: layers") && Catch::Contains("layer 3"));
}

TEST_CASE("Bad HC configurations are rejected with the field named", "[hc][errors]") {
  const auto c = hc_case(3, 4, 2, true, true, 0.2, 1, 61);
  auto expect = [&](const HcConfig<double>& cfg, const std::string& field) {
    try {
      HyperConnections<double> m(cfg);
      FAIL("no error for " << field);
    } catch (const std::invalid_argument& e) {
      CHECK_THAT(e.what(), Catch::Contains("hc: " + field));
    }
  };
  auto cfg = c.config<double>();
  cfg.n = 0;
  expect(cfg, "n");
  cfg = c.config<double>();
  cfg.d = 0;
  expect(cfg, "d");
  cfg = c.config<double>();
  cfg.ln_eps = 0;
  expect(cfg, "ln_eps");
  cfg = c.config<double>();
  cfg.layers[1].ar = Mat<double>::Identity(2, 2);
  expect(cfg, "ar");
  cfg = c.config<double>();
  cfg.layers[0].b(2) = std::nan("");
  expect(cfg, "b");
  cfg = c.config<double>();
  cfg.layers[1].wr = Mat<double>::Zero(4, 2);
  expect(cfg, "wr");
  cfg = c.config<double>();
  cfg.layers[1].ln_gain.resize(3);
  expect(cfg, "ln_gain");
  cfg = c.config<double>();
  cfg.layers[0].s_b = INFINITY;
  expect(cfg, "s_b");
  // Static HC does not look at the dynamic fields.
  cfg = c.config<double>();
  cfg.dynamic = false;
  cfg.layers[1].wr.resize(0, 0);
  CHECK_NOTHROW(HyperConnections<double>(cfg));
  HyperConnections<double> m(c.config<double>());
  CHECK_THROWS_WITH(m.init(Vec<double>::Zero(5)), Catch::Contains("hc: embedding"));
  CHECK_THROWS_WITH(hc_paper_init<double>(0, 4, 2, false), Catch::Contains("hc: init"));
}
