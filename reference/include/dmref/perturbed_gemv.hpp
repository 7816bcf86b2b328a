// dmref/perturbed_gemv.hpp: Eigen's matrix-vector products on Perturbed
// (perturbed.hpp), row-major and column-major, several rows at a time in
// vector registers, with the same bits as Eigen's own loops.
//
// Eigen's loops (Eigen/src/Core/products/GeneralMatrixVector.h,
// general_matrix_vector_product; Perturbed has no packets, so its packet size
// is 1) compute, for each row i, whatever blocking of rows they use:
//     c = 0;  for j in a block of columns:  c = pmadd(A(i, j), x(j), c) = fl(fl(A(i, j) x(j)) + c)
//     res(i) = fl(res(i) + fl(alpha c))
// (row-major: one block, all columns; column-major: blocks of block_cols
// columns, each added into res in turn), where fl(r) = r + sign(r) (r u) is
// Perturbed's rounding of a + - * result and sign(r) a hash of the sample's
// seed and of the bits of r. Each row is one chain of dependent roundings
// (each rounding waits for the hash of its sum), so Eigen's loop, four rows
// at once, is bound by that latency; it was the largest part of the tolerance
// model's CPU for the mHC ops at C = 4096 (docs/performance.md). Here 8 rows
// run in the lanes of one vector and up to 4 vectors at once: the same
// operations on the same values in the same order per row, so the same bits
// (IEEE + - * are correctly rounded in every vector unit; s (r u) with
// s = +-1 is exact, so a fused multiply-add of it rounds like the separate
// addition). tests/test_tolerance.cpp compares every build with Eigen's loop
// written out, bit for bit; every corpus bound tensor regenerates
// byte-identical (docs/performance.md).
//
// The loops are in reference/src/perturbed_gemv.cpp (compiled once): GCC/clang
// vector extensions, on x86-64 an AVX-512 and an AVX2 build chosen at run time
// (__builtin_cpu_supports), else the baseline build.
#pragma once

#include "dmref/matrix.hpp"
#include "dmref/perturbed.hpp"  // (which includes this header at its end)

#include <Eigen/Core>

#include <cstdint>
#include <initializer_list>

namespace dmref::detail {

/// One build of the row-major loop: res += alpha A x, A [rows, cols] with
/// row stride `stride`, res with increment `incr`, rounded under m.
using GemvRowsLoop = void (*)(const Perturbed* A, std::int64_t stride, std::int64_t rows, std::int64_t cols,
                              const Perturbed* x, Perturbed* res, std::int64_t incr, double alpha,
                              const RoundingModel& m);
/// One build of the column-major loop: A [rows, cols] with column stride
/// `stride`, x with increment `xstride`, res contiguous.
using GemvColsLoop = void (*)(const Perturbed* A, std::int64_t stride, std::int64_t rows, std::int64_t cols,
                              const Perturbed* x, std::int64_t xstride, Perturbed* res, double alpha,
                              const RoundingModel& m);
/// The builds of one loop this machine runs, baseline first, the widest
/// last (test_tolerance compares them all; the products call the last).
template <class Loop>
struct GemvBuilds {
  Loop build[3];
  int n;
};
/// One build of the row-major loop over rows given by pointers: *out[i] =
/// fl(*out[i] + fl(alpha c_i)), c_i the chain of row[i] . x over `cols`; row
/// and out padded to a multiple of 4 kGemvLanesOut, null outputs past `rows`.
using GemvPtrsLoop = void (*)(const Perturbed* const* row, std::int64_t rows, std::int64_t cols, const Perturbed* x,
                              Perturbed* const* out, double alpha, const RoundingModel& m);
inline constexpr int kGemvLanesOut = 8;  // rows per vector (perturbed_gemv.cpp's kGemvLanes)
GemvBuilds<GemvRowsLoop> gemv_rows_builds();
GemvBuilds<GemvPtrsLoop> gemv_ptrs_builds();
GemvBuilds<GemvColsLoop> gemv_cols_builds();
/// One build of the rank-1 update: d += x y^T, d column-major [rows, cols]
/// with column stride `stride`, x [rows] and y [cols] contiguous.
using OuterLoop = void (*)(Perturbed* d, std::int64_t stride, std::int64_t rows, std::int64_t cols, const Perturbed* x,
                           const Perturbed* y, const RoundingModel& m);
GemvBuilds<OuterLoop> outer_builds();
/// One build of the row dot products: r(j) = v . A.row(j), A column-major
/// [rows, cols] with column stride `stride`, v and r contiguous.
using RowDotsLoop = void (*)(const Perturbed* A, std::int64_t stride, std::int64_t rows, std::int64_t cols,
                             const Perturbed* v, Perturbed* r, const RoundingModel& m);
GemvBuilds<RowDotsLoop> row_dots_builds();
/// One build of d(i) = fl(d(i) + t(i)) over n contiguous entries.
using AddLoop = void (*)(Perturbed* d, const Perturbed* t, std::int64_t n, const RoundingModel& m);
GemvBuilds<AddLoop> add_builds();

/// res += alpha A x on Perturbed, A row-major [rows, cols] with row stride
/// `stride`, x contiguous, res with increment `incr`: the widest build.
void perturbed_gemv_rows(const Perturbed* A, std::int64_t stride, std::int64_t rows, std::int64_t cols,
                         const Perturbed* x, Perturbed* res, std::int64_t incr, Perturbed alpha);
/// res += alpha A x on Perturbed, A column-major [rows, cols] with column
/// stride `stride`, x with increment `xstride`, res contiguous.
void perturbed_gemv_cols(const Perturbed* A, std::int64_t stride, std::int64_t rows, std::int64_t cols,
                         const Perturbed* x, std::int64_t xstride, Perturbed* res, Perturbed alpha);

}  // namespace dmref::detail

namespace dmref {

/// y_k = A_k^T x for each k on Perturbed (matrix.hpp's transposed_products):
/// Eigen's row-major loop per row of each A_k^T, the same bits as the
/// products one by one, but the chains of all the matrices' rows in one pass
/// (a chain waits for the hash of each sum; mHC's three projections have 4,
/// 4 and 16 rows at n = 4, too few to fill the vectors one product at a time).
void transposed_products(std::initializer_list<const Mat<Perturbed>*> A, const Vec<Perturbed>& x,
                         std::initializer_list<Vec<Perturbed>*> y);

/// r(j) = v . A.row(j) on Perturbed (matrix.hpp's row_dots): Eigen's dot
/// product per row, the rows' chains in the lanes of a vector.
void row_dots(const Mat<Perturbed>& A, const Vec<Perturbed>& v, Vec<Perturbed>& r);

/// d += t on Perturbed (matrix.hpp's add_to), d(i) = fl(d(i) + t(i)) in
/// vector lanes; for vectors and matrices.
void add_to(Vec<Perturbed>& d, const Vec<Perturbed>& t);
void add_to(Mat<Perturbed>& d, const Mat<Perturbed>& t);

/// d += x y^T on Perturbed (matrix.hpp's add_outer): Eigen's loop, column by
/// column, d(i, j) = fl(d(i, j) + fl(y(j) x(i))), 8 rows in the lanes of a
/// vector (each element's two roundings are independent of the others'), the
/// widest build; test_tolerance compares every build with Eigen's expression.
void add_outer(Mat<Perturbed>& d, const Vec<Perturbed>& x, const Vec<Perturbed>& y);

}  // namespace dmref

namespace Eigen::internal {

/// Eigen's row-major matrix-vector product on Perturbed: the loop above.
template <typename Index, typename LhsMapper, bool ConjugateLhs, typename RhsMapper, bool ConjugateRhs, int Version>
struct general_matrix_vector_product<Index, dmref::Perturbed, LhsMapper, RowMajor, ConjugateLhs, dmref::Perturbed,
                                     RhsMapper, ConjugateRhs, Version> {
  static void run(Index rows, Index cols, const LhsMapper& lhs, const RhsMapper& rhs, dmref::Perturbed* res,
                  Index resIncr, dmref::Perturbed alpha) {
    dmref::detail::perturbed_gemv_rows(lhs.data(), std::int64_t(lhs.stride()), std::int64_t(rows),
                                       std::int64_t(cols), rhs.data(), res, std::int64_t(resIncr), alpha);
  }
};

/// Eigen's column-major matrix-vector product on Perturbed: the loop above.
/// (Eigen calls it with a contiguous res: its resIncr is 1.)
template <typename Index, typename LhsMapper, bool ConjugateLhs, typename RhsMapper, bool ConjugateRhs, int Version>
struct general_matrix_vector_product<Index, dmref::Perturbed, LhsMapper, ColMajor, ConjugateLhs, dmref::Perturbed,
                                     RhsMapper, ConjugateRhs, Version> {
  static void run(Index rows, Index cols, const LhsMapper& lhs, const RhsMapper& rhs, dmref::Perturbed* res,
                  Index resIncr, dmref::Perturbed alpha) {
    eigen_internal_assert(resIncr == 1);
    EIGEN_UNUSED_VARIABLE(resIncr);
    dmref::detail::perturbed_gemv_cols(lhs.data(), std::int64_t(lhs.stride()), std::int64_t(rows),
                                       std::int64_t(cols), rhs.data(), std::int64_t(rhs.stride()), res, alpha);
  }
};

}  // namespace Eigen::internal
