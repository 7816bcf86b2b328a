// Properties of Hyper-Connections (docs/hc.md) and of DenseFormer's
// depth-weighted average (docs/denseformer.md), in one executable to save a
// translation unit. The reference runs at 257 bits (mp77); oracles at 667 bits
// (mp200). HC cases cover n up to 4 streams, d up to 16, depth up to 32,
// static and dynamic HC with and without tanh, coefficients scattered around
// the paper's init and dynamic scales up to 1. DenseFormer cases cover depth
// up to 48 and every dilation and period up to 4.
#include "check.hpp"
#include "harness.hpp"

#include "dmref/denseformer.hpp"
#include "dmref/hc.hpp"
#include "hc_cases.hpp"
#include "dmref/model.hpp"
#include "dmref/oracles/denseformer_matrix.hpp"
#include "dmref/oracles/hc_matrix.hpp"
#include "dmref/preln.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

using namespace dmref;
using dmref::test::K;
using S = mp77;
using Hi = mp200;

namespace dmref::test {
inline void showValue(const HcShape& s, std::ostream& os) { os << describe(s); }
}  // namespace dmref::test

namespace hcprop {

// ---------------------------------------------------------------- HC cases

using test::describe;
using test::HcCase;
using test::HcShape;
using test::make_hc_case;

// ------------------------------------------------------- DenseFormer cases

struct DfShape {
  int d = 4, layers = 8, dilation = 1, period = 1;
  std::uint64_t seed = 1;
};
inline std::string describe(const DfShape& s) {
  std::ostringstream o;
  o << "d=" << s.d << " L=" << s.layers << " dilation=" << s.dilation << " period=" << s.period
    << " seed=" << s.seed;
  return o.str();
}
inline void showValue(const DfShape& s, std::ostream& os) { os << describe(s); }

struct DfCase {
  DfShape shape;
  Mat<double> a;
  Vec<double> e;
  std::vector<Vec<double>> v;  // X_1..X_L

  template <class T>
  DenseFormerConfig<T> config(const Mat<double>& w) const {
    DenseFormerConfig<T> c;
    c.d = shape.d;
    c.a = convert<T>(w);
    c.dilation = shape.dilation;
    c.period = shape.period;
    return c;
  }
  template <class T>
  DenseFormerConfig<T> config() const {
    return config<T>(a);
  }
  /// The inputs at full precision: the double values divided by 3 in T, so
  /// that the weighted sums round (with double inputs they would be exact).
  template <class T>
  Vec<T> embedding() const {
    return convert<T>(e) / T(3);
  }
  template <class T>
  std::vector<Vec<T>> values() const {
    std::vector<Vec<T>> r;
    for (const auto& x : v) r.push_back(convert<T>(x) / T(3));
    return r;
  }
  /// [X_0 .. X_L] as columns, the inputs at T converted exactly to Hi.
  template <class T>
  Mat<Hi> X() const {
    Mat<Hi> x(shape.d, shape.layers + 1);
    x.col(0) = embedding<T>().template cast<Hi>();
    const auto vs = values<T>();
    for (int i = 0; i < shape.layers; ++i) x.col(i + 1) = vs[i].template cast<Hi>();
    return x;
  }
};

/// Weights on the pattern: multiples of 2^-10 in [-4, 4] (so that small
/// dyadic combinations of two weight matrices are exact in double), identity
/// rows where the period leaves no DWA; block outputs N(0, 4).
inline Mat<double> df_weights(const DfShape& s, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> I(-4096, 4096);
  DenseFormerConfig<double> pattern;
  pattern.dilation = s.dilation;
  pattern.period = s.period;
  Mat<double> a = Mat<double>::Identity(s.layers + 1, s.layers + 1);
  for (int i = 1; i <= s.layers; ++i)
    for (int j = 0; j <= i; ++j)
      if (i % s.period == 0 && pattern.in_pattern(i, j)) a(i, j) = std::ldexp(double(I(rng)), -10);
  return a;
}

inline DfCase make_df_case(const DfShape& s) {
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<double> N(0, 2);
  DfCase c;
  c.shape = s;
  c.a = df_weights(s, rng);
  c.e.resize(s.d);
  for (int i = 0; i < s.d; ++i) c.e(i) = N(rng);
  for (int l = 0; l < s.layers; ++l) {
    Vec<double> x(s.d);
    for (int i = 0; i < s.d; ++i) x(i) = N(rng);
    c.v.push_back(x);
  }
  return c;
}

}  // namespace hcprop

namespace {

using hcprop::DfShape;
using hcprop::HcShape;


rc::Gen<HcShape> gen_hc(int max_layers = 32) {
  return rc::gen::build<HcShape>(rc::gen::set(&HcShape::n, rc::gen::inRange(1, 5)),
                                 rc::gen::set(&HcShape::d, rc::gen::inRange(2, 17)),
                                 rc::gen::set(&HcShape::layers, rc::gen::inRange(1, max_layers + 1)),
                                 rc::gen::set(&HcShape::dynamic, rc::gen::arbitrary<bool>()),
                                 rc::gen::set(&HcShape::tanh, rc::gen::arbitrary<bool>()),
                                 rc::gen::set(&HcShape::spread, prop::grid(0, 0.5)),
                                 rc::gen::set(&HcShape::wscale, prop::grid(0, 3)),
                                 rc::gen::set(&HcShape::smax, prop::grid(0.01, 1)),
                                 rc::gen::set(&HcShape::seed, rc::gen::arbitrary<std::uint64_t>()));
}

rc::Gen<DfShape> gen_df(int max_layers = 48) {
  return rc::gen::build<DfShape>(rc::gen::set(&DfShape::d, rc::gen::inRange(1, 17)),
                                 rc::gen::set(&DfShape::layers, rc::gen::inRange(1, max_layers + 1)),
                                 rc::gen::set(&DfShape::dilation, rc::gen::inRange(1, 5)),
                                 rc::gen::set(&DfShape::period, rc::gen::inRange(1, 5)),
                                 rc::gen::set(&DfShape::seed, rc::gen::arbitrary<std::uint64_t>()));
}

const double eps = to_double(epsilon<S>());

template <class A, class B>
double dist(const A& a, const B& b) {
  return to_double(Hi((a.template cast<Hi>() - b.template cast<Hi>()).norm()));
}

/// The stack of layer functions the exact relations run through.
TanhMlpStack<S> stack_for(int d, int L, std::uint64_t seed) { return TanhMlpStack<S>::random(d, 8, L, seed); }

}  // namespace

// ===================================================================== HC

TEST_CASE("HC == matrix form H' = A_r^T H + B v^T, h = A_m^T H (every layer, final)", "[property][hc]") {
  static double worst_ratio = 0, worst_rel = 0;
  prop::check("HC == matrix form H' = A_r^T H + B v^T, h = A_m^T H (every layer, final)", 100, [] {
    const auto shape = *gen_hc();
    const auto c = hcprop::make_hc_case(shape);
    const auto t = hc_kernel<S>(c.config<S>(), c.embedding<S>(), c.values<S>());
    const auto o = oracle::hc_matrix_solve(c.problem<Hi, S>());
    auto close = [&](double err, double bound, const Hi& norm, const std::string& what) {
      const double tol = K::hc * eps * bound;
      const std::string in = hcprop::describe(shape) + " " + what;
      DMREF_PROP_CLOSE("HC == matrix form: " + what, err, tol, in);
      DMREF_PROP_TRUE("the bound means something at 257 bits", tol < 1e-3 * to_double(norm), in);
      worst_ratio = std::max(worst_ratio, err / (eps * bound));
      worst_rel = std::max(worst_rel, err / to_double(norm) / eps);
    };
    for (int l = 0; l < shape.layers; ++l) {
      close(dist(t.h[l], o.h[l]), o.bound_h[l], o.h[l].norm(), "h_" + std::to_string(l));
      close(dist(t.states[l].H, o.H[l]), o.bound_H[l], o.H[l].norm(), "H_" + std::to_string(l));
    }
    close(dist(t.out, o.out), o.bound_out, o.out.norm(), "final");
  });
  std::cout << "  worst HC error at " << bits<S>() << " bits: " << worst_ratio << " eps bound (k = " << K::hc
            << "); " << worst_rel << " eps relative\n";
}

TEST_CASE("final == sum of the rows of H_L", "[property][hc]") {
  prop::check("final == sum of the rows of H_L", 40, [] {
    const auto shape = *gen_hc();
    const auto c = hcprop::make_hc_case(shape);
    const auto t = hc_kernel<S>(c.config<S>(), c.embedding<S>(), c.values<S>());
    const Mat<Hi> H = t.states.back().H.template cast<Hi>();
    const Vec<Hi> sum = H.colwise().sum().transpose();
    // n-1 additions, each rounding by at most eps sum_j |H_j| per entry.
    const double tol = K::sum * eps * (shape.n - 1) * to_double(Hi(H.cwiseAbs().colwise().sum().norm()));
    DMREF_PROP_CLOSE("final == sum_j H_j", dist(t.out, sum), tol, hcprop::describe(shape));
  });
}

TEST_CASE("n = 1, A_m = A_r = B = 1: HC == PreLN (exactly)", "[property][hc]") {
  prop::check("n = 1, A_m = A_r = B = 1: HC == PreLN (exactly)", 40, [] {
    auto shape = *gen_hc();
    shape.n = 1;
    // Static: the paper's init at n = 1 is A_m = A_r = B = 1. Dynamic: the
    // same static part and zero dynamic weights (any norm parameters, scales).
    auto c = hcprop::make_hc_case(shape);
    for (auto& q : c.p) {
      q.am.setOnes();
      q.ar.setOnes();
      q.b.setOnes();
      if (shape.dynamic) {
        q.wm.setZero();
        q.wr.setZero();
        q.wb.setZero();
      }
    }
    const auto stack = stack_for(shape.d, shape.layers, shape.seed);
    const auto t = forward(HyperConnections<S>(c.config<S>()), c.embedding<S>(), shape.layers, stack);
    const auto p = forward(PreLN<S>{}, c.embedding<S>(), shape.layers, stack);
    for (int l = 0; l < shape.layers; ++l)
      DMREF_PROP_TRUE("h_l(HC, n = 1) == h_l(PreLN)", t.h[l] == p.h[l], hcprop::describe(shape));
    DMREF_PROP_TRUE("final(HC, n = 1) == final(PreLN)", t.out == p.out, hcprop::describe(shape));
  });
}

TEST_CASE("paper init (A_m = e_{l mod n}, A_r = I, B = 1, W = 0): HC reads PreLN (exactly)", "[property][hc]") {
  prop::check("paper init (A_m = e_{l mod n}, A_r = I, B = 1; W = 0): HC reads PreLN (exactly)", 40, [] {
    const auto shape = *gen_hc();
    const auto stack = stack_for(shape.d, shape.layers, shape.seed);
    const auto c = hcprop::make_hc_case(shape);
    const auto cfg = hc_paper_init<S>(shape.n, shape.d, shape.layers, shape.dynamic);
    const auto t = forward(HyperConnections<S>(cfg), c.embedding<S>(), shape.layers, stack);
    const auto p = forward(PreLN<S>{}, c.embedding<S>(), shape.layers, stack);
    for (int l = 0; l < shape.layers; ++l) {
      DMREF_PROP_TRUE("h_l(HC at init) == h_l(PreLN)", t.h[l] == p.h[l], hcprop::describe(shape));
      for (int j = 0; j < shape.n; ++j)
        DMREF_PROP_TRUE("every stream == PreLN's x", Vec<S>(t.states[l].H.row(j).transpose()) == p.states[l].x,
                        hcprop::describe(shape));
    }
  });
}

TEST_CASE("dynamic HC with W = 0 == static HC (exactly)", "[property][hc]") {
  prop::check("dynamic HC with W = 0 == static HC (exactly)", 40, [] {
    auto shape = *gen_hc();
    shape.dynamic = true;
    auto c = hcprop::make_hc_case(shape);
    for (auto& q : c.p) {
      q.wm.setZero();
      q.wr.setZero();
      q.wb.setZero();
    }
    auto st = c.config<S>();
    st.dynamic = false;
    const auto stack = stack_for(shape.d, shape.layers, shape.seed);
    const auto td = forward(HyperConnections<S>(c.config<S>()), c.embedding<S>(), shape.layers, stack);
    const auto ts = forward(HyperConnections<S>(st), c.embedding<S>(), shape.layers, stack);
    for (int l = 0; l < shape.layers; ++l) {
      DMREF_PROP_TRUE("h_l(dynamic, W = 0) == h_l(static)", td.h[l] == ts.h[l], hcprop::describe(shape));
      DMREF_PROP_TRUE("H_l(dynamic, W = 0) == H_l(static)", td.states[l].H == ts.states[l].H,
                      hcprop::describe(shape));
    }
    DMREF_PROP_TRUE("final(dynamic, W = 0) == final(static)", td.out == ts.out, hcprop::describe(shape));
  });
}

TEST_CASE("permuting the streams with the parameters permutes the state", "[property][hc]") {
  prop::check("permuting the streams with the parameters permutes the state", 40, [] {
    const auto shape = *gen_hc();
    const auto c = hcprop::make_hc_case(shape);
    const int n = shape.n;
    std::vector<int> pi(n);  // stream i of the permuted model is stream pi[i] of the original
    std::iota(pi.begin(), pi.end(), 0);
    std::mt19937_64 rng(shape.seed ^ 0x9e3779b97f4a7c15ull);
    std::shuffle(pi.begin(), pi.end(), rng);
    auto pc = c;
    for (int l = 0; l < shape.layers; ++l) {
      const auto& q = c.p[l];
      auto& r = pc.p[l];
      for (int i = 0; i < n; ++i) {
        r.am(i) = q.am(pi[i]);
        r.b(i) = q.b(pi[i]);
        for (int k = 0; k < n; ++k) r.ar(i, k) = q.ar(pi[i], pi[k]);
        if (shape.dynamic) r.wr.col(i) = q.wr.col(pi[i]);
      }
    }
    const auto t = hc_kernel<S>(c.config<S>(), c.embedding<S>(), c.values<S>());
    const auto tp = hc_kernel<S>(pc.config<S>(), c.embedding<S>(), c.values<S>());
    const auto o = oracle::hc_matrix_solve(c.problem<Hi, S>());
    // Both runs are within K::hc eps bound of the same exact values (the sums
    // run in another order, so equality is not exact for n > 2).
    const std::string in = hcprop::describe(shape);
    for (int l = 0; l < shape.layers; ++l) {
      Mat<S> PH(n, shape.d);
      for (int i = 0; i < n; ++i) PH.row(i) = t.states[l].H.row(pi[i]);
      DMREF_PROP_CLOSE("H_l(permuted) == P H_l", dist(tp.states[l].H, PH), 2 * K::hc * eps * o.bound_H[l], in);
      DMREF_PROP_CLOSE("h_l(permuted) == h_l", dist(tp.h[l], t.h[l]), 2 * K::hc * eps * o.bound_h[l], in);
    }
    DMREF_PROP_CLOSE("final(permuted) == final", dist(tp.out, t.out), 2 * K::hc * eps * o.bound_out, in);
  });
}

// ============================================================ DenseFormer

TEST_CASE("DWA == X W^T from the full coefficient matrix", "[property][denseformer]") {
  static double worst = 0;
  prop::check("DWA == X W^T from the full coefficient matrix", 100, [] {
    const auto shape = *gen_df();
    const auto c = hcprop::make_df_case(shape);
    const auto t = denseformer_kernel<S>(c.config<S>(), c.embedding<S>(), c.values<S>());
    const Mat<Hi> X = c.X<S>();
    const Mat<Hi> W = oracle::denseformer_weights<Hi>(c.a.cast<Hi>(), shape.dilation, shape.period);
    const Mat<Hi> Y = oracle::denseformer_averages(W, X);
    const Mat<Hi> Yabs = oracle::denseformer_abs_averages(W, X);
    for (int i = 0; i <= shape.layers; ++i) {
      const Vec<S>& got = i < shape.layers ? t.h[i] : t.out;
      const double cond = (i + 1) * to_double(Hi(Yabs.col(i).norm()));
      const double err = dist(got, Vec<Hi>(Y.col(i)));
      DMREF_PROP_CLOSE("Y_i == sum_j W_ij X_j", err, K::sum * eps * cond,
                       hcprop::describe(shape) + " i=" + std::to_string(i));
      worst = std::max(worst, err / (eps * cond));
    }
  });
  std::cout << "  worst DWA error at " << bits<S>() << " bits: " << worst << " eps (i+1) || |X| |W_i|^T || (k = "
            << K::sum << ")\n";
}

TEST_CASE("identity weights: DenseFormer == chain of blocks, residual blocks == PreLN (exactly)",
          "[property][denseformer]") {
  prop::check("identity weights: DenseFormer == chain of blocks; residual blocks == PreLN (exactly)", 40, [] {
    const auto shape = *gen_df(24);
    const auto c = hcprop::make_df_case(shape);
    const int L = shape.layers;
    const auto G = stack_for(shape.d, L, shape.seed);
    const auto cfg = denseformer_paper_init<S>(shape.d, L, shape.dilation, shape.period);
    const Vec<S> e = c.embedding<S>();
    const std::string in = hcprop::describe(shape);
    // Any block: Y_i = X_i, so h_l = B_{l-1}(..B_0(e)).
    const auto t = forward(DenseFormer<S>(cfg), e, L, G);
    Vec<S> x = e;
    for (int l = 0; l < L; ++l) {
      DMREF_PROP_TRUE("h_l == B_{l-1}(..B_0(e))", t.h[l] == x, in);
      x = G(l, x);
    }
    DMREF_PROP_TRUE("final == B_{L-1}(..B_0(e))", t.out == x, in);
    // Residual blocks B_l(y) = y + G_l(y): PreLN with G_l.
    auto block = [&](int l, const Vec<S>& y) { return Vec<S>(y + G(l, y)); };
    const auto tr = forward(DenseFormer<S>(cfg), e, L, block);
    const auto p = forward(PreLN<S>{}, e, L, G);
    for (int l = 0; l < L; ++l) DMREF_PROP_TRUE("h_l(DenseFormer, I, y + G(y)) == h_l(PreLN, G)", tr.h[l] == p.h[l], in);
    DMREF_PROP_TRUE("final(DenseFormer, I, y + G(y)) == final(PreLN, G)", tr.out == p.out, in);
  });
}

TEST_CASE("DWA is linear in the weights: Y(c1 a + c2 b) == c1 Y(a) + c2 Y(b)", "[property][denseformer]") {
  prop::check("DWA is linear in the weights: Y(c1 a + c2 b) == c1 Y(a) + c2 Y(b)", 40, [] {
    auto shape = *gen_df();
    shape.period = 1;  // rows without a DWA are fixed to e_i, not a linear space
    const auto c = hcprop::make_df_case(shape);
    std::mt19937_64 rng(shape.seed ^ 0x5851f42d4c957f2dull);
    const Mat<double> b = hcprop::df_weights(shape, rng);
    std::uniform_int_distribution<int> I(-16, 16);
    const double c1 = I(rng) / 8.0, c2 = I(rng) / 8.0;
    Mat<double> ab = c1 * c.a + c2 * b;  // exact: multiples of 2^-13 below 2^4
    ab(0, 0) = 1;                        // Y_0 = X_0 is not a DWA
    const Vec<S> e = c.embedding<S>();
    const auto v = c.values<S>();
    const auto ta = denseformer_kernel<S>(c.config<S>(c.a), e, v);
    const auto tb = denseformer_kernel<S>(c.config<S>(b), e, v);
    const auto tab = denseformer_kernel<S>(c.config<S>(ab), e, v);
    const Mat<Hi> X = c.X<S>();
    auto absY = [&](const Mat<double>& w) {
      return oracle::denseformer_abs_averages(oracle::denseformer_weights<Hi>(w.cast<Hi>(), shape.dilation, 1), X);
    };
    const Mat<Hi> Aa = absY(c.a), Ab = absY(b), Aab = absY(ab);
    for (int i = 1; i <= shape.layers; ++i) {
      auto Y = [&](const auto& t) { return Vec<Hi>((i < shape.layers ? t.h[i] : t.out).template cast<Hi>()); };
      const Vec<Hi> comb = Hi(c1) * Y(ta) + Hi(c2) * Y(tb);
      // Each of the three sums is within (i+1) eps of its exact value.
      const double tol = K::sum * eps * (i + 1) *
                         to_double(Hi(Aab.col(i).norm() + std::abs(c1) * Aa.col(i).norm() +
                                      std::abs(c2) * Ab.col(i).norm()));
      std::ostringstream in;
      in << hcprop::describe(shape) << " i=" << i << " c1=" << c1 << " c2=" << c2;
      DMREF_PROP_CLOSE("Y_i(c1 a + c2 b) == c1 Y_i(a) + c2 Y_i(b)", to_double(Hi((Y(tab) - comb).norm())), tol,
                       in.str());
    }
  });
}

TEST_CASE("k x p DenseFormer == 1 x 1 DenseFormer with the same weights (exactly)", "[property][denseformer]") {
  prop::check("k x p DenseFormer == 1 x 1 DenseFormer with the same weights (exactly)", 40, [] {
    const auto shape = *gen_df();
    const auto c = hcprop::make_df_case(shape);
    const Vec<S> e = c.embedding<S>();
    const auto v = c.values<S>();
    const auto t = denseformer_kernel<S>(c.config<S>(), e, v);
    auto dense = c.config<S>();
    dense.dilation = dense.period = 1;
    const auto td = denseformer_kernel<S>(dense, e, v);
    const std::string in = hcprop::describe(shape);
    for (int l = 0; l < shape.layers; ++l) {
      DMREF_PROP_TRUE("Y_l(k x p) == Y_l(1 x 1, off-pattern weights 0)", t.h[l] == td.h[l], in);
      if (l % shape.period != 0) DMREF_PROP_TRUE("no DWA: Y_l == X_l", t.h[l] == v[l - 1], in);
    }
    DMREF_PROP_TRUE("final(k x p) == final(1 x 1)", t.out == td.out, in);
  });
}
