// Unit tests of the emulated low-precision scalars (reference/include/dmref/lowp.hpp).
// Rounding is exact, so those checks are ==, against three independent routes:
//   - the definition: the nearest value in the sorted table of every pattern
//     of the format (ties to the even pattern, overflow at max + ulp(max)/2),
//     applied to the exact result of the operation, which is a double plus the
//     sign of an exactly computed remainder (TwoSum, fma);
//   - dtype.hpp's round_to (a different algorithm from lowp_round);
//   - the hardware: native float arithmetic, and g++'s _Float16.
// Transcendental functions are checked against 257-bit MPFR. Eigen products and
// the reference's RLS recursion run on the types, with k eps cond tolerances.
#include "check.hpp"
#include "ldm_cases.hpp"

#include "dmref/dtype.hpp"
#include "dmref/ldm.hpp"
#include "dmref/lowp.hpp"
#include "dmref/oracles/ldm_rls_closed_form.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace dmref;
using dmref::test::K;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string hexf(double x) {
  char b[48];
  std::snprintf(b, sizeof b, "%a", x);
  return b;
}

bool same(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

/// Every non-negative finite value of a format, ascending (pattern order).
struct Table {
  std::vector<double> v;
  double overflow = 0;  // max + ulp(max)/2: the smallest magnitude that rounds to inf
};

Table table(const FloatFormat& f) {
  Table t;
  const std::uint64_t inf_bits = ((std::uint64_t{1} << f.exponent_bits) - 1) << (f.precision - 1);
  for (std::uint64_t b = 0; b < inf_bits; ++b) t.v.push_back(decode(f, b));
  t.overflow = t.v.back() + (t.v.back() - t.v[t.v.size() - 2]) / 2;
  return t;
}

/// The correctly rounded value of x + delta, where delta is an unknown real of
/// sign `dir` (-1, 0, +1) smaller than half an ulp of x in double: found in
/// the table (Sterbenz makes the midpoint comparisons exact).
double round_def(const Table& t, double x, int dir) {
  if (!std::isfinite(x)) return x;
  if (x == 0 && dir == 0) return x;
  const double a = std::fabs(x);
  const int d = x < 0 ? -dir : dir;  // direction of the correction in magnitude
  double r;
  if (a > t.overflow || (a == t.overflow && d >= 0)) {
    r = kInf;
  } else if (a >= t.v.back()) {
    r = t.v.back();
  } else {
    const std::size_t hi = std::upper_bound(t.v.begin(), t.v.end(), a) - t.v.begin(), lo = hi - 1;
    const double mid = t.v[lo] + (t.v[hi] - t.v[lo]) / 2;
    if (a < mid || (a == mid && d < 0)) r = t.v[lo];
    else if (a > mid || (a == mid && d > 0)) r = t.v[hi];
    else r = (lo % 2 == 0) ? t.v[lo] : t.v[hi];  // a tie: the even pattern
  }
  return std::copysign(r, x == 0 ? static_cast<double>(dir) : x);
}

int sgn(double x) { return (x > 0) - (x < 0); }

// Hot loops check without INFO (which formats its message on every pass).
#define LOWP_SAME(got, want, what)                                                                   \
  do {                                                                                               \
    const double lowp_g_ = (got), lowp_w_ = (want);                                                  \
    if (!same(lowp_g_, lowp_w_)) FAIL(what << ": got " << hexf(lowp_g_) << ", expected " << hexf(lowp_w_)); \
  } while (0)

/// The operands b of the exhaustive tables: edge values and random patterns.
template <class T>
std::vector<double> second_operands(const FloatFormat& f, int random_count) {
  const Table t = table(f);
  const double mn = std::numeric_limits<T>::min().value(), mx = t.v.back();
  std::vector<double> b{0.0, t.v[1], t.v[2], mn - t.v[1], mn, 2 * mn, 0.5, 1.0, 1.0 + std::ldexp(1.0, 1 - f.precision),
                        2.0 - std::ldexp(1.0, 1 - f.precision), 3.0, 0.1875, 1.5, 7.0, mx, t.v[t.v.size() - 2],
                        std::ldexp(1.0, f.emax), std::ldexp(1.0, f.emin + f.precision), kInf,
                        std::numeric_limits<double>::quiet_NaN()};
  const std::size_t edges = b.size();
  for (std::size_t i = 0; i < edges; ++i) b.push_back(-b[i]);
  std::mt19937_64 rng(0x10f);
  std::uniform_int_distribution<std::size_t> pick(0, t.v.size() - 1);
  for (int i = 0; i < random_count; ++i) b.push_back((rng() & 1 ? -1 : 1) * t.v[pick(rng)]);
  return b;
}

/// Every finite pattern of f as a, both signs, and inf, against second_operands:
/// + - * / and sqrt give the definition's value, bit for bit.
template <class T>
void exhaustive_arithmetic(const FloatFormat& f) {
  const Table t = table(f);
  const auto bs = second_operands<T>(f, 96);
  std::vector<double> as;
  for (double v : t.v) {
    as.push_back(v);
    as.push_back(-v);
  }
  as.push_back(kInf);
  as.push_back(-kInf);
  long checked = 0;
  for (double a : as) {
    const T A = T::exact(a);
    for (double b : bs) {
      const T B = T::exact(b);
      // Sum: TwoSum gives the exact error of the double sum.
      const double s = a + b, bb = s - a, es = std::isfinite(s) ? (a - (s - bb)) + (b - bb) : 0.0;
      const double d = a - b, db = d - a, ed = std::isfinite(d) ? (a - (d - db)) + (-b - db) : 0.0;
      const double p = a * b;  // exact: 2p <= 22 significant bits, far inside double's range
      const double q = a / b;
      const int eq = (std::isfinite(q) && q != 0) ? sgn(std::fma(-q, b, a)) * sgn(b) : 0;
      LOWP_SAME((A + B).value(), round_def(t, s, sgn(es)), f.name << " " << hexf(a) << " + " << hexf(b));
      LOWP_SAME((A - B).value(), round_def(t, d, sgn(ed)), f.name << " " << hexf(a) << " - " << hexf(b));
      LOWP_SAME((A * B).value(), round_def(t, p, 0), f.name << " " << hexf(a) << " * " << hexf(b));
      LOWP_SAME((A / B).value(), round_def(t, q, eq), f.name << " " << hexf(a) << " / " << hexf(b));
      checked += 4;
    }
    const double r = std::sqrt(a);
    const int er = (std::isfinite(r) && r > 0) ? sgn(std::fma(-r, r, a)) : 0;
    LOWP_SAME(sqrt(A).value(), round_def(t, r, er), f.name << " sqrt " << hexf(a));
  }
  WARN(f.name << ": " << checked << " operations (" << as.size() << " x " << bs.size()
              << " operand pairs) and " << as.size() << " square roots equal to the definition");
}

}  // namespace

TEST_CASE("lowp_round equals dtype.hpp's round_to (exhaustive near every value of each format)", "[lowp]") {
  for (const FloatFormat* f : {&bfloat16, &float16}) {
    const Table t = table(*f);
    for (std::size_t i = 0; i + 1 < t.v.size(); ++i) {
      const double lo = t.v[i], hi = t.v[i + 1], mid = lo + (hi - lo) / 2;
      for (double x : {lo, mid, std::nextafter(mid, 0.0), std::nextafter(mid, kInf), lo + (hi - lo) / 3,
                       std::nextafter(lo, kInf), std::nextafter(hi, 0.0)}) {
        LOWP_SAME(lowp_round(*f, x), round_to(*f, x), f->name << " x = " << hexf(x));
        LOWP_SAME(lowp_round(*f, -x), round_to(*f, -x), f->name << " x = " << hexf(-x));
      }
    }
    for (double x : {t.overflow, std::nextafter(t.overflow, 0.0), std::nextafter(t.overflow, kInf), 2 * t.overflow,
                     std::numeric_limits<double>::max(), std::numeric_limits<double>::denorm_min(), kInf,
                     std::numeric_limits<double>::quiet_NaN(), 0.0, -0.0}) {
      INFO(f->name << " x = " << hexf(x));
      REQUIRE(same(lowp_round(*f, x), round_to(*f, x)));
      REQUIRE(same(lowp_round(*f, -x), round_to(*f, -x)));
    }
  }
  // binary32: random doubles at every exponent from below its subnormals to past overflow.
  std::mt19937_64 rng(32);
  std::uniform_int_distribution<int> ex(-160, 130);
  for (int i = 0; i < 2000000; ++i) {
    const double m = std::bit_cast<double>((std::uint64_t{1023} << 52) | (rng() >> 12));
    const double x = std::ldexp(m, ex(rng)) * (rng() & 1 ? -1 : 1);
    LOWP_SAME(lowp_round(float32, x), round_to(float32, x), "float32 x = " << hexf(x));
    LOWP_SAME(lowp_round(float32, x), static_cast<double>(static_cast<float>(x)), "(float) x = " << hexf(x));
  }
}

TEST_CASE("bfloat16 arithmetic is correctly rounded (every value x edge and random operands)", "[lowp][bf16]") {
  exhaustive_arithmetic<bf16>(bfloat16);
}

TEST_CASE("float16 arithmetic is correctly rounded (every value x edge and random operands)", "[lowp][f16]") {
  exhaustive_arithmetic<fp16>(float16);
}

TEST_CASE("float16 agrees with g++'s _Float16 arithmetic", "[lowp][f16]") {
  auto h = [](double x) { return static_cast<_Float16>(static_cast<float>(x)); };
  const auto bs = second_operands<fp16>(float16, 64);
  for (std::uint32_t pa = 0; pa < 65536; ++pa) {
    const double a = decode(float16, pa);
    for (double b : bs) {
      const _Float16 ha = h(a), hb = h(b);
      const volatile _Float16 s = ha + hb, d = ha - hb, p = ha * hb, q = ha / hb;  // stored: rounded to half
      const fp16 A = fp16::exact(a), B = fp16::exact(b);
      LOWP_SAME((A + B).value(), static_cast<double>(s), hexf(a) << " + " << hexf(b));
      LOWP_SAME((A - B).value(), static_cast<double>(d), hexf(a) << " - " << hexf(b));
      LOWP_SAME((A * B).value(), static_cast<double>(p), hexf(a) << " * " << hexf(b));
      LOWP_SAME((A / B).value(), static_cast<double>(q), hexf(a) << " / " << hexf(b));
    }
  }
}

TEST_CASE("emulated float32 agrees with native float arithmetic, bit for bit", "[lowp][f32]") {
  std::mt19937_64 rng(24);
  std::uniform_int_distribution<int> ex(-150, 127);
  auto rnd = [&] {
    const float m = std::bit_cast<float>(static_cast<std::uint32_t>((127u << 23) | (rng() >> 41)));
    return std::ldexp(m, ex(rng)) * (rng() & 1 ? -1.0f : 1.0f);  // exact, or flushed past the range
  };
  for (int i = 0; i < 1000000; ++i) {
    const float a = rnd(), b = rnd();
    const volatile float s = a + b, d = a - b, p = a * b, q = a / b, r = std::sqrt(a);
    const fp32e A(a), B(b);
    LOWP_SAME(A.value(), static_cast<double>(a), "fp32e(" << hexf(a) << ")");
    LOWP_SAME((A + B).value(), static_cast<double>(s), hexf(a) << " + " << hexf(b));
    LOWP_SAME((A - B).value(), static_cast<double>(d), hexf(a) << " - " << hexf(b));
    LOWP_SAME((A * B).value(), static_cast<double>(p), hexf(a) << " * " << hexf(b));
    LOWP_SAME((A / B).value(), static_cast<double>(q), hexf(a) << " / " << hexf(b));
    LOWP_SAME(sqrt(A).value(), static_cast<double>(r), "sqrt " << hexf(a));
  }
}

TEST_CASE("exp, log, log1p, expm1, tanh round the 257-bit value to nearest (every 16-bit input)", "[lowp]") {
  for (const FloatFormat* f : {&bfloat16, &float16}) {
    const Table t = table(*f);
    long checked = 0, near_tie = 0;
    auto check = [&](const char* name, double a, double got, const mp77& exact) {
      // got must be the nearest value of f to `exact`; within 2^-50 relative of
      // a midpoint the double the C library returns may fall on either side.
      const mp77 ex = abs(exact);
      const double g = std::fabs(got);
      auto where = [&] {
        std::ostringstream o;
        o << f->name << " " << name << "(" << hexf(a) << ") = " << hexf(got) << ", exact " << exact;
        return o.str();
      };
      if (std::isnan(got)) FAIL(where());
      if (exact != 0 && got != 0 && (exact < 0) != (got < 0)) FAIL("sign: " << where());
      double lo_mid, hi_mid;
      if (std::isinf(g)) {
        lo_mid = t.overflow;
        hi_mid = kInf;
      } else {
        const std::size_t i = std::lower_bound(t.v.begin(), t.v.end(), g) - t.v.begin();
        if (i == t.v.size() || t.v[i] != g) FAIL("not a value of the format: " << where());
        lo_mid = i == 0 ? 0.0 : t.v[i - 1] + (t.v[i] - t.v[i - 1]) / 2;
        hi_mid = i + 1 == t.v.size() ? t.overflow : t.v[i] + (t.v[i + 1] - t.v[i]) / 2;
      }
      const mp77 slack = ex * mp77(0x1p-50);
      const bool in = mp77(lo_mid) <= ex && (std::isinf(hi_mid) || ex <= mp77(hi_mid));
      if (!in) {
        ++near_tie;
        if (!(abs(ex - mp77(lo_mid)) <= slack || (!std::isinf(hi_mid) && abs(ex - mp77(hi_mid)) <= slack)))
          FAIL("not the nearest value: " << where());
      }
      ++checked;
    };
    for (std::uint64_t b = 0; b < t.v.size(); ++b)
      for (double a : {t.v[b], -t.v[b]}) {
        const mp77 x(a);
        if (f == &bfloat16) {
          check("exp", a, exp(bf16::exact(a)).value(), exp(x));
          check("tanh", a, tanh(bf16::exact(a)).value(), tanh(x));
          check("expm1", a, expm1(bf16::exact(a)).value(), expm1(x));
          if (a > 0) check("log", a, log(bf16::exact(a)).value(), log(x));
          if (a > -1) check("log1p", a, log1p(bf16::exact(a)).value(), log1p(x));
        } else {
          check("exp", a, exp(fp16::exact(a)).value(), exp(x));
          check("tanh", a, tanh(fp16::exact(a)).value(), tanh(x));
          check("expm1", a, expm1(fp16::exact(a)).value(), expm1(x));
          if (a > 0) check("log", a, log(fp16::exact(a)).value(), log(x));
          if (a > -1) check("log1p", a, log1p(fp16::exact(a)).value(), log1p(x));
        }
      }
    WARN(f->name << ": " << checked << " function values checked, " << near_tie
                 << " within 2^-50 of a midpoint (either neighbour accepted)");
  }
}

TEST_CASE("numeric_limits and NumTraits describe the formats of dtype.hpp", "[lowp]") {
  auto check = [](auto tag, const FloatFormat& f) {
    using T = decltype(tag);
    using NL = std::numeric_limits<T>;
    CHECK(NL::is_specialized);
    CHECK(NL::digits == f.precision);
    CHECK(NL::epsilon().value() == std::ldexp(1.0, 1 - f.precision));
    CHECK(NL::max().value() == max_finite(f));
    CHECK(NL::lowest().value() == -max_finite(f));
    CHECK(NL::min().value() == std::ldexp(1.0, f.emin));
    CHECK(NL::denorm_min().value() == std::ldexp(1.0, f.emin - f.precision + 1));
    CHECK(NL::denorm_min().value() == decode(f, 1));
    CHECK(std::isinf(NL::infinity().value()));
    CHECK(std::isnan(NL::quiet_NaN().value()));
    CHECK(epsilon<T>() == NL::epsilon());
    CHECK(Eigen::NumTraits<T>::epsilon() == NL::epsilon());
    CHECK(Eigen::NumTraits<T>::highest() == NL::max());
    // Everything round-trips: each limit is a value of the format.
    for (const T& x : {NL::max(), NL::min(), NL::denorm_min(), NL::epsilon()}) CHECK(round_to(f, x.value()) == x.value());
  };
  check(bf16{}, bfloat16);
  check(fp16{}, float16);
  check(fp32e{}, float32);
  // The emulated binary32 and native float agree on every limit.
  CHECK(std::numeric_limits<fp32e>::max().value() == std::numeric_limits<float>::max());
  CHECK(std::numeric_limits<fp32e>::min().value() == std::numeric_limits<float>::min());
  CHECK(std::numeric_limits<fp32e>::denorm_min().value() == std::numeric_limits<float>::denorm_min());
  CHECK(std::numeric_limits<fp32e>::digits10 == std::numeric_limits<float>::digits10);
  CHECK(std::numeric_limits<fp32e>::max_digits10 == std::numeric_limits<float>::max_digits10);
  CHECK(std::numeric_limits<fp32e>::min_exponent10 == std::numeric_limits<float>::min_exponent10);
  CHECK(std::numeric_limits<fp32e>::max_exponent10 == std::numeric_limits<float>::max_exponent10);
}

TEST_CASE("conversions: construction rounds once, store_as rounds to the storage format", "[lowp]") {
  CHECK(bf16(1.0 / 3).value() == round_to(bfloat16, 1.0 / 3));
  CHECK(fp16(1e6).value() == kInf);          // past 65504: overflow
  CHECK(fp16(65519.99).value() == 65504.0);  // below max + ulp/2 = 65520
  CHECK(fp16(65520.0).value() == kInf);
  CHECK(bf16(3).value() == 3.0);
  CHECK(bf16(257).value() == 256.0);         // 257 = 256 + 1 is a tie: to even (256)
  CHECK(bf16(259).value() == 260.0);
  CHECK(static_cast<double>(fp16(0.1)) == round_to(float16, 0.1));
  const float x = 1.0f / 3;
  CHECK(store_as(bfloat16, x) == static_cast<float>(round_to(bfloat16, x)));
  CHECK(store_as(float16, 1e5f) == std::numeric_limits<float>::infinity());
  Vec<float> v(3);
  v << 1.0f / 3, 1e-9f, 70000.0f;
  store_in(float16, v);
  CHECK(v(0) == static_cast<float>(round_to(float16, 1.0 / 3.0f)));
  CHECK(v(1) == 0.0f);  // below half the smallest float16 subnormal (2^-25)
  CHECK(std::isinf(v(2)));
  // Mixed arithmetic promotes the plain number to the format first.
  CHECK((bf16(1) + 1e-3).value() == 1.0);  // 1e-3 -> bf16, then 1 + 0.000999 rounds to 1
  CHECK((fp16(2) * 3).value() == 6.0);
}

TEMPLATE_TEST_CASE("Eigen products and Cholesky on emulated types stay within gamma_n bounds", "[lowp][eigen]", bf16,
                   fp16, fp32e) {
  using T = TestType;
  const double eps = to_double(epsilon<T>());
  std::mt19937_64 rng(7);
  std::normal_distribution<double> N(0, 1);
  for (int n : {3, 8, 24}) {
    Mat<double> Ad(n, n), Bd(n, n);
    Vec<double> xd(n);
    for (Eigen::Index i = 0; i < Ad.size(); ++i) Ad(i) = round_to(T::format, N(rng));
    for (Eigen::Index i = 0; i < Bd.size(); ++i) Bd(i) = round_to(T::format, N(rng));
    for (int i = 0; i < n; ++i) xd(i) = round_to(T::format, N(rng));
    const Mat<T> A = Ad.cast<T>(), B = Bd.cast<T>();
    const Vec<T> x = xd.cast<T>();
    // Every entry is a dot product of length n: |fl - exact| <= gamma_n (|A||x|)_i,
    // gamma_n = n u / (1 - n u) <= n eps (u = eps/2, n u <= 1/2): K::lowp_dot = 1.
    const Vec<T> y = A * x;
    const Vec<double> ye = Ad * xd, ya = Ad.cwiseAbs() * xd.cwiseAbs();  // exact in double: few bits, short sums
    double worst = 0;
    for (int i = 0; i < n; ++i) {
      const double tol = K::lowp_dot * n * eps * ya(i);
      INFO("n = " << n << " row " << i);
      CHECK(std::fabs(to_double(y(i)) - ye(i)) <= tol);
      worst = std::max(worst, std::fabs(to_double(y(i)) - ye(i)) / (n * eps * ya(i)));
    }
    const Mat<T> C = A * B;  // the blocked matrix-matrix kernel
    const Mat<double> Ce = Ad * Bd, Ca = Ad.cwiseAbs() * Bd.cwiseAbs();
    for (Eigen::Index i = 0; i < C.size(); ++i) CHECK(std::fabs(to_double(C(i)) - Ce(i)) <= K::lowp_dot * n * eps * Ca(i));
    // Cholesky of a well-conditioned SPD matrix: A_spd = L L^T + dA with
    // |dA| <= gamma_{n+1} |L||L^T| (Higham, Thm 10.3): same k, length n + 1.
    Mat<double> Sd = Ad * Ad.transpose() / n + Mat<double>::Identity(n, n);
    Sd = Sd.unaryExpr([](double s) { return round_to(T::format, s); });
    const Eigen::LLT<Mat<T>> llt(Sd.cast<T>());
    REQUIRE(llt.info() == Eigen::Success);
    const Mat<double> L = Mat<T>(llt.matrixL()).unaryExpr([](const T& s) { return to_double(s); });
    const Mat<double> R = (Sd - L * L.transpose()).cwiseAbs(), Rb = L.cwiseAbs() * L.cwiseAbs().transpose();
    for (Eigen::Index i = 0; i < R.size(); ++i) CHECK(R(i) <= K::lowp_dot * (n + 1) * eps * Rb(i));
    WARN(scalar_name<T>() << " n = " << n << ": worst A x error / (n eps |A||x|) = " << worst);
  }
}

TEST_CASE("the RLS reference runs unchanged on emulated float32 and meets its tolerance", "[lowp][ldm]") {
  // The same tolerance as tests/test_ldm.cpp, with eps of binary32: the
  // emulation is a scalar type like any other to the reference.
  using T = fp32e;
  using Hi = mp200;
  const double eps = to_double(epsilon<T>());
  double worst = 0;
  for (const test::LdmShape& shape : {test::LdmShape{4, 2, 1, 10, 0, 0.9, 2, 0.1, 0, 31},
                                      test::LdmShape{3, 2, 2, 8, 0, 0.9, 1, 0.0, 0, 32}}) {
    const auto c = test::make_ldm_case(shape);
    // Case values have 30 significant bits: round them to binary32 so every type sees the same problem.
    auto c32 = c;
    auto r32 = [](double x) { return round_to(float32, x); };
    c32.lambda = c.lambda.unaryExpr(r32);
    c32.e = c.e.unaryExpr(r32);
    for (auto& v : c32.v) v = v.unaryExpr(r32);
    for (auto& a : c32.a) a = {a.q.unaryExpr(r32), a.k.unaryExpr(r32), a.omega.unaryExpr(r32)};
    const auto t = ldm_kernel<T>(c32.config<T>(), convert<T>(c32.e), c32.values<T>(), c32.addresses<T>());
    std::vector<test::RlsCondition> conds(shape.groups, test::RlsCondition(c32.alpha));
    for (int l = 0; l < shape.layers; ++l)
      for (int g = 0; g < shape.groups; ++g) {
        const auto cf = oracle::rls_closed_form(c32.problem<Hi>(g, l));
        const double cond = conds[g].add(cf, c32.lambda(l, g));
        const double tol = K::rls * eps * cond;
        INFO(test::describe(shape) << " layer " << l << " group " << g << " cond_rls " << cond);
        REQUIRE(tol < 1e-3);
        const Mat<double> M = t.states[l].mem[g].M.unaryExpr([](const T& s) { return to_double(s); });
        const double e = test::rel_err<Hi>(M, cf.M);
        CHECK(e <= tol);
        worst = std::max(worst, e / (eps * cond));
      }
  }
  WARN("emulated float32: worst RLS error / (eps cond_rls) = " << worst << " (k = " << K::rls << ")");
}

TEST_CASE("the RLS reference runs unchanged on bfloat16 and float16", "[lowp]") {
  // How far 16-bit runs drift is the stability sweeps' subject
  // (docs/stability.md, with measured numbers); here: the reference
  // instantiates and runs, and a well-conditioned case stays finite.
  const auto c = test::make_ldm_case({4, 2, 2, 12, 0, 0.9, 1, 0.0, 0, 41});
  auto grid = [](double x) { return round_to(bfloat16, x); };
  auto cb = c;
  cb.lambda = c.lambda.unaryExpr(grid);
  cb.e = c.e.unaryExpr(grid);
  for (auto& v : cb.v) v = v.unaryExpr(grid);
  for (auto& a : cb.a) a = {a.q.unaryExpr(grid), a.k.unaryExpr(grid), a.omega.unaryExpr(grid)};
  const auto hi = ldm_kernel<mp77>(cb.config<mp77>(), convert<mp77>(cb.e), cb.values<mp77>(), cb.addresses<mp77>());
  const auto b = ldm_kernel<bf16>(cb.config<bf16>(), convert<bf16>(cb.e), cb.values<bf16>(), cb.addresses<bf16>());
  const auto h = ldm_kernel<fp16>(cb.config<fp16>(), convert<fp16>(cb.e), cb.values<fp16>(), cb.addresses<fp16>());
  const double eb = test::rel_err<mp77>(b.out, hi.out), eh = test::rel_err<mp77>(h.out, hi.out);
  WARN("LDM (12 layers, lambda >= 0.9): bfloat16 output error " << eb << " (" << eb / to_double(epsilon<bf16>()) << " eps), float16 "
                                                               << eh << " (" << eh / to_double(epsilon<fp16>()) << " eps)");
  CHECK(b.out.unaryExpr([](const bf16& x) { return to_double(x); }).allFinite());
  CHECK(h.out.unaryExpr([](const fp16& x) { return to_double(x); }).allFinite());
}
