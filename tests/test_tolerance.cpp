// The tolerance model (docs/precision.md "Tolerance model"; perturbed.hpp,
// conformance/tolerance.hpp): the error scale B that K = 32 samples of the
// standard model give covers float32 evaluations in other orders within the
// gate's factor, covers a kernel that stores its stream in bfloat16 between
// layers under the bf16:f32 recipe (and not under f32), and is the same bytes
// whatever the thread count.
#include "dmref/conformance/evaluate.hpp"
#include "dmref/conformance/generate.hpp"
#include "dmref/conformance/tolerance.hpp"
#include "dmref/layers.hpp"
#include "dmref/perturbed.hpp"
#include "dmref/random.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

using namespace dmref;
using namespace dmref::conf;

namespace {

/// B = |mean| / factor + std of K samples of f under recipe r (as generate.cpp forms it).
template <class F>
double scale_of(const Recipe& r, double exact, F&& f) {
  const int K = kToleranceSamples;
  double s1 = 0, s2 = 0;
  for (int k = 0; k < K; ++k) {
    RoundingModel m = rounding_model_of(r);
    m.state = 0x5eed0000ull + std::uint64_t(k);
    const ScopedRoundingModel scope(m);
    const double e = f() - exact;
    s1 += e;
    s2 += e * e;
  }
  const double mean = s1 / K;
  return std::fabs(mean) / kToleranceFactor + std::sqrt(std::fmax(s2 - K * mean * mean, 0.0) / (K - 1));
}

/// A tensor of the given shape, uniform on [-1, 1) rounded to format f.
io::Tensor draw(SplitMix64& rng, const FloatFormat& f, std::vector<std::int64_t> shape) {
  io::Tensor t;
  t.dtype = "F64";
  t.shape = shape;
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  for (std::int64_t i = 0; i < n; ++i) t.values.push_back(round_to(f, rng.uniform()));
  return t;
}

/// Every entry of m, uniform on [-1, 1), as exact Perturbed values.
template <class M>
void fill_uniform(M& m, SplitMix64& rng) {
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = Perturbed::exact(2 * rng.uniform() - 1);
}

}  // namespace

TEST_CASE("a normalised weight carries the log domain's relative error u |log q| besides the division's", "[tolerance]") {
  // perturbed.hpp `normalized`: q (1 +- u_fn)(1 +- u |log q|), each sign drawn; the relative
  // error of a sample is one of the four products minus 1 (exact in double to ~1e-16 relative,
  // far below u = 2^-24), so its magnitude is u_fn + u L or |u_fn - u L| up to u_fn u L.
  // One draw per sample seed (a sign is a function of the seed and the value: the same
  // quotient under one seed rounds the same way every time, as a real kernel's does).
  RoundingModel m;
  for (const double q : {1e-6, 0.25, 1.0}) {
    const double L = std::fabs(std::log(q)), u = m.u, ufn = m.u_fn;
    int high = 0;
    for (int k = 0; k < 64; ++k) {
      m.state = 0x5eed0000ull + std::uint64_t(k);
      const ScopedRoundingModel scope(m);
      const double r = normalized(Perturbed::exact(q), Perturbed::exact(1.0)).value() / q - 1;
      CHECK(normalized(Perturbed::exact(q), Perturbed::exact(1.0)).value() / q - 1 == r);  // the same value, the same rounding
      const double a = std::fabs(r);
      const bool is_high = std::fabs(a - (ufn + u * L)) <= 2 * ufn * u * L + 1e-15;
      const bool is_low = std::fabs(a - std::fabs(ufn - u * L)) <= 2 * ufn * u * L + 1e-15;
      REQUIRE((is_high || is_low));
      high += is_high;
    }
    if (q == 1.0) CHECK(high == 64);          // log 1 = 0: only the division's u_fn
    else CHECK((high > 0 && high < 64));      // both sign combinations occur in 64 draws
  }
  // Every other scalar divides.
  CHECK(normalized(0.3, 0.7) == 0.3 / 0.7);
}

TEST_CASE("a sample does not depend on the order in which the operands of an expression are evaluated", "[tolerance]") {
  // C++ leaves the order of the operands of a + b unspecified (GCC and clang differ): the
  // products a*b and c*d computed in either order give the same sample, bit for bit, because
  // a rounding's sign is a function of the seed and the value (perturbed.hpp). Under the stream
  // drawn in evaluation order that it replaced, each rounding took the next position of the
  // stream, so the second evaluation drew other signs than the first and the sums differed.
  const Perturbed a = Perturbed::exact(0.3), b = Perturbed::exact(1.7), c = Perturbed::exact(-2.9), d = Perturbed::exact(0.41);
  for (int k = 0; k < 32; ++k) {
    RoundingModel m;
    m.state = 0x5eed0000ull + std::uint64_t(k);
    const ScopedRoundingModel scope(m);
    const Perturbed x1 = a * b, y1 = c * d;
    const Perturbed y2 = c * d, x2 = a * b;
    CHECK((x1 + y1).value() == (x2 + y2).value());
  }
}

TEST_CASE("the vector loop of a row-major product on Perturbed gives the bits of Eigen's scalar loop", "[tolerance]") {
  // perturbed_gemv.hpp replaces Eigen's row-major general_matrix_vector_product on Perturbed.
  // Eigen's loop (its packet size for Perturbed is 1) is, per row i: c = 0; c = A(i, j) x(j) + c
  // for j = 0 .. cols-1; res(i) = res(i) + alpha c, each operation one Perturbed rounding: written
  // here as that plain loop of Perturbed operations, it must give the same bits as the product
  // (A^T x on a column-major A is the row-major case; a single row is a dot product, not this
  // loop), for row counts across the block sizes (1 to 4 vectors of 8 lanes, and the padded
  // last block), a block of a larger matrix (row stride > cols), alpha != 1 and both u, and for
  // each instruction set's build of the loop that this machine runs.
  SplitMix64 rng(0x6e6d76);
  using MP = Eigen::Matrix<Perturbed, Eigen::Dynamic, Eigen::Dynamic>;
  using VP = Eigen::Matrix<Perturbed, Eigen::Dynamic, 1>;
  int checked = 0;
  for (const int rows : {2, 3, 7, 8, 9, 16, 17, 24, 31, 32, 33, 41, 70})
    for (const int cols : {1, 5, 64}) {
      RoundingModel m;
      m.state = 0x5eed0000ull + std::uint64_t(rows * 100 + cols);
      m.u = cols == 5 ? 0x1p-53 : 0x1p-24;
      const ScopedRoundingModel scope(m);
      MP big(cols + 3, rows + 2);  // A = big.block(2, 1, cols, rows): column stride cols + 3
      VP x(cols);
      fill_uniform(big, rng);
      fill_uniform(x, rng);
      const auto A = big.block(2, 1, cols, rows);
      // Eigen's product: res = 0, then res += alpha1 c with its alpha 1 * 1 * 1 (the product's
      // scalar times each operand's scalar factor, two Perturbed multiplications).
      const VP y = A.transpose() * x;
      const Perturbed alpha1 = Perturbed(1) * Perturbed(1) * Perturbed(1);
      const auto loop = [&](int i, const Perturbed& res0, const Perturbed& alpha) {
        Perturbed c = Perturbed::exact(0);
        for (int j = 0; j < cols; ++j) c = A(j, i) * x(j) + c;
        return std::bit_cast<std::uint64_t>((res0 + alpha * c).value());
      };
      for (int i = 0; i < rows; ++i) CHECK(std::bit_cast<std::uint64_t>(y(i).value()) == loop(i, Perturbed::exact(0), alpha1));
      // Each instruction set's build of the loop, res += alpha A x with res != 0 and alpha = 0.75.
      VP y0(rows);
      for (int i = 0; i < rows; ++i) y0(i) = Perturbed::exact(rng.uniform());
      const Perturbed alpha = Perturbed::exact(0.75);
      const auto builds = detail::gemv_rows_builds();
      for (int b = 0; b < builds.n; ++b) {
        const auto f = builds.build[b];
        VP yb = y0;
        f(A.data(), big.rows(), rows, cols, x.data(), yb.data(), 1, alpha.value(), m);
        for (int i = 0; i < rows; ++i) CHECK(std::bit_cast<std::uint64_t>(yb(i).value()) == loop(i, y0(i), alpha));
      }
      checked += rows;
    }
  CHECK(checked == 3 * (2 + 3 + 7 + 8 + 9 + 16 + 17 + 24 + 31 + 32 + 33 + 41 + 70));
}

TEST_CASE("the vector loop of a column-major product on Perturbed gives the bits of Eigen's scalar loop", "[tolerance]") {
  // perturbed_gemv.hpp replaces Eigen's column-major general_matrix_vector_product on Perturbed
  // too. Eigen's loop splits the columns into blocks of block_cols = cols if cols < 128, else 16
  // if the column stride is under 32000 bytes, else 4; per block and row: c = 0; c = A(i, j) x(j)
  // + c over the block's columns; res(i) = c alpha + res(i). Written here as that plain loop of
  // Perturbed operations, for row counts across the block sizes and the partial last vector
  // (whose lanes past the last row must not be read), all three column-block rules (130 columns
  // of stride 12 and of stride 4103 doubles), a strided x, and each instruction set's build.
  SplitMix64 rng(0x636f6c);
  using MP = Eigen::Matrix<Perturbed, Eigen::Dynamic, Eigen::Dynamic>;
  using VP = Eigen::Matrix<Perturbed, Eigen::Dynamic, 1>;
  struct Shape {
    int rows, cols;
  };
  int checked = 0;
  for (const Shape sh : {Shape{1, 7}, {2, 3}, {7, 1}, {9, 64}, {24, 5}, {33, 130}, {70, 16}, {4100, 130}}) {
    const int rows = sh.rows, cols = sh.cols;
    RoundingModel m;
    m.state = 0x5eed0000ull + std::uint64_t(rows * 1000 + cols);
    m.u = rows == 24 ? 0x1p-53 : 0x1p-24;
    const ScopedRoundingModel scope(m);
    MP big(rows + 3, cols + 1);  // A = big.block(1, 1, rows, cols): column stride rows + 3
    MP xs(2, cols);                // x = a row of xs: increment 2
    fill_uniform(big, rng);
    fill_uniform(xs, rng);
    const auto A = big.block(1, 1, rows, cols);
    const auto x = xs.row(1).transpose();
    const std::int64_t stride = big.rows();
    const std::int64_t block = cols < 128 ? cols : (stride * 8 < 32000 ? 16 : 4);
    const auto loop = [&](int i, Perturbed res, const Perturbed& alpha) {
      for (std::int64_t j2 = 0; j2 < cols; j2 += block) {
        Perturbed c = Perturbed::exact(0);
        for (std::int64_t j = j2; j < std::min<std::int64_t>(j2 + block, cols); ++j) c = A(i, j) * x(j) + c;
        res = c * alpha + res;
      }
      return std::bit_cast<std::uint64_t>(res.value());
    };
    if (rows > 1 && cols > 1) {  // (one row or one column: Eigen takes a dot product or a scaled copy, not this loop)
      const VP y = A * x;  // res = 0, alpha 1 * 1 * 1 as in the row-major case
      const Perturbed alpha1 = Perturbed(1) * Perturbed(1) * Perturbed(1);
      for (int i = 0; i < rows; ++i) CHECK(std::bit_cast<std::uint64_t>(y(i).value()) == loop(i, Perturbed::exact(0), alpha1));
    }
    VP y0(rows);
    for (int i = 0; i < rows; ++i) y0(i) = Perturbed::exact(rng.uniform());
    const Perturbed alpha = Perturbed::exact(-1.25);
    const auto builds = detail::gemv_cols_builds();
    for (int b = 0; b < builds.n; ++b) {
      const auto f = builds.build[b];
      VP yb = y0;
      f(A.data(), stride, rows, cols, &x(0), 2, yb.data(), alpha.value(), m);
      for (int i = 0; i < rows; ++i) CHECK(std::bit_cast<std::uint64_t>(yb(i).value()) == loop(i, y0(i), alpha));
    }
    checked += rows;
  }
  CHECK(checked == 1 + 2 + 7 + 9 + 24 + 33 + 70 + 4100);
}

TEST_CASE("several transposed products on Perturbed in one pass give the bits of Eigen's products one by one",
          "[tolerance]") {
  // perturbed_gemv.hpp's transposed_products runs the row chains of y_k = A_k^T x for several A_k
  // together (mHC's projections, mhc.hpp). Compared bit for bit with Eigen's `y = A.transpose() * x`
  // for each A_k, for column counts that fill vectors partly, wholly and across blocks (mHC's 4, 4,
  // 16 at n = 4; 8, 8, 64 at n = 8), a single column (Eigen's dot product: taken one by one),
  // both u (at u = 2^-53 with products whose r u is subnormal and not exact, where a fused r u + r
  // rounds differently: the rank-1 case below), and each build of the loop over row pointers.
  SplitMix64 rng(0x70726f);
  using MP = Eigen::Matrix<Perturbed, Eigen::Dynamic, Eigen::Dynamic>;
  using VP = Eigen::Matrix<Perturbed, Eigen::Dynamic, 1>;
  struct Shape {
    int rows, c0, c1, c2;
  };
  int checked = 0, expected = 0;
  for (const Shape sh : {Shape{64, 4, 4, 16}, {37, 8, 8, 64}, {5, 2, 3, 5}, {9, 1, 4, 4}, {130, 16, 1, 33}}) {
    RoundingModel m;
    m.state = 0x5eed0000ull + std::uint64_t(sh.rows * 1000 + sh.c2);
    m.u = sh.rows == 37 ? 0x1p-53 : 0x1p-24;
    const ScopedRoundingModel scope(m);
    MP A0(sh.rows, sh.c0), A1(sh.rows, sh.c1), A2(sh.rows, sh.c2);
    VP x(sh.rows);
    fill_uniform(A0, rng), fill_uniform(A1, rng), fill_uniform(A2, rng), fill_uniform(x, rng);
    if (sh.rows == 37) {  // the tie of the rank-1 case below: products r = (1 + k 2^-52) 2^-1007, k even
      x.setConstant(Perturbed::exact(1.0));
      for (Eigen::Index i = 0; i < A0.size(); ++i) A0(i) = Perturbed::exact(std::ldexp(1 + 2.0 * double(i % 7 + 1) * 0x1p-52, -1007));
    }
    const VP w0 = A0.transpose() * x, w1 = A1.transpose() * x, w2 = A2.transpose() * x;  // Eigen's
    VP y0, y1, y2;
    transposed_products({&A0, &A1, &A2}, x, {&y0, &y1, &y2});
    const auto same = [&](const VP& a, const VP& b) {
      REQUIRE(a.size() == b.size());
      for (Eigen::Index i = 0; i < a.size(); ++i)
        CHECK(std::bit_cast<std::uint64_t>(a(i).value()) == std::bit_cast<std::uint64_t>(b(i).value()));
      checked += int(a.size());
    };
    same(y0, w0), same(y1, w1), same(y2, w2);
    const bool loop = sh.c0 >= 2 && sh.c1 >= 2 && sh.c2 >= 2;
    expected += (sh.c0 + sh.c1 + sh.c2) * (1 + (loop ? detail::gemv_ptrs_builds().n : 0));
    if (!loop) continue;  // the loop itself: only where Eigen runs it
    const Perturbed alpha = Perturbed(1) * Perturbed(1) * Perturbed(1);
    const auto builds = detail::gemv_ptrs_builds();
    for (int b = 0; b < builds.n; ++b) {
      std::vector<const Perturbed*> row;
      std::vector<Perturbed*> out;
      VP z0 = VP::Zero(sh.c0), z1 = VP::Zero(sh.c1), z2 = VP::Zero(sh.c2);
      for (auto [a, z] : {std::pair{&A0, &z0}, {&A1, &z1}, {&A2, &z2}})
        for (Eigen::Index i = 0; i < a->cols(); ++i) row.push_back(&a->coeffRef(0, i)), out.push_back(&(*z)(i));
      const auto rows = std::int64_t(row.size());
      while (row.size() % (4 * detail::kGemvLanesOut) != 0) row.push_back(row.back()), out.push_back(nullptr);
      builds.build[b](row.data(), rows, sh.rows, x.data(), out.data(), alpha.value(), m);
      same(z0, w0), same(z1, w1), same(z2, w2);
    }
  }
  CHECK(checked == expected);
}

TEST_CASE("the vector loop of a rank-1 update on Perturbed gives the bits of Eigen's outer-product loop", "[tolerance]") {
  // perturbed_gemv.hpp's add_outer replaces `d += x * y.transpose()` on Perturbed (matrix.hpp). Eigen
  // evaluates it column by column, d.col(j) += y(j) * x: d(i, j) = d(i, j) + y(j) x(i), two
  // Perturbed roundings per element. Compared bit for bit with that expression, on a column of a
  // larger matrix (column stride > rows), for row counts around the vector width (the partial last
  // vector's lanes must be neither read nor stored: the guard row below it must keep its bits),
  // both u, and each instruction set's build this machine runs.
  SplitMix64 rng(0x6f7574);
  using MP = Eigen::Matrix<Perturbed, Eigen::Dynamic, Eigen::Dynamic>;
  using VP = Eigen::Matrix<Perturbed, Eigen::Dynamic, 1>;
  int checked = 0;
  for (const int rows : {1, 3, 7, 8, 9, 16, 23, 64, 70})
    for (const int cols : {1, 4, 5, 8, 13, 4096}) {  // (rows < 8 with cols >= 8: 8 columns a vector)
      RoundingModel m;
      m.state = 0x5eed0000ull + std::uint64_t(rows * 100 + cols);
      m.u = cols == 5 ? 0x1p-53 : 0x1p-24;
      const ScopedRoundingModel scope(m);
      MP d0(rows, cols);
      VP x(rows), y(cols);
      fill_uniform(d0, rng);
      fill_uniform(x, rng);
      fill_uniform(y, rng);
      // Products r = (1 + k 2^-52) 2^-1007, k even, at u = 2^-53: r u is subnormal and rounds to
      // 2^-1060, so r +- fl(r u) is a tie (to even: r), while a fused r u + r (an FMA in the vector
      // builds, which CMakeLists.txt turns off for them) rounds the exact value away from r.
      if (cols == 5 && rows == 9) {
        for (Eigen::Index i = 0; i < x.size(); ++i) x(i) = Perturbed::exact(std::ldexp(1 + 2.0 * double(i + 1) * 0x1p-52, -1007));
        for (Eigen::Index j = 0; j < y.size(); ++j) y(j) = Perturbed::exact(1.0);
        d0.setConstant(Perturbed::exact(0.0));
      }
      MP want = d0;
      want += x * y.transpose();  // Eigen's own loop (the generic add_outer)
      MP got = d0;
      add_outer(got, x, y);  // the widest build
      for (int k = 0; k < rows * cols; ++k)
        CHECK(std::bit_cast<std::uint64_t>(got(k).value()) == std::bit_cast<std::uint64_t>(want(k).value()));
      const auto builds = detail::outer_builds();
      for (int b = 0; b < builds.n; ++b) {
        MP big(rows + 1, cols);  // d = the first rows of big: column stride rows + 1, row `rows` a guard
        fill_uniform(big, rng);
        const MP guard = big.bottomRows(1);
        big.topRows(rows) = d0;
        builds.build[b](big.data(), big.rows(), rows, cols, x.data(), y.data(), m);
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < cols; ++j)
            CHECK(std::bit_cast<std::uint64_t>(big(i, j).value()) == std::bit_cast<std::uint64_t>(want(i, j).value()));
        for (int j = 0; j < cols; ++j) CHECK(big(rows, j).value() == guard(0, j).value());
      }
      checked += rows * cols;
    }
  CHECK(checked == (1 + 3 + 7 + 8 + 9 + 16 + 23 + 64 + 70) * (1 + 4 + 5 + 8 + 13 + 4096));
}

TEST_CASE("the row dot products on Perturbed give the bits of Eigen's dot products", "[tolerance]") {
  // perturbed_gemv.hpp's row_dots replaces r(j) = v.dot(A.row(j).transpose()) (mHC's mix backward,
  // mhc_backward.hpp) for every row of a column-major A: Eigen's reduction, r = v(0) A(j, 0), then
  // r = r + v(i) A(j, i). Compared bit for bit for row counts around the vector width, a block of a
  // larger matrix (column stride > rows), one and zero columns, both u, and each build.
  SplitMix64 rng(0x646f74);
  using MP = Eigen::Matrix<Perturbed, Eigen::Dynamic, Eigen::Dynamic>;
  using VP = Eigen::Matrix<Perturbed, Eigen::Dynamic, 1>;
  int checked = 0;
  for (const int rows : {1, 4, 8, 9, 16, 19})
    for (const int cols : {0, 1, 2, 33, 4096}) {
      RoundingModel m;
      m.state = 0x5eed0000ull + std::uint64_t(rows * 10000 + cols);
      m.u = cols == 33 ? 0x1p-53 : 0x1p-24;
      const ScopedRoundingModel scope(m);
      MP big(rows + 3, cols);  // A = the first rows of big: column stride rows + 3
      VP v(cols);
      fill_uniform(big, rng);
      fill_uniform(v, rng);
      const auto A = big.topRows(rows);
      const MP Ad = A;
      VP want(rows);
      for (int j = 0; j < rows; ++j) want(j) = v.dot(A.row(j).transpose());
      VP got;
      row_dots(Ad, v, got);
      REQUIRE(got.size() == rows);
      for (int j = 0; j < rows; ++j) CHECK(std::bit_cast<std::uint64_t>(got(j).value()) == std::bit_cast<std::uint64_t>(want(j).value()));
      const auto builds = detail::row_dots_builds();
      for (int b = 0; b < builds.n && cols > 0; ++b) {
        VP r(rows + 1);
        r(rows) = Perturbed::exact(7.0);  // a guard past the last row
        builds.build[b](big.data(), big.rows(), rows, cols, v.data(), r.data(), m);
        for (int j = 0; j < rows; ++j) CHECK(std::bit_cast<std::uint64_t>(r(j).value()) == std::bit_cast<std::uint64_t>(want(j).value()));
        CHECK(r(rows).value() == 7.0);
      }
      checked += rows;
    }
  CHECK(checked == 5 * (1 + 4 + 8 + 9 + 16 + 19));
}

TEST_CASE("entry-by-entry sums and a scaled product on Perturbed give the bits of Eigen's expressions", "[tolerance]") {
  // perturbed_gemv.hpp's add_to replaces `d += t` on Perturbed vectors and matrices, d(i) = d(i) + t(i)
  // (one rounding each), in vector lanes; matrix.hpp's add_scaled_product is Eigen's `y += A * (a * x)`:
  // the product into a temporary, then added. Compared bit for bit, sizes around the vector width,
  // both u, every build of the sum loop.
  SplitMix64 rng(0x616464);
  using MP = Eigen::Matrix<Perturbed, Eigen::Dynamic, Eigen::Dynamic>;
  using VP = Eigen::Matrix<Perturbed, Eigen::Dynamic, 1>;
  int checked = 0, expected = 0;
  const auto same = [&](const auto& a, const auto& b) {
    REQUIRE(a.size() == b.size());
    for (Eigen::Index i = 0; i < a.size(); ++i)
      CHECK(std::bit_cast<std::uint64_t>(a(i).value()) == std::bit_cast<std::uint64_t>(b(i).value()));
    checked += int(a.size());
  };
  for (const int n : {1, 7, 8, 9, 31, 4096}) {
    RoundingModel m;
    m.state = 0x5eed0000ull + std::uint64_t(n);
    m.u = n == 9 ? 0x1p-53 : 0x1p-24;
    const ScopedRoundingModel scope(m);
    const auto add_to_is_eigens = [&](const auto& d, const auto& t) {  // d += t both ways; Eigen's sum returned
      auto want = d;
      want += t;
      auto got = d;
      add_to(got, t);
      same(got, want);
      return want;
    };
    VP d(n), t(n);
    fill_uniform(d, rng), fill_uniform(t, rng);
    const VP want = add_to_is_eigens(d, t);
    MP D(3, n), E(3, n);
    fill_uniform(D, rng), fill_uniform(E, rng);
    add_to_is_eigens(D, E);
    const auto builds = detail::add_builds();
    for (int b = 0; b < builds.n; ++b) {
      VP g = d;
      builds.build[b](g.data(), t.data(), n, m);
      same(g, want);
    }
    MP A(n, 4);
    VP x(4);
    fill_uniform(A, rng), fill_uniform(x, rng);
    const Perturbed a = Perturbed::exact(0.375);
    VP y0 = d;
    y0 += A * (a * x);  // Eigen's own
    VP y1 = d;
    add_scaled_product(y1, MP(A), a, x);
    same(y1, y0);
    expected += n * (5 + builds.n);  // the vector, the 3 x n matrix, each build, the scaled product
  }
  CHECK(checked == expected);
}

TEST_CASE("float32 dot products in four orders stay within factor x B of the sampled model", "[tolerance]") {
  SplitMix64 rng(11);
  double worst = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(rng.next() % 1024);
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; ++i) x[i] = float(rng.uniform()), y[i] = float(rng.uniform());
    float fwd = 0, rev = 0;
    for (int i = 0; i < n; ++i) fwd += x[i] * y[i];
    for (int i = n; i-- > 0;) rev += x[i] * y[i];
    float lanes[8] = {};
    for (int i = 0; i < n; ++i) lanes[i % 8] += x[i] * y[i];
    const float lane = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    std::vector<float> pw(n);  // pairwise
    for (int i = 0; i < n; ++i) pw[i] = x[i] * y[i];
    for (int w = 1; w < n; w *= 2)
      for (int i = 0; i + w < n; i += 2 * w) pw[i] += pw[i + w];
    // The "exact" value: float products are exact in double, and a recursive
    // double sum of n of them is within gamma_{n-1} sum |x_i y_i| <= n 2^-53 n
    // of the true sum (|x_i y_i| <= 1; Higham eq. 4.4).
    double exact = 0;
    for (int i = 0; i < n; ++i) exact += double(x[i]) * double(y[i]);
    const double slack = double(n) * double(n) * 0x1p-53;
    const double B = scale_of(recipe("f32"), exact, [&] {
      Perturbed acc = 0;
      for (int i = 0; i < n; ++i) acc += Perturbed(x[i]) * Perturbed(y[i]);
      return acc.value();
    });
    for (float got : {fwd, rev, lane, pw[0]}) {
      const double err = std::fabs(double(got) - exact);
      INFO("n = " << n << ": err " << err << ", B " << B);
      CHECK(err <= kToleranceFactor * B + slack);
      worst = std::max(worst, err / (B + 1e-300));
    }
  }
  // The margin, reported (the factor is 8): rounding to nearest errs by about
  // u/sqrt(3) per operation where the model errs by u.
  WARN("float32 dot products of 1..1024 terms, four orders: worst |err| / B = " << worst);
}

TEST_CASE("the bf16:f32 recipe covers a PreLN kernel that stores its stream in bfloat16 after every layer, f32 does not",
          "[tolerance][conformance]") {
  // A per-layer kernel: h_{l+1} = bf16(h_l + v_l) in float32, all inputs bf16.
  const std::int64_t T = 3, L = 48, d = 64;
  Problem p;
  p.scheme = "preln";
  p.config = {{"tokens", T}, {"layers", L}, {"d", d}};
  SplitMix64 rng(3);
  p.tensors["input.e"] = draw(rng, bfloat16, {T, d});
  p.tensors["input.v"] = draw(rng, bfloat16, {T, L, d});
  const io::File fx = run_problem(p, "test", "", 1);
  const auto& hi = fx.tensors.at("output.h").values;
  const auto& lo = fx.tensors.at("output.h.lo").values;
  const auto& B = fx.tensors.at("bound.bf16.output.h").values;
  const auto& B32 = fx.tensors.at("bound.f32.output.h").values;
  double worst = 0, worst32 = 0;
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t j = 0; j < d; ++j) {
      float h = float(p.tensors["input.e"].values[std::size_t(t * d + j)]);
      for (std::int64_t l = 0; l < L; ++l) {
        const std::size_t k = std::size_t((t * L + l) * d + j);
        const double err = std::fabs((double(h) - hi[k]) - lo[k]);
        const double tol = tolerance(kToleranceFactor, B[k], kToleranceFloorUlps, "bf16", hi[k]);
        CHECK(err <= tol);
        worst = std::max(worst, err / tol);
        worst32 = std::max(worst32, err / tolerance(kToleranceFactor, B32[k], kToleranceFloorUlps, "f32", hi[k]));
        h = float(round_to(bfloat16, double(h + float(p.tensors["input.v"].values[k]))));
      }
    }
  CHECK(worst32 > 1);  // the f32 recipe does not model bf16 stores: it rejects this kernel
  WARN("bf16-stored PreLN stream, L = 48: worst err/tol " << worst << " (bf16:f32), " << worst32 << " (f32)");
}

TEST_CASE("the bound tensors are the same bytes for 1 and 3 threads", "[tolerance]") {
  Problem p;
  p.scheme = "attnres";
  p.config = {{"tokens", 2}, {"layers", 5}, {"d", 8}, {"variant", "full"}};
  SplitMix64 rng(5);
  p.tensors["input.e"] = draw(rng, float32, {2, 8});
  p.tensors["input.v"] = draw(rng, float32, {2, 5, 8});
  p.tensors["param.w"] = draw(rng, float32, {6, 8});
  p.tensors["param.g"] = draw(rng, float32, {6, 8});
  const io::File a = run_problem(p, "test", "", 1), b = run_problem(p, "test", "", 3);
  REQUIRE(a.tensors.count("bound.f32.output.h"));
  for (const auto& [name, t] : a.tensors) {
    INFO(name);
    CHECK(t.values == b.tensors.at(name).values);
  }
}
