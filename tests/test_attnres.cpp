// Unit tests of Attention Residuals (reference/include/dmref/attnres.hpp)
// against the independent oracles (oracles/include/dmref/oracles/attnres_*.hpp).
// Expected values are computed at 667 bits (mp200); tolerances: check.hpp
// (K::attnres with the readout's cond from DirectReadout).
#include "attnres_cases.hpp"
#include "check.hpp"

#include "dmref/attnres.hpp"
#include "dmref/layers.hpp"
#include "dmref/oracles/attnres_direct.hpp"
#include "dmref/oracles/attnres_mean.hpp"

#include <catch2/catch.hpp>

#include <cfloat>
#include <random>
#include <sstream>

using namespace dmref;
using dmref::test::K;
using Hi = mp200;

namespace {

using Shape = test::AttnResShape;
using Case = test::AttnResCase;
Case make_case(const Shape& s) { return test::make_attnres_case(s); }

// Full and Block cases: nearly uniform and nearly one-hot softmaxes, unit
// and random gains, eps that matters (tiny outputs, eps = 0.1), blocks that
// divide L and blocks that leave a partial block at the end (and S > L).
std::vector<Shape> shapes() {
  return {
      {4, 12, 0, 1, false, 1e-6, 0, 101},  {16, 24, 0, 10, false, 1e-6, 2, 102},
      {3, 8, 0, 0.3, true, 0.1, 3, 103},   {8, 24, 4, 3, false, 1e-6, 1, 104},
      {5, 13, 3, 1, false, 1e-6, 2, 105},  {6, 10, 2, 30, false, 1e-6, 0, 106},
      {4, 7, 9, 2, true, 1e-6, 0, 107},    {2, 9, 1, 5, false, 1e-3, 4, 108},
  };
}

template <class S>
void check_against_direct(const Shape& shape, double* worst_eps, double* worst_ratio) {
  const auto c = make_case(shape);
  const auto t = attnres_kernel<S>(c.config<S>(), convert<S>(c.e), c.values<S>());
  const double eps = to_double(epsilon<S>());
  for (int r = 0; r <= shape.layers; ++r) {
    const auto o = oracle::attnres_direct(c.readout<Hi>(r));
    const Vec<S>& got = r < shape.layers ? t.h[r] : t.out;
    const double err = to_double(Hi((got.template cast<Hi>() - o.h).norm()));
    const double tol = K::attnres * eps * to_double(o.cond);
    INFO(describe(shape) << " readout " << r << " (" << o.a.size() << " sources) err " << err << " tol " << tol);
    REQUIRE(std::isfinite(tol));
    REQUIRE(tol < 1e-6 * to_double(Hi(o.h.norm())) + 1e-300);  // the check must mean something
    CHECK(err <= tol);
    *worst_eps = std::max(*worst_eps, err / (eps * to_double(Hi(o.h.norm()))));
    *worst_ratio = std::max(*worst_ratio, err / (eps * to_double(o.cond)));
  }
}

}  // namespace

TEMPLATE_TEST_CASE("AttnRes equals the direct softmax over its sources at every readout", "[attnres]", double,
                   mp50, mp77, mp100) {
  double worst_eps = 0, worst_ratio = 0;
  for (const auto& s : shapes()) check_against_direct<TestType>(s, &worst_eps, &worst_ratio);
  WARN(scalar_name<TestType>() << ": worst AttnRes readout error " << worst_eps
                               << " eps (normwise relative); worst error / (eps cond) = " << worst_ratio
                               << " (k = " << K::attnres << ")");
}

TEST_CASE("AttnRes on MPFI encloses the 667-bit oracle", "[attnres][interval]") {
  // The exact readout lies in each interval; the oracle is within
  // K::attnres eps(Hi) cond of it.
  double widest = 0;
  for (const Shape& s : {Shape{5, 10, 0, 2, false, 1e-6, 1, 201}, Shape{5, 11, 3, 2, false, 1e-6, 1, 202}}) {
    const auto c = make_case(s);
    const auto t = attnres_kernel<mi77>(c.config<mi77>(), convert<mi77>(c.e), c.values<mi77>());
    for (int r = 0; r <= s.layers; ++r) {
      const auto o = oracle::attnres_direct(c.readout<Hi>(r));
      const Hi dHi = Hi(K::attnres) * epsilon<Hi>() * o.cond;
      const Vec<mi77>& got = r < s.layers ? t.h[r] : t.out;
      for (int j = 0; j < s.d; ++j) {
        INFO(describe(s) << " readout " << r << " h[" << j << "] = " << got(j) << " oracle " << o.h(j));
        CHECK(Hi(lower(got(j))) - dHi <= o.h(j));
        CHECK(o.h(j) <= Hi(upper(got(j))) + dHi);
        widest = std::max(widest, to_double(width(got(j))) / to_double(Hi(o.h.norm())));
      }
    }
  }
  WARN("widest relative enclosure of a readout at 257 bits: " << widest << " = "
                                                               << test::in_eps<mp77>(widest));
  CHECK(widest < 1e-60);  // tight enough to certify a double-double
}

TEMPLATE_TEST_CASE("Block AttnRes with block size 1 is Full AttnRes, bit for bit", "[attnres][block]", double,
                   mp77) {
  // S = 1: the partial sum of one output is a copy of it and is closed at
  // once, so both variants mix the same source lists with the same operations.
  using S = TestType;
  for (Shape s : shapes()) {
    s.block = 0;
    const auto c = make_case(s);
    auto cfg = c.config<S>();
    const auto full = attnres_kernel<S>(cfg, convert<S>(c.e), c.values<S>());
    cfg.variant = AttnResVariant::block;
    cfg.block_size = 1;
    const auto block = attnres_kernel<S>(cfg, convert<S>(c.e), c.values<S>());
    INFO(describe(s));
    for (int l = 0; l < s.layers; ++l) CHECK(block.h[l] == full.h[l]);
    CHECK(block.out == full.out);
  }
}

TEMPLATE_TEST_CASE("N blocks: floor(L/N) layers each, the remainder in the last, N | L is block size L/N, N = L is Full",
                   "[attnres][block]", double, mp77) {
  using S = TestType;
  for (Shape s : shapes()) {
    s.block = 0;
    const auto c = make_case(s);
    auto cfg = c.config<S>();
    const auto full = attnres_kernel<S>(cfg, convert<S>(c.e), c.values<S>());
    cfg.variant = AttnResVariant::block;
    INFO(describe(s));
    for (int N = 1; N <= s.layers; ++N) {
      cfg.num_blocks = N;
      cfg.block_size = 0;
      const auto nb = attnres_kernel<S>(cfg, convert<S>(c.e), c.values<S>());
      // The block boundaries: after layer l the finished blocks are those whose
      // last layer is <= l, with block b ending at (b+1) floor(L/N) - 1 except
      // the last, which ends at L - 1.
      const int base = s.layers / N;
      for (int l = 0; l < s.layers; ++l) {
        const int finished = l + 1 == s.layers ? N : std::min(N - 1, (l + 1) / base);
        CHECK(nb.states[l].sources.size() == std::size_t(1 + finished));
      }
      if (s.layers % N == 0) {
        auto fixed = cfg;
        fixed.num_blocks = 0;
        fixed.block_size = s.layers / N;
        const auto fb = attnres_kernel<S>(fixed, convert<S>(c.e), c.values<S>());
        for (int l = 0; l < s.layers; ++l) CHECK(nb.h[l] == fb.h[l]);
        CHECK(nb.out == fb.out);
      }
      if (N == s.layers) {
        for (int l = 0; l < s.layers; ++l) CHECK(nb.h[l] == full.h[l]);
        CHECK(nb.out == full.out);
      }
    }
  }
}

TEMPLATE_TEST_CASE("At initialization (w = 0, g = 1) every readout is the mean of its sources", "[attnres][init]",
                   double, mp50, mp77) {
  // Logits are exactly 0, exp(0) = 1 exactly, the sum of n ones is n: the
  // weights are 1/n rounded once, and h = sum_i fl(1/n) b_i. With the block
  // sums' own m_i - 1 roundings: |dh| <= (n + m_max) u sum_i A_i / n, i.e.
  // K::sum eps (n + m_max) ||sum_i A_i|| / n (A_i: sum of |terms of b_i|).
  using S = TestType;
  double worst = 0;
  for (Shape s : shapes()) {
    const auto c = make_case(s);
    auto cfg = c.config<S>();
    cfg.w.clear();  // paper init: w = 0, g = 1, eps = 1e-6
    cfg.g.clear();
    cfg.eps = AttnResConfig<S>{}.eps;
    const AttentionResiduals<S> m(cfg);
    const auto v = c.values<S>();
    const auto t = forward(m, convert<S>(c.e), s.layers, GivenOutputs<S>{&v});
    for (int r = 0; r <= s.layers; ++r) {
      const auto& st = r == 0 ? m.init(convert<S>(c.e)) : t.states[r - 1];
      const auto terms = c.readout<Hi>(r).terms;
      const int n = static_cast<int>(terms.size());
      CHECK(m.weights(st, r) == Vec<S>::Constant(n, S(1) / S(n)));
      Vec<Hi> abs_sum = Vec<Hi>::Zero(s.d);
      int m_max = 1;
      for (const auto& x : terms) {
        abs_sum += x.cwiseAbs().rowwise().sum();
        m_max = std::max(m_max, static_cast<int>(x.cols()));
      }
      const Vec<Hi> mean = oracle::attnres_mean(terms);
      const Vec<S>& got = r < s.layers ? t.h[r] : t.out;
      const double err = to_double(Hi((got.template cast<Hi>() - mean).norm()));
      const double cond = (n + m_max) * to_double(Hi(abs_sum.norm())) / n;
      INFO(describe(s) << " readout " << r << " err " << err);
      CHECK(err <= K::sum * to_double(epsilon<S>()) * cond);
      worst = std::max(worst, err / (to_double(epsilon<S>()) * cond));
    }
  }
  WARN(scalar_name<TestType>() << ": w = 0, worst |h - mean| / (eps cond) = " << worst);
}

TEMPLATE_TEST_CASE("A readout over one source returns it exactly", "[attnres]", double, mp77) {
  // a = exp(z) / exp(z) = 1 exactly, and 1 * b + 0 = b.
  using S = TestType;
  for (const auto& s : shapes()) {
    const auto c = make_case(s);
    const auto t = attnres_kernel<S>(c.config<S>(), convert<S>(c.e), c.values<S>());
    CHECK(t.h[0] == convert<S>(c.e));  // layer 0 reads [e] in both variants
    for (int l = 0; l < s.layers; ++l) {
      const Vec<S> x = convert<S>(c.v[l]);
      CHECK(attnres_mix<S>({x}, convert<S>(c.w[l]), convert<S>(c.g[l]), S(s.eps)) == x);
    }
  }
}

TEST_CASE("read mixes the sources the state holds, final uses the (L+1)-th pair", "[attnres][framework]") {
  using S = mp77;
  for (const Shape& s : {Shape{3, 10, 0, 1, false, 1e-6, 0, 301}, Shape{3, 10, 4, 1, false, 1e-6, 0, 302}}) {
    const auto c = make_case(s);
    const auto cfg = c.config<S>();
    const AttentionResiduals<S> m(cfg);
    const auto v = c.values<S>();
    const Vec<S> e = convert<S>(c.e);
    const auto t = forward(m, e, s.layers, GivenOutputs<S>{&v});
    INFO(describe(s));
    for (int l = 0; l < s.layers; ++l) {
      const auto& st = l == 0 ? m.init(e) : t.states[l - 1];
      const auto src = m.sources(st);
      const int n_expected = s.block == 0 ? l + 1 : 1 + l / s.block + (l % s.block > 0 ? 1 : 0);
      CHECK(static_cast<int>(src.size()) == n_expected);
      CHECK(t.h[l] == attnres_mix<S>(src, cfg.w[l], cfg.g[l], cfg.eps));
    }
    const auto src = m.sources(t.states.back());
    CHECK(t.out == attnres_mix<S>(src, cfg.w[s.layers], cfg.g[s.layers], cfg.eps));
    CHECK(t.out != attnres_mix<S>(src, cfg.w[s.layers - 1], cfg.g[s.layers - 1], cfg.eps));
    if (s.block > 0) {
      // Finished blocks are left-to-right sums of their outputs; 10 = 4 + 4 + 2
      // leaves a partial sum of the last two outputs.
      REQUIRE(src.size() == 4);
      for (int n = 0; n < 3; ++n) {
        Vec<S> b = v[4 * n];
        for (int i = 1; i < 4 && 4 * n + i < s.layers; ++i) b += v[4 * n + i];
        CHECK(src[n + 1] == b);
      }
      CHECK(t.states.back().in_block == 2);
    }
  }
}

TEST_CASE("Model-level AttnRes equals kernel-level AttnRes fed its own layer outputs", "[attnres][model]") {
  // Any layer function runs through dmref::forward; here the end-to-end
  // fixture layer F(h) = W2 tanh(W1 RMSNorm(h)).
  using S = mp50;
  const int d = 6, hidden = 5, L = 9;
  std::mt19937_64 rng(401);
  std::normal_distribution<double> N(0, 0.5);
  auto rnd = [&](int r, int cc) {
    Mat<S> x(r, cc);
    for (Eigen::Index i = 0; i < x.size(); ++i) x(i) = S(N(rng));
    return x;
  };
  for (int block : {0, 2, 4}) {
    AttnResConfig<S> cfg;
    cfg.d = d;
    cfg.layers = L;
    cfg.variant = block == 0 ? AttnResVariant::full : AttnResVariant::block;
    cfg.block_size = block;
    for (int l = 0; l <= L; ++l) {
      cfg.w.push_back(Vec<S>(rnd(d, 1)));
      cfg.g.push_back(Vec<S>::Ones(d) + Vec<S>(rnd(d, 1)));
    }
    TanhMlpLayer<S> layer{rnd(hidden, d), rnd(d, hidden)};
    const Vec<S> e = rnd(d, 1);
    const auto t = forward(AttentionResiduals<S>(cfg), e, L, [&](int, const Vec<S>& h) { return layer(h); });
    const auto tk = attnres_kernel<S>(cfg, e, t.v);
    for (int l = 0; l < L; ++l) {
      CHECK(tk.h[l] == t.h[l]);
      CHECK(t.v[l] == layer(t.h[l]));
    }
    CHECK(tk.out == t.out);
  }
}

TEST_CASE("Logits past double's exp range: accurate up to the limit, rejected past it, fine at 257 bits",
          "[attnres][range]") {
  // d = 1: the key of b is g b / sqrt(b^2 + eps) ~ +-g, so the logits are
  // ~ +-w g: sources of both signs reach both ends of [-B, B], B = |w| |g|.
  const int L = 5;
  Case c;
  c.shape = {1, L, 0, 0, true, 1e-6, 0, 0};
  c.e = Vec<double>::Constant(1, 1.0);
  for (int l = 0; l < L; ++l) c.v.push_back(Vec<double>::Constant(1, l % 2 == 0 ? -0.5 : 2.0));
  const double limit = AttentionResiduals<double>::logit_limit(L + 1);
  CHECK(limit == -std::log(DBL_MIN) - std::log(L + 1.0));  // the normal-range bound is the tighter one
  auto with_w = [&](double B) {
    c.w.assign(L + 1, Vec<double>::Constant(1, B));
    c.g.assign(L + 1, Vec<double>::Ones(1));
  };
  // Just below the limit: double stays finite and within K::attnres eps cond.
  with_w(limit * (1 - 1e-12));
  const auto t = attnres_kernel<double>(c.config<double>(), c.e, c.values<double>());
  for (int r = 0; r <= L; ++r) {
    const auto o = oracle::attnres_direct(c.readout<Hi>(r));
    const Vec<double>& got = r < L ? t.h[r] : t.out;
    REQUIRE(got.allFinite());
    CHECK(to_double(Hi((got.cast<Hi>() - o.h).norm())) <= K::attnres * DBL_EPSILON * to_double(o.cond));
  }
  // Past it: double refuses; without the check exp would overflow.
  with_w(2000);
  CHECK(std::isinf(std::exp(2000.0)));
  CHECK_THROWS_WITH(AttentionResiduals<double>(c.config<double>()),
                    Catch::Contains("attnres: w") && Catch::Contains("exp range"));
  // 257 bits: MPFR's exponent range makes exp(+-2000) ordinary numbers.
  const double mp_limit = AttentionResiduals<mp77>::logit_limit(L + 1);
  WARN("logit bound limit for " << L + 1 << " sources: double " << limit << ", mpfr257 " << mp_limit);
  CHECK(mp_limit > 1e8);
  const auto tm = attnres_kernel<mp77>(c.config<mp77>(), convert<mp77>(c.e), c.values<mp77>());
  for (int r = 0; r <= L; ++r) {
    const auto o = oracle::attnres_direct(c.readout<Hi>(r));
    const Vec<mp77>& got = r < L ? tm.h[r] : tm.out;
    INFO("readout " << r << " got " << got(0) << " oracle " << o.h(0));
    CHECK(to_double(Hi((got.cast<Hi>() - o.h).norm())) <=
          K::attnres * to_double(epsilon<mp77>()) * to_double(o.cond));
  }
}

TEST_CASE("Bad AttnRes configurations are rejected with the field named", "[attnres][errors]") {
  const auto c = make_case({3, 4, 2, 1, false, 1e-6, 0, 501});
  auto expect = [](const AttnResConfig<double>& cfg, const std::string& field) {
    INFO("field " << field);
    CHECK_THROWS_WITH(AttentionResiduals<double>(cfg), Catch::Contains("attnres: " + field));
  };
  auto cfg = c.config<double>();
  cfg.d = 0;
  expect(cfg, "d");
  cfg = c.config<double>();
  cfg.layers = -1;
  expect(cfg, "layers");
  cfg = c.config<double>();
  cfg.block_size = 0;
  expect(cfg, "block_size");
  for (double bad : {0.0, -1e-6, std::nan("")}) {
    cfg = c.config<double>();
    cfg.eps = bad;
    expect(cfg, "eps");
  }
  cfg = c.config<double>();
  cfg.w.pop_back();
  expect(cfg, "w");
  cfg = c.config<double>();
  cfg.g.push_back(cfg.g.back());
  expect(cfg, "g");
  cfg = c.config<double>();
  cfg.w[2] = Vec<double>::Zero(2);
  expect(cfg, "w");
  cfg = c.config<double>();
  cfg.g[4](1) = INFINITY;
  expect(cfg, "g");

  const AttentionResiduals<double> m(c.config<double>());
  CHECK_THROWS_WITH(m.init(Vec<double>::Zero(2)), Catch::Contains("attnres: embedding"));
  auto st = m.init(c.e);
  CHECK_THROWS_WITH(m.read(st, 1), Catch::Contains("attnres: read"));
  CHECK_THROWS_WITH(m.write(st, 0, Vec<double>::Zero(4)), Catch::Contains("attnres: v"));
  CHECK_THROWS_WITH(m.final(st), Catch::Contains("attnres: final"));
  const std::vector<Vec<double>> five(5, Vec<double>::Zero(3));
  CHECK_THROWS_WITH(forward(m, c.e, 5, GivenOutputs<double>{&five}), Catch::Contains("attnres: read"));
  CHECK_THROWS_WITH(attnres_mix<double>({}, c.w[0], c.g[0], 1e-6), Catch::Contains("attnres: sources"));
  CHECK_THROWS_WITH(attnres_mix<double>({c.e}, c.w[0], Vec<double>::Ones(2), 1e-6), Catch::Contains("attnres: g"));
}
