// dmref/mhc.hpp: Manifold-Constrained Hyper-Connections on the framework
// (docs/mhc.md; arXiv 2512.24880, Xie et al., "mHC", Eqs. 3 and 7-9).
//
// Streams: X, n x C, row j = stream j. Its vectorization is stream-major,
// x_vec[j*C + c] = X(j, c). Layer l computes, from X before the layer,
//   x'      = RMSNorm(x_vec)                       (over all nC entries, gain 1)
//   Ht_pre  = a_pre  (x' phi_pre)  + b_pre         (1 x n)
//   Ht_post = a_post (x' phi_post) + b_post        (1 x n)
//   Ht_res  = a_res mat(x' phi_res) + b_res        (n x n, row-major: entry
//                                                   (i, j) is column i*n + j)
//   H_pre   = pre_scale * sigmoid(Ht_pre) + pre_eps   (paper: pre_scale 1)
//   H_post  = post_scale * sigmoid(Ht_post)           (paper: post_scale 2)
//   H_res   = Sinkhorn(exp(Ht_res)), exactly t_max rounds
// and then
//   read:   h_l = sum_j H_pre[j] X_j
//   write:  X_i <- sum_j H_res[i,j] X_j + H_post[i] v_l,   v_l = F_l(h_l).
// One Sinkhorn round is a column normalization followed by a row
// normalization, so the rows of H_res sum to 1 (to working precision) and the
// columns only approximately: this is the finite recurrence, not its limit.
// The deepseek-v4 preset adds eps_add to every entry after the first column
// normalization and eps_den to every later denominator (TileKernels /
// DeepSeek-V4), see mhc_sinkhorn.
//
// No max is subtracted before exp: that needs comparisons, which do not run on
// intervals. MPFR's exponent range makes exp(Ht) safe for any realistic logit;
// in double exp overflows above 709.78 (float32: 88.7, fp16: 11.1). The suite
// shows that a max-subtracted Sinkhorn (oracles/.../mhc_sinkhorn.hpp) agrees
// with this one to rounding, for both presets.
//
// DeepSeek-V4 stores the transpose of H_res (its "comb" matrix A has
// A[in, out] = H_res[out, in]); that is handled only at the boundary, by
// mhc_to_storage / mhc_from_storage / mhc_res_columns_transpose.
//
// Sums are explicit loops in index order 0..n-1. No recursion here branches on
// data values, so all of it runs on intervals.
#pragma once

#include "dmref/ball_jet.hpp"
#include "dmref/diagnostics.hpp"
#include "dmref/framework.hpp"
#include "dmref/layers.hpp"

#include <cmath>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace dmref {

enum class MhcPreset {
  paper,        // arXiv 2512.24880: no extra epsilons, RMSNorm eps 1e-20 (Table 5)
  deepseek_v4,  // DeepSeek-V4 / TileKernels: hc_eps = 1e-6 in three places, RMSNorm eps 1e-6
};

/// What final() hands to the LM head.
enum class MhcReduce {
  sum,   // sum_j X_j (default)
  head,  // DeepSeek-V4's learned head: sum_j pre_j X_j, pre = sigmoid(a (x' phi) + b) + head_eps
};

/// The parameters of one layer's hyper-connection.
template <class S>
struct MhcLayer {
  Mat<S> phi_pre;   // nC x n
  Mat<S> phi_post;  // nC x n
  Mat<S> phi_res;   // nC x n^2; column i*n + j gives Ht_res(i, j)
  S a_pre = S(1), a_post = S(1), a_res = S(1);  // the paper's alpha gating factors
  Vec<S> b_pre;     // n
  Vec<S> b_post;    // n
  Mat<S> b_res;     // n x n
};

/// The learned reduce head (MhcReduce::head).
template <class S>
struct MhcHead {
  Mat<S> phi;    // nC x n
  S a = S(1);    // scale
  Vec<S> b;      // n
};

template <class S>
struct MhcConfig {
  int n = 4;      // expansion rate: number of streams (paper: 4)
  int C = 0;      // model width
  int t_max = 20;                          // Sinkhorn rounds (paper Table 5 and DeepSeek-V4: 20)
  S rms_eps = S(1) / S(1e20);              // RMSNorm epsilon (paper Table 5: 1e-20)
  S pre_scale = S(1);                      // H_pre = pre_scale * sigmoid(Ht_pre) + pre_eps (paper: 1)
  S pre_eps = S(0);                        // added after sigmoid of H_pre
  S res_eps_add = S(0);                    // added to every entry after the first column normalization
  S res_eps_den = S(0);                    // added to every Sinkhorn denominator after the first
  S post_scale = S(2);                     // H_post = post_scale * sigmoid(Ht_post) (paper: 2)
  Vec<S> init_weights;                     // init: X_j = init_weights[j] e; empty = n copies of e
  MhcReduce reduce = MhcReduce::sum;
  MhcHead<S> head;                         // used when reduce == head
  S head_eps = S(0);                       // head: added after the sigmoid
  std::vector<MhcLayer<S>> layers;         // layer l uses layers[l]
  // Or, when set, layer l's parameters are made on demand by layer_source(l),
  // l < layer_count, and only the last one made is held (eval_mhc converts
  // them from the fixture's tensors: at C = 1024, n = 4, 2048 bits a layer is
  // ~25 MiB of balls, all of L = 16 about 0.4 GiB per thread). `layers` must
  // then be empty.
  std::function<MhcLayer<S>(int)> layer_source;
  int layer_count = 0;
};

/// A configuration with the preset's constants and no layers yet.
template <class S>
MhcConfig<S> mhc_config(MhcPreset preset, int n, int C) {
  MhcConfig<S> c;
  c.n = n;
  c.C = C;
  if (preset == MhcPreset::deepseek_v4) {
    const S hc_eps = S(1) / S(1e6);  // hc_eps (DeepSeek-V4-Flash config.json)
    c.rms_eps = S(1) / S(1e6);       // norm_eps
    c.pre_eps = hc_eps;
    c.res_eps_add = hc_eps;
    c.res_eps_den = hc_eps;
    c.head_eps = hc_eps;
  }
  return c;
}

/// The coefficients of one layer, computed from the streams before it.
template <class S>
struct MhcCoefficients {
  Vec<S> pre_logits, post_logits;  // Ht_pre, Ht_post (n)
  Mat<S> res_logits;               // Ht_res (n x n)
  Vec<S> pre, post;                // H_pre, H_post (n)
  Mat<S> res;                      // H_res (n x n), paper orientation
  // Where they were computed (mhc_coefficients_of), the point the backward
  // linearizes at: the normalized streams x' (nC) and the projections
  // phi_pre^T x', phi_post^T x' (n), phi_res^T x' (n^2). Empty where the
  // coefficients were given (op post) or dropped (Mhc::read keeps none in its
  // state). Backward<Mhc>::coefficients_vjp reuses them instead of computing
  // them again: every scalar type computes the same numbers both ways (the
  // tolerance model's rounding signs are hashes of the values: perturbed.hpp).
  // rms: RMSNorm's divisor sqrt(mean(x^2) + eps) of x' = x / rms (set with xn
  // by mhc_coefficients).
  Vec<S> xn, proj_pre, proj_post, proj_res;
  S rms{};
};

/// Sinkhorn(exp(logits)) with exactly t_max >= 1 rounds:
///   round 1:      M_ij <- exp(L_ij) / sum_k exp(L_kj) + eps_add          (columns)
///                 M_ij <- M_ij / (sum_k M_ik + eps_den)                  (rows)
///   rounds 2..t:  M_ij <- M_ij / (sum_k M_kj + eps_den)                  (columns)
///                 M_ij <- M_ij / (sum_k M_ik + eps_den)                  (rows)
/// eps_add = eps_den = 0 is the paper's recurrence; both 1e-6 is DeepSeek-V4's
/// (its first column normalization is a softmax, with no eps in the denominator).
template <class S>
Mat<S> mhc_sinkhorn(const Mat<S>& logits, int t_max, const S& eps_add = S(0), const S& eps_den = S(0)) {
  using std::exp;
  if (logits.rows() != logits.cols() || logits.rows() == 0)
    throw std::invalid_argument("mhc: sinkhorn: logits must be square and non-empty, got " +
                                std::to_string(logits.rows()) + "x" + std::to_string(logits.cols()));
  if (t_max < 1) throw std::invalid_argument("mhc: t_max: must be >= 1, got " + std::to_string(t_max));
  const Eigen::Index n = logits.rows();
  Mat<S> M(n, n);
  for (Eigen::Index i = 0; i < M.size(); ++i) M(i) = exp(logits(i));
  auto columns = [&](const S& add_to_sum) {
    for (Eigen::Index j = 0; j < n; ++j) {
      S s = M(0, j);
      for (Eigen::Index i = 1; i < n; ++i) s += M(i, j);
      const S den = s + add_to_sum;
      for (Eigen::Index i = 0; i < n; ++i) M(i, j) = normalized(M(i, j), den);
    }
  };
  auto rows = [&](const S& add_to_sum) {
    for (Eigen::Index i = 0; i < n; ++i) {
      S s = M(i, 0);
      for (Eigen::Index j = 1; j < n; ++j) s += M(i, j);
      const S den = s + add_to_sum;
      for (Eigen::Index j = 0; j < n; ++j) M(i, j) = normalized(M(i, j), den);
    }
  };
  columns(S(0));
  for (Eigen::Index i = 0; i < M.size(); ++i) M(i) = M(i) + eps_add;
  rows(eps_den);
  for (int t = 2; t <= t_max; ++t) {
    columns(eps_den);
    rows(eps_den);
  }
  return M;
}

/// Certification only: Sinkhorn on Balls in the centred (mean-value) form
/// (docs/precision.md, "Centred form"). Naive ball evaluation of
/// mhc_sinkhorn doubles the relative radius at each normalization (the sum
/// in the denominator contains the numerator, and the two are treated as
/// independent): 2 t_max bits per call, which the next layer's logits inherit.
/// For the exact map S and any logits L* in the ball L with midpoints m,
/// entry k of S(L*) = S_k(m) + grad S_k(xi) . (L* - m) for some xi on the
/// segment [m, L*], inside L (mean-value theorem; L is convex). Hence
///   S(L) is enclosed by  S(m) + J(L) [-r, r],   r = rad(L),
/// with S(m) the ball evaluation at the (exact) midpoints and J(L) an
/// enclosure of the Jacobian over all of L: mhc_sinkhorn itself run on
/// BallJet (ball_jet.hpp), forward mode over the n^2 logits. The radius of
/// the result is then rad S(m) + sum_j |J_kj| r_j: the image's own half-width
/// (to first order), not 2^(2 t_max) r.
///   Precisions: S(m) at p + 2 t_max + 64 bits (its naive evaluation loses the
/// 2 t_max bits; 64 more keep its rounding 2^-64 below one ulp at p), the
/// result rounded to p; J at 2 t_max + 64 bits (104 for t_max = 20: two limbs,
/// which Arb stores without allocating), from L rounded outward to that
/// precision (a superset of L, so still an enclosure): J only scales r and is
/// needed to a few bits; the jet loses about 2.3 bits per round over the ball
/// (measured: 46 bits at t_max = 20), so J keeps ~58 bits.
/// The generic mhc_sinkhorn is unchanged and is what every point type runs.
inline Mat<Ball> mhc_sinkhorn_centred(const Mat<Ball>& logits, int t_max, const Ball& eps_add, const Ball& eps_den) {
  if (t_max < 1) throw std::invalid_argument("mhc: t_max: must be >= 1, got " + std::to_string(t_max));
  const slong p = ball_precision();
  const Eigen::Index n = logits.rows(), N = logits.size();
  Mat<BallJet> J;
  {
    const BallPrecision guard(2 * static_cast<slong>(t_max) + 64);
    Mat<BallJet> Lj(logits.rows(), logits.cols());
    for (Eigen::Index i = 0; i < N; ++i) {
      Ball x;
      arb_set_round(x.get(), logits(i).get(), ball_precision());
      Lj(i) = BallJet::variable(std::move(x), i, N);
    }
    J = mhc_sinkhorn<BallJet>(Lj, t_max, BallJet(eps_add), BallJet(eps_den));
  }
  Mat<Ball> Sm;
  {
    const BallPrecision guard(p + 2 * static_cast<slong>(t_max) + 64);
    const Mat<Ball> m = logits.unaryExpr([](const Ball& x) {
      Ball r;
      arb_get_mid_arb(r.get(), x.get());
      return r;
    });
    Sm = mhc_sinkhorn<Ball>(m, t_max, eps_add, eps_den);
  }
  Mat<Ball> out(n, n);
  for (Eigen::Index k = 0; k < N; ++k) {
    Ball& y = out(k);
    arb_set_round(y.get(), Sm(k).get(), p);
    for (Eigen::Index j = 0; j < N && !J(k).d.empty(); ++j) {
      Ball dj;  // [0 +- r_j]: L*_j - m_j for any L*_j in the ball
      mag_set(arb_radref(dj.get()), arb_radref(logits(j).get()));
      arb_addmul(y.get(), J(k).d[static_cast<std::size_t>(j)].get(), dj.get(), p);
    }
  }
  return out;
}

/// x_vec = vec(X), stream-major: x_vec[j*C + c] = X(j, c).
template <class S>
Vec<S> mhc_vec(const Mat<S>& X) {
  const Eigen::Index n = X.rows(), C = X.cols();
  Vec<S> x(n * C);
  for (Eigen::Index j = 0; j < n; ++j)
    for (Eigen::Index c = 0; c < C; ++c) x(j * C + c) = X(j, c);
  return x;
}

/// H_pre, H_post and H_res of c from its logits (c.pre_logits, c.post_logits,
/// c.res_logits): the sigmoids and Sinkhorn. Apart, so that a study can store
/// the logits in a 16-bit format in between, as a projection kernel hands them
/// to a Sinkhorn kernel (stability sweep, `bf16:f32/S`).
template <class S>
void mhc_coefficients_from_logits(const MhcConfig<S>& cfg, MhcCoefficients<S>& c) {
  c.pre = c.pre_logits.unaryExpr([&](const S& z) { return S(cfg.pre_scale * sigmoid(z) + cfg.pre_eps); });
  c.post = c.post_logits.unaryExpr([&](const S& z) { return S(cfg.post_scale * sigmoid(z)); });
  if constexpr (std::is_same_v<S, Ball>)  // certification: the centred enclosure (same values, tighter)
    c.res = mhc_sinkhorn_centred(c.res_logits, cfg.t_max, cfg.res_eps_add, cfg.res_eps_den);
  else
    c.res = mhc_sinkhorn<S>(c.res_logits, cfg.t_max, cfg.res_eps_add, cfg.res_eps_den);
}

/// The coefficients of layer `p` from the normalized streams xn = x'
/// (no validation: see Mhc).
template <class S>
MhcCoefficients<S> mhc_coefficients_of(const MhcConfig<S>& cfg, const MhcLayer<S>& p, const Vec<S>& xn) {
  const int n = cfg.n;
  MhcCoefficients<S> c;
  c.xn = xn;
  transposed_products({&p.phi_pre, &p.phi_post, &p.phi_res}, xn, {&c.proj_pre, &c.proj_post, &c.proj_res});
  c.pre_logits = p.a_pre * c.proj_pre + p.b_pre;
  c.post_logits = p.a_post * c.proj_post + p.b_post;
  c.res_logits.resize(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) c.res_logits(i, j) = p.a_res * c.proj_res(i * n + j) + p.b_res(i, j);
  mhc_coefficients_from_logits<S>(cfg, c);
  return c;
}

/// The coefficients of layer `p` for streams X: x' = RMSNorm(vec(X)) over all nC values.
template <class S>
MhcCoefficients<S> mhc_coefficients(const MhcConfig<S>& cfg, const MhcLayer<S>& p, const Mat<S>& X) {
  S rms;
  const Vec<S> xn = rms_norm<S>(mhc_vec<S>(X), cfg.rms_eps, Vec<S>(), &rms);
  MhcCoefficients<S> c = mhc_coefficients_of<S>(cfg, p, xn);
  c.rms = rms;
  return c;
}

/// sum_j w[j] X_j, in stream order.
template <class S>
Vec<S> mhc_mix(const Mat<S>& X, const Vec<S>& w) {
  Vec<S> h = w(0) * X.row(0).transpose();
  for (Eigen::Index j = 1; j < X.rows(); ++j) h += w(j) * X.row(j).transpose();
  return h;
}

/// X_i <- sum_j H_res[i,j] X_j + H_post[i] v, entry by entry in stream order.
template <class S>
Mat<S> mhc_update(const Mat<S>& X, const MhcCoefficients<S>& k, const Vec<S>& v) {
  const Eigen::Index n = X.rows(), C = X.cols();
  Mat<S> Y(n, C);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index c = 0; c < C; ++c) {
      S acc = k.res(i, 0) * X(0, c);
      for (Eigen::Index j = 1; j < n; ++j) acc += k.res(i, j) * X(j, c);
      Y(i, c) = acc + k.post(i) * v(c);
    }
  return Y;
}

/// DeepSeek-V4 boundary. Its comb matrix A (and the n x n block of its base
/// vector) is stored as A[in, out] = H_res[out, in]: the transpose.
template <class S>
Mat<S> mhc_to_storage(const Mat<S>& H_res) {
  return H_res.transpose();
}
template <class S>
Mat<S> mhc_from_storage(const Mat<S>& A) {
  return A.transpose();
}
/// The same transposition on the n^2 logit columns of phi_res (an involution):
/// DeepSeek's column in*n + out is the paper's column out*n + in.
template <class S>
Mat<S> mhc_res_columns_transpose(const Mat<S>& phi_res, int n) {
  if (n <= 0 || phi_res.cols() != static_cast<Eigen::Index>(n) * n)
    throw std::invalid_argument("mhc: phi_res: needs n^2 columns");
  Mat<S> out(phi_res.rows(), phi_res.cols());
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) out.col(a * n + b) = phi_res.col(b * n + a);
  return out;
}

template <class S>
class Mhc {
 public:
  using Scalar = S;
  struct State {
    Mat<S> X;  // n x C, row j = stream j
    // The coefficients computed by the last read, for layer `layer` (-1: none).
    // A read computes them from X, which it does not change; the following
    // write of that layer must use the same numbers, so they travel here.
    mutable int layer = -1;
    mutable MhcCoefficients<S> coef;
    template <class F>
    void stored(F&& f) { f(X); }  // framework.hpp: the residual streams (coefficients stay float32)
  };

  explicit Mhc(MhcConfig<S> cfg) : cfg_(std::move(cfg)) { validate(); }

  const MhcConfig<S>& config() const { return cfg_; }

  State init(const Vec<S>& e) const {
    if (e.size() != cfg_.C) fail("embedding", "width " + std::to_string(e.size()) + " != C = " + std::to_string(cfg_.C));
    State s;
    s.X.resize(cfg_.n, cfg_.C);
    for (int j = 0; j < cfg_.n; ++j)
      s.X.row(j) = cfg_.init_weights.size() == 0 ? Vec<S>(e).transpose() : Vec<S>(cfg_.init_weights(j) * e).transpose();
    return s;
  }

  int layer_count() const { return cfg_.layer_source ? cfg_.layer_count : static_cast<int>(cfg_.layers.size()); }

  /// Layer l's parameters: from cfg_.layers, or made by cfg_.layer_source and
  /// checked as validate() checks cfg_.layers (the last one made is kept: an
  /// Mhc with a layer_source is used by one thread at a time).
  const MhcLayer<S>& layer(int l) const {
    if (l < 0 || l >= layer_count())
      fail("layers", "no parameters for layer " + std::to_string(l) + " (have " + std::to_string(layer_count()) + ")");
    if (!cfg_.layer_source) return cfg_.layers[l];
    if (!cached_ || cached_->first != l) {
      cached_.reset();
      MhcLayer<S> p = cfg_.layer_source(l);
      validate_layer(p, l);
      cached_.emplace(l, std::move(p));
    }
    return cached_->second;
  }

  /// The coefficients of layer l for streams X.
  MhcCoefficients<S> coefficients(const Mat<S>& X, int l) const { return mhc_coefficients<S>(cfg_, layer(l), X); }

  /// h_l = sum_j H_pre[j] X_j; keeps the coefficients for write(l).
  Vec<S> read(const State& s, int l) const {
    s.coef = coefficients(s.X, l);
    s.coef.xn = Vec<S>();  // write needs only the mixes; the state stays n C, not 2 n C
    s.layer = l;
    return mhc_mix<S>(s.X, s.coef.pre);
  }

  /// X_i <- sum_j H_res[i,j] X_j + H_post[i] v with the coefficients of read(l).
  void write(State& s, int l, const Vec<S>& v) const {
    if (s.layer != l)
      fail("write", "layer " + std::to_string(l) + " was not read first (its coefficients come from the read)");
    if (v.size() != cfg_.C)
      fail("v", "layer " + std::to_string(l) + " output has width " + std::to_string(v.size()) + " != C = " +
                    std::to_string(cfg_.C));
    s.X = mhc_update<S>(s.X, s.coef, v);
    s.layer = -1;
  }

  /// The head's weights for streams X: sigmoid(a (x' phi) + b) + head_eps.
  Vec<S> head_weights(const Mat<S>& X) const {
    const Vec<S> xn = rms_norm<S>(mhc_vec<S>(X), cfg_.rms_eps);
    const Vec<S> z = cfg_.head.a * Vec<S>(cfg_.head.phi.transpose() * xn) + cfg_.head.b;
    return z.unaryExpr([&](const S& t) { return S(sigmoid(t) + cfg_.head_eps); });
  }

  /// sum_j X_j, or the learned head sum_j pre_j X_j.
  Vec<S> final(const State& s) const {
    if (cfg_.reduce == MhcReduce::head) return mhc_mix<S>(s.X, head_weights(s.X));
    return mhc_mix<S>(s.X, Vec<S>::Ones(cfg_.n));
  }

 private:
  [[noreturn]] static void fail(const std::string& field, const std::string& what) {
    throw ParameterError("mhc", field, what);
  }

  template <class M>
  static void check(const M& m, Eigen::Index rows, Eigen::Index cols, const std::string& field, const std::string& at) {
    if (m.rows() != rows || m.cols() != cols)
      fail(field, "shape " + std::to_string(m.rows()) + "x" + std::to_string(m.cols()) + ", expected " +
                      std::to_string(rows) + "x" + std::to_string(cols) + at);
    for (Eigen::Index i = 0; i < m.size(); ++i)
      if (!std::isfinite(to_double(m(i)))) fail(field, "entry " + std::to_string(i) + " is not finite" + at);
  }
  static void check_scalar(const S& x, const std::string& field, const std::string& at) {
    if (!std::isfinite(to_double(x))) fail(field, "is not finite" + at);
  }
  static void check_eps(const S& x, const std::string& field) {
    const double e = to_double(x);
    if (!(std::isfinite(e) && e >= 0)) fail(field, "must be finite and >= 0, got " + show(e));
  }

  void validate() const {
    const int n = cfg_.n, C = cfg_.C;
    if (n <= 0) fail("n", "must be > 0, got " + std::to_string(n));
    if (C <= 0) fail("C", "must be > 0, got " + std::to_string(C));
    if (cfg_.t_max < 1) fail("t_max", "must be >= 1, got " + std::to_string(cfg_.t_max));
    check_eps(cfg_.rms_eps, "rms_eps");
    check_eps(cfg_.pre_eps, "pre_eps");
    check_eps(cfg_.res_eps_add, "res_eps_add");
    check_eps(cfg_.res_eps_den, "res_eps_den");
    check_eps(cfg_.head_eps, "head_eps");
    check_scalar(cfg_.pre_scale, "pre_scale", "");
    check_scalar(cfg_.post_scale, "post_scale", "");
    if (cfg_.init_weights.size() != 0) check(cfg_.init_weights, n, 1, "init_weights", "");
    const Eigen::Index nC = static_cast<Eigen::Index>(n) * C;
    if (cfg_.reduce == MhcReduce::head) {
      check(cfg_.head.phi, nC, n, "head.phi", "");
      check(cfg_.head.b, n, 1, "head.b", "");
      check_scalar(cfg_.head.a, "head.a", "");
    }
    if (cfg_.layer_source && !cfg_.layers.empty()) fail("layers", "give layers or a layer_source, not both");
    for (int l = 0; l < static_cast<int>(cfg_.layers.size()); ++l) validate_layer(cfg_.layers[l], l);
  }

  void validate_layer(const MhcLayer<S>& p, int l) const {
    const int n = cfg_.n;
    const Eigen::Index nC = static_cast<Eigen::Index>(n) * cfg_.C;
    {
      const std::string at = " at layer " + std::to_string(l);
      check(p.phi_pre, nC, n, "phi_pre", at);
      check(p.phi_post, nC, n, "phi_post", at);
      check(p.phi_res, nC, static_cast<Eigen::Index>(n) * n, "phi_res", at);
      check(p.b_pre, n, 1, "b_pre", at);
      check(p.b_post, n, 1, "b_post", at);
      check(p.b_res, n, n, "b_res", at);
      check_scalar(p.a_pre, "a_pre", at);
      check_scalar(p.a_post, "a_post", at);
      check_scalar(p.a_res, "a_res", at);
    }
  }

  MhcConfig<S> cfg_;
  mutable std::optional<std::pair<int, MhcLayer<S>>> cached_;
};

/// Kernel-level entry point: per-layer outputs v[l] given; the whole trace.
template <class S>
Trace<S, typename Mhc<S>::State> mhc_kernel(const MhcConfig<S>& cfg, const Vec<S>& e, const std::vector<Vec<S>>& v) {
  Mhc<S> m(cfg);
  return forward(m, e, static_cast<int>(v.size()), GivenOutputs<S>{&v});
}

}  // namespace dmref
