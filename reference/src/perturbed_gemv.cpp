// reference/src/perturbed_gemv.cpp: the loops behind perturbed_gemv.hpp
// (why and how: that header). Compiled once, here, rather than in every
// translation unit that multiplies matrices of Perturbed.
#include "dmref/perturbed_gemv.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

namespace dmref::detail {
namespace {

constexpr int kGemvLanes = kGemvLanesOut;
using GemvD = double __attribute__((vector_size(8 * kGemvLanes)));
using GemvU = std::uint64_t __attribute__((vector_size(8 * kGemvLanes)));

/// r = fl(r) lane by lane (Perturbed::op). (By reference: a vector passed
/// by value would change the ABI with the instruction set, -Wpsabi.)
__attribute__((always_inline)) inline void gemv_round(GemvD& r, double u, std::uint64_t state) {
  GemvU mask;
  std::memcpy(&mask, &r, sizeof r);
  Perturbed::sign_mask(state, mask, Perturbed::kind_op());
  Perturbed::round_with(r, mask, u);
}

/// NB kGemvLanes rows at once: out[l] = fl(out[l] + fl(alpha c_l)), c_l =
/// the chain over j of fl(fl(row[l][j] x[j]) + c) (Eigen's row-major loop),
/// in NB vectors whose chains are independent (a chain's rounding waits for
/// the hash of its sum; NB chains overlap). A lane whose out[l] is null
/// (padding) is computed and not stored.
template <int NB>
__attribute__((always_inline)) inline void gemv_rows_block(const Perturbed* const* row, std::int64_t cols,
                                                           const Perturbed* x, Perturbed* const* out, double alpha,
                                                           double u, std::uint64_t state) {
  GemvD c[NB] = {};
  for (std::int64_t j = 0; j < cols; ++j) {
    const double xj = x[j].value();
    for (int b = 0; b < NB; ++b) {
      GemvD p;
      for (int l = 0; l < kGemvLanes; ++l) p[l] = row[b * kGemvLanes + l][j].value();
      p = p * xj;
      gemv_round(p, u, state);
      c[b] = p + c[b];
      gemv_round(c[b], u, state);
    }
  }
  for (int b = 0; b < NB; ++b) {
    GemvD t = alpha * c[b];
    gemv_round(t, u, state);
    GemvD r;
    for (int l = 0; l < kGemvLanes; ++l) r[l] = out[b * kGemvLanes + l] ? out[b * kGemvLanes + l]->value() : 0.0;
    r = r + t;
    gemv_round(r, u, state);
    for (int l = 0; l < kGemvLanes; ++l)
      if (out[b * kGemvLanes + l]) *out[b * kGemvLanes + l] = Perturbed::exact(r[l]);
  }
}

/// Rows [i0, i0 + NB kGemvLanes) of res += alpha A x (A row-major, row
/// stride `stride`): rows past `rows` repeat the last row and are not stored.
template <int NB>
__attribute__((always_inline)) inline void gemv_block(const Perturbed* A, std::int64_t stride, std::int64_t i0,
                                                      std::int64_t rows, std::int64_t cols, const Perturbed* x,
                                                      Perturbed* res, std::int64_t incr, double alpha, double u,
                                                      std::uint64_t state) {
  constexpr int R = NB * kGemvLanes;
  const Perturbed* row[R];
  Perturbed* out[R];
  for (int l = 0; l < R; ++l) {
    row[l] = A + (i0 + l < rows ? i0 + l : rows - 1) * stride;
    out[l] = i0 + l < rows ? res + (i0 + l) * incr : nullptr;
  }
  gemv_rows_block<NB>(row, cols, x, out, alpha, u, state);
}

/// Rows [i0, i0 + NB kGemvLanes) of the rows given by pointers (padded to a
/// multiple of 4 kGemvLanes: null outputs past `rows`).
template <int NB>
__attribute__((always_inline)) inline void gemv_ptrs_block(const Perturbed* const* row, std::int64_t i0,
                                                           std::int64_t cols, const Perturbed* x,
                                                           Perturbed* const* out, double alpha, double u,
                                                           std::uint64_t state) {
  gemv_rows_block<NB>(row + i0, cols, x, out + i0, alpha, u, state);
}

/// Column-major A (column stride `stride`): rows [i0, i0 + NB kGemvLanes)
/// of res += alpha A(:, j2:jend) x(j2:jend), the rows of a lane contiguous in
/// memory; lanes past `rows` are neither read nor stored.
template <int NB>
__attribute__((always_inline)) inline void gemv_col_block(const Perturbed* A, std::int64_t stride, std::int64_t i0,
                                                          std::int64_t rows, std::int64_t j2, std::int64_t jend,
                                                          const Perturbed* x, std::int64_t xstride, Perturbed* res,
                                                          double alpha, double u, std::uint64_t state) {
  const bool full = i0 + NB * kGemvLanes <= rows;
  GemvD c[NB] = {};
  for (std::int64_t j = j2; j < jend; ++j) {
    const double xj = x[j * xstride].value();
    const Perturbed* col = A + j * stride + i0;
    for (int b = 0; b < NB; ++b) {
      GemvD p{};
      if (full) {
        std::memcpy(&p, col + b * kGemvLanes, sizeof p);  // Perturbed is one double
      } else {
        for (int l = 0; l < kGemvLanes; ++l) p[l] = i0 + b * kGemvLanes + l < rows ? col[b * kGemvLanes + l].value() : 0.0;
      }
      p = p * xj;
      gemv_round(p, u, state);
      c[b] = p + c[b];
      gemv_round(c[b], u, state);
    }
  }
  for (int b = 0; b < NB; ++b) {
    GemvD t = c[b] * alpha;
    gemv_round(t, u, state);
    GemvD r;
    Perturbed* out = res + i0 + b * kGemvLanes;
    if (full) {  // one vector load and store (the lane loops were a quarter of this loop's time at C = 4096)
      std::memcpy(&r, out, sizeof r);  // Perturbed is one double
    } else {
      for (int l = 0; l < kGemvLanes; ++l) r[l] = i0 + b * kGemvLanes + l < rows ? out[l].value() : 0.0;
    }
    r = t + r;
    gemv_round(r, u, state);
    if (full) {
      std::memcpy(out, &r, sizeof r);
    } else {
      for (int l = 0; l < kGemvLanes; ++l)
        if (i0 + b * kGemvLanes + l < rows) out[l] = Perturbed::exact(r[l]);
    }
  }
}

/// d += x y^T, column by column: d(i, j) = fl(d(i, j) + fl(y(j) x(i))), as
/// Eigen's outer-product loop (`d += x * y.transpose()`: for each column,
/// d.col(j) += y(j) * x); 8 rows a vector, the last vector's lanes past
/// `rows` neither read nor stored; columns shorter than a vector 8 columns a
/// vector instead (each element's two roundings are its own: any grouping
/// gives the same bits).
__attribute__((always_inline)) inline void outer_body(Perturbed* d, std::int64_t stride, std::int64_t rows,
                                                      std::int64_t cols, const Perturbed* x, const Perturbed* y,
                                                      double u, std::uint64_t state) {
  if (rows < kGemvLanes && cols >= kGemvLanes) {  // short columns (mHC's mix VJP, n x C): 8 columns a vector
    for (std::int64_t i = 0; i < rows; ++i) {
      const double xi = x[i].value();
      for (std::int64_t j = 0; j < cols; j += kGemvLanes) {
        const int k = int(std::min<std::int64_t>(kGemvLanes, cols - j));
        GemvD p{}, c{};
        for (int l = 0; l < k; ++l) p[l] = y[j + l].value(), c[l] = d[(j + l) * stride + i].value();
        p = p * xi;
        gemv_round(p, u, state);
        c = c + p;
        gemv_round(c, u, state);
        for (int l = 0; l < k; ++l) d[(j + l) * stride + i] = Perturbed::exact(c[l]);
      }
    }
    return;
  }
  for (std::int64_t j = 0; j < cols; ++j) {
    const double yj = y[j].value();
    Perturbed* col = d + j * stride;
    const auto update = [&](GemvD& p, GemvD& c) {  // c = fl(c + fl(yj p)) (by reference: -Wpsabi)
      p = yj * p;
      gemv_round(p, u, state);
      c = c + p;
      gemv_round(c, u, state);
    };
    std::int64_t i = 0;
    for (; i + kGemvLanes <= rows; i += kGemvLanes) {  // whole vectors: loaded and stored as such
      GemvD p, c;
      std::memcpy(&p, x + i, sizeof p);  // Perturbed is one double
      std::memcpy(&c, col + i, sizeof c);
      update(p, c);
      std::memcpy(col + i, &c, sizeof c);
    }
    if (i < rows) {
      GemvD p{}, c{};
      for (int l = 0; i + l < rows; ++l) p[l] = x[i + l].value(), c[l] = col[i + l].value();
      update(p, c);
      for (int l = 0; i + l < rows; ++l) col[i + l] = Perturbed::exact(c[l]);
    }
  }
}

/// r(j) = v . A.row(j), A column-major [rows, cols] (column stride `stride`),
/// as Eigen's dot product (a reduction, not its product loop): r = fl(A(j, 0)
/// v(0)), then r = fl(r + fl(A(j, i) v(i))); 8 rows a vector, the lanes past
/// `rows` neither read nor stored.
__attribute__((always_inline)) inline void row_dots_body(const Perturbed* A, std::int64_t stride, std::int64_t rows,
                                                         std::int64_t cols, const Perturbed* v, Perturbed* r,
                                                         double u, std::uint64_t state) {
  for (std::int64_t j0 = 0; j0 < rows; j0 += kGemvLanes) {
    const bool full = j0 + kGemvLanes <= rows;
    const auto column = [&](std::int64_t i, GemvD& a) {  // a = fl(A(j0.., i) v(i)) (by reference: -Wpsabi)
      a = GemvD{};
      if (full) std::memcpy(&a, A + i * stride + j0, sizeof a);  // Perturbed is one double
      else
        for (int l = 0; j0 + l < rows; ++l) a[l] = A[i * stride + j0 + l].value();
      a = a * v[i].value();
      gemv_round(a, u, state);
    };
    GemvD c, p;
    column(0, c);
    for (std::int64_t i = 1; i < cols; ++i) {
      column(i, p);
      c = c + p;
      gemv_round(c, u, state);
    }
    for (int l = 0; l < kGemvLanes && j0 + l < rows; ++l) r[j0 + l] = Perturbed::exact(c[l]);
  }
}

/// d(i) = fl(d(i) + t(i)) over n contiguous entries, 8 a vector.
__attribute__((always_inline)) inline void add_body(Perturbed* d, const Perturbed* t, std::int64_t n, double u,
                                                    std::uint64_t state) {
  for (std::int64_t i = 0; i < n; i += kGemvLanes) {
    const int k = int(std::min<std::int64_t>(kGemvLanes, n - i));
    GemvD a{}, b{};
    if (k == kGemvLanes) {
      std::memcpy(&a, d + i, sizeof a);  // Perturbed is one double
      std::memcpy(&b, t + i, sizeof b);
    } else {
      for (int l = 0; l < k; ++l) a[l] = d[i + l].value(), b[l] = t[i + l].value();
    }
    a = a + b;
    gemv_round(a, u, state);
    if (k == kGemvLanes) std::memcpy(d + i, &a, sizeof a);
    else
      for (int l = 0; l < k; ++l) d[i + l] = Perturbed::exact(a[l]);
  }
}

/// Blocks of up to four vectors of rows: BLOCK<NB>(..., i, ...) for i = 0, NB kGemvLanes, ...
#define DMREF_GEMV_BLOCKS(BLOCK, ...)                                         \
  for (std::int64_t i = 0; i < rows;) {                                      \
    const std::int64_t left = rows - i;                                      \
    const int nb = left > 3 * kGemvLanes ? 4 : left > 2 * kGemvLanes ? 3 : left > kGemvLanes ? 2 : 1; \
    if (nb == 4) BLOCK<4>(__VA_ARGS__);                                      \
    else if (nb == 3) BLOCK<3>(__VA_ARGS__);                                 \
    else if (nb == 2) BLOCK<2>(__VA_ARGS__);                                 \
    else BLOCK<1>(__VA_ARGS__);                                              \
    i += nb * kGemvLanes;                                                    \
  }
/// Row-major A: one chain per row over all columns.
#define DMREF_GEMV_ROWS_BODY DMREF_GEMV_BLOCKS(gemv_block, A, stride, i, rows, cols, x, res, incr, alpha, m.u, m.state)
/// Column-major A: Eigen's column blocks (block_cols), each a chain per row
/// that starts at 0 and is added into res.
#define DMREF_GEMV_COLS_BODY                                                                         \
  const std::int64_t block_cols = cols < 128 ? cols : (stride * std::int64_t(sizeof(Perturbed)) < 32000 ? 16 : 4); \
  for (std::int64_t j2 = 0; j2 < cols; j2 += block_cols) {                                            \
    const std::int64_t jend = std::min(j2 + block_cols, cols);                                        \
    DMREF_GEMV_BLOCKS(gemv_col_block, A, stride, i, rows, j2, jend, x, xstride, res, alpha, m.u, m.state) \
  }

#define DMREF_GEMV_ROWS_ARGS                                                                                  \
  const Perturbed *A, std::int64_t stride, std::int64_t rows, std::int64_t cols, const Perturbed *x, Perturbed *res, \
      std::int64_t incr, double alpha, const RoundingModel &m
#define DMREF_GEMV_COLS_ARGS                                                                                  \
  const Perturbed *A, std::int64_t stride, std::int64_t rows, std::int64_t cols, const Perturbed *x,          \
      std::int64_t xstride, Perturbed *res, double alpha, const RoundingModel &m
/// Rows given by pointers: one chain per row over all columns.
#define DMREF_GEMV_PTRS_BODY DMREF_GEMV_BLOCKS(gemv_ptrs_block, row, i, cols, x, out, alpha, m.u, m.state)
#define DMREF_GEMV_PTRS_ARGS                                                                                 \
  const Perturbed *const *row, std::int64_t rows, std::int64_t cols, const Perturbed *x, Perturbed *const *out, \
      double alpha, const RoundingModel &m
#define DMREF_DOTS_ARGS                                                                                   \
  const Perturbed *A, std::int64_t stride, std::int64_t rows, std::int64_t cols, const Perturbed *v, Perturbed *r, \
      const RoundingModel &m
#define DMREF_DOTS_BODY row_dots_body(A, stride, rows, cols, v, r, m.u, m.state);
#define DMREF_ADD_ARGS Perturbed *d, const Perturbed *t, std::int64_t n, const RoundingModel &m
#define DMREF_ADD_BODY add_body(d, t, n, m.u, m.state);
#define DMREF_OUTER_ARGS                                                                                   \
  Perturbed *d, std::int64_t stride, std::int64_t rows, std::int64_t cols, const Perturbed *x, const Perturbed *y, \
      const RoundingModel &m
#define DMREF_OUTER_BODY outer_body(d, stride, rows, cols, x, y, m.u, m.state);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DMREF_GEMV_X86 1
__attribute__((target("avx512f,avx512dq"))) void gemv_rows_avx512(DMREF_GEMV_ROWS_ARGS) { DMREF_GEMV_ROWS_BODY }
__attribute__((target("avx2"))) void gemv_rows_avx2(DMREF_GEMV_ROWS_ARGS) { DMREF_GEMV_ROWS_BODY }
__attribute__((target("avx512f,avx512dq"))) void gemv_cols_avx512(DMREF_GEMV_COLS_ARGS) { DMREF_GEMV_COLS_BODY }
__attribute__((target("avx2"))) void gemv_cols_avx2(DMREF_GEMV_COLS_ARGS) { DMREF_GEMV_COLS_BODY }
__attribute__((target("avx512f,avx512dq"))) void gemv_ptrs_avx512(DMREF_GEMV_PTRS_ARGS) { DMREF_GEMV_PTRS_BODY }
__attribute__((target("avx2"))) void gemv_ptrs_avx2(DMREF_GEMV_PTRS_ARGS) { DMREF_GEMV_PTRS_BODY }
__attribute__((target("avx512f,avx512dq"))) void row_dots_avx512(DMREF_DOTS_ARGS) { DMREF_DOTS_BODY }
__attribute__((target("avx2"))) void row_dots_avx2(DMREF_DOTS_ARGS) { DMREF_DOTS_BODY }
__attribute__((target("avx512f,avx512dq"))) void add_avx512(DMREF_ADD_ARGS) { DMREF_ADD_BODY }
__attribute__((target("avx2"))) void add_avx2(DMREF_ADD_ARGS) { DMREF_ADD_BODY }
__attribute__((target("avx512f,avx512dq"))) void outer_avx512(DMREF_OUTER_ARGS) { DMREF_OUTER_BODY }
__attribute__((target("avx2"))) void outer_avx2(DMREF_OUTER_ARGS) { DMREF_OUTER_BODY }
#endif
void gemv_rows_base(DMREF_GEMV_ROWS_ARGS) { DMREF_GEMV_ROWS_BODY }
void gemv_cols_base(DMREF_GEMV_COLS_ARGS) { DMREF_GEMV_COLS_BODY }
void gemv_ptrs_base(DMREF_GEMV_PTRS_ARGS) { DMREF_GEMV_PTRS_BODY }
void row_dots_base(DMREF_DOTS_ARGS) { DMREF_DOTS_BODY }
void add_base(DMREF_ADD_ARGS) { DMREF_ADD_BODY }
void outer_base(DMREF_OUTER_ARGS) { DMREF_OUTER_BODY }
#undef DMREF_GEMV_ROWS_BODY
#undef DMREF_GEMV_COLS_BODY
#undef DMREF_GEMV_BLOCKS
#undef DMREF_GEMV_ROWS_ARGS
#undef DMREF_GEMV_COLS_ARGS
#undef DMREF_OUTER_ARGS
#undef DMREF_ADD_ARGS
#undef DMREF_ADD_BODY
#undef DMREF_DOTS_ARGS
#undef DMREF_DOTS_BODY
#undef DMREF_GEMV_PTRS_ARGS
#undef DMREF_GEMV_PTRS_BODY
#undef DMREF_OUTER_BODY

/// The vector unit this machine has: 2 AVX-512 (with its 64-bit multiply), 1 AVX2, 0 neither.
int gemv_isa() {
#ifdef DMREF_GEMV_X86
  static const int isa = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") ? 2
                         : __builtin_cpu_supports("avx2")                                       ? 1
                                                                                                : 0;
  return isa;
#else
  return 0;
#endif
}


}  // namespace

#ifdef DMREF_GEMV_X86
#define DMREF_GEMV_BUILDS(name) {{name##_base, name##_avx2, name##_avx512}, gemv_isa() + 1}
#else
#define DMREF_GEMV_BUILDS(name) {{name##_base, nullptr, nullptr}, 1}
#endif
GemvBuilds<GemvRowsLoop> gemv_rows_builds() { return DMREF_GEMV_BUILDS(gemv_rows); }
GemvBuilds<GemvColsLoop> gemv_cols_builds() { return DMREF_GEMV_BUILDS(gemv_cols); }
GemvBuilds<GemvPtrsLoop> gemv_ptrs_builds() { return DMREF_GEMV_BUILDS(gemv_ptrs); }
GemvBuilds<OuterLoop> outer_builds() { return DMREF_GEMV_BUILDS(outer); }
GemvBuilds<RowDotsLoop> row_dots_builds() { return DMREF_GEMV_BUILDS(row_dots); }
GemvBuilds<AddLoop> add_builds() { return DMREF_GEMV_BUILDS(add); }
#undef DMREF_GEMV_BUILDS

void perturbed_gemv_rows(const Perturbed* A, std::int64_t stride, std::int64_t rows, std::int64_t cols,
                         const Perturbed* x, Perturbed* res, std::int64_t incr, Perturbed alpha) {
  static const auto loop = gemv_rows_builds();
  loop.build[loop.n - 1](A, stride, rows, cols, x, res, incr, alpha.value(), rounding_model());
}

void perturbed_gemv_cols(const Perturbed* A, std::int64_t stride, std::int64_t rows, std::int64_t cols,
                         const Perturbed* x, std::int64_t xstride, Perturbed* res, Perturbed alpha) {
  static const auto loop = gemv_cols_builds();
  loop.build[loop.n - 1](A, stride, rows, cols, x, xstride, res, alpha.value(), rounding_model());
}

}  // namespace dmref::detail

void dmref::transposed_products(std::initializer_list<const Mat<Perturbed>*> A, const Vec<Perturbed>& x,
                                std::initializer_list<Vec<Perturbed>*> y) {
  // Eigen takes a dot product for a single row (or column): the products one by one then.
  bool gemv = A.size() == y.size() && x.size() >= 2;
  for (const Mat<Perturbed>* a : A) gemv = gemv && a->cols() >= 2 && a->rows() == x.size();
  if (!gemv) {
    auto out = y.begin();
    for (const Mat<Perturbed>* a : A) **out++ = a->transpose() * x;
    return;
  }
  // Eigen's product y = A^T x: y = 0, then y += alpha c with alpha = 1 * 1 * 1 in Perturbed (its
  // factor times each operand's, test_tolerance).
  const Perturbed alpha = Perturbed(1) * Perturbed(1) * Perturbed(1);
  std::vector<const Perturbed*> row;
  std::vector<Perturbed*> out;
  auto yo = y.begin();
  for (const Mat<Perturbed>* a : A) {
    Vec<Perturbed>& v = **yo++;
    v = Vec<Perturbed>::Zero(a->cols());
    for (Eigen::Index i = 0; i < a->cols(); ++i) row.push_back(&a->coeffRef(0, i)), out.push_back(&v(i));
  }
  const std::int64_t rows = std::int64_t(row.size());
  while (row.size() % (4 * detail::kGemvLanesOut) != 0) row.push_back(row.back()), out.push_back(nullptr);
  static const auto loop = detail::gemv_ptrs_builds();
  loop.build[loop.n - 1](row.data(), rows, std::int64_t(x.size()), x.data(), out.data(), alpha.value(),
                         rounding_model());
}

namespace {
void add_entries(dmref::Perturbed* d, const dmref::Perturbed* t, std::int64_t n) {
  static const auto loop = dmref::detail::add_builds();
  loop.build[loop.n - 1](d, t, n, dmref::rounding_model());
}
}  // namespace

void dmref::add_to(Vec<Perturbed>& d, const Vec<Perturbed>& t) {
  eigen_assert(d.size() == t.size());
  add_entries(d.data(), t.data(), std::int64_t(d.size()));
}

void dmref::add_to(Mat<Perturbed>& d, const Mat<Perturbed>& t) {
  eigen_assert(d.rows() == t.rows() && d.cols() == t.cols());
  add_entries(d.data(), t.data(), std::int64_t(d.size()));  // both contiguous, the same order
}

void dmref::row_dots(const Mat<Perturbed>& A, const Vec<Perturbed>& v, Vec<Perturbed>& r) {
  eigen_assert(A.cols() == v.size());
  r.resize(A.rows());
  if (A.cols() == 0) {  // Eigen's dot of empty vectors: 0
    r.setConstant(Perturbed(0));
    return;
  }
  static const auto loop = detail::row_dots_builds();
  loop.build[loop.n - 1](A.data(), std::int64_t(A.outerStride()), std::int64_t(A.rows()), std::int64_t(A.cols()),
                         v.data(), r.data(), rounding_model());
}

void dmref::add_outer(Mat<Perturbed>& d, const Vec<Perturbed>& x, const Vec<Perturbed>& y) {
  eigen_assert(d.rows() == x.size() && d.cols() == y.size());
  static const auto loop = detail::outer_builds();
  loop.build[loop.n - 1](d.data(), std::int64_t(d.outerStride()), std::int64_t(d.rows()), std::int64_t(d.cols()),
                         x.data(), y.data(), rounding_model());
}
