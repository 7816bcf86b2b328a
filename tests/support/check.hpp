// tests/support/check.hpp: how the suite measures and reports error, and the
// one table of tolerance constants. Every tolerance in the suite is
//     k * eps(S) * cond
// with eps of the type under test, cond computed from the problem (never a
// bare number), and k from the table below. The expected value is always
// computed at higher precision than the value checked (the oracle type `Hi`).
#pragma once

#include "dmref/scalar.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

namespace dmref::test {

/// The k's. Each is a small integer times the number of rounding errors
/// per step of the analysis in the comment; see docs/precision.md.
struct K {
  // RLS vs closed form: ||M_rls - M*||_F <= k eps cond_rls ||M*||_F with
  //   cond_rls = ||R_l||_1 max(alpha, max_{i<=l} ||R_i^{-1}||_1) (l+1) / min(lambda).
  // Per layer the recursion subtracts w g pi^T from P_{i-1}: the rounding
  // error is eps ||P_{i-1}||, i.e. relative to the result ||P_{i-1}|| / ||P_i||
  // (cancellation when a strong key shrinks P; ||P_i|| >= 1/||R_i||, P_{-1} =
  // alpha I). Before the next key damps it the error grows by 1/lambda in the
  // directions orthogonal to the current key, and (l+1) layers accumulate
  // linearly. M inherits P's relative error through the gain.
  static constexpr double rls = 16;
  // Direct sums of n terms (outer-product memory, PreLN): n eps in the worst case.
  static constexpr double sum = 2;
  // Dual (n x n LU) vs primal (Cholesky) closed forms, both at the oracle
  // precision: backward-stable solves, error <= k eps cond.
  static constexpr double solve = 64;
  // AttnRes readout vs the direct softmax: first-order analysis of keys, logits, exp, sum, division and weighted sum gives ||dh|| <= 2 eps cond (DirectReadout::cond); 2x for second-order terms.
  static constexpr double attnres = 4;
  // HC vs its matrix form: err <= eps * bound, bound = the oracle's first-order running bound (hc_matrix.hpp, one rounding per operation per path, unit roundoff eps/2 counted as eps); 2x for second-order terms.
  static constexpr double hc = 2;
  // mHC vs its oracles: err <= eps * bound, bound = the first-order a priori bounds of oracle::MhcBounds (mhc_layer.hpp: logits, sigmoid, t-round Sinkhorn in scaling form, mixing; every rounding counted as a full eps); 2x for second-order terms.
  static constexpr double mhc = 2;
  // Emulated low-precision dot products (lowp.hpp): n products and sums rounded once each give |fl - exact| <= gamma_n |A||x|, gamma_n = n u/(1 - n u) <= n eps (u = eps/2, n u <= 1/2): k = 1 with cond = n |A||x|.
  static constexpr double lowp_dot = 1;
  // RLS wind-up on never-excited key directions (rls_forms.hpp, ldm.hpp): P there is a chain of at most 4 roundings per layer plus 3 (cond = 4 (l + 1) + 3), each <= u = eps/2 relative: k = 1 leaves 2x for second-order terms.
  static constexpr double rls_windup = 1;
};

/// Rounds to 30 significant bits so that sums of a few products of case
/// values stay exact in double (keeps the inputs "nice" without losing
/// generality: every value is still a generic real at the tested precisions).
inline double round30(double x) {
  int ex;
  const double m = std::frexp(x, &ex);
  return std::ldexp(std::nearbyint(std::ldexp(m, 30)), ex - 30);
}

/// The condition number RLS tolerances use (see K::rls), accumulated layer
/// by layer from the closed forms R_0, R_1, ... of one group.
class RlsCondition {
 public:
  explicit RlsCondition(double alpha) : max_rinv_(alpha) {}
  /// Adds layer l with its closed form (R, R^{-1}) and lambda_l; returns cond_rls at l.
  template <class CF>
  double add(const CF& cf, double lambda_l) {
    ++layers_;
    lambda_min_ = std::min(lambda_min_, lambda_l);
    max_rinv_ = std::max(max_rinv_, norm1(cf.Rinv));
    return norm1(cf.R) * max_rinv_ * layers_ / lambda_min_;
  }

 private:
  template <class M>
  static double norm1(const M& m) {
    return to_double(m.cwiseAbs().colwise().sum().maxCoeff());
  }
  double max_rinv_;
  double lambda_min_ = 1;
  int layers_ = 0;
};

/// Normwise relative error ||a - b|| / ||b||, evaluated in Hi. b != 0.
template <class Hi, class A, class B>
double rel_err(const A& a, const B& b) {
  using std::abs;
  const auto ah = a.template cast<Hi>();
  const auto bh = b.template cast<Hi>();
  const Hi nb = bh.norm();
  const Hi d = (ah - bh).norm();
  return to_double(nb == 0 ? d : Hi(d / nb));
}

/// Error `err` in units of eps(S), both decimal and hexfloat, for reports.
template <class S>
std::string in_eps(double err) {
  const double e = err / to_double(epsilon<S>());
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.3g eps (%a)", e, err);
  return buf;
}

template <class T>
std::string hex(const T& x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%a", to_double(x));
  return buf;
}

}  // namespace dmref::test
