// dmref/ldm.hpp: Linear Depth Memory on the framework (docs/ldm.md).
//
// Streams: the residual x (width d) and, per group g = 0..G-1, a memory M_g
// (d/G x dk) and, for the RLS write, an inverse key covariance P_g (dk x dk).
// One memory module, three write rules that differ only in the update of M:
//   outer_product:  M += v k^T                       (paper, two-stream LDM)
//   delta:          M += beta (v - M k) k^T          (one gradient step of the
//                                                     depth regression objective)
//   rls:            the exact recursive least-squares solution of the weighted,
//                   decayed-ridge depth regression objective (ldm-math.md).
// Read: h_{l+1} = x_l + concat_g(M_g q_g); final: the same read after layer L-1. Ablations: memory-only read
// (`read_residual = false`) and no residual addition (`write_residual = false`).
//
// Queries, keys and weights come from an "addresser": any callable
// (int l, const Vec<S>& x_q, const Vec<S>& x_k) -> Address<S>, evaluated after
// layer l has written the residual. The query comes from x_q = x_l; the key
// and weight from x_k = x_l (the spec's default) or, with
// KeySource::layer_input, from the layer's input residual x_{l-1} (x_{-1} = e,
// the spec's alternative). Kernel level: `GivenAddresses` (the sequences a GPU
// kernel consumes); model level: `MlpAddresses`.
//
// No recursion here branches on data values, so all of it runs on intervals.
#pragma once

#include "dmref/diagnostics.hpp"
#include "dmref/framework.hpp"
#include "dmref/layers.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace dmref {

enum class MemoryWrite { outer_product, delta, rls };

/// How the RLS inverse covariance is updated; equal in exact arithmetic.
///  symmetric (default): P <- (P - w g pi^T)/lambda, then P <- (P + P^T)/2
///  naive:               P <- (P - w g pi^T)/lambda  (unstable for lambda < 1,
///                       kept only so the suite can show why)
///  joseph:              P <- [(I - w g k^T) P (I - w g k^T)^T + lambda w g g^T]/lambda
enum class PUpdate { symmetric, naive, joseph };

/// Where the model-level keys (and weights) are computed from: x_l, after the
/// layer's write (default), or x_{l-1}, the residual the layer read.
enum class KeySource { layer_output, layer_input };

template <class S>
struct LdmConfig {
  int d = 0;                 // model width
  int groups = 1;            // G, must divide d
  int dk = 0;                // key/query width per group
  MemoryWrite write = MemoryWrite::rls;
  S alpha = S(1);            // rls: P_{-1} = alpha I, ridge alpha^{-1} (alpha > 0)
  Mat<S> lambda;             // rls: L x G forgetting factors in (0, 1]
  Mat<S> beta;               // delta: L x G step sizes
  PUpdate p_update = PUpdate::symmetric;
  bool read_residual = true;   // false: h = M q (memory-only read ablation)
  bool write_residual = true;  // false: x is not accumulated (no-residual ablation)
  KeySource keys = KeySource::layer_output;  // keys from x_l (default) or x_{l-1}

  int dv() const { return groups > 0 ? d / groups : 0; }
};

/// Query, key (both G*dk, group-major) and importance weight (G) of one layer.
template <class S>
struct Address {
  Vec<S> q, k, omega;
};

/// Scratch space of rls_step for multiprecision scalars: sized on first use,
/// reused afterwards, so a step allocates nothing (every MPFR/MPFI number owns
/// heap limbs; Eigen expressions on them allocate one per temporary).
template <class S>
struct RlsWorkspace {
  Vec<S> pi, g, wg, wu;  // dk, dk, dk, dv
  Mat<S> A, T;           // dk x dk (Joseph form only)
  S t, acc, gamma, lw, zero = S(0), one = S(1);

  void fit(Eigen::Index dk, Eigen::Index dv, bool joseph) {
    if (pi.size() != dk) {
      pi.resize(dk);
      g.resize(dk);
      wg.resize(dk);
    }
    if (wu.size() != dv) wu.resize(dv);
    if (joseph && (A.rows() != dk || A.cols() != dk)) {
      A.resize(dk, dk);
      T.resize(dk, dk);
    }
  }
};

namespace detail {

// In-place arithmetic on MPFR/MPFI numbers: one MPFR/MPFI call each, no
// temporary (r may alias a or b); MpArith (scalar_traits.hpp) says how, per type.
template <class S>
void mp_mul(S& r, const S& a, const S& b) { MpArith<S>::mul(r, a, b); }
template <class S>
void mp_add(S& r, const S& a, const S& b) { MpArith<S>::add(r, a, b); }
template <class S>
void mp_sub(S& r, const S& a, const S& b) { MpArith<S>::sub(r, a, b); }
template <class S>
void mp_div(S& r, const S& a, const S& b) { MpArith<S>::div(r, a, b); }
/// r = a / 2 (exact, as a / S(2) is).
template <class S>
void mp_half(S& r, const S& a) { MpArith<S>::half(r, a); }
/// r = sum_j x(j) y(j), left to right, products rounded then added (t: scratch).
template <class X, class Y, class S>
void mp_dot(S& r, const X& x, const Y& y, S& t) {
  const Eigen::Index n = x.size();
  if (n == 0) {
    r = S(0);
    return;
  }
  mp_mul(r, x(0), y(0));
  for (Eigen::Index j = 1; j < n; ++j) {
    mp_mul(t, x(j), y(j));
    mp_add(r, r, t);
  }
}

/// y = A x, column by column (storage order); every y(i) is still summed
/// j = 0..n-1, products rounded then added, as mp_dot does (t: scratch).
template <class S>
void mp_gemv(Vec<S>& y, const Mat<S>& A, const Vec<S>& x, S& t) {
  const Eigen::Index m = A.rows(), n = A.cols();
  if (n == 0) {
    y.setZero();
    return;
  }
  for (Eigen::Index i = 0; i < m; ++i) mp_mul(y(i), A(i, 0), x(0));
  for (Eigen::Index j = 1; j < n; ++j)
    for (Eigen::Index i = 0; i < m; ++i) {
      mp_mul(t, A(i, j), x(j));
      mp_add(y(i), y(i), t);
    }
}

/// The mpfr_t of an MPFR point number (Boost's or Real's).
template <class S>
auto mpfr_of(S& x) { return MpArith<std::remove_const_t<S>>::data(x); }

// The primitives of rls_step, one family per kind of scalar. Each family says
// how its type rounds a dot product, a matrix-vector product, a rank-1
// update; rls_step (below) is the one body that calls them, in one order.
//   RlsExprOps  Eigen expressions: float, double, the emulated formats,
//               Perturbed, any other scalar (Eigen's summation order; the
//               expressions of the definition, so the low-precision
//               baselines and the tolerance bounds' samples do not move)
//   RlsBallOps  Arb balls: arb_dot (exact accumulation, one rounding per dot
//               product, v - M k included), arb_addmul / arb_submul
//   RlsMpfrOps  MPFR points: mpfr_fma chains in index order (one rounding per
//               term), as a careful MPFR C user writes them
//   RlsMpOps    other MPFR/MPFI numbers (Boost's mpfi): each product rounded
//               then added, in index order, in place
// The symmetric P update is the one place where the families differ in
// formula, not only in rounding: the expression family forms
// Q = (P - (w g) pi^T) / lambda and averages (Q + Q^T) / 2, the others
// compute the upper triangle of Q and mirror it (in exact arithmetic P is
// symmetric and g pi^T = pi pi^T / gamma, so Q = Q^T and both are the spec's
// update; the triangle has fewer roundings and half the divisions, and a
// ball or interval of Q_ij encloses the exact entry). The expression form is
// kept for its types because the corpus's bound.* tensors are sums over
// Perturbed samples whose random stream follows the operation order.
struct RlsExprOps {
  template <class S>
  static void gemv(Vec<S>& y, const Mat<S>& A, const Vec<S>& x, RlsWorkspace<S>&) {
    y.noalias() = A * x;
  }
  template <class S>
  static void dot(S& r, const Vec<S>& x, const Vec<S>& y, RlsWorkspace<S>&) {
    r = x.dot(y);
  }
  template <class S>  // r = c + a b
  static void muladd(S& r, const S& a, const S& b, const S& c, RlsWorkspace<S>&) {
    r = c + a * b;
  }
  template <class S>  // y = x / s
  static void quotient(Vec<S>& y, const Vec<S>& x, const S& s) {
    y = x / s;
  }
  template <class S>  // y = s x
  static void scale(Vec<S>& y, const S& s, const Vec<S>& x) {
    y = s * x;
  }
  template <class S>  // y = w (v - A x)
  static void scaled_residual(Vec<S>& y, const S& w, const Vec<S>& v, const Mat<S>& A, const Vec<S>& x,
                              RlsWorkspace<S>&) {
    y.noalias() = v - A * x;
    y = w * y;
  }
  template <class S>  // M += a b^T
  static void rank1_add(Mat<S>& M, const Vec<S>& a, const Vec<S>& b, RlsWorkspace<S>&) {
    M.noalias() += a * b.transpose();
  }
  /// P = (P - a b^T) / lambda; symmetric: Q = that, P = (Q + Q^T) / 2.
  template <class S>
  static void downdate(Mat<S>& P, const Vec<S>& a, const Vec<S>& b, const S& lambda, bool symmetric,
                       RlsWorkspace<S>&) {
    if (!symmetric) {
      P = (P - a * b.transpose()) / lambda;
      return;
    }
    Mat<S> Q = (P - a * b.transpose()) / lambda;
    P = (Q + Q.transpose()) / S(2);
  }
  template <class S>  // A = I - (w g) k^T; P = (A P A^T + ((lambda w) g) g^T) / lambda
  static void joseph(Mat<S>& P, const Vec<S>& k, const Vec<S>& wg, const Vec<S>& g, const S& w, const S& lambda,
                     RlsWorkspace<S>&) {
    const auto n = P.rows();
    const Mat<S> A = Mat<S>::Identity(n, n) - wg * k.transpose();
    P = (A * P * A.transpose() + (lambda * w) * g * g.transpose()) / lambda;
  }
};

/// In-place loops shared by the MP families: the elementwise steps, and the
/// Joseph update (each product rounded then added, in index order).
struct RlsMpOps {
  template <class S>
  static void gemv(Vec<S>& y, const Mat<S>& A, const Vec<S>& x, RlsWorkspace<S>& ws) {
    mp_gemv(y, A, x, ws.t);
  }
  template <class S>
  static void dot(S& r, const Vec<S>& x, const Vec<S>& y, RlsWorkspace<S>& ws) {
    mp_dot(r, x, y, ws.t);
  }
  template <class S>
  static void muladd(S& r, const S& a, const S& b, const S& c, RlsWorkspace<S>& ws) {
    mp_mul(ws.t, a, b);
    mp_add(r, c, ws.t);
  }
  template <class S>
  static void quotient(Vec<S>& y, const Vec<S>& x, const S& s) {
    for (Eigen::Index i = 0; i < x.size(); ++i) mp_div(y(i), x(i), s);
  }
  template <class S>
  static void scale(Vec<S>& y, const S& s, const Vec<S>& x) {
    for (Eigen::Index i = 0; i < x.size(); ++i) mp_mul(y(i), s, x(i));
  }
  template <class S>
  static void scaled_residual(Vec<S>& y, const S& w, const Vec<S>& v, const Mat<S>& A, const Vec<S>& x,
                              RlsWorkspace<S>& ws) {
    mp_gemv(y, A, x, ws.t);
    for (Eigen::Index i = 0; i < y.size(); ++i) {
      mp_sub(y(i), v(i), y(i));
      mp_mul(y(i), w, y(i));
    }
  }
  template <class S>
  static void rank1_add(Mat<S>& M, const Vec<S>& a, const Vec<S>& b, RlsWorkspace<S>& ws) {
    for (Eigen::Index j = 0; j < M.cols(); ++j)
      for (Eigen::Index i = 0; i < M.rows(); ++i) {
        mp_mul(ws.t, a(i), b(j));
        mp_add(M(i, j), M(i, j), ws.t);
      }
  }
  /// P_ij = (P_ij - a_i b_j) / lambda for every i, or (symmetric) for i <= j, mirrored.
  template <class S>
  static void downdate(Mat<S>& P, const Vec<S>& a, const Vec<S>& b, const S& lambda, bool upper,
                       RlsWorkspace<S>& ws) {
    const Eigen::Index n = P.rows();
    for (Eigen::Index j = 0; j < n; ++j)
      for (Eigen::Index i = 0; i < (upper ? j + 1 : n); ++i) {
        mp_mul(ws.t, a(i), b(j));
        mp_sub(ws.t, P(i, j), ws.t);
        mp_div(P(i, j), ws.t, lambda);
        if (upper && i != j) P(j, i) = P(i, j);
      }
  }
  template <class S>
  static void joseph(Mat<S>& P, const Vec<S>& k, const Vec<S>& wg, const Vec<S>& g, const S& w, const S& lambda,
                     RlsWorkspace<S>& ws) {
    const Eigen::Index n = P.rows();
    S& t = ws.t;
    for (Eigen::Index j = 0; j < n; ++j)  // A = I - (w g) k^T
      for (Eigen::Index i = 0; i < n; ++i) {
        mp_mul(t, wg(i), k(j));
        mp_sub(ws.A(i, j), i == j ? ws.one : ws.zero, t);
      }
    for (Eigen::Index j = 0; j < n; ++j)  // T = A P
      for (Eigen::Index i = 0; i < n; ++i) mp_dot(ws.T(i, j), ws.A.row(i), P.col(j), t);
    mp_mul(ws.lw, lambda, w);
    for (Eigen::Index i = 0; i < n; ++i) mp_mul(ws.pi(i), ws.lw, g(i));  // pi is free now: (lambda w) g
    for (Eigen::Index j = 0; j < n; ++j)
      for (Eigen::Index i = 0; i < n; ++i) {
        mp_dot(ws.acc, ws.T.row(i), ws.A.row(j), t);  // (T A^T)(i, j)
        mp_mul(t, ws.pi(i), g(j));
        mp_add(ws.acc, ws.acc, t);
        mp_div(P(i, j), ws.acc, lambda);
      }
  }
};

/// MPFR points: every sum an mpfr_fma chain in index order (one rounding per
/// term), v - M k as that chain started at -v, the downdate one mpfr_fms and
/// one division per entry (bench/bench_kernels.cpp's plain-C anchor; direct
/// MPFR calls on the numbers' mpfr_t, rounded to nearest at the type's
/// precision). The elementwise steps and the Joseph update: RlsMpOps.
struct RlsMpfrOps : RlsMpOps {
  template <class S>
  static void gemv(Vec<S>& y, const Mat<S>& A, const Vec<S>& x, RlsWorkspace<S>&) {
    for (Eigen::Index i = 0; i < y.size(); ++i) mpfr_set_zero(mpfr_of(y(i)), 1);  // column by column
    for (Eigen::Index j = 0; j < A.cols(); ++j)
      for (Eigen::Index i = 0; i < A.rows(); ++i)
        mpfr_fma(mpfr_of(y(i)), mpfr_of(A(i, j)), mpfr_of(x(j)), mpfr_of(y(i)), MPFR_RNDN);
  }
  template <class S>
  static void dot(S& r, const Vec<S>& x, const Vec<S>& y, RlsWorkspace<S>&) {
    mpfr_set_zero(mpfr_of(r), 1);
    for (Eigen::Index i = 0; i < x.size(); ++i) mpfr_fma(mpfr_of(r), mpfr_of(x(i)), mpfr_of(y(i)), mpfr_of(r), MPFR_RNDN);
  }
  template <class S>
  static void muladd(S& r, const S& a, const S& b, const S& c, RlsWorkspace<S>&) {
    mpfr_fma(mpfr_of(r), mpfr_of(a), mpfr_of(b), mpfr_of(c), MPFR_RNDN);
  }
  template <class S>  // y = -w (A x - v): the chain from -v, then times -w (both negations exact)
  static void scaled_residual(Vec<S>& y, const S& w, const Vec<S>& v, const Mat<S>& A, const Vec<S>& x,
                              RlsWorkspace<S>& ws) {
    for (Eigen::Index i = 0; i < y.size(); ++i) mpfr_neg(mpfr_of(y(i)), mpfr_of(v(i)), MPFR_RNDN);
    for (Eigen::Index j = 0; j < A.cols(); ++j)
      for (Eigen::Index i = 0; i < A.rows(); ++i)
        mpfr_fma(mpfr_of(y(i)), mpfr_of(A(i, j)), mpfr_of(x(j)), mpfr_of(y(i)), MPFR_RNDN);
    mpfr_neg(mpfr_of(ws.lw), mpfr_of(w), MPFR_RNDN);
    for (Eigen::Index i = 0; i < y.size(); ++i) mpfr_mul(mpfr_of(y(i)), mpfr_of(ws.lw), mpfr_of(y(i)), MPFR_RNDN);
  }
  template <class S>
  static void rank1_add(Mat<S>& M, const Vec<S>& a, const Vec<S>& b, RlsWorkspace<S>&) {
    for (Eigen::Index j = 0; j < M.cols(); ++j)
      for (Eigen::Index i = 0; i < M.rows(); ++i)
        mpfr_fma(mpfr_of(M(i, j)), mpfr_of(a(i)), mpfr_of(b(j)), mpfr_of(M(i, j)), MPFR_RNDN);
  }
  /// P_ij = (a_i b_j - P_ij) / (-lambda): one fms, one division (i <= j, mirrored, if upper).
  template <class S>
  static void downdate(Mat<S>& P, const Vec<S>& a, const Vec<S>& b, const S& lambda, bool upper,
                       RlsWorkspace<S>& ws) {
    const Eigen::Index n = P.rows();
    mpfr_neg(mpfr_of(ws.t), mpfr_of(lambda), MPFR_RNDN);  // -lambda, exact
    for (Eigen::Index j = 0; j < n; ++j)
      for (Eigen::Index i = 0; i < (upper ? j + 1 : n); ++i) {
        mpfr_fms(mpfr_of(ws.acc), mpfr_of(a(i)), mpfr_of(b(j)), mpfr_of(P(i, j)), MPFR_RNDN);
        mpfr_div(mpfr_of(P(i, j)), mpfr_of(ws.acc), mpfr_of(ws.t), MPFR_RNDN);
        if (upper && i != j) mpfr_set(mpfr_of(P(j, i)), mpfr_of(P(i, j)), MPFR_RNDN);
      }
  }
};

/// Arb balls, as an Arb user writes the step (bench/bench_kernels.cpp's Arb
/// anchor): every dot product one arb_dot, v - M k one arb_dot with v as its
/// initial value, updates by arb_addmul / arb_submul.
struct RlsBallOps {
  static slong prec() { return ball_precision(); }
  static void gemv(Vec<Ball>& y, const Mat<Ball>& A, const Vec<Ball>& x, RlsWorkspace<Ball>&) { ball_gemv(y, A, x); }
  static void dot(Ball& r, const Vec<Ball>& x, const Vec<Ball>& y, RlsWorkspace<Ball>&) { ball_dot(r, x, y); }
  static void muladd(Ball& r, const Ball& a, const Ball& b, const Ball& c, RlsWorkspace<Ball>& ws) {
    arb_mul(ws.t.get(), a.get(), b.get(), prec());
    arb_add(r.get(), c.get(), ws.t.get(), prec());
  }
  static void quotient(Vec<Ball>& y, const Vec<Ball>& x, const Ball& s) {
    for (Eigen::Index i = 0; i < x.size(); ++i) arb_div(y(i).get(), x(i).get(), s.get(), prec());
  }
  static void scale(Vec<Ball>& y, const Ball& s, const Vec<Ball>& x) {
    for (Eigen::Index i = 0; i < x.size(); ++i) arb_mul(y(i).get(), s.get(), x(i).get(), prec());
  }
  static void scaled_residual(Vec<Ball>& y, const Ball& w, const Vec<Ball>& v, const Mat<Ball>& A, const Vec<Ball>& x,
                              RlsWorkspace<Ball>&) {
    for (Eigen::Index i = 0; i < y.size(); ++i) {
      arb_dot(y(i).get(), v(i).get(), 1, ball_ptr(A.data() + i), A.outerStride(), ball_ptr(x.data()), 1, A.cols(),
              prec());
      arb_mul(y(i).get(), w.get(), y(i).get(), prec());
    }
  }
  static void rank1_add(Mat<Ball>& M, const Vec<Ball>& a, const Vec<Ball>& b, RlsWorkspace<Ball>&) {
    for (Eigen::Index j = 0; j < M.cols(); ++j)
      for (Eigen::Index i = 0; i < M.rows(); ++i) arb_addmul(M(i, j).get(), a(i).get(), b(j).get(), prec());
  }
  static void downdate(Mat<Ball>& P, const Vec<Ball>& a, const Vec<Ball>& b, const Ball& lambda, bool upper,
                       RlsWorkspace<Ball>&) {
    const Eigen::Index n = P.rows();
    for (Eigen::Index j = 0; j < n; ++j)
      for (Eigen::Index i = 0; i < (upper ? j + 1 : n); ++i) {
        arb_submul(P(i, j).get(), a(i).get(), b(j).get(), prec());
        arb_div(P(i, j).get(), P(i, j).get(), lambda.get(), prec());
        if (upper && i != j) arb_set(P(j, i).get(), P(i, j).get());
      }
  }
  static void joseph(Mat<Ball>& P, const Vec<Ball>& k, const Vec<Ball>& wg, const Vec<Ball>& g, const Ball& w,
                     const Ball& lambda, RlsWorkspace<Ball>& ws) {
    const Eigen::Index n = P.rows();
    for (Eigen::Index j = 0; j < n; ++j)  // A = I - (w g) k^T
      for (Eigen::Index i = 0; i < n; ++i) {
        arb_mul(ws.t.get(), wg(i).get(), k(j).get(), prec());
        arb_sub(ws.A(i, j).get(), (i == j ? ws.one : ws.zero).get(), ws.t.get(), prec());
      }
    for (Eigen::Index j = 0; j < n; ++j)  // T = A P
      for (Eigen::Index i = 0; i < n; ++i) ball_dot(ws.T(i, j), ws.A.row(i), P.col(j));
    arb_mul(ws.lw.get(), lambda.get(), w.get(), prec());
    for (Eigen::Index i = 0; i < n; ++i) arb_mul(ws.pi(i).get(), ws.lw.get(), g(i).get(), prec());  // (lambda w) g
    for (Eigen::Index j = 0; j < n; ++j)
      for (Eigen::Index i = 0; i < n; ++i) {
        ball_dot(ws.acc, ws.T.row(i), ws.A.row(j));  // (T A^T)(i, j)
        arb_addmul(ws.acc.get(), ws.pi(i).get(), g(j).get(), prec());
        arb_div(P(i, j).get(), ws.acc.get(), lambda.get(), prec());
      }
  }
};

/// The primitive family of scalar S.
template <class S>
using RlsOpsOf = std::conditional_t<std::is_same_v<S, Ball>, RlsBallOps,
                                    std::conditional_t<MpArith<S>::is_mpfr_point, RlsMpfrOps,
                                                       std::conditional_t<MpArith<S>::is_mp, RlsMpOps, RlsExprOps>>>;

/// The body of rls_step on the primitives of family Ops.
template <class Ops, class S>
void rls_step_with(Mat<S>& M, Mat<S>& P, const Vec<S>& k, const Vec<S>& v, const S& w, const S& lambda, PUpdate how,
                   RlsWorkspace<S>& ws) {
  ws.fit(P.rows(), M.rows(), how == PUpdate::joseph);
  Ops::gemv(ws.pi, P, k, ws);                    // pi = P k
  Ops::dot(ws.acc, k, ws.pi, ws);                // k^T pi
  Ops::muladd(ws.gamma, w, ws.acc, lambda, ws);  // gamma = lambda + w k^T pi
  Ops::quotient(ws.g, ws.pi, ws.gamma);          // g = pi / gamma
  Ops::scaled_residual(ws.wu, w, v, M, k, ws);   // w u = w (v - M k)
  Ops::rank1_add(M, ws.wu, ws.g, ws);            // M += (w u) g^T
  Ops::scale(ws.wg, w, ws.g);                    // w g
  switch (how) {
    case PUpdate::naive:  // P = (P - (w g) pi^T) / lambda
      Ops::downdate(P, ws.wg, ws.pi, lambda, false, ws);
      break;
    case PUpdate::symmetric:  // the same, symmetrised (see the families above)
      Ops::downdate(P, ws.wg, ws.pi, lambda, true, ws);
      break;
    case PUpdate::joseph:
      Ops::joseph(P, k, ws.wg, ws.g, w, lambda, ws);
      break;
  }
}

}  // namespace detail

/// One RLS step of one group, in the weight-safe form of ldm-math.md:
///   pi = P k, gamma = lambda + w k^T pi, g = pi / gamma,
///   M += w (v - M k) g^T, P updated by `how`.
/// With w = sqrt(omega)^2 this is the weighted recursion of the spec
/// (kappa = sqrt(w) g, u = sqrt(w)(v - M k)); w = 0 is exact (P <- P/lambda).
///
/// One body (detail::rls_step_with) over the rounding primitives of the
/// scalar's family (detail::RlsOpsOf: Eigen expressions, Arb balls, MPFR fma
/// chains, in-place MP loops). Nothing allocates per step except the
/// expression family's temporaries; none branches on data (docs/performance.md).
template <class S>
void rls_step(Mat<S>& M, Mat<S>& P, const Vec<S>& k, const Vec<S>& v, const S& w, const S& lambda, PUpdate how,
              RlsWorkspace<S>& ws) {
  static_assert(MpArith<S>::is_mp || !requires(const S& s) { s.backend(); },
                "rls_step on a Boost.Multiprecision number: include dmref/scalar.hpp (its MpArith says how it rounds)");
  detail::rls_step_with<detail::RlsOpsOf<S>>(M, P, k, v, w, lambda, how, ws);
}

/// rls_step with a per-thread workspace.
template <class S>
void rls_step(Mat<S>& M, Mat<S>& P, const Vec<S>& k, const Vec<S>& v, const S& w, const S& lambda,
              PUpdate how = PUpdate::symmetric) {
  static thread_local RlsWorkspace<S> ws;
  rls_step<S>(M, P, k, v, w, lambda, how, ws);
}

/// The shape rules of an LDM configuration, the scheme's own: d > 0, groups
/// divides d, dk > 0. LinearDepthMemory::validate applies them; the
/// conformance binding (conformance/schemes/ldm.hpp) calls them before it
/// reads the tensors they shape. ParameterError naming the field.
inline void ldm_validate_shape(int d, int groups, int dk) {
  auto fail = [](const std::string& field, const std::string& what) { throw ParameterError("ldm", field, what); };
  if (d <= 0) fail("d", "must be > 0, got " + std::to_string(d));
  if (groups <= 0 || d % groups != 0) fail("groups", std::to_string(groups) + " does not divide d = " + std::to_string(d));
  if (dk <= 0) fail("dk", "must be > 0, got " + std::to_string(dk));
}

template <class S, class Addresser>
class LinearDepthMemory {
 public:
  using Scalar = S;
  struct Group {
    Mat<S> M;  // dv x dk
    Mat<S> P;  // dk x dk (rls only; empty otherwise)
  };
  struct State {
    Vec<S> x;                 // residual stream
    std::vector<Group> mem;   // one memory per group
    Vec<S> q;                 // query of the last write (G*dk); zero before layer 0
    template <class F>
    void stored(F&& f) {  // framework.hpp: the stream and the memories M (P stays float32)
      f(x);
      for (auto& g : mem) f(g.M);
    }
  };

  LinearDepthMemory(LdmConfig<S> cfg, Addresser addr) : cfg_(std::move(cfg)), addr_(std::move(addr)) {
    validate();
  }

  const LdmConfig<S>& config() const { return cfg_; }
  const Addresser& addresser() const { return addr_; }

  State init(const Vec<S>& e) const {
    if (e.size() != cfg_.d) fail("embedding", "width " + std::to_string(e.size()) + " != d = " + std::to_string(cfg_.d));
    State s;
    s.x = e;
    s.q = Vec<S>::Zero(cfg_.groups * cfg_.dk);
    s.mem.resize(cfg_.groups);
    for (auto& g : s.mem) {
      g.M = Mat<S>::Zero(cfg_.dv(), cfg_.dk);
      if (cfg_.write == MemoryWrite::rls) g.P = cfg_.alpha * Mat<S>::Identity(cfg_.dk, cfg_.dk);
    }
    return s;
  }

  /// concat_g M_g q_g: the memory readout alone.
  Vec<S> readout(const State& s) const {
    const int dv = cfg_.dv(), dk = cfg_.dk;
    Vec<S> r(cfg_.d);
    for (int g = 0; g < cfg_.groups; ++g) r.segment(g * dv, dv) = s.mem[g].M * s.q.segment(g * dk, dk);
    return r;
  }

  Vec<S> read(const State& s, int) const {
    if (cfg_.read_residual) return s.x + readout(s);
    return readout(s);
  }

  void write(State& s, int l, const Vec<S>& v) const {
    const Vec<S> x_in = cfg_.keys == KeySource::layer_input ? s.x : Vec<S>();
    if (cfg_.write_residual) s.x += v;
    Address<S> a = addr_(l, s.x, cfg_.keys == KeySource::layer_input ? x_in : s.x);
    check_address(a, l);
    const int dv = cfg_.dv(), dk = cfg_.dk;
    for (int g = 0; g < cfg_.groups; ++g) {
      Group& G = s.mem[g];
      const Vec<S> k = a.k.segment(g * dk, dk);
      const Vec<S> vg = v.segment(g * dv, dv);
      switch (cfg_.write) {
        case MemoryWrite::outer_product:
          G.M.noalias() += vg * k.transpose();
          break;
        case MemoryWrite::delta: {
          const Vec<S> u = vg - G.M * k;
          G.M.noalias() += (cfg_.beta(l, g) * u) * k.transpose();
          break;
        }
        case MemoryWrite::rls:
          rls_step<S>(G.M, G.P, k, vg, a.omega(g), cfg_.lambda(l, g), cfg_.p_update);
          break;
      }
    }
    s.q = std::move(a.q);
  }

  /// The LM head reads what a next layer would read: h_L = x_{L-1} + M q.
  Vec<S> final(const State& s) const { return read(s, -1); }

 private:
  [[noreturn]] static void fail(const std::string& field, const std::string& what) {
    throw ParameterError("ldm", field, what);
  }

  void validate() const {
    ldm_validate_shape(cfg_.d, cfg_.groups, cfg_.dk);
    if (cfg_.write == MemoryWrite::rls) {
      const double a = to_double(cfg_.alpha);
      if (!(std::isfinite(a) && a > 0)) fail("alpha", "must be finite and > 0, got " + show(a));
      if (cfg_.lambda.cols() != cfg_.groups)
        fail("lambda", "needs one column per group (" + std::to_string(cfg_.groups) + "), got " +
                           std::to_string(cfg_.lambda.cols()));
      for (Eigen::Index i = 0; i < cfg_.lambda.size(); ++i) {
        const double x = to_double(cfg_.lambda(i));
        if (!(std::isfinite(x) && x > 0 && x <= 1))
          fail("lambda", "entry " + std::to_string(i) + " = " + show(x) + " is outside (0, 1]");
      }
    }
    if (cfg_.write == MemoryWrite::delta) {
      if (cfg_.beta.cols() != cfg_.groups) fail("beta", "needs one column per group");
      for (Eigen::Index i = 0; i < cfg_.beta.size(); ++i)
        if (!std::isfinite(to_double(cfg_.beta(i)))) fail("beta", "entry " + std::to_string(i) + " is not finite");
    }
  }

  void check_address(const Address<S>& a, int l) const {
    const auto n = cfg_.groups * cfg_.dk;
    const std::string at = " at layer " + std::to_string(l);
    if (a.q.size() != n || a.k.size() != n) fail("q/k", "width must be G*dk = " + std::to_string(n) + at);
    if (cfg_.write == MemoryWrite::rls) {
      if (l >= cfg_.lambda.rows()) fail("lambda", "has " + std::to_string(cfg_.lambda.rows()) + " rows, need a row" + at);
      if (a.omega.size() != cfg_.groups) fail("omega", "needs one weight per group" + at);
    }
    if (cfg_.write == MemoryWrite::delta && l >= cfg_.beta.rows()) fail("beta", "needs a row" + at);
  }

  LdmConfig<S> cfg_;
  Addresser addr_;
};

/// Kernel level: q, k, omega supplied per layer (what a GPU kernel consumes).
template <class S>
struct GivenAddresses {
  std::vector<Address<S>> a;
  Address<S> operator()(int l, const Vec<S>&, const Vec<S>&) const {
    if (l < 0 || l >= static_cast<int>(a.size()))
      throw std::invalid_argument("ldm: addresses: no q/k/omega for layer " + std::to_string(l));
    for (Eigen::Index g = 0; g < a[l].omega.size(); ++g) {
      const double w = to_double(a[l].omega(g));
      if (!(std::isfinite(w) && w >= 0))
        throw std::invalid_argument("ldm: omega: layer " + std::to_string(l) + " group " + std::to_string(g) +
                                    " = " + std::to_string(w) + " must be finite and >= 0");
    }
    return a[l];
  }
};

/// Model level: q = normalize(MLP_q(x_q)), k = normalize(MLP_k(x_k)[:G dk]),
/// omega = softplus(MLP_k(x_k)[G dk:]); normalization per group.
template <class S>
struct MlpAddresses {
  SmallMlp<S> mlp_q;  // G*dk outputs
  SmallMlp<S> mlp_k;  // G*dk + G outputs
  int groups = 1;
  int dk = 0;
  Address<S> operator()(int, const Vec<S>& x_q, const Vec<S>& x_k) const {
    const int n = groups * dk;
    Vec<S> kq = mlp_k(x_k);
    if (kq.size() != n + groups) throw std::invalid_argument("ldm: mlp_k must have G*dk + G outputs");
    Address<S> a;
    a.q = normalize_groups<S>(mlp_q(x_q), groups);
    a.k = normalize_groups<S>(kq.head(n), groups);
    a.omega = kq.tail(groups).unaryExpr([](const S& t) { return softplus(t); });
    return a;
  }
};

template <class S>
using LdmKernel = LinearDepthMemory<S, GivenAddresses<S>>;
template <class S>
using LdmModel = LinearDepthMemory<S, MlpAddresses<S>>;

/// Kernel-level entry point: per-layer values v[l] and addresses a[l] given;
/// returns the whole trace (readouts h[l+1], every state).
template <class S>
Trace<S, typename LdmKernel<S>::State> ldm_kernel(const LdmConfig<S>& cfg, const Vec<S>& e,
                                                   const std::vector<Vec<S>>& v,
                                                   const std::vector<Address<S>>& a) {
  if (v.size() != a.size()) throw std::invalid_argument("ldm: v and addresses differ in length");
  LdmKernel<S> m(cfg, GivenAddresses<S>{a});
  return forward(m, e, static_cast<int>(v.size()), GivenOutputs<S>{&v});
}

}  // namespace dmref
