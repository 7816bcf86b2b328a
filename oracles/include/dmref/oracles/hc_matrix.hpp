// dmref/oracles/hc_matrix.hpp: Hyper-Connections in the paper's matrix form
// (arXiv 2409.19606, Eq. 1-5): with alpha = [A_m | A_r] (n x (n+1)) and
// B (n), one layer is
//     [h^T ; H'] = alpha^T H           ((n+1) x d, one matrix product)
//     H_next     = B v^T + H'
// and the dynamic coefficients come from the whole LayerNorm-ed stream matrix
// at once: alpha = alpha^s + s_a act(Hb [W_m | W_r]), B = B^s + s_b act(Hb W_b).
// Independent of the reference (matrix products instead of per-stream loops,
// its own LayerNorm), it also returns a first-order running error bound for
// any evaluation of the recursion that rounds each operation once (used by the
// tests as `cond`; see docs/hc.md "Accuracy").
#pragma once

#include "dmref/scalar_traits.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dmref::oracle {

template <class S>
struct HcLayerParams {
  Vec<S> am;                // n
  Mat<S> ar;                // n x n
  Vec<S> b;                 // n
  Vec<S> gain, bias;        // d (dynamic)
  Vec<S> wm, wb;            // d (dynamic)
  Mat<S> wr;                // d x n (dynamic)
  S sa = S(0), sb = S(0);   // (dynamic)
};

template <class S>
struct HcProblem {
  int n = 0;
  bool dynamic = false;
  bool tanh = true;
  S ln_eps = S(0);
  std::vector<HcLayerParams<S>> layer;  // at least as many as outputs
  Vec<S> e;                             // d
  std::vector<Vec<S>> v;                // L layer outputs (given)
};

template <class S>
struct HcSolution {
  std::vector<Vec<S>> h;        // h[l]: input of layer l
  std::vector<Mat<S>> H;        // H[l]: streams after layer l
  std::vector<Mat<S>> alpha;    // alpha[l] = [A_m | A_r] used by layer l
  std::vector<Vec<S>> beta;     // beta[l] = B used by layer l
  Vec<S> out;                   // sum of the rows of H[L-1] (or n e for L = 0)
  // First-order bounds on the error of a computation that rounds each
  // operation once with unit roundoff <= eps, in units of eps (absolute, 2-norm):
  std::vector<double> bound_h;  // ||dh_l||
  std::vector<double> bound_H;  // ||dH_l||_F (sum of the per-stream bounds)
  std::vector<double> bound_alpha, bound_beta;  // ||d alpha_l||_F, ||d beta_l|| (0 for static HC)
  double bound_out = 0;         // ||d out||
};

/// Runs the layers with the given outputs v, in the matrix form.
template <class S>
HcSolution<S> hc_matrix_solve(const HcProblem<S>& p) {
  using std::abs;
  using std::sqrt;
  using std::tanh;
  const int n = p.n;
  const int d = static_cast<int>(p.e.size());
  const int L = static_cast<int>(p.v.size());
  HcSolution<S> r;
  Mat<S> H = Vec<S>::Ones(n) * p.e.transpose();  // n copies of e
  std::vector<double> E(n, 0.0);                 // per-stream error bounds (eps units)
  for (int l = 0; l < L; ++l) {
    const HcLayerParams<S>& q = p.layer[l];
    Mat<S> alpha(n, n + 1);
    alpha.col(0) = q.am;
    alpha.rightCols(n) = q.ar;
    Vec<S> beta = q.b;
    std::vector<double> dAm(n, 0.0), dB(n, 0.0);
    Mat<double> dAr = Mat<double>::Zero(n, n);
    std::vector<double> Hn(n);
    for (int j = 0; j < n; ++j) Hn[j] = to_double(H.row(j).norm());
    if (p.dynamic) {
      // LayerNorm of every row at once.
      const Vec<S> mean = H.rowwise().sum() / S(d);
      const Mat<S> C = H - mean * Vec<S>::Ones(d).transpose();
      const Vec<S> var = C.rowwise().squaredNorm() / S(d);
      Vec<S> sigma(n);
      for (int j = 0; j < n; ++j) sigma(j) = sqrt(var(j) + p.ln_eps);
      const Mat<S> Hb = (sigma.cwiseInverse().asDiagonal() * C) * q.gain.asDiagonal() +
                        Vec<S>::Ones(n) * q.bias.transpose();
      Mat<S> W(d, n + 1);
      W.col(0) = q.wm;
      W.rightCols(n) = q.wr;
      Mat<S> Z = Hb * W;      // n x (n+1)
      Vec<S> zb = Hb * q.wb;  // n
      auto act = [&](const S& z) { return p.tanh ? S(tanh(z)) : z; };
      const Mat<S> Za = Z.unaryExpr(act);
      const Vec<S> zba = zb.unaryExpr(act);
      alpha += q.sa * Za;
      beta += q.sb * zba;
      // Bounds on the coefficient errors (eps units), stream by stream:
      //   LayerNorm: ||dHb|| <= g [E + (d+1) ||x||] / sigma + g sqrt(d) (d/2 + 3) + 2 ||Hb||.
      //   Input error E: the Jacobian of (x - mean)/sigma is (P - c c^T/(d sigma^2))/sigma
      //   with P the centring projection and ||c||^2 = d var <= d sigma^2, so its
      //   norm is <= 1/sigma (g = max |gain|). Rounding: the mean and the centring
      //   move c by <= (d+1) ||x||; the variance (d+2 roundings), the eps add and
      //   the sqrt move sigma by (d/2+3) relative, i.e. c/sigma by that times
      //   ||c/sigma|| <= sqrt(d); the gain and bias add 2 ||Hb||.
      //   Argument z = Hb.w: |dz| <= ||w|| ||dHb|| + d ||Hb|| ||w||;
      //   act: |d act| <= |dz| + |act| (tanh rounds once); coefficient
      //   c = c^s + s act: |dc| <= |s| |d act| + |s act| + |c|.
      const double g = to_double(S(q.gain.cwiseAbs().maxCoeff()));
      const double sa = std::abs(to_double(q.sa)), sb = std::abs(to_double(q.sb));
      for (int j = 0; j < n; ++j) {
        const double hb = to_double(S(Hb.row(j).norm()));
        const double dHb =
            g * (E[j] + (d + 1) * Hn[j]) / to_double(sigma(j)) + g * std::sqrt(double(d)) * (d / 2.0 + 3) + 2 * hb;
        auto dcoef = [&](const Vec<S>& w, const S& za, const S& coef, double s) {
          const double wn = to_double(S(w.norm()));
          const double dz = wn * dHb + d * hb * wn;
          const double dact = dz + (p.tanh ? std::abs(to_double(za)) : 0.0);
          return s * dact + s * std::abs(to_double(za)) + std::abs(to_double(coef));
        };
        dAm[j] = dcoef(q.wm, Za(j, 0), alpha(j, 0), sa);
        for (int i = 0; i < n; ++i) dAr(j, i) = dcoef(q.wr.col(i), Za(j, i + 1), alpha(j, i + 1), sa);
        dB[j] = dcoef(q.wb, zba(j), beta(j), sb);
      }
    }
    // The layer, as one matrix product.
    const Mat<S> mix = alpha.transpose() * H;  // (n+1) x d
    const Vec<S> h = mix.row(0).transpose();
    Mat<S> Hnext = beta * p.v[l].transpose() + mix.bottomRows(n);
    // Bounds: a sum of n products rounds at most n times on each path;
    // the write adds one product (B[i] v) to n: n+1 roundings.
    const double vn = to_double(S(p.v[l].norm()));
    double bh = 0;
    for (int j = 0; j < n; ++j) {
      const double a = std::abs(to_double(alpha(j, 0)));
      bh += dAm[j] * Hn[j] + a * E[j] + n * a * Hn[j];
    }
    std::vector<double> En(n);
    double bH = 0;
    for (int i = 0; i < n; ++i) {
      double e = dB[i] * vn + (n + 1) * std::abs(to_double(beta(i))) * vn;
      for (int j = 0; j < n; ++j) {
        const double a = std::abs(to_double(alpha(j, i + 1)));
        e += dAr(j, i) * Hn[j] + a * E[j] + (n + 1) * a * Hn[j];
      }
      En[i] = e;
      bH += e;
    }
    r.h.push_back(h);
    r.alpha.push_back(alpha);
    r.beta.push_back(beta);
    r.bound_h.push_back(bh);
    r.bound_H.push_back(bH);
    double ba = 0, bb = 0;
    for (int j = 0; j < n; ++j) {
      ba += dAm[j] + dAr.row(j).sum();
      bb += dB[j];
    }
    r.bound_alpha.push_back(ba);
    r.bound_beta.push_back(bb);
    H = std::move(Hnext);
    r.H.push_back(H);
    E = std::move(En);
  }
  r.out = H.colwise().sum().transpose();
  double bo = 0;
  for (int j = 0; j < n; ++j) bo += E[j] + (n - 1) * to_double(S(H.row(j).norm()));
  r.bound_out = bo;
  return r;
}

}  // namespace dmref::oracle
