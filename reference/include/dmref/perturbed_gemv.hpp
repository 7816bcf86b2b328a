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

#include "dmref/perturbed.hpp"  // (which includes this header at its end)

#include <Eigen/Core>

#include <cstdint>

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
GemvBuilds<GemvRowsLoop> gemv_rows_builds();
GemvBuilds<GemvColsLoop> gemv_cols_builds();

/// res += alpha A x on Perturbed, A row-major [rows, cols] with row stride
/// `stride`, x contiguous, res with increment `incr`: the widest build.
void perturbed_gemv_rows(const Perturbed* A, std::int64_t stride, std::int64_t rows, std::int64_t cols,
                         const Perturbed* x, Perturbed* res, std::int64_t incr, Perturbed alpha);
/// res += alpha A x on Perturbed, A column-major [rows, cols] with column
/// stride `stride`, x with increment `xstride`, res contiguous.
void perturbed_gemv_cols(const Perturbed* A, std::int64_t stride, std::int64_t rows, std::int64_t cols,
                         const Perturbed* x, std::int64_t xstride, Perturbed* res, Perturbed alpha);

}  // namespace dmref::detail

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
