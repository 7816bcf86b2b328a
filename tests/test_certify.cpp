// Unit tests of the certified double-double evaluation (dmref/certify.hpp).
//
// Expected values are computed independently at 667 bits (mp200) in point
// arithmetic, by other formulas or in another order, and rounded twice:
// hi = RN(x), lo = RN(x - hi). That equals the double-double of the exact
// value unless the exact value lies within the mp200 error (< 2^-600
// relative here) of a rounding tie, so the comparison is ==. Accuracy of
// hi + lo is checked against the bound of certify.hpp,
//     |x - (hi + lo)| <= max(2^-106 |hi|, 2^-1075),
// widened by the error of the mp200 value itself (n 2^-666 |x| for a sum of
// n terms, each rounded once).
//
// To keep compile time down the computations are few small lambdas, most
// instantiated at the default list of 5 precisions once.
#include "dmref/certify_mpfi.hpp"
#include "dmref/conformance/generate.hpp"

#include <catch2/catch.hpp>

#include <mpfr.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>

using namespace dmref;
using Catch::Matchers::Contains;
using Hi = mp200;

namespace {

/// hi = RN(x), lo = RN(x - hi) from a 667-bit value (x - hi is exact).
std::pair<double, double> double_double(const Hi& x) {
  const double hi = mpfr_get_d(x.backend().data(), MPFR_RNDN);
  const Hi rest = x - Hi(hi);
  return {hi, mpfr_get_d(rest.backend().data(), MPFR_RNDN)};
}

/// Checks element i of c against the 667-bit value x computed with n
/// rounding errors; returns |x - hi - lo| / |hi| in units of 2^-106.
double check_element(const Certified& c, Eigen::Index i, const Hi& x, int n) {
  using std::abs;
  using std::ldexp;
  const auto [hi, lo] = double_double(x);
  INFO("element " << i << ": certified hi " << c.hi(i) << " lo " << c.lo(i) << ", expected hi " << hi << " lo "
                  << lo);
  CHECK(c.hi(i) == hi);
  CHECK(c.lo(i) == lo);
  const Hi err = abs(x - Hi(c.hi(i)) - Hi(c.lo(i)));
  const Hi bound = std::max(ldexp(Hi(std::fabs(c.hi(i))), -106), ldexp(Hi(1), -1075)) +
                   Hi(n) * epsilon<Hi>() * abs(x);
  INFO("|x - hi - lo| = " << to_double(err) << ", bound " << to_double(bound));
  CHECK(err <= bound);
  return c.hi(i) == 0 ? 0.0 : to_double(Hi(err / abs(Hi(c.hi(i))))) / 0x1p-106;
}

/// exp(x) - 1 computed naively: the subtraction cancels the leading 1, so
/// about log2(1/x) bits are lost and the needed precision grows with 1/x.
auto naive_expm1(double x) {
  return [x](auto p) {
    using I = typename decltype(p)::type;
    using std::exp;
    return Vec<I>::Constant(1, exp(I(x)) - I(1));
  };
}

/// exp(x) - 1 = sum_{k>=1} x^k / k! at 667 bits, truncated after x^12/12!
/// (the remainder is below 2^-1000 relative for x <= 2^-100).
Hi expm1_series(double x) {
  Hi s = 0, term = 1;
  for (int k = 1; k <= 12; ++k) {
    term = term * Hi(x) / Hi(k);
    s += term;
  }
  return s;
}

}  // namespace

TEST_CASE("certify: a well-conditioned sum certifies at 40 digits to the exact double-double", "[certify]") {
  const int n = 1000;
  auto basel = [](auto p) {
    using I = typename decltype(p)::type;
    Vec<I> v(2);
    I s = 0;
    for (int k = 1; k <= n; ++k) s += I(1) / (I(k) * I(k));
    v(0) = s;
    v(1) = I(1) / I(3);
    return v;
  };
  const Certified c = certify_with<40, 80>(basel);
  CHECK(c.digits10 == 40);
  CHECK(c.bits == bits<mpfi<40>>());
  REQUIRE(c.hi.rows() == 2);
  REQUIRE(c.hi.cols() == 1);
  REQUIRE(c.lo.rows() == 2);
  // Independently: the sum in the other order (smallest terms first), and 1/3.
  Hi s = 0;
  for (int k = n; k >= 1; --k) s += Hi(1) / (Hi(k) * Hi(k));
  double worst = check_element(c, 0, s, 3 * n);
  worst = std::max(worst, check_element(c, 1, Hi(1) / Hi(3), 1));
  CHECK(c.lo(1) != 0);  // 1/3 is not a double: the low part carries information
  WARN("Basel sum and 1/3: worst |x - hi - lo| / |hi| = " << worst << " x 2^-106 (bound 1)");
}

TEST_CASE("certify: exact inputs, a tie, and a scalar result", "[certify]") {
  auto exact = [](auto p) {
    using I = typename decltype(p)::type;
    Vec<I> v(3);
    v(0) = I(0.1);                    // a double: hi = 0.1, lo = 0
    v(1) = I(1) + I(0x1p-53);         // exactly halfway between 1 and 1 + 2^-52: ties to even
    v(2) = I(1) / I(7);
    return v;
  };
  const Certified c = certify_with<40>(exact);
  CHECK(c.digits10 == 40);
  CHECK(c.hi(0) == 0.1);
  CHECK(c.lo(0) == 0.0);
  CHECK(c.hi(1) == 1.0);       // RN(1 + 2^-53) = 1, the even neighbour
  CHECK(c.lo(1) == 0x1p-53);   // the remainder is exact
  check_element(c, 2, Hi(1) / Hi(7), 1);
  const Certified s = certify_with<40>([](auto p) {
    using I = typename decltype(p)::type;
    return I(2) / I(3);
  });
  REQUIRE(s.hi.size() == 1);
  check_element(s, 0, Hi(2) / Hi(3), 1);
}

TEST_CASE("certify: cancellation needs more digits, and certify climbs the list until it suffices", "[certify]") {
  // With B bits, exp(x) - 1 has an interval of width about 2^(1-B) around
  // x + x^2/2, whose lo ~ x^2/2 needs that width below ~2^-54 x^2, i.e.
  // B > ~56 + 2 log2(1/x): x = 2^-100 needs 256 bits (80 digits = 267 bits),
  // x = 2^-200 needs 456 (160 digits = 533 bits). For x = 2^-520, lo = 2^-1041
  // is subnormal and the width must be below its half ulp 2^-1075: 640
  // digits (2128 bits), since 320 digits are 1065 bits.
  struct Case {
    double x;
    unsigned digits10;
  };
  double worst = 0;
  for (const Case& k : {Case{0x1p-100, 80}, Case{0x1p-200, 160}, Case{0x1p-520, 640}}) {
    INFO("x = " << k.x);
    const Certified c = certify(naive_expm1(k.x));
    CHECK(c.digits10 == k.digits10);
    CHECK(c.digits10 > 40);
    worst = std::max(worst, check_element(c, 0, expm1_series(k.x), 12 * 3));
  }
  // x^2/2 = 2^-201 is the whole low part: x^3/6 ~ 2^-302.6 < ulp(2^-201)/2 = 2^-254.
  const Certified c = certify(naive_expm1(0x1p-100));
  CHECK(c.hi(0) == 0x1p-100);
  CHECK(c.lo(0) == 0x1p-201);
  // Capped below what it needs, it fails and says where.
  CHECK_THROWS_WITH(certify(naive_expm1(0x1p-100), 40),
                    Contains("element (0, 0) at 40 digits") && Contains("width"));
  CHECK_THROWS_WITH(certify(naive_expm1(0x1p-520), 320), Contains("at 320 digits"));
  CHECK_THROWS_WITH(certify(naive_expm1(0x1p-100), 10), Contains("no precision in the list is <= max_digits10 = 10"));
  WARN("exp(x) - 1: worst |x - hi - lo| / |hi| = " << worst << " x 2^-106 (bound 1)");
}

TEST_CASE("certify: an input interval of nonzero width never certifies", "[certify]") {
  auto wide = [](auto p) {
    using I = typename decltype(p)::type;
    Mat<I> m(2, 2);
    m(0, 0) = I(1);
    m(0, 1) = I(2) / I(3);
    m(1, 0) = I(1.0, 1.0 + 0x1p-40) * I(3);  // the input itself is uncertain by 2^-40
    m(1, 1) = I(5);
    return m;
  };
  try {
    certify_with<40, 80>(wide);
    FAIL("certified an uncertain value");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK_THAT(what, Contains("not certified at 40, 80 digits"));
    CHECK_THAT(what, Contains("element (1, 0) at 80 digits"));  // the last precision tried
    CHECK_THAT(what, Contains("[3, 3.0000000000027284841"));    // 3 (1 + 2^-40) = 3.00000000000272848...
    CHECK_THAT(what, Contains("width 2.73e-12"));                // 3 2^-40
    CHECK(what.find('\n') == std::string::npos);
  }
}

TEST_CASE("certify: non-finite results are errors at once", "[certify]") {
  auto overflow = [](auto p) {
    using I = typename decltype(p)::type;
    using std::exp;
    return Vec<I>::Constant(1, exp(I(1000)));  // e^1000 > DBL_MAX: hi would be inf
  };
  CHECK_THROWS_WITH((certify_with<40, 80>(overflow)),
                    Contains("element (0, 0) at 40 digits") && Contains("not finite in double"));
  auto nan = [](auto p) {
    using I = typename decltype(p)::type;
    using std::log;
    return Vec<I>::Constant(1, log(I(-1)));
  };
  CHECK_THROWS_WITH((certify_with<40, 80>(nan)), Contains("at 40 digits") && Contains("not finite"));
}

// An output beyond double's range (issue 14, "The limits, stated"). The
// overflow threshold of RN is 2^1024 - 2^970 (the midpoint between DBL_MAX and
// 2^1024): an x at or above it has RN(x) = +inf. certify_bits marks an element
// whose whole ball is beyond it (hi = +-inf, lo = E with |x| >= 2^E) and does not
// let it hold the ladder back; one whose ball straddles it climbs, and fails at
// the top. conf::assemble then leaves the tensor out, naming the element.
TEST_CASE("certify_bits: an element proven beyond double's range is marked, a straddling one climbs", "[certify]") {
  const std::vector<int> ladder = {128, 512};
  auto ball = [](slong m, slong e) {  // m 2^e, exactly
    Ball x;
    arb_set_si(x.get(), m);
    arb_mul_2exp_si(x.get(), x.get(), e);
    return x;
  };
  const slong t54 = (slong(1) << 54) - 1;  // the threshold is t54 2^970
  // 3 2^1030 = 3.7e310 and -2^1100: both ends of each exact ball are beyond.
  // The third element, 1 + 2^-200 computed as (1 + 2^-200) with a 2^-bits
  // error, needs the 512-bit rung: the marked ones do not stop the climb.
  auto f = [&](int bits) {
    Vec<Ball> v(3);
    v(0) = ball(3, 1030);
    v(1) = ball(-1, 1100);
    v(2) = Ball(1) + ball(1, -200);
    arb_add_error_2exp_si(v(2).get(), -bits + 100);  // width 2^(101-bits): 128 bits cannot see 2^-200
    return v;
  };
  const Certified c = certify_bits(f, ladder);
  CHECK(c.bits == 512);
  CHECK(c.hi(0) == INFINITY);
  CHECK(c.lo(0) == 1031);  // floor(log2(3 2^1030)) = 1031
  CHECK(c.hi(1) == -INFINITY);
  CHECK(c.lo(1) == 1100);
  CHECK(c.hi(2) == 1.0);
  CHECK(c.lo(2) == 0x1p-200);
  // Just below the threshold, (2^1024 - 2^970) (1 - 2^-60), is finite: hi = DBL_MAX, lo its remainder.
  const Certified below = certify_bits([&](int) { return ball(t54, 970) * (Ball(1) - ball(1, -60)); }, ladder);
  CHECK(below.hi(0) == DBL_MAX);
  CHECK(below.lo(0) > 0);
  // A ball around the threshold itself, of radius 2^(1024 - bits): its ends
  // round to DBL_MAX and +inf at every precision; not proven either way.
  auto straddle = [&](int bits) {
    Ball x = ball(t54, 970);
    arb_add_error_2exp_si(x.get(), 1024 - bits);
    return x;
  };
  CHECK_THROWS_WITH(certify_bits(straddle, ladder),
                    Contains("not certified at 128, 512 bits") && Contains("do not round to the same double-double"));
}

TEST_CASE("assemble: a tensor with an element beyond double's range is left out, named, all of them is an error",
          "[certify]") {
  // Two tokens; per token output.P [1, 2] and output.out [1, 1], flat column (P0, P1, out);
  // assembled, P is [2, 2] and its element j of token t is [t,j].
  auto token = [](double p1, double lo1, int bits) {
    conf::TokenGolden t;
    t.layout = {{"output.P", {1, 2}}, {"output.out", {1, 1}}};
    t.c.hi = Mat<double>(3, 1);
    t.c.lo = Mat<double>(3, 1);
    t.c.hi << 1.5, p1, 2.0;
    t.c.lo << 0.0, lo1, 0x1p-60;
    t.c.bits = bits;
    return t;
  };
  // Token 1's P[1] is marked +inf with |x| >= 2^1030: 2^1030 = 1.15e310 (1030 log10 2 = 310.06).
  const conf::Golden g = conf::assemble({token(3.0, 0.0, 128), token(INFINITY, 1030, 512)});
  CHECK(g.bits == 512);
  CHECK(g.tensors.count("output.out") == 1);
  CHECK(g.tensors.count("output.out.lo") == 1);
  CHECK(g.tensors.at("output.out").values == std::vector<double>{2.0, 2.0});
  CHECK(g.tensors.count("output.P") == 0);
  CHECK(g.tensors.count("output.P.lo") == 0);
  REQUIRE(g.unrepresentable.count("output.P") == 1);
  CHECK(g.unrepresentable.at("output.P") ==
        "element [1,1] is beyond double's range: x >= 2^1030 (about 1.15e310), certified at 512 bits");
  // A negative one: its bound is an upper bound.
  const conf::Golden n = conf::assemble({token(-INFINITY, 1100, 128)});
  CHECK(n.unrepresentable.at("output.P") ==
        "element [0,1] is beyond double's range: x <= -2^1100 (about -1.35e331), certified at 128 bits");
  // Nothing left out: no entry (the committed corpus' metadata is unchanged).
  CHECK(conf::assemble({token(3.0, 0.0, 128)}).unrepresentable.empty());
  // Every output beyond: nothing to write, an error.
  conf::TokenGolden all = token(INFINITY, 1030, 128);
  all.c.hi(0) = all.c.hi(2) = INFINITY;
  all.c.lo(0) = all.c.lo(2) = 1024;
  CHECK_THROWS_WITH(conf::assemble({all}), Contains("every output is beyond double's range") && Contains("output.P"));
}

namespace {

/// Rows [t0, t1) of every per-token tensor (input.*, leading dimension T), config.tokens = t1 - t0.
conf::Problem tokens_of(const conf::Problem& p, std::int64_t t0, std::int64_t t1) {
  const std::int64_t T = p.integer("tokens");
  conf::Problem q = p;
  q.config["tokens"] = t1 - t0;
  for (auto& [name, x] : q.tensors)
    if (name.rfind("input.", 0) == 0 && x.shape.at(0) == T) {
      const std::size_t row = x.values.size() / std::size_t(T);
      x.values = std::vector<double>(x.values.begin() + std::ptrdiff_t(row * t0), x.values.begin() + std::ptrdiff_t(row * t1));
      x.shape[0] = t1 - t0;
    }
  return q;
}
conf::Problem one_token(const conf::Problem& p, std::int64_t t) { return tokens_of(p, t, t + 1); }

/// Every output of o that `keep` accepts (all, without it), in name order, as one column (as
/// generate.cpp certifies them).
Mat<Ball> column(const conf::Outputs<Ball>& o, const std::function<bool(const std::string&)>& keep = {}) {
  std::vector<Ball> v;
  for (const auto& [name, out] : o.t)
    if (!keep || keep(name)) v.insert(v.end(), out.values.begin(), out.values.end());
  Mat<Ball> x(Eigen::Index(v.size()), 1);
  for (std::size_t i = 0; i < v.size(); ++i) x(Eigen::Index(i), 0) = std::move(v[i]);
  return x;
}

/// The committed backward case `id` (2 tokens, A and B) made 4 * reps tokens (A, A-, B, B-) repeated:
/// A- has A's inputs and the negated upstream gradients, except grad.out[0], one ulp nearer 0.
conf::Problem cancelling_tokens(const std::string& id, int reps) {
  const conf::Problem p = [&] {
    for (const auto& c : conf::corpus())
      if (c.id == id) return conf::make_problem(c);
    throw std::runtime_error("no case " + id);
  }();
  REQUIRE(p.integer("tokens") == 2);
  conf::Problem q = p;
  q.config["tokens"] = 4 * reps;
  for (auto& entry : q.tensors) {
    const std::string& name = entry.first;  // not a structured binding: clang 14 cannot capture one (the lambda below)
    auto& x = entry.second;
    if (name.rfind("input.", 0) != 0) continue;
    const std::size_t row = x.values.size() / 2;
    const std::vector<double> a(x.values.begin(), x.values.begin() + std::ptrdiff_t(row)),
        b(x.values.begin() + std::ptrdiff_t(row), x.values.end());
    const bool upstream = name.rfind("input.grad.", 0) == 0;
    auto minus = [&](std::vector<double> r) {
      if (!upstream) return r;
      for (auto& y : r) y = -y;
      if (name == "input.grad.out") r[0] = std::nextafter(r[0], 0.0);
      return r;
    };
    x.values.clear();
    for (int k = 0; k < reps; ++k)
      for (const auto& r : {a, minus(a), b, minus(b)}) x.values.insert(x.values.end(), r.begin(), r.end());
    x.shape[0] = 4 * reps;
  }
  return q;
}

}  // namespace

TEST_CASE("a backward problem's tokens certified in parallel: the bytes of one evaluation, for any --jobs",
          "[certify]") {
  // A committed backward case made 4 tokens (A, A-, B, B-): A and B are its two tokens; A- has A's inputs
  // and the negated upstream gradients, except grad.out[0], one ulp nearer 0. A parameter gradient is
  // linear in the upstream gradient, so its sum over the four tokens is one ulp of grad.out[0] times
  // d out_0 / d param, per pair: the terms cancel to ~2^-52 of their size. Each token alone certifies at
  // the case's rung; the sums need the next (at 128 bits the terms' radii are ~2^-110 of them, so ~2^-58
  // of the sum, and a double-double needs ~2^-106), and the tokens are evaluated again there. LDM delta at
  // kernel level (grad.param.beta summed by run_tokens), PreLN at model level (grad.param.W1, summed inside
  // the layers' backward: its terms are added in another order than the whole problem's).
  struct Case {
    const char *id, *param;
    int alone, summed;
  };
  for (const Case& k : {Case{"ldm_delta.kernel_grad.g2_dk4_d8.L6.f32.s1", "grad.param.beta", 128, 512},
                        Case{"preln.model_grad.d8_h8.L6.f32.s1", "grad.param.W1", 512, 2048}}) {
    INFO(k.id);
    const conf::Problem q = cancelling_tokens(k.id, 1);
    const conf::Outputs<Ball> layout = conf::validate(q);
    REQUIRE(conf::backward_group(4, layout.per_token, layout.summed, q.limits.max_elements) == 1);  // token by token
    for (std::int64_t t = 0; t < 4; ++t) CHECK(conf::certified_outputs(one_token(q, t)).bits == k.alone);
    const conf::Golden g = conf::certified_outputs(q, 1);
    CHECK(g.bits == k.summed);
    for (const unsigned jobs : {2u, 3u, 5u}) {
      INFO("--jobs " << jobs);
      const conf::Golden h = conf::certified_outputs(q, jobs);
      CHECK(h.bits == g.bits);
      CHECK(h.unrepresentable == g.unrepresentable);
      REQUIRE(h.tensors.size() == g.tensors.size());
      for (const auto& [name, t] : g.tensors) {
        INFO(name);
        CHECK(h.tensors.at(name).shape == t.shape);
        CHECK(h.tensors.at(name).values == t.values);
      }
    }
    // The whole problem evaluated at once (the bindings' own sums over tokens): it first certifies at the
    // same rung, to the same double-doubles, every tensor.
    Certified whole;
    std::string why;
    for (const int bits : conf::kZivBits) {
      if (bits == k.summed) break;
      const BallPrecision b(bits);
      CHECK_FALSE(certify_rung(column(conf::evaluate<Ball>(q)), bits, whole, why));
    }
    const BallPrecision b(k.summed);
    const conf::Outputs<Ball> o = conf::evaluate<Ball>(q);
    REQUIRE(certify_rung(column(o), k.summed, whole, why));
    Eigen::Index n = 0;
    for (const auto& [name, out] : o.t) {
      INFO(name);
      REQUIRE(g.tensors.count(name) == 1);
      CHECK(g.tensors.at(name).shape == out.shape);
      for (std::size_t i = 0; i < out.values.size(); ++i, ++n) {
        CHECK(g.tensors.at(name).values[i] == whole.hi(n, 0));
        CHECK(g.tensors.at(name + ".lo").values[i] == whole.lo(n, 0));
      }
    }
    CHECK(n == whole.hi.rows());
    CHECK(g.tensors.size() == 2 * o.t.size());
    // The parameter gradient is the correctly rounded sum of the tokens' terms: their balls added, certified.
    const auto param = [&](const std::string& name) { return name == k.param; };
    Mat<Ball> sum = column(conf::evaluate<Ball>(one_token(q, 0)), param);
    const Mat<Ball> first = sum;
    for (std::int64_t t = 1; t < 4; ++t) sum += column(conf::evaluate<Ball>(one_token(q, t)), param);
    Certified s;
    REQUIRE(certify_rung(sum, k.summed, s, why));
    const auto& gp = g.tensors.at(k.param).values;
    CHECK(gp == std::vector<double>(s.hi.data(), s.hi.data() + s.hi.size()));
    CHECK(g.tensors.at(std::string(k.param) + ".lo").values == std::vector<double>(s.lo.data(), s.lo.data() + s.lo.size()));
    // The cancellation the test is about: the sum is at most ~2^-40 of a term.
    double term = 0, total = 0;
    for (Eigen::Index i = 0; i < first.rows(); ++i) {
      term = std::max(term, std::fabs(arf_get_d(arb_midref(first(i, 0).get()), ARF_RND_NEAR)));
      total = std::max(total, std::fabs(gp[std::size_t(i)]));
    }
    CHECK(total > 0);
    CHECK(total < 0x1p-40 * term);
  }
}

TEST_CASE("a backward problem of 32 tokens or more certified in groups: each token's goldens, for any --jobs",
          "[certify]") {
  // From 32 tokens on, backward_group(...) consecutive tokens are one evaluation (generate.cpp,
  // certify_backward): rows certified token by token, the group's part of each sum over tokens summed by
  // the binding's own loop. A golden is the correctly rounded double-double of its exact value, so the
  // rows must be those of each token alone and the sums those of the tokens' terms added one by one, and
  // the bytes the same for any --jobs. 36 tokens (A, A-, B, B-) x 9: groups of 2, (A, A-) and (B, B-),
  // whose terms cancel inside the group, so the sums need the rung past the rows' (as in the test above);
  // then the first 35 (the last group one token, nothing cancelling against B).
  struct Case {
    const char* id;
    int summed;
  };
  for (const Case& k : {Case{"ldm_delta.kernel_grad.g2_dk4_d8.L6.f32.s1", 512},
                        Case{"preln.model_grad.d8_h8.L6.f32.s1", 2048}}) {
    for (const std::int64_t T : {36, 35}) {
      INFO(k.id << ", " << T << " tokens");
      const conf::Problem q = tokens_of(cancelling_tokens(k.id, 9), 0, T);
      const conf::Outputs<Ball> layout = conf::validate(q);
      REQUIRE(conf::backward_group(T, layout.per_token, layout.summed, q.limits.max_elements) == 2);
      const conf::Golden g = conf::certified_outputs(q, 1);
      if (T == 36) CHECK(g.bits == k.summed);
      for (const unsigned jobs : {2u, 3u}) {
        INFO("--jobs " << jobs);
        const conf::Golden h = conf::certified_outputs(q, jobs);
        CHECK(h.bits == g.bits);
        REQUIRE(h.tensors.size() == g.tensors.size());
        for (const auto& [name, t] : g.tensors) CHECK(h.tensors.at(name).values == t.values);
      }
      // Rows: token t's are those of token t alone.
      std::size_t rows = 0;
      for (std::int64_t t = 0; t < T; ++t) {
        const conf::Golden a = conf::certified_outputs(one_token(q, t));
        for (const auto& [name, x] : a.tensors) {
          const std::string base = name.size() > 3 && name.ends_with(".lo") ? name.substr(0, name.size() - 3) : name;
          if (!q.row_output(base)) continue;
          INFO(name << " token " << t);
          const auto& all = g.tensors.at(name).values;
          REQUIRE(all.size() == x.values.size() * std::size_t(T));
          CHECK(std::vector<double>(all.begin() + std::ptrdiff_t(x.values.size() * std::size_t(t)),
                                    all.begin() + std::ptrdiff_t(x.values.size() * std::size_t(t + 1))) == x.values);
          ++rows;
        }
      }
      CHECK(rows > 0);
      // Sums: the tokens' terms as balls added one by one (every sum over tokens in one column, in name
      // order), certified from g's rung on; each tensor's (hi, lo) compared.
      const auto summed = [&](const std::string& name) { return !q.row_output(name); };
      Certified s;
      bool certified = false;
      for (const int bits : conf::kZivBits) {
        if (bits < g.bits || certified) continue;
        const BallPrecision b(bits);
        Mat<Ball> sum = column(conf::evaluate<Ball>(one_token(q, 0)), summed);
        for (std::int64_t t = 1; t < T; ++t) sum += column(conf::evaluate<Ball>(one_token(q, t)), summed);
        std::string why;
        certified = certify_rung(sum, bits, s, why);
      }
      REQUIRE(certified);
      std::size_t sums = 0;
      Eigen::Index at = 0;
      for (const auto& [name, x] : g.tensors) {  // name order, as the column
        if (name.ends_with(".lo") || q.row_output(name)) continue;
        INFO(name);
        const Eigen::Index n = Eigen::Index(x.values.size());
        REQUIRE(at + n <= s.hi.rows());
        CHECK(x.values == std::vector<double>(s.hi.data() + at, s.hi.data() + at + n));
        CHECK(g.tensors.at(name + ".lo").values == std::vector<double>(s.lo.data() + at, s.lo.data() + at + n));
        at += n;
        ++sums;
      }
      CHECK(at == s.hi.rows());
      CHECK(sums > 0);
    }
  }
}

TEST_CASE("backward_group: T / 16 tokens a group, at most 16, within the bound on one evaluation", "[certify]") {
  constexpr std::int64_t limit = std::int64_t{1} << 22;  // Limits::max_elements
  // Below 32 tokens, one (every committed backward case has 1 or 2).
  for (const std::int64_t T : {1, 2, 31}) CHECK(conf::backward_group(T, 10, 10, limit) == 1);
  CHECK(conf::backward_group(32, 10, 10, limit) == 2);
  CHECK(conf::backward_group(255, 10, 10, limit) == 15);
  CHECK(conf::backward_group(256, 10, 10, limit) == 16);
  CHECK(conf::backward_group(100000, 10, 10, limit) == 16);
  // mhc_ops pre, n = 4, C = 4096: rows n C + C + 2n + n^2 = 20,504 a token, sums n3 n C + 3 + n3 =
  // 393,243 (n3 = 2n + n^2 = 24): (2^22 - 393,243) / 20,504 = 185 tokens fit, so 16.
  CHECK(conf::backward_group(1024, 20504, 393243, limit) == 16);
  // Where the rows are big, as many as fit: (300 - 100) / 100 = 2, (299 - 100) / 100 = 1.
  CHECK(conf::backward_group(1024, 100, 100, 300) == 2);
  CHECK(conf::backward_group(1024, 100, 100, 299) == 1);
  CHECK(conf::backward_group(1024, std::int64_t{1} << 20, 0, limit) == 4);
  // A backward problem without rows (every output a sum): limited by T / 16 and 16 only.
  CHECK(conf::backward_group(64, 0, 100, limit) == 4);
}
