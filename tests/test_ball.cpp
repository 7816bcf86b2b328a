// Unit tests of the Ball type (dmref/ball.hpp) and of Ziv's strategy on a
// runtime ladder (certify_bits, dmref/certify.hpp).
//
// Enclosure checks: the same computation in 667-bit MPFR point arithmetic
// (mp200: independent code, Boost/MPFR, not Arb) differs from the exact value
// by at most n 2^-666 |x| for n roundings; a ball of the exact value computed
// at b <= 512 bits has radius >= 0 and must contain the mp200 value up to that
// error, so the test widens the ball by it and checks containment. A wrong
// operation (a missed term, a radius not propagated) moves the midpoint by far
// more than 2^-600 relative, or leaves a radius too small.
//
// Certification checks: expected double-doubles from mp200 as in
// test_certify.cpp (hi = RN(x), lo = RN(x - hi); == unless x is within 2^-600
// relative of a tie, which none of these values is).
#include "dmref/certify_mpfi.hpp"
#include "dmref/ldm.hpp"

#include <catch2/catch.hpp>

#include <mpfr.h>

#include <cmath>
#include <string>
#include <utility>

using namespace dmref;
using Catch::Matchers::Contains;
using Hi = mp200;

namespace {

Hi to_hi(const arf_t x) {
  Hi r;
  arf_get_mpfr(r.backend().data(), x, MPFR_RNDN);
  return r;
}

/// True if |mid(b) - x| <= rad(b) + n 2^-666 |x| (the mp200 error of x).
bool encloses(const Ball& b, const Hi& x, int n) {
  using std::abs;
  arf_t r;
  arf_init(r);
  arf_set_mag(r, arb_radref(b.get()));
  const Hi rad = to_hi(r);
  arf_clear(r);
  const Hi gap = abs(to_hi(arb_midref(b.get())) - x);
  return gap <= rad + Hi(n) * epsilon<Hi>() * abs(x);
}

double radius(const Ball& b) { return mag_get_d(arb_radref(b.get())); }

std::pair<double, double> double_double(const Hi& x) {
  const double hi = mpfr_get_d(x.backend().data(), MPFR_RNDN);
  const Hi rest = x - Hi(hi);
  return {hi, mpfr_get_d(rest.backend().data(), MPFR_RNDN)};
}

}  // namespace

TEST_CASE("Ball: runtime precision, exact conversions, value semantics", "[ball]") {
  CHECK(ball_precision() == 128);
  {
    const BallPrecision p(512);
    CHECK(ball_precision() == 512);
    CHECK(bits<Ball>() == 512);
    CHECK(scalar_name<Ball>() == "arb512");
    const Ball third = Ball(1) / Ball(3);
    // 1/3 at 512 bits: radius about 2^-513 (one rounding of the midpoint).
    CHECK(radius(third) > 0);
    CHECK(radius(third) <= std::ldexp(1.0, -510));
  }
  CHECK(ball_precision() == 128);
  const Ball a(0.1), b(a);  // a double converts exactly: radius 0
  CHECK(radius(a) == 0);
  CHECK(static_cast<double>(b) == 0.1);
  Ball c = std::move(Ball(2.5));
  c = a;
  CHECK(c == a);
  CHECK(static_cast<double>(Ball(std::int64_t(1) << 60)) == 0x1p60);
  CHECK_THROWS_WITH(Ball(std::string("x1")), Contains("not a number"));
  CHECK_THROWS(BallPrecision(1));
}

TEST_CASE("Ball: operations enclose the exact value (mp200 reference)", "[ball]") {
  const BallPrecision p(256);
  const double xs[] = {0.75, -1.375, 3.0e-5, 12.5};
  for (double x : xs) {
    INFO("x = " << x);
    const Ball X(x);
    const Hi H(x);
    using std::exp;
    using std::log1p;
    using std::sqrt;
    using std::tanh;
    CHECK(encloses(exp(X) * X - X / Ball(7), exp(H) * H - H / Hi(7), 4));
    CHECK(encloses(tanh(X), tanh(H), 1));
    CHECK(encloses(log1p(exp(-X)), log1p(exp(-H)), 3));
    CHECK(encloses(sqrt(abs(X) + Ball(1)), sqrt(abs(H) + Hi(1)), 2));
  }
  // Exact dot product: 1e16 + 1 - 1e16 cancels; arb_dot keeps the 1.
  Vec<Ball> u(3), v(3);
  u << Ball(1e16), Ball(1), Ball(-1e16);
  v << Ball(1), Ball(1), Ball(1);
  Ball r;
  ball_dot(r, u, v);
  CHECK(radius(r) == 0);
  CHECK(static_cast<double>(r) == 1.0);
}

TEST_CASE("Ball: rls_step (arb_dot form) encloses the MPFR step, every P update", "[ball]") {
  // Two steps of one group, dk = 3, dv = 2, from P = 2 I: the Ball path
  // (ldm.hpp rls_step on detail::RlsBallOps) against the MPFR primitives at 667 bits.
  // n = 200 roundings bounds the mp200 error per entry (a few dozen per step).
  const BallPrecision prec(256);
  const double K[2][3] = {{0.5, -0.25, 1.0}, {0.125, 0.75, -0.5}};
  const double V[2][2] = {{1.0, -2.0}, {0.375, 0.5}};
  for (PUpdate how : {PUpdate::symmetric, PUpdate::naive, PUpdate::joseph}) {
    Mat<Ball> M = Mat<Ball>::Zero(2, 3), P = Ball(2) * Mat<Ball>::Identity(3, 3);
    Mat<Hi> Mh = Mat<Hi>::Zero(2, 3), Ph = Hi(2) * Mat<Hi>::Identity(3, 3);
    for (int s = 0; s < 2; ++s) {
      Vec<Ball> k(3), v(2);
      Vec<Hi> kh(3), vh(2);
      for (int i = 0; i < 3; ++i) k(i) = Ball(K[s][i]), kh(i) = Hi(K[s][i]);
      for (int i = 0; i < 2; ++i) v(i) = Ball(V[s][i]), vh(i) = Hi(V[s][i]);
      rls_step<Ball>(M, P, k, v, Ball(0.5), Ball(0.9375), how);
      rls_step<Hi>(Mh, Ph, kh, vh, Hi(0.5), Hi(0.9375), how);
    }
    for (Eigen::Index i = 0; i < M.size(); ++i) CHECK(encloses(M(i), Mh(i), 200));
    for (Eigen::Index i = 0; i < P.size(); ++i) CHECK(encloses(P(i), Ph(i), 200));
    CHECK(radius(P(0, 0)) < std::ldexp(1.0, -240));  // 256 bits, a few dozen roundings
  }
}

TEST_CASE("certify_bits: the ladder climbs until the exact double-double is reached", "[ball][certify]") {
  // exp(x) - 1 for x = 2^-100 at B bits: width ~2^(1-B), lo = x^2/2 = 2^-201
  // needs it below ~2^-255: 128 bits fail, 512 certify (test_certify.cpp).
  const std::vector<int> ladder = {128, 512, 2048};
  auto expm1 = [](double x) {
    return [x](int) {
      using std::exp;
      return Vec<Ball>::Constant(1, exp(Ball(x)) - Ball(1));
    };
  };
  const Certified c = certify_bits(expm1(0x1p-100), ladder);
  CHECK(c.bits == 512);
  CHECK(c.hi(0) == 0x1p-100);
  CHECK(c.lo(0) == 0x1p-201);  // x^3/6 ~ 2^-302.6 < ulp(2^-201)/2
  // x = 2^-520: lo = 2^-1041 is subnormal, the width must be below 2^-1075.
  CHECK(certify_bits(expm1(0x1p-520), ladder).bits == 2048);
  CHECK_THROWS_WITH(certify_bits(expm1(0x1p-520), {128, 512}),
                    Contains("not certified at 128, 512 bits") && Contains("element (0, 0) at 512 bits"));
  // The Basel sum: agrees with the MPFI certification (certify_with) bit for bit.
  auto basel_ball = [](int) {
    Ball s(0);
    for (int k = 1; k <= 1000; ++k) s += Ball(1) / (Ball(k) * Ball(k));
    return s;
  };
  Hi s = 0;
  for (int k = 1000; k >= 1; --k) s += Hi(1) / (Hi(k) * Hi(k));
  const auto [hi, lo] = double_double(s);
  const Certified b = certify_bits(basel_ball, ladder);
  CHECK(b.bits == 128);
  CHECK(b.hi(0) == hi);
  CHECK(b.lo(0) == lo);
}

TEST_CASE("certify_bits: ties, uncertain inputs, exponents beyond MPFR's, non-finite, indeterminate", "[ball][certify]") {
  const std::vector<int> ladder = {128, 512};
  // 1 + 2^-53 is a tie of RN; as an exact point it certifies (ties to even).
  const Certified t = certify_bits([](int) { return Ball(1) + Ball(0x1p-53); }, ladder);
  CHECK(t.hi(0) == 1.0);
  CHECK(t.lo(0) == 0x1p-53);
  // An input uncertain by 2^-40 never certifies, whatever the precision.
  auto wide = [](int) {
    Ball x(3);
    arb_add_error_2exp_si(x.get(), -40);
    return x;
  };
  CHECK_THROWS_WITH(certify_bits(wide, ladder), Contains("not certified at 128, 512 bits") && Contains("width"));
  // 2^-(2^24) and 2^(2^24) are outside MPFR's default exponent range: the
  // tiny one is (+0, +0) in double-double.
  auto pow2 = [](slong e) {
    return [e](int) {
      Ball x(1);
      arb_mul_2exp_si(x.get(), x.get(), e);
      return x;
    };
  };
  const Certified z = certify_bits(pow2(-(slong(1) << 24)), ladder);
  CHECK(z.hi(0) == 0.0);
  CHECK_FALSE(std::signbit(z.hi(0)));
  CHECK(z.lo(0) == 0.0);
  // The huge one is proven beyond double's range: marked +inf, lo = 2^20
  // (the end is clamped to 2^(2^20), still a true lower bound), at the first rung.
  const Certified big = certify_bits(pow2(slong(1) << 24), ladder);
  CHECK(big.bits == 128);
  CHECK(big.hi(0) == INFINITY);
  CHECK(big.lo(0) == double(slong(1) << 20));
  // log(-1) and 1 / [-1, 1] are Arb's indeterminate ball: no information, so
  // the ladder climbs and fails at its top, naming the element.
  CHECK_THROWS_WITH(certify_bits([](int) { using std::log; return log(Ball(-1)); }, ladder),
                    Contains("not certified at 128, 512 bits") && Contains("indeterminate"));
  auto inv = [](int) {
    Ball x(0);
    arb_add_error_2exp_si(x.get(), 0);  // [-1, 1]
    return Ball(1) / x;
  };
  CHECK_THROWS_WITH(certify_bits(inv, ladder), Contains("element (0, 0) at 512 bits is indeterminate"));
}
