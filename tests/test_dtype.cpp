// Unit tests of the narrow-format rounding (reference/include/dmref/dtype.hpp).
// Everything here is exact, so every check is ==. Expected values come from
// three independent routes: the definition (a nearest-value search in the
// sorted table of all 65536 patterns, ties to the even pattern), the compiler's
// own conversions ((double)(float)x, and (_Float16)x where g++ offers it), and
// the bfloat16 definition as the top half of a binary32 pattern.
#include "dmref/dtype.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace dmref;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string hexf(double x) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%a", x);
  return buf;
}

bool same_bits(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

/// All non-negative finite values of a 16-bit format, ascending, with their
/// patterns: the definition against which rounding is checked.
struct Table {
  std::vector<double> value;
  std::vector<std::uint16_t> bits;
};

Table positive_table(const FloatFormat& f) {
  Table t;
  const std::uint64_t inf_bits = ((std::uint64_t{1} << f.exponent_bits) - 1) << (f.precision - 1);
  for (std::uint64_t b = 0; b < inf_bits; ++b) {
    t.value.push_back(decode(f, b));
    t.bits.push_back(static_cast<std::uint16_t>(b));
  }
  return t;
}

/// Round-to-nearest-even from the definition: the nearest table entry, the
/// even pattern on a tie, +-inf at or beyond max + ulp(max)/2.
double round_by_search(const Table& t, double x) {
  const double a = std::fabs(x);
  const double max = t.value.back();
  const double half_ulp_max = (max - t.value[t.value.size() - 2]) / 2;
  double r;
  if (a >= max + half_ulp_max) {
    r = kInf;
  } else if (a >= max) {
    r = max;
  } else {
    const auto hi = std::upper_bound(t.value.begin(), t.value.end(), a) - t.value.begin();
    const auto lo = hi - 1;  // value[lo] <= a < value[hi]
    // Exact near a tie (Sterbenz: a/2 <= value <= 2a); elsewhere a rounding
    // error cannot reverse the comparison.
    const double dlo = a - t.value[lo], dhi = t.value[hi] - a;
    if (dlo < dhi) r = t.value[lo];
    else if (dhi < dlo) r = t.value[hi];
    else r = (t.bits[lo] % 2 == 0) ? t.value[lo] : t.value[hi];
  }
  return std::copysign(r, x);
}

/// Random doubles concentrated where format f is interesting: exponents from
/// below its subnormals to beyond its overflow, random mantissas and signs.
double random_near(std::mt19937_64& rng, const FloatFormat& f) {
  std::uniform_int_distribution<int> ex(f.emin - f.precision - 3, f.emax + 2);
  const std::uint64_t mant = rng() & ((std::uint64_t{1} << 52) - 1);
  const double m = std::bit_cast<double>((std::uint64_t{1023} << 52) | mant);  // [1, 2)
  const double x = std::ldexp(m, ex(rng));
  return (rng() & 1) ? -x : x;
}

/// Exhaustive checks shared by the 16-bit formats.
void check_16bit_format(const FloatFormat& f, std::uint16_t max_bits, std::uint16_t inf_bits) {
  const Table t = positive_table(f);
  REQUIRE(t.bits.back() == max_bits);
  REQUIRE(t.value.back() == max_finite(f));
  REQUIRE(std::isinf(decode(f, inf_bits)));

  SECTION("every pattern decodes and re-encodes to itself, and its value is a fixed point") {
    long nans = 0;
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const double v = decode(f, b);
      INFO(f.name << " pattern 0x" << std::hex << b << " value " << hexf(v));
      REQUIRE(encode(f, v) == b);
      REQUIRE(same_bits(round_to(f, v), v));
      nans += std::isnan(v);
    }
    // 2 signs x (2^(p-1) - 1) non-zero mantissas under the all-ones exponent.
    CHECK(nans == 2 * ((1L << (f.precision - 1)) - 1));
  }

  SECTION("decoded values increase strictly with the pattern; the sign bit negates") {
    for (std::size_t i = 1; i < t.value.size(); ++i) REQUIRE(t.value[i - 1] < t.value[i]);
    for (std::uint32_t b = 0; b <= inf_bits; ++b) {
      const double neg = decode(f, b | 0x8000u);
      REQUIRE(same_bits(neg, -decode(f, b)));
    }
  }

  SECTION("midpoints round to the even neighbour, their neighbours to the nearer value") {
    for (std::size_t i = 0; i + 1 < t.value.size(); ++i) {
      const double lo = t.value[i], hi = t.value[i + 1];
      const double mid = lo + (hi - lo) / 2;  // exact: one more bit than the format
      REQUIRE(mid > lo);
      REQUIRE(mid < hi);
      const double even = (t.bits[i] % 2 == 0) ? lo : hi;
      INFO(f.name << " between " << hexf(lo) << " and " << hexf(hi));
      REQUIRE(round_to(f, mid) == even);
      REQUIRE(round_to(f, -mid) == -even);
      REQUIRE(round_to(f, std::nextafter(mid, 0.0)) == lo);
      REQUIRE(round_to(f, std::nextafter(mid, kInf)) == hi);
      REQUIRE(round_to(f, -std::nextafter(mid, kInf)) == -hi);
    }
  }

  SECTION("overflow threshold: max + ulp(max)/2 and above round to inf, just below to max") {
    const double max = t.value.back();
    const double threshold = max + (max - t.value[t.value.size() - 2]) / 2;
    CHECK(round_to(f, threshold) == kInf);
    CHECK(round_to(f, -threshold) == -kInf);
    CHECK(round_to(f, std::nextafter(threshold, 0.0)) == max);
    CHECK(round_to(f, -std::nextafter(threshold, 0.0)) == -max);
    CHECK(encode(f, threshold) == inf_bits);
    CHECK(round_to(f, std::numeric_limits<double>::max()) == kInf);
    CHECK(round_to(f, 2 * max) == kInf);
    CHECK(round_to(f, kInf) == kInf);
    CHECK(round_to(f, -kInf) == -kInf);
  }

  SECTION("underflow: half the smallest subnormal rounds to zero (even), above it to the subnormal") {
    const double tiny = t.value[1];
    CHECK(tiny == std::ldexp(1.0, f.emin - (f.precision - 1)));
    CHECK(same_bits(round_to(f, tiny / 2), 0.0));
    CHECK(same_bits(round_to(f, -tiny / 2), -0.0));  // the sign of zero is kept
    CHECK(round_to(f, std::nextafter(tiny / 2, 1.0)) == tiny);
    CHECK(round_to(f, 3 * tiny / 2) == 2 * tiny);  // tie: 2 tiny has the even pattern
    CHECK(same_bits(round_to(f, std::numeric_limits<double>::denorm_min()), 0.0));
    CHECK(encode(f, -0.0) == 0x8000u);
  }

  SECTION("random doubles round as the nearest-value search says") {
    std::mt19937_64 rng(20240611);
    for (int i = 0; i < 200000; ++i) {
      const double x = random_near(rng, f);
      INFO(f.name << " x = " << hexf(x) << " (seed 20240611, draw " << i << ")");
      REQUIRE(same_bits(round_to(f, x), round_by_search(t, x)));
    }
  }
}

}  // namespace

TEST_CASE("bfloat16: exhaustive patterns, midpoints, overflow, nearest-value search", "[dtype][bf16]") {
  check_16bit_format(bfloat16, 0x7f7f, 0x7f80);
}

TEST_CASE("float16: exhaustive patterns, midpoints, overflow, nearest-value search", "[dtype][f16]") {
  check_16bit_format(float16, 0x7bff, 0x7c00);
}

TEST_CASE("bfloat16 is the top half of a binary32 pattern", "[dtype][bf16]") {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float f = std::bit_cast<float>(b << 16);
    const double v = decode_bfloat16(static_cast<std::uint16_t>(b));
    INFO("pattern 0x" << std::hex << b);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(v));
      REQUIRE(encode_float32(v) == (b << 16));  // the payload lands in the same bits
    } else {
      REQUIRE(v == static_cast<double>(f));
      REQUIRE(encode_float32(v) == (b << 16));
    }
  }
  // A bfloat16 rounding equals the binary32 rounding of values that are
  // exactly representable in binary32 and have no bits below the bf16 ulp
  // except a tie, e.g. 1 + 2^-8 (tie, to 1) and 1 + 3 2^-8 (tie, to 1 + 2^-6).
  CHECK(round_to_bfloat16(1 + 0x1p-8) == 1.0);
  CHECK(round_to_bfloat16(1 + 3 * 0x1p-8) == 1 + 0x1p-6);
  CHECK(encode_bfloat16(1.0) == 0x3f80);
  CHECK(encode_bfloat16(-2.0) == 0xc000);
  CHECK(encode_float16(1.0) == 0x3c00);
  CHECK(encode_float16(65504.0) == 0x7bff);
  CHECK(encode_float16(0x1p-24) == 0x0001);
}

TEST_CASE("float16 agrees with the compiler's _Float16 conversion", "[dtype][f16]") {
#if defined(__FLT16_MAX__)
  std::mt19937_64 rng(777);
  long checked = 0;
  auto check = [&](double x) {
    const _Float16 h = static_cast<_Float16>(x);
    INFO("x = " << hexf(x));
    REQUIRE(same_bits(round_to_float16(x), static_cast<double>(h)));
    REQUIRE(encode_float16(x) == std::bit_cast<std::uint16_t>(h));
    ++checked;
  };
  for (int i = 0; i < 500000; ++i) check(random_near(rng, float16));
  for (std::uint32_t b = 0; b < 0x7c00; ++b) {  // every midpoint of adjacent values, and its neighbours
    const double lo = decode_float16(static_cast<std::uint16_t>(b));
    const double hi = decode_float16(static_cast<std::uint16_t>(b + 1));
    const double mid = lo + (hi - lo) / 2;
    for (double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, kInf)}) {
      check(x);
      check(-x);
    }
  }
  WARN("float16 compared with g++ _Float16 conversions at " << checked << " points");
#else
  WARN("_Float16 is not available with this compiler: float16 is checked against the definition only");
  SUCCEED();
#endif
}

TEST_CASE("float32: round_to and its generic algorithm agree with (double)(float)x", "[dtype][f32]") {
  std::mt19937_64 rng(4242);
  auto check = [](double x) {
    const float g = static_cast<float>(x);
    INFO("x = " << hexf(x));
    REQUIRE(same_bits(round_to_float32(x), static_cast<double>(g)));
    REQUIRE(same_bits(round_to_generic(float32, x), static_cast<double>(g)));  // the path the other formats take
    REQUIRE(encode_float32(x) == std::bit_cast<std::uint32_t>(g));
    REQUIRE(same_bits(decode_float32(std::bit_cast<std::uint32_t>(g)), static_cast<double>(g)));
  };
  for (int i = 0; i < 1000000; ++i) check(random_near(rng, float32));
  for (int i = 0; i < 200000; ++i) {  // midpoints of random adjacent binary32 values
    const std::uint32_t b = static_cast<std::uint32_t>(rng()) & 0x7fffffffu;
    if (b >= 0x7f7fffffu) continue;
    const double lo = std::bit_cast<float>(b), hi = std::bit_cast<float>(b + 1);
    const double mid = lo + (hi - lo) / 2;
    for (double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, kInf)}) {
      check(x);
      check(-x);
    }
  }
  const double max = std::numeric_limits<float>::max();
  CHECK(max_finite(float32) == max);
  const double threshold = max + std::ldexp(1.0, 127 - 24);  // max + ulp(max)/2
  check(threshold);
  check(std::nextafter(threshold, 0.0));
  CHECK(round_to_float32(threshold) == kInf);
  CHECK(round_to_float32(std::nextafter(threshold, 0.0)) == max);
  check(std::numeric_limits<float>::denorm_min() / 2.0);
  check(std::numeric_limits<float>::denorm_min() * 1.5);
  check(std::numeric_limits<double>::denorm_min());
  check(std::numeric_limits<double>::max());
  check(-0.0);
}

TEST_CASE("NaNs stay NaN, keep their sign and leading payload bits", "[dtype][nan]") {
  const double qnan = std::numeric_limits<double>::quiet_NaN();
  for (const FloatFormat* f : {&float32, &bfloat16, &float16}) {
    INFO(f->name);
    CHECK(std::isnan(round_to(*f, qnan)));
    CHECK(std::signbit(round_to(*f, -qnan)));
    // A payload only in the low double bits would vanish: encode sets the
    // leading payload bit instead, so the pattern is still a NaN.
    const double low_payload = std::bit_cast<double>(std::uint64_t{0x7ff0000000000001});
    CHECK(std::isnan(decode(*f, encode(*f, low_payload))));
    CHECK(std::isnan(round_to(*f, low_payload)));
    // round_to and decode(encode) agree bit for bit on NaNs too.
    for (double x : {qnan, -qnan, low_payload}) CHECK(same_bits(round_to(*f, x), decode(*f, encode(*f, x))));
  }
  CHECK(encode_float16(qnan) == 0x7e00);
  CHECK(encode_bfloat16(qnan) == 0x7fc0);
  CHECK(encode_float32(qnan) == 0x7fc00000u);
  CHECK_THROWS_AS(decode(float16, 0x10000), std::invalid_argument);
}
