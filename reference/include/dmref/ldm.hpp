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

template <class T>
struct is_mp_number : std::false_type {};
template <class B, bmp::expression_template_option E>
struct is_mp_number<bmp::number<B, E>> : std::true_type {};
template <mpfr_prec_t B>
struct is_mp_number<Real<B>> : std::true_type {};

// In-place arithmetic on Boost.Multiprecision numbers: one MPFR/MPFI call
// each, no temporary (r may alias a or b).
template <class S>
void mp_mul(S& r, const S& a, const S& b) {
  using bmp::default_ops::eval_multiply;
  eval_multiply(r.backend(), a.backend(), b.backend());
}
template <class S>
void mp_add(S& r, const S& a, const S& b) {
  using bmp::default_ops::eval_add;
  eval_add(r.backend(), a.backend(), b.backend());
}
template <class S>
void mp_sub(S& r, const S& a, const S& b) {
  using bmp::default_ops::eval_subtract;
  eval_subtract(r.backend(), a.backend(), b.backend());
}
template <class S>
void mp_div(S& r, const S& a, const S& b) {
  using bmp::default_ops::eval_divide;
  eval_divide(r.backend(), a.backend(), b.backend());
}
/// r = a / 2 (exact, as a / S(2) is).
template <class S>
void mp_half(S& r, const S& a) {
  using bmp::default_ops::eval_ldexp;
  eval_ldexp(r.backend(), a.backend(), -1L);
}
// The same on Real<B>: the MPFR calls Boost's backend makes.
template <mpfr_prec_t B>
void mp_mul(Real<B>& r, const Real<B>& a, const Real<B>& b) {
  mpfr_mul(r.get(), a.get(), b.get(), MPFR_RNDN);
}
template <mpfr_prec_t B>
void mp_add(Real<B>& r, const Real<B>& a, const Real<B>& b) {
  mpfr_add(r.get(), a.get(), b.get(), MPFR_RNDN);
}
template <mpfr_prec_t B>
void mp_sub(Real<B>& r, const Real<B>& a, const Real<B>& b) {
  mpfr_sub(r.get(), a.get(), b.get(), MPFR_RNDN);
}
template <mpfr_prec_t B>
void mp_div(Real<B>& r, const Real<B>& a, const Real<B>& b) {
  mpfr_div(r.get(), a.get(), b.get(), MPFR_RNDN);
}
template <mpfr_prec_t B>
void mp_half(Real<B>& r, const Real<B>& a) {
  mpfr_div_2ui(r.get(), a.get(), 1, MPFR_RNDN);
}
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

/// rls_step on MPFR or MPFI numbers as in-place loops on `ws` (no allocation;
/// sums in index order, each product rounded then added, as the expressions
/// do; the symmetric update averages before it divides): every update for
/// MPFI, the Joseph form for MPFR.
template <class S>
void rls_step_mp_loops(Mat<S>& M, Mat<S>& P, const Vec<S>& k, const Vec<S>& v, const S& w, const S& lambda,
                       PUpdate how, RlsWorkspace<S>& ws) {
  const Eigen::Index n = P.rows(), m = M.rows();
  ws.fit(n, m, how == PUpdate::joseph);
  S& t = ws.t;
  mp_gemv(ws.pi, P, k, t);      // pi = P k
  mp_dot(ws.acc, k, ws.pi, t);  // k^T pi
  mp_mul(t, w, ws.acc);
  mp_add(ws.gamma, lambda, t);          // gamma = lambda + w k^T pi
  for (Eigen::Index i = 0; i < n; ++i) {
    mp_div(ws.g(i), ws.pi(i), ws.gamma);  // g = pi / gamma
    mp_mul(ws.wg(i), w, ws.g(i));         // w g
  }
  mp_gemv(ws.wu, M, k, t);  // w u = w (v - M k)
  for (Eigen::Index i = 0; i < m; ++i) {
    mp_sub(ws.wu(i), v(i), ws.wu(i));
    mp_mul(ws.wu(i), w, ws.wu(i));
  }
  for (Eigen::Index j = 0; j < M.cols(); ++j)  // M += (w u) g^T
    for (Eigen::Index i = 0; i < m; ++i) {
      mp_mul(t, ws.wu(i), ws.g(j));
      mp_add(M(i, j), M(i, j), t);
    }
  switch (how) {
    case PUpdate::naive:
      // P = (P - (w g) pi^T) / lambda, in place
      for (Eigen::Index j = 0; j < n; ++j)
        for (Eigen::Index i = 0; i < n; ++i) {
          mp_mul(t, ws.wg(i), ws.pi(j));
          mp_sub(t, P(i, j), t);
          mp_div(P(i, j), t, lambda);
        }
      break;
    case PUpdate::symmetric:
      // P = (D + D^T) / (2 lambda) with D = P - (w g) pi^T: the average is
      // taken before the division (one division per pair i <= j instead of
      // two; a profile showed MPFR's division at 12% of the step), so the
      // entries can differ in the last bit from the expression form
      // ((D / lambda) + (D / lambda)^T) / 2. The diagonal is D_ii / lambda.
      for (Eigen::Index j = 0; j < n; ++j) {
        for (Eigen::Index i = 0; i < j; ++i) {
          mp_mul(t, ws.wg(i), ws.pi(j));
          mp_sub(ws.acc, P(i, j), t);
          mp_mul(t, ws.wg(j), ws.pi(i));
          mp_sub(t, P(j, i), t);
          mp_add(ws.acc, ws.acc, t);
          mp_half(ws.acc, ws.acc);
          mp_div(P(i, j), ws.acc, lambda);
          P(j, i) = P(i, j);
        }
        mp_mul(t, ws.wg(j), ws.pi(j));
        mp_sub(t, P(j, j), t);
        mp_div(P(j, j), t, lambda);
      }
      break;
    case PUpdate::joseph: {
      // A = I - (w g) k^T;  P = (A P A^T + ((lambda w) g) g^T) / lambda
      for (Eigen::Index j = 0; j < n; ++j)
        for (Eigen::Index i = 0; i < n; ++i) {
          mp_mul(t, ws.wg(i), k(j));
          mp_sub(ws.A(i, j), i == j ? ws.one : ws.zero, t);
        }
      for (Eigen::Index j = 0; j < n; ++j)  // T = A P
        for (Eigen::Index i = 0; i < n; ++i) mp_dot(ws.T(i, j), ws.A.row(i), P.col(j), t);
      mp_mul(ws.lw, lambda, w);
      for (Eigen::Index i = 0; i < n; ++i) mp_mul(ws.pi(i), ws.lw, ws.g(i));  // pi is free now: (lambda w) g
      for (Eigen::Index j = 0; j < n; ++j)
        for (Eigen::Index i = 0; i < n; ++i) {
          mp_dot(ws.acc, ws.T.row(i), ws.A.row(j), t);  // (T A^T)(i, j)
          mp_mul(t, ws.pi(i), ws.g(j));
          mp_add(ws.acc, ws.acc, t);
          mp_div(P(i, j), ws.acc, lambda);
        }
      break;
    }
  }
}

template <class T>
struct is_mpfr_number : std::false_type {};
template <unsigned D>
struct is_mpfr_number<mpfr<D>> : std::true_type {};
template <mpfr_prec_t B>
struct is_mpfr_number<Real<B>> : std::true_type {};

/// The mpfr_t of an MPFR point number (Boost's or Real's).
template <unsigned D>
mpfr_ptr mpfr_of(mpfr<D>& x) { return x.backend().data(); }
template <unsigned D>
mpfr_srcptr mpfr_of(const mpfr<D>& x) { return x.backend().data(); }
template <mpfr_prec_t B>
mpfr_ptr mpfr_of(Real<B>& x) { return x.get(); }
template <mpfr_prec_t B>
mpfr_srcptr mpfr_of(const Real<B>& x) { return x.get(); }

/// rls_step on MPFR point numbers as a careful MPFR C user writes it
/// (bench/bench_kernels.cpp's plain-C anchor): every dot product an mpfr_fma
/// chain in index order (one rounding per term), v - M k as that chain started
/// at -v, M += (w u) g^T by mpfr_fma, and the symmetric update on the upper
/// triangle only: P_ij = (P_ij - (w g)_i pi_j) / lambda for i <= j, mirrored.
/// In exact arithmetic P is symmetric and g pi^T = pi pi^T / gamma, so
/// D = P - (w g) pi^T is symmetric and (D + D^T)/2 = D: one triangle is the
/// spec's symmetric update, with fewer roundings than averaging the two (and
/// what rls_step on Balls does). Direct MPFR calls on the numbers' mpfr_t, all
/// rounded to nearest at the precision of the destination (the type's).
template <class S>
void rls_step_mpfr(Mat<S>& M, Mat<S>& P, const Vec<S>& k, const Vec<S>& v, const S& w, const S& lambda,
                   PUpdate how, RlsWorkspace<S>& ws) {
  constexpr mpfr_rnd_t rn = MPFR_RNDN;
  auto r = [](const S& x) { return mpfr_of(x); };  // mpfr_srcptr
  auto o = [](S& x) { return mpfr_of(x); };        // mpfr_ptr
  const Eigen::Index n = P.rows(), m = M.rows();
  ws.fit(n, m, how == PUpdate::joseph);
  if (how == PUpdate::joseph) return rls_step_mp_loops<S>(M, P, k, v, w, lambda, how, ws);
  for (Eigen::Index i = 0; i < n; ++i) mpfr_set_zero(o(ws.pi(i)), 1);  // pi = P k, column by column
  for (Eigen::Index j = 0; j < n; ++j)
    for (Eigen::Index i = 0; i < n; ++i) mpfr_fma(o(ws.pi(i)), r(P(i, j)), r(k(j)), r(ws.pi(i)), rn);
  mpfr_set_zero(o(ws.acc), 1);  // gamma = lambda + w k^T pi
  for (Eigen::Index i = 0; i < n; ++i) mpfr_fma(o(ws.acc), r(k(i)), r(ws.pi(i)), r(ws.acc), rn);
  mpfr_fma(o(ws.gamma), r(w), r(ws.acc), r(lambda), rn);
  for (Eigen::Index i = 0; i < n; ++i) {
    mpfr_div(o(ws.g(i)), r(ws.pi(i)), r(ws.gamma), rn);  // g = pi / gamma
    mpfr_mul(o(ws.wg(i)), r(w), r(ws.g(i)), rn);         // w g
  }
  for (Eigen::Index i = 0; i < m; ++i) mpfr_neg(o(ws.wu(i)), r(v(i)), rn);  // w u = -w (M k - v)
  for (Eigen::Index j = 0; j < n; ++j)
    for (Eigen::Index i = 0; i < m; ++i) mpfr_fma(o(ws.wu(i)), r(M(i, j)), r(k(j)), r(ws.wu(i)), rn);
  mpfr_neg(o(ws.lw), r(w), rn);  // -w, exact
  for (Eigen::Index i = 0; i < m; ++i) mpfr_mul(o(ws.wu(i)), r(ws.lw), r(ws.wu(i)), rn);
  for (Eigen::Index j = 0; j < n; ++j)  // M += (w u) g^T
    for (Eigen::Index i = 0; i < m; ++i) mpfr_fma(o(M(i, j)), r(ws.wu(i)), r(ws.g(j)), r(M(i, j)), rn);
  // P_ij = (P_ij - (w g)_i pi_j) / lambda = ((w g)_i pi_j - P_ij) / (-lambda): one fms, one division
  mpfr_neg(o(ws.t), r(lambda), rn);  // -lambda, exact
  for (Eigen::Index j = 0; j < n; ++j)
    for (Eigen::Index i = 0; i < (how == PUpdate::symmetric ? j + 1 : n); ++i) {
      mpfr_fms(o(ws.acc), r(ws.wg(i)), r(ws.pi(j)), r(P(i, j)), rn);
      mpfr_div(o(P(i, j)), r(ws.acc), r(ws.t), rn);
      if (how == PUpdate::symmetric && i != j) mpfr_set(o(P(j, i)), r(P(i, j)), rn);
    }
}

/// rls_step as Eigen expressions: the definition, used as is for float and
/// double (so low-precision baselines do not move) and any other scalar.
template <class S>
void rls_step_expr(Mat<S>& M, Mat<S>& P, const Vec<S>& k, const Vec<S>& v, const S& w, const S& lambda,
                   PUpdate how) {
  const Vec<S> pi = P * k;
  const S gamma = lambda + w * k.dot(pi);
  const Vec<S> g = pi / gamma;
  const Vec<S> u = v - M * k;
  M.noalias() += (w * u) * g.transpose();
  switch (how) {
    case PUpdate::naive:
      P = (P - (w * g) * pi.transpose()) / lambda;
      break;
    case PUpdate::symmetric: {
      Mat<S> Q = (P - (w * g) * pi.transpose()) / lambda;
      P = (Q + Q.transpose()) / S(2);
      break;
    }
    case PUpdate::joseph: {
      const auto n = P.rows();
      const Mat<S> A = Mat<S>::Identity(n, n) - (w * g) * k.transpose();
      P = (A * P * A.transpose() + (lambda * w) * g * g.transpose()) / lambda;
      break;
    }
  }
}

}  // namespace detail

/// rls_step on Balls, as an Arb user writes it (bench/bench_kernels.cpp's Arb
/// anchor): every dot product one arb_dot (exact accumulation, one rounding),
/// v - M k as one arb_dot with v as its initial value, M += (w u) g^T by
/// arb_addmul. Symmetric update: the upper triangle of D = P - (w g) pi^T,
/// divided by lambda and mirrored. In exact arithmetic P is symmetric, so
/// D_ij = D_ji and (D + D^T)/2 = D: the ball of D_ij / lambda encloses the
/// exact entry of the symmetric formula, which is all certification needs.
inline void rls_step_ball(Mat<Ball>& M, Mat<Ball>& P, const Vec<Ball>& k, const Vec<Ball>& v, const Ball& w,
                          const Ball& lambda, PUpdate how, RlsWorkspace<Ball>& ws) {
  const slong prec = ball_precision();
  const Eigen::Index n = P.rows(), m = M.rows();
  ws.fit(n, m, how == PUpdate::joseph);
  ball_gemv(ws.pi, P, k);                                               // pi = P k
  ball_dot(ws.acc, k, ws.pi);                                           // k^T pi
  arb_mul(ws.t.get(), w.get(), ws.acc.get(), prec);
  arb_add(ws.gamma.get(), lambda.get(), ws.t.get(), prec);              // gamma = lambda + w k^T pi
  for (Eigen::Index i = 0; i < n; ++i) {
    arb_div(ws.g(i).get(), ws.pi(i).get(), ws.gamma.get(), prec);       // g = pi / gamma
    arb_mul(ws.wg(i).get(), w.get(), ws.g(i).get(), prec);              // w g
  }
  for (Eigen::Index i = 0; i < m; ++i) {                                // w u = w (v - M k)
    arb_dot(ws.wu(i).get(), v(i).get(), 1, ball_ptr(M.data() + i), M.outerStride(), ball_ptr(k.data()), 1, n, prec);
    arb_mul(ws.wu(i).get(), w.get(), ws.wu(i).get(), prec);
  }
  for (Eigen::Index j = 0; j < M.cols(); ++j)                           // M += (w u) g^T
    for (Eigen::Index i = 0; i < m; ++i) arb_addmul(M(i, j).get(), ws.wu(i).get(), ws.g(j).get(), prec);
  switch (how) {
    case PUpdate::naive:  // P = (P - (w g) pi^T) / lambda
      for (Eigen::Index j = 0; j < n; ++j)
        for (Eigen::Index i = 0; i < n; ++i) {
          arb_submul(P(i, j).get(), ws.wg(i).get(), ws.pi(j).get(), prec);
          arb_div(P(i, j).get(), P(i, j).get(), lambda.get(), prec);
        }
      break;
    case PUpdate::symmetric:
      for (Eigen::Index j = 0; j < n; ++j)
        for (Eigen::Index i = 0; i <= j; ++i) {
          arb_submul(P(i, j).get(), ws.wg(i).get(), ws.pi(j).get(), prec);
          arb_div(P(i, j).get(), P(i, j).get(), lambda.get(), prec);
          if (i != j) arb_set(P(j, i).get(), P(i, j).get());
        }
      break;
    case PUpdate::joseph: {
      // A = I - (w g) k^T;  P = (A P A^T + ((lambda w) g) g^T) / lambda
      for (Eigen::Index j = 0; j < n; ++j)
        for (Eigen::Index i = 0; i < n; ++i) {
          arb_mul(ws.t.get(), ws.wg(i).get(), k(j).get(), prec);
          arb_sub(ws.A(i, j).get(), (i == j ? ws.one : ws.zero).get(), ws.t.get(), prec);
        }
      for (Eigen::Index j = 0; j < n; ++j)  // T = A P
        for (Eigen::Index i = 0; i < n; ++i) ball_dot(ws.T(i, j), ws.A.row(i), P.col(j));
      arb_mul(ws.lw.get(), lambda.get(), w.get(), prec);
      for (Eigen::Index i = 0; i < n; ++i) arb_mul(ws.pi(i).get(), ws.lw.get(), ws.g(i).get(), prec);
      for (Eigen::Index j = 0; j < n; ++j)
        for (Eigen::Index i = 0; i < n; ++i) {
          ball_dot(ws.acc, ws.T.row(i), ws.A.row(j));  // (T A^T)(i, j)
          arb_addmul(ws.acc.get(), ws.pi(i).get(), ws.g(j).get(), prec);
          arb_div(P(i, j).get(), ws.acc.get(), lambda.get(), prec);
        }
      break;
    }
  }
}

/// One RLS step of one group, in the weight-safe form of ldm-math.md:
///   pi = P k, gamma = lambda + w k^T pi, g = pi / gamma,
///   M += w (v - M k) g^T, P updated by `how`.
/// With w = sqrt(omega)^2 this is the weighted recursion of the spec
/// (kappa = sqrt(w) g, u = sqrt(w)(v - M k)); w = 0 is exact (P <- P/lambda).
///
/// Balls: rls_step_ball (arb_dot, upper triangle). MPFR: detail::rls_step_mpfr
/// (mpfr_fma chains, upper triangle). MPFI (and MPFR's Joseph form): in-place
/// loops on `ws` (detail::rls_step_mp_loops: each product rounded then added,
/// the symmetric update averaged before it divides). Other scalars: the Eigen
/// expressions of detail::rls_step_expr. None allocates per step except the
/// expressions; all are the formulas above, and none branches on data
/// (docs/performance.md).
template <class S>
void rls_step(Mat<S>& M, Mat<S>& P, const Vec<S>& k, const Vec<S>& v, const S& w, const S& lambda, PUpdate how,
              RlsWorkspace<S>& ws) {
  if constexpr (std::is_same_v<S, Ball>) {
    rls_step_ball(M, P, k, v, w, lambda, how, ws);
  } else if constexpr (!detail::is_mp_number<S>::value) {
    (void)ws;
    detail::rls_step_expr<S>(M, P, k, v, w, lambda, how);
  } else if constexpr (detail::is_mpfr_number<S>::value) {
    detail::rls_step_mpfr<S>(M, P, k, v, w, lambda, how, ws);
  } else {
    detail::rls_step_mp_loops<S>(M, P, k, v, w, lambda, how, ws);
  }
}

/// rls_step with a per-thread workspace.
template <class S>
void rls_step(Mat<S>& M, Mat<S>& P, const Vec<S>& k, const Vec<S>& v, const S& w, const S& lambda,
              PUpdate how = PUpdate::symmetric) {
  if constexpr (detail::is_mp_number<S>::value || std::is_same_v<S, Ball>) {
    static thread_local RlsWorkspace<S> ws;
    rls_step<S>(M, P, k, v, w, lambda, how, ws);
  } else {
    detail::rls_step_expr<S>(M, P, k, v, w, lambda, how);
  }
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
