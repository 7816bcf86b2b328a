// Unit tests of Real<Bits> (dmref/real.hpp), the limb-aligned MPFR point type.
//
// What can go wrong in a hand-written MPFR wrapper: a number initialised at
// the wrong precision (the point of the type: 256, not Boost's 257), an
// operation that rounds twice or drops its rounding mode, a copy or move that
// loses the value, a conversion that is not exact, limits that disagree with
// MPFR. The strongest check is the last test: every scheme of the corpus,
// forward and backward, evaluated on Real<257> and on Boost's mpfr<77>
// (also 257 bits, MPFR underneath, Boost's own operators) must give the same
// numbers bit for bit, since both perform the same MPFR operations in the
// same order, each rounded once to nearest at 257 bits; any difference in an
// operator, a function (exp, log, log1p, tanh, sqrt) or the RLS step's
// direct-MPFR primitives (detail::RlsMpfrOps, reached by both) show up as a
// differing bit. No tolerance: equality is the claim.
#include "dmref/conformance/corpus.hpp"
#include "dmref/conformance/evaluate_impl.hpp"
#include "dmref/ldm.hpp"
#include "dmref/scalar.hpp"

#include <catch2/catch.hpp>

#include <mpfr.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>

using namespace dmref;

TEST_CASE("Real<B>: exactly B bits, exact conversions, value semantics", "[real]") {
  STATIC_REQUIRE(std::numeric_limits<real256>::digits == 256);
  STATIC_REQUIRE(std::numeric_limits<real512>::digits == 512);
  STATIC_REQUIRE(bits<real256>() == 256);
  real256 a(0.1);
  CHECK(mpfr_get_prec(a.get()) == 256);
  CHECK(mpfr_get_prec(real512(3).get()) == 512);
  CHECK(mpfr_get_prec((a * a + a).get()) == 256);  // results keep the type's precision
  CHECK(static_cast<double>(a) == 0.1);            // double -> Real -> double is exact
  CHECK(real256(-7) == real256(-7.0));
  CHECK(real256(std::uint64_t(1) << 63) == real256(9223372036854775808.0));  // 64-bit integers exact
  // epsilon = 2^(1 - B): 1 + eps is the next number after 1, 1 + eps/2 rounds back to 1 (tie to even)
  const real256 one(1), eps = epsilon<real256>();
  real256 next = one;
  mpfr_nextabove(next.get());
  CHECK(one + eps == next);
  CHECK(one + eps / real256(2) == one);
  CHECK(mpfr_cmp_si_2exp(eps.get(), 1, -255) == 0);
  // one rounding per operation: 1/3 at 256 bits is 0x5555...55 (256 ones and zeros) rounded to nearest
  real256 third = real256(1) / real256(3), ref;
  mpfr_set_ui(ref.get(), 1, MPFR_RNDN);
  mpfr_div_ui(ref.get(), ref.get(), 3, MPFR_RNDN);
  CHECK(third == ref);
  CHECK(mpfr_cmp_ui(real256(third * real256(3)).get(), 1) == 0);  // 3 RN(1/3) rounds back to 1 at 256 bits
  // copy and move keep the value; moved-from is valid
  real256 b(a), c(std::move(b));
  CHECK(c == a);
  b = c;
  CHECK(b == a);
  // strings: decimal, rounded to nearest; garbage refused
  CHECK(static_cast<double>(real256("0.1")) == 0.1);
  CHECK(real256("0.1") != real256(0.1));  // the decimal 0.1 is not the double 0.1
  CHECK_THROWS_AS(real256("0.1x"), std::invalid_argument);
  CHECK_THROWS_AS(real256(""), std::invalid_argument);
  // limits: max doubles to infinity, min halves below the exponent range to 0
  const real256 mx = std::numeric_limits<real256>::max();
  CHECK(mpfr_number_p(mx.get()));
  CHECK(mpfr_inf_p(real256(mx * real256(2)).get()));
  const real256 mn = std::numeric_limits<real256>::min();
  CHECK(mpfr_regular_p(mn.get()));
  CHECK(mpfr_zero_p(real256(mn / real256(4)).get()));
  CHECK(std::isnan(static_cast<double>(std::numeric_limits<real256>::quiet_NaN())));
  // functions: MPFR's, correctly rounded at the type's precision
  real256 e;
  mpfr_exp(e.get(), real256(1).get(), MPFR_RNDN);
  CHECK(exp(real256(1)) == e);
  CHECK(mpfr_get_prec(tanh(real256(0.5)).get()) == 256);
  CHECK(abs(real256(-2)) == real256(2));
}

TEST_CASE("Real<257> gives the bits of Boost's mpfr<77> on every scheme of the corpus, forward and backward",
          "[real]") {
  using R = Real<257>;
  STATIC_REQUIRE(std::numeric_limits<R>::digits == std::numeric_limits<mp77>::digits);
  int cases = 0, grad = 0;
  for (const auto& c : conf::corpus()) {
    if (!c.committed) continue;
    INFO(c.id);
    const conf::Problem p = conf::make_problem(c);
    const auto a = conf::evaluate_at<R>(p);
    const auto b = conf::evaluate_at<mp77>(p);
    REQUIRE(a.t.size() == b.t.size());
    for (const auto& [name, x] : a.t) {
      INFO(name);
      REQUIRE(b.t.count(name) == 1);
      const auto& y = b.t.at(name);
      REQUIRE(x.shape == y.shape);
      REQUIRE(x.values.size() == y.values.size());
      std::size_t differ = 0;
      for (std::size_t i = 0; i < x.values.size(); ++i) {
        const bool nan = mpfr_nan_p(x.values[i].get()) && mpfr_nan_p(y.values[i].backend().data());
        if (!nan && !mpfr_equal_p(x.values[i].get(), y.values[i].backend().data())) ++differ;
        if (mpfr_get_prec(x.values[i].get()) != 257) ++differ;
      }
      CHECK(differ == 0);
    }
    ++cases;
    grad += c.grad;
  }
  CHECK(cases >= 100);  // the committed corpus (171 cases when written)
  CHECK(grad >= 50);
}
