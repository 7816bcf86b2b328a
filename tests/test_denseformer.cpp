// Unit tests of DenseFormer's depth-weighted average
// (reference/include/dmref/denseformer.hpp) against the full-matrix form
// Y = X W^T (oracles/include/dmref/oracles/denseformer_matrix.hpp).
// Expected values are computed at 667 bits (mp200). Y_i is a direct sum of at
// most i+1 products, so every tolerance is K::sum * eps(S) * (i+1) * || |X| |W_i|^T ||.
#include "check.hpp"

#include "dmref/denseformer.hpp"
#include "dmref/model.hpp"
#include "dmref/oracles/denseformer_matrix.hpp"
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

/// A kernel-level DenseFormer problem in doubles: L blocks, dilation k,
/// period p, weights a = I + N(0, 1/2) on the DWA pattern, block outputs N(0,1).
struct DfCase {
  int d = 4, L = 8, k = 1, p = 1;
  std::uint64_t seed = 1;
  Mat<double> a;
  Vec<double> e;
  std::vector<Vec<double>> v;  // X_1..X_L

  std::string describe() const {
    std::ostringstream o;
    o << "d=" << d << " L=" << L << " dilation=" << k << " period=" << p << " seed=" << seed;
    return o.str();
  }
  template <class S>
  DenseFormerConfig<S> config() const {
    DenseFormerConfig<S> c;
    c.d = d;
    c.a = convert<S>(a);
    c.dilation = k;
    c.period = p;
    return c;
  }
  /// The inputs at the full precision of S: the double values divided by 3
  /// in S, so that the weighted sums round at every precision (with double
  /// inputs they would be exact at 168 bits and more).
  template <class S>
  Vec<S> embedding() const {
    return convert<S>(e) / S(3);
  }
  template <class S>
  std::vector<Vec<S>> values() const {
    std::vector<Vec<S>> r;
    for (const auto& x : v) r.push_back(convert<S>(x) / S(3));
    return r;
  }
  /// [X_0 .. X_L] as columns, from the inputs at S converted exactly to Hi.
  template <class S>
  Mat<Hi> X() const {
    Mat<Hi> x(d, L + 1);
    x.col(0) = embedding<S>().template cast<Hi>();
    const auto vs = values<S>();
    for (int i = 0; i < L; ++i) x.col(i + 1) = vs[i].template cast<Hi>();
    return x;
  }
};

DfCase df_case(int d, int L, int k, int p, std::uint64_t seed) {
  DfCase c{d, L, k, p, seed, Mat<double>::Identity(L + 1, L + 1), Vec<double>(d), {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N(0, 0.5);
  DenseFormerConfig<double> pattern;
  pattern.dilation = k;
  pattern.period = p;
  for (int i = 1; i <= L; ++i)
    for (int j = 0; j <= i; ++j)
      if (i % p == 0 && pattern.in_pattern(i, j)) c.a(i, j) += N(rng);
  for (int i = 0; i < d; ++i) c.e(i) = 2 * N(rng);
  for (int l = 0; l < L; ++l) {
    Vec<double> x(d);
    for (int i = 0; i < d; ++i) x(i) = 2 * N(rng);
    c.v.push_back(x);
  }
  return c;
}

std::vector<DfCase> cases() {
  return {df_case(8, 12, 1, 1, 11), df_case(5, 24, 4, 1, 12), df_case(6, 20, 2, 3, 13), df_case(16, 48, 1, 1, 14),
          df_case(3, 30, 3, 5, 15)};
}

/// Reference vs Y = X W^T at every read and the final output; returns the
/// worst error / (eps (i+1) || |X| |W_i|^T ||).
template <class S>
double check_against_matrix_form(const DfCase& c) {
  const auto t = denseformer_kernel<S>(c.config<S>(), c.embedding<S>(), c.values<S>());
  const Mat<Hi> X = c.X<S>();
  const Mat<Hi> W = oracle::denseformer_weights<Hi>(c.a.cast<Hi>(), c.k, c.p);
  const Mat<Hi> Y = oracle::denseformer_averages(W, X);
  const Mat<Hi> Yabs = oracle::denseformer_abs_averages(W, X);
  const double eps = to_double(epsilon<S>());
  double worst = 0;
  for (int i = 0; i <= c.L; ++i) {
    const Vec<S>& got = i < c.L ? t.h[i] : t.out;
    const double err = to_double(Hi((got.template cast<Hi>() - Y.col(i)).norm()));
    const double cond = (i + 1) * to_double(Hi(Yabs.col(i).norm()));
    const double tol = K::sum * eps * cond;
    INFO(c.describe() << " Y_" << i << ": err " << test::in_eps<S>(err) << " tol " << test::in_eps<S>(tol));
    REQUIRE(std::isfinite(tol));
    REQUIRE(tol < 1e-3 * to_double(Hi(Y.col(i).norm())));
    CHECK(err <= tol);
    worst = std::max(worst, err / (eps * cond));
  }
  return worst;
}

template <class S>
Vec<S> ramp(int d) {
  Vec<S> e(d);
  for (int i = 0; i < d; ++i) e(i) = S(std::ldexp(double(5 * i - 7), -2));
  return e;
}

}  // namespace

TEMPLATE_TEST_CASE("DWA equals Y = X W^T from the full coefficient matrix (every k x p)", "[denseformer]", double,
                   mp50, mp77, mp100) {
  double worst = 0;
  for (const auto& c : cases()) worst = std::max(worst, check_against_matrix_form<TestType>(c));
  WARN(scalar_name<TestType>() << ": worst DWA error / (eps (i+1) || |X| |W_i|^T ||) = " << worst
                               << " (k = " << K::sum << ")");
}

TEST_CASE("DenseFormer on MPFI encloses the 667-bit averages", "[denseformer][interval]") {
  const auto c = df_case(6, 16, 2, 1, 21);
  // The inputs x/3 are intervals at 257 bits; the oracle rounds them at 667
  // bits, an error inside its own bound below.
  const auto t = denseformer_kernel<mi77>(c.config<mi77>(), c.embedding<mi77>(), c.values<mi77>());
  const Mat<Hi> X = c.X<Hi>();
  const Mat<Hi> W = oracle::denseformer_weights<Hi>(c.a.cast<Hi>(), c.k, c.p);
  const Mat<Hi> Y = oracle::denseformer_averages(W, X);
  const Mat<Hi> Yabs = oracle::denseformer_abs_averages(W, X);
  double widest = 0;
  for (int i = 0; i <= c.L; ++i) {
    const Vec<mi77>& got = i < c.L ? t.h[i] : t.out;
    for (int r = 0; r < c.d; ++r) {
      // The oracle's own error: at most (i+1) eps(Hi) |X| |W_i|^T per entry.
      const Hi dHi = Hi(K::sum * (i + 1)) * epsilon<Hi>() * Yabs(r, i);
      INFO("Y_" << i << "[" << r << "] = " << got(r) << " oracle " << Y(r, i));
      CHECK(Hi(lower(got(r))) - dHi <= Y(r, i));
      CHECK(Y(r, i) <= Hi(upper(got(r))) + dHi);
      widest = std::max(widest, to_double(width(got(r))) / to_double(Yabs(r, i)));
    }
  }
  WARN("widest enclosure of Y at 257 bits, relative to |X| |W|^T: " << widest);
  CHECK(widest < 1e-70);
}

TEMPLATE_TEST_CASE("Identity weights (paper init): DenseFormer is the plain chain X_i = B_i(X_{i-1})",
                   "[denseformer]", double, mp77) {
  // Y_i = 0 X_0 + .. + 1 X_i adds exact zeros, so this holds to the last bit,
  // for every dilation and period (the identity is inside every pattern).
  using S = TestType;
  const int d = 7, L = 15;
  const auto blocks = TanhMlpStack<S>::random(d, 11, L, 2027);
  const Vec<S> e = ramp<S>(d);
  std::vector<Vec<S>> chain{e};
  for (int l = 0; l < L; ++l) chain.push_back(blocks(l, chain.back()));
  for (auto [k, p] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{3, 4}}) {
    const auto cfg = denseformer_paper_init<S>(d, L, k, p);
    const auto t = forward(DenseFormer<S>(cfg), e, L, blocks);
    for (int l = 0; l < L; ++l) CHECK(t.h[l] == chain[l]);
    CHECK(t.out == chain[L]);
    // The oracle's stack with W = I agrees too.
    const Mat<S> X = oracle::denseformer_stack<S>(oracle::denseformer_weights<S>(cfg.a, k, p), e, L, blocks);
    for (int l = 0; l <= L; ++l) CHECK(Vec<S>(X.col(l)) == chain[l]);
  }
}

TEMPLATE_TEST_CASE("B_i includes the residual: identity DenseFormer with B_l(y) = y + G_l(y) is PreLN with G_l",
                   "[denseformer][preln]", double, mp77) {
  // PreLN computes x + G(x); the block computes y + G(y): the same operation.
  using S = TestType;
  const int d = 9, L = 20;
  const auto G = TanhMlpStack<S>::random(d, 13, L, 2028);
  auto block = [&](int l, const Vec<S>& y) { return Vec<S>(y + G(l, y)); };
  const Vec<S> e = ramp<S>(d);
  const auto t = forward(DenseFormer<S>(denseformer_paper_init<S>(d, L)), e, L, block);
  const auto p = forward(PreLN<S>{}, e, L, G);
  for (int l = 0; l < L; ++l) {
    CHECK(t.h[l] == p.h[l]);
    CHECK(t.states[l].X.back() == p.states[l].x);
  }
  CHECK(t.out == p.out);
}

TEST_CASE("Model-level DenseFormer equals the matrix form fed with its own block outputs", "[denseformer][model]") {
  using S = mp50;
  auto c = df_case(8, 16, 1, 1, 31);
  const auto G = TanhMlpStack<S>::random(c.d, 12, c.L, 32);
  auto block = [&](int l, const Vec<S>& y) { return Vec<S>(y + G(l, y)); };
  const auto t = forward(DenseFormer<S>(c.config<S>()), convert<S>(c.e), c.L, block);
  Mat<Hi> X(c.d, c.L + 1);
  X.col(0) = convert<Hi>(c.e);
  for (int l = 0; l < c.L; ++l) {
    CHECK(t.v[l] == block(l, t.h[l]));
    X.col(l + 1) = t.v[l].template cast<Hi>();
  }
  const Mat<Hi> W = oracle::denseformer_weights<Hi>(c.a.cast<Hi>(), 1, 1);
  const Mat<Hi> Y = oracle::denseformer_averages(W, X);
  const Mat<Hi> Yabs = oracle::denseformer_abs_averages(W, X);
  for (int i = 0; i <= c.L; ++i) {
    const Vec<S>& got = i < c.L ? t.h[i] : t.out;
    CHECK(to_double(Hi((got.template cast<Hi>() - Y.col(i)).norm())) <=
          K::sum * to_double(epsilon<S>()) * (i + 1) * to_double(Hi(Yabs.col(i).norm())));
  }
}

TEST_CASE("A k x p DenseFormer equals the 1 x 1 DenseFormer with the same (pattern-zero) weights", "[denseformer]") {
  // Off-pattern weights are zero, so the dense sum only adds exact zeros;
  // rows without a DWA (p does not divide i) are e_i, so Y_i = X_i exactly.
  using S = mp77;
  for (const auto& c : {df_case(5, 24, 4, 1, 41), df_case(6, 20, 2, 3, 42), df_case(3, 30, 3, 5, 43)}) {
    const auto t = denseformer_kernel<S>(c.config<S>(), c.embedding<S>(), c.values<S>());
    auto dense = c.config<S>();
    dense.dilation = dense.period = 1;
    const auto td = denseformer_kernel<S>(dense, c.embedding<S>(), c.values<S>());
    for (int l = 0; l < c.L; ++l) {
      CHECK(t.h[l] == td.h[l]);
      if (l % c.p != 0) CHECK(t.h[l] == t.states[l].X[l]);  // X_l (states[l] also holds X_{l+1})
    }
    CHECK(t.out == td.out);
    CHECK(t.h[0] == c.embedding<S>());  // Y_0 = X_0
  }
}

TEST_CASE("Bad DenseFormer configurations are rejected with the field named", "[denseformer][errors]") {
  const auto c = df_case(4, 6, 2, 3, 51);
  auto expect = [&](const DenseFormerConfig<double>& cfg, const std::string& field, const std::string& what) {
    try {
      DenseFormer<double> m(cfg);
      FAIL("no error for " << field);
    } catch (const std::invalid_argument& e) {
      CHECK_THAT(e.what(), Catch::Contains("denseformer: " + field) && Catch::Contains(what));
    }
  };
  CHECK_NOTHROW(DenseFormer<double>(c.config<double>()));
  auto cfg = c.config<double>();
  cfg.d = 0;
  expect(cfg, "d", "> 0");
  cfg = c.config<double>();
  cfg.dilation = 0;
  expect(cfg, "dilation", "> 0");
  cfg = c.config<double>();
  cfg.period = -1;
  expect(cfg, "period", "> 0");
  cfg = c.config<double>();
  cfg.a = Mat<double>::Identity(3, 4);
  expect(cfg, "a", "square");
  cfg = c.config<double>();
  cfg.a(0, 0) = 0.5;
  expect(cfg, "a", "Y_0 = X_0");
  cfg = c.config<double>();
  cfg.a(2, 4) = 0.5;
  expect(cfg, "a", "lower triangular");
  cfg = c.config<double>();
  cfg.a(6, 5) = 0.5;  // 6 - 5 is odd: outside dilation 2
  expect(cfg, "a", "pattern");
  cfg = c.config<double>();
  cfg.a(4, 4) = 2;  // 3 does not divide 4: no DWA after block 4
  expect(cfg, "a", "no DWA");
  cfg = c.config<double>();
  cfg.a(6, 2) = std::nan("");
  expect(cfg, "a", "not finite");
  DenseFormer<double> m(c.config<double>());
  CHECK_THROWS_WITH(m.init(Vec<double>::Zero(3)), Catch::Contains("denseformer: embedding"));
  auto s = m.init(c.e);
  CHECK_THROWS_WITH(m.read(s, 1), Catch::Contains("denseformer: state"));
  std::vector<Vec<double>> v(7, Vec<double>::Ones(4));  // one block more than a has rows for
  CHECK_THROWS_WITH(denseformer_kernel<double>(c.config<double>(), c.e, v),
                    Catch::Contains("denseformer: a") && Catch::Contains("block 7"));
}
