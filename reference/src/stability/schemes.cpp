// Stability sweeps of PreLN (growth of the residual sum), Attention Residuals
// (softmax over depth) and mHC (Sinkhorn and coefficients in low precision,
// exp overflow, streams stored in 16 bits over depth), each against the same
// scheme at 257 bits (dmref/stability.hpp).
#include "dmref/attnres.hpp"
#include "dmref/lowp.hpp"
#include "dmref/mhc.hpp"
#include "dmref/preln.hpp"
#include "dmref/scalar.hpp"  // mp77
#include "dmref/stability.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dmref::stability {
namespace {

using Ref = mp77;

template <class T>
Eigen::VectorXd to_d(const Vec<T>& x) {
  return x.unaryExpr([](const T& t) { return to_double(t); });
}
template <class T>
Eigen::VectorXd to_d(const Mat<T>& x) {
  Eigen::VectorXd r(x.size());
  for (Eigen::Index i = 0; i < x.size(); ++i) r(i) = to_double(x(i));
  return r;
}

std::string num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}

Vec<double> gauss_grid(Normal& N, int n, double mean_scale = 0, const Vec<double>* mean = nullptr) {
  Vec<double> x(n);
  for (int i = 0; i < n; ++i) x(i) = on_grid(N() + (mean ? mean_scale * (*mean)(i) : 0.0));
  return x;
}

// ------------------------------------------------------------------ PreLN
struct Values {
  Vec<double> e;
  std::vector<Vec<double>> v;
};

/// random: v_l ~ N(0, I) (||x|| grows like sqrt(l)); correlated: v_l = mu +
/// N(0, I) with one fixed mu ~ N(0, I) (||x|| grows like l).
Values make_values(int d, int L, bool correlated, std::uint64_t seed) {
  Normal N(seed);
  Values p;
  Vec<double> mu(d);
  for (int i = 0; i < d; ++i) mu(i) = N();
  p.e = gauss_grid(N, d);
  for (int l = 0; l < L; ++l) p.v.push_back(gauss_grid(N, d, 1.0, correlated ? &mu : nullptr));
  return p;
}

template <class T>
class PreLNStepper : public Stepper {
 public:
  PreLNStepper(const Values& p, Storage store) : p_(p), store_(store) { st_ = m_.init(convert<T>(p.e)); }
  void step(int l) override {
    m_.write(st_, l, convert<T>(p_.v[l]));
    if (store_.f) store_in(*store_.f, st_.x);
  }
  void snap(Snap& s, bool) override {
    s.read = to_d<T>(m_.read(st_, 0));
    s.finite = s.read.allFinite();
  }

 private:
  const Values& p_;
  PreLN<T> m_;
  typename PreLN<T>::State st_;
  Storage store_;
};

std::vector<Result> run_preln(const Sizes& z, bool correlated, std::uint64_t seed) {
  const Values p = make_values(z.preln_d, z.preln_layers, correlated, seed);
  PreLNStepper<Ref> ref(p, Storage{});
  Result meta;
  meta.scheme = "preln";
  meta.sweep = "values";
  meta.form = "preln";
  meta.metrics = {"err_readout", "norm_x"};
  meta.config = {{"values", correlated ? "correlated" : "random"}};
  auto cands = candidates(meta, {Dtype::fp64, Dtype::fp32, Dtype::bf16, Dtype::fp16},
                          [&](Dtype d) { return make_stepper<PreLNStepper>(d, p); });
  std::vector<Result> out;
  lockstep(ref, cands, z.preln_layers, [](const Snap& a, const Snap& r, bool) {
    return std::vector<double>{rel_err(a.read, r.read), a.read.norm()};
  }, out);
  return out;
}

// ------------------------------------------------------------------ AttnRes
struct AttnDraw {
  int d = 0, L = 0, S = 0;
  bool block = false;
  double w_scale = 0;
  Values src;
  std::vector<Vec<double>> w;  // L + 1 pseudo-queries
};

/// w_l ~ N(0, (w_scale^2 / d) I), so the logits w^T RMSNorm(v) have standard
/// deviation about w_scale (0: the paper's init, a uniform mean over depth).
AttnDraw draw_attn(const Sizes& z, bool block, double w_scale, std::uint64_t seed) {
  AttnDraw p;
  p.d = z.attnres_d;
  p.block = block;
  p.L = block ? z.attnres_block_layers : z.attnres_full_layers;
  p.S = block ? z.attnres_block_size : 0;
  p.w_scale = w_scale;
  p.src = make_values(p.d, p.L, false, seed);
  Normal N(seed ^ 0x5eed);
  for (int l = 0; l <= p.L; ++l) {
    Vec<double> w(p.d);
    for (int i = 0; i < p.d; ++i) w(i) = on_f32(w_scale / std::sqrt(double(p.d)) * N());
    p.w.push_back(w);
  }
  return p;
}

template <class T>
AttnResConfig<T> attn_config(const AttnDraw& p) {
  AttnResConfig<T> c;
  c.d = p.d;
  c.layers = p.L;
  c.variant = p.block ? AttnResVariant::block : AttnResVariant::full;
  c.block_size = p.block ? p.S : 0;
  c.eps = T(on_f32(1e-6));  // the float32 constant, rounded once to T (S(1)/S(1e6) overflows float16)
  for (const auto& w : p.w) c.w.push_back(convert<T>(w));
  return c;
}

template <class T>
class AttnStepper : public Stepper {
 public:
  AttnStepper(const AttnDraw& p, Storage store) : p_(p), m_(attn_config<T>(p)), store_(store) {
    st_ = m_.init(convert<T>(p.src.e));
    keep();
  }
  void step(int l) override {
    m_.write(st_, l, convert<T>(p_.src.v[l]));
    keep();
    l_ = l;
  }
  void snap(Snap& s, bool) override {
    if (store_.has(kStoreStats))
      s.read = to_d<T>(two_phase(l_ + 1));
    else
      s.read = to_d<T>(l_ + 1 < p_.L ? m_.read(st_, l_ + 1) : m_.final(st_));
    s.finite = s.read.allFinite();
  }

 private:
  /// bf16:f32/S: readout l (l = L: the final one) by the AttnRes paper's
  /// two-phase algorithm in T (float) arithmetic, with what phase 1 hands to
  /// phase 2 stored in bfloat16: over the cached sources 0..k-1 the running
  /// max m, the denominator sum exp(z_i - m) and the normalised output
  /// sum exp(z_i - m) s_i / denominator (as a flash-style kernel stores it);
  /// phase 2 merges the newest source k online. The sources themselves stay
  /// in T: only the statistics are 16-bit.
  Vec<T> two_phase(int l) const {
    using std::exp;
    const auto& c = m_.config();
    const std::vector<Vec<T>> src = m_.sources(st_);
    const Vec<T> z = attnres_logits<T>(src, c.w[l], c.g[l], c.eps);
    const Eigen::Index k = z.size() - 1;
    if (k == 0) return src[0];
    T m = z(0);
    for (Eigen::Index i = 1; i < k; ++i) m = z(i) > m ? z(i) : m;
    T den(0);
    Vec<T> o = Vec<T>::Zero(c.d);
    for (Eigen::Index i = 0; i < k; ++i) {
      const T e = exp(T(z(i) - m));
      den += e;
      o += e * src[std::size_t(i)];
    }
    o /= den;
    Vec<T> stats(2);
    stats << m, den;
    store_in(*store_.f, stats);
    store_in(*store_.f, o);
    m = stats(0), den = stats(1);
    const T m2 = z(k) > m ? z(k) : m;
    const T a = den * T(exp(T(m - m2))), b = exp(T(z(k) - m2));
    return (a * o + b * src[std::size_t(k)]) / T(a + b);
  }
  void keep() {  // mixed precision: sources and the open block's partial sum stored in 16 bits
    if (!store_.has(kStoreStream)) return;
    for (auto& x : st_.sources) store_in(*store_.f, x);
    if (st_.partial.size()) store_in(*store_.f, st_.partial);
  }
  const AttnDraw& p_;
  AttentionResiduals<T> m_;
  typename AttentionResiduals<T>::State st_;
  Storage store_;
  int l_ = -1;
};

std::vector<Result> run_attn(const Sizes& z, bool block, double w_scale, std::uint64_t seed) {
  const AttnDraw p = draw_attn(z, block, w_scale, seed);
  AttnStepper<Ref> ref(p, Storage{});
  Result meta;
  meta.scheme = "attnres";
  meta.sweep = block ? "block" : "full";
  meta.form = block ? "block S=" + std::to_string(p.S) : "full";
  meta.metrics = {"err_readout"};
  meta.config = {{"w", num(w_scale)}, {"variant", block ? "block" : "full"}};
  std::vector<Dtype> dt{Dtype::fp64, Dtype::fp32, Dtype::bf16, Dtype::fp16};
  if (block) dt.push_back(Dtype::bf16_store);  // full AttnRes stores only the (16-bit) inputs: same as float32
  dt.push_back(Dtype::bf16_S);
  auto cands = candidates(meta, dt, [&](Dtype d) { return make_stepper<AttnStepper>(d, p); });
  std::vector<Result> out;
  lockstep(ref, cands, p.L, [](const Snap& a, const Snap& r, bool) { return std::vector<double>{rel_err(a.read, r.read)}; },
           out);
  return out;
}

// ------------------------------------------------------------------ mHC
struct MhcDraw {
  int n = 0, C = 0, L = 0, bank = 0;
  double scale = 1;
  MhcPreset preset = MhcPreset::paper;
  std::vector<MhcLayer<double>> layers;  // `bank` parameter sets; layer l uses l mod bank
  Values src;
};

/// As tests/test_mhc.cpp: phi ~ N(0, 1/(nC)) (so x' phi ~ N(0, 1)), a_pre =
/// a_post = 1, b_pre, b_post ~ N(0, 1/4), and the residual logits spread by
/// `scale`: a_res = scale, b_res ~ N(0, scale^2 / 4).
MhcDraw draw_mhc(const Sizes& z, double scale, MhcPreset preset, std::uint64_t seed) {
  MhcDraw p;
  p.n = z.mhc_n, p.C = z.mhc_C, p.L = z.mhc_layers, p.bank = z.mhc_bank, p.scale = scale, p.preset = preset;
  Normal N(seed);
  const int nC = p.n * p.C;
  auto rnd = [&](int r, int c, double sd) {
    Mat<double> m(r, c);
    for (Eigen::Index i = 0; i < m.size(); ++i) m(i) = on_f32(sd * N());
    return m;
  };
  for (int b = 0; b < p.bank; ++b) {
    MhcLayer<double> q;
    const double sd = 1 / std::sqrt(double(nC));
    q.phi_pre = rnd(nC, p.n, sd);
    q.phi_post = rnd(nC, p.n, sd);
    q.phi_res = rnd(nC, p.n * p.n, sd);
    q.a_pre = 1;
    q.a_post = 1;
    q.a_res = on_f32(scale);
    q.b_pre = rnd(p.n, 1, 0.5);
    q.b_post = rnd(p.n, 1, 0.5);
    q.b_res = rnd(p.n, p.n, 0.5 * scale);
    p.layers.push_back(q);
  }
  p.src = make_values(p.C, p.L, false, seed ^ 0xabc);
  return p;
}

template <class T>
MhcConfig<T> mhc_cfg(const MhcDraw& p) {
  MhcConfig<T> c = mhc_config<T>(p.preset, p.n, p.C);
  // The preset's constants as float32 numbers rounded once to T (as a kernel
  // stores them), so that every run, the reference included, has the same ones.
  if (p.preset == MhcPreset::deepseek_v4) {
    const T eps(on_f32(1e-6));
    c.rms_eps = c.pre_eps = c.res_eps_add = c.res_eps_den = c.head_eps = eps;
  } else {
    c.rms_eps = T(on_f32(1e-20));
  }
  for (const auto& q : p.layers) {
    MhcLayer<T> r;
    r.phi_pre = convert<T>(q.phi_pre);
    r.phi_post = convert<T>(q.phi_post);
    r.phi_res = convert<T>(q.phi_res);
    r.a_pre = T(q.a_pre);
    r.a_post = T(q.a_post);
    r.a_res = T(q.a_res);
    r.b_pre = convert<T>(q.b_pre);
    r.b_post = convert<T>(q.b_post);
    r.b_res = convert<T>(q.b_res);
    c.layers.push_back(r);
  }
  return c;
}

template <class T>
class MhcStepper : public Stepper {
 public:
  MhcStepper(const MhcDraw& p, Storage store) : p_(p), m_(mhc_cfg<T>(p)), store_(store) {
    st_ = m_.init(convert<T>(p.src.e));
    keep();
    m_.read(st_, 0);
    keep_logits();
    keep_coefficients();
    track();
  }
  void step(int l) override {
    // read(l) ran before (constructor or the previous snapshot): its coefficients are in st_.
    m_.write(st_, l % p_.bank, convert<T>(p_.src.v[l]));
    keep();
    if (l + 1 < p_.L) {
      h_ = m_.read(st_, (l + 1) % p_.bank);
      // the read again with the stored H_pre, or with the one from the stored logits
      if (keep_logits() | keep_coefficients()) h_ = mhc_mix<T>(st_.X, st_.coef.pre);
      track();
    } else {
      h_ = m_.final(st_);
    }
  }
  /// The largest |logit| (pre, post, res) of any layer so far.
  double max_logit() const { return max_logit_; }
  void snap(Snap& s, bool) override {
    s.read = to_d<T>(h_);
    s.state = to_d<T>(st_.X);
    s.mem = to_d<T>(st_.coef.res);
    s.finite = s.state.allFinite() && s.mem.allFinite();
  }

 private:
  void keep() {
    if (store_.has(kStoreStream)) store_in(*store_.f, st_.X);
  }
  /// bf16:f32/S: only the logits (pre, post, res) stored in bfloat16, as a
  /// projection kernel hands them to the sigmoid / Sinkhorn kernel; H_pre,
  /// H_post and H_res are then computed from them in float. Returns whether
  /// it stored.
  bool keep_logits() {
    if (!store_.has(kStoreStats)) return false;
    store_in(*store_.f, st_.coef.pre_logits);
    store_in(*store_.f, st_.coef.post_logits);
    store_in(*store_.f, st_.coef.res_logits);
    mhc_coefficients_from_logits<T>(m_.config(), st_.coef);
    return true;
  }
  /// bf16:f32/M: only the coefficients H_pre, H_post, H_res (the Sinkhorn
  /// output) stored in bfloat16, as a coefficient kernel hands them to the
  /// apply kernel; the streams stay float32. (The other 16-bit modes store
  /// the streams only: the coefficients are not a state between layers, so
  /// bf16:f32's kStoreAll, which has the kStoreMemory bit, does not store
  /// them; until 2026-12-03 it did, and the mHC rows of bf16:f32 and f16:f32
  /// stored both.) Returns whether it stored (then the layer input is read
  /// again with the stored H_pre).
  bool keep_coefficients() {
    if (store_.f == nullptr || store_.what != kStoreMemory) return false;
    store_in(*store_.f, st_.coef.pre);
    store_in(*store_.f, st_.coef.post);
    store_in(*store_.f, st_.coef.res);
    return true;
  }
  void track() {
    const auto& c = st_.coef;
    for (Eigen::Index i = 0; i < c.res_logits.size(); ++i) max_logit_ = std::max(max_logit_, std::fabs(to_double(c.res_logits(i))));
    for (Eigen::Index i = 0; i < c.pre_logits.size(); ++i) max_logit_ = std::max(max_logit_, std::fabs(to_double(c.pre_logits(i))));
    for (Eigen::Index i = 0; i < c.post_logits.size(); ++i) max_logit_ = std::max(max_logit_, std::fabs(to_double(c.post_logits(i))));
  }
  double max_logit_ = 0;
  const MhcDraw& p_;
  Mhc<T> m_;
  typename Mhc<T>::State st_;
  Storage store_;
  Vec<T> h_;
};

std::vector<Result> run_mhc(const Sizes& z, double scale, MhcPreset preset, std::uint64_t seed) {
  const MhcDraw p = draw_mhc(z, scale, preset, seed);
  MhcStepper<Ref> ref(p, Storage{});
  Result meta;
  meta.scheme = "mhc";
  meta.sweep = "logits";
  meta.form = "mhc";
  meta.metrics = {"err_readout", "err_X", "err_Hres"};
  meta.config = {{"logit_scale", num(scale)}, {"preset", preset == MhcPreset::paper ? "paper" : "deepseek-v4"}};
  auto cands = candidates(meta, {Dtype::fp64, Dtype::fp32, Dtype::bf16, Dtype::fp16, Dtype::bf16_store, Dtype::fp16_store,
                                 Dtype::bf16_M, Dtype::bf16_S},
                          [&](Dtype d) { return make_stepper<MhcStepper>(d, p); });
  std::vector<Result> out;
  lockstep(ref, cands, p.L, [](const Snap& a, const Snap& r, bool) {
    return std::vector<double>{rel_err(a.read, r.read), rel_err(a.state, r.state), rel_err(a.mem, r.mem)};
  }, out);
  for (auto& r : out) r.config["max_logit"] = num(ref.max_logit());
  return out;
}

}  // namespace

std::vector<Task> preln_tasks(const Sizes& z) {
  std::vector<Task> t;
  seeded(t, z, 0x9e0001, [z](std::uint64_t s) { return run_preln(z, false, s); });
  seeded(t, z, 0x9e0002, [z](std::uint64_t s) { return run_preln(z, true, s); });
  return t;
}

std::vector<Task> attnres_tasks(const Sizes& z) {
  std::vector<Task> t;
  std::uint64_t seed = 0xa70000;
  for (bool block : {false, true})
    for (double w : {0.0, 3.0}) seeded(t, z, ++seed, [z, block, w](std::uint64_t s) { return run_attn(z, block, w, s); });
  return t;
}

std::vector<Task> mhc_tasks(const Sizes& z) {
  std::vector<Task> t;
  std::uint64_t seed = 0x3c0000;
  for (double sc : {1.0, 4.0, 16.0, 32.0, 64.0})
    seeded(t, z, ++seed, [z, sc](std::uint64_t s) { return run_mhc(z, sc, MhcPreset::paper, s); });
  for (double sc : {4.0, 32.0})
    seeded(t, z, ++seed, [z, sc](std::uint64_t s) { return run_mhc(z, sc, MhcPreset::deepseek_v4, s); });
  return t;
}

}  // namespace dmref::stability

// ------------------------------------------------------------------ Sinkhorn (mHC's H_res)
namespace dmref::stability {
namespace {

enum class SkVariant { paper, eps, log_domain };
const char* sk_name(SkVariant v) {
  return v == SkVariant::paper ? "paper" : v == SkVariant::eps ? "eps=1e-6" : "log-domain";
}

/// A batch of `count` n x n logit matrices with entries N(0, scale^2 / 4) (as
/// make_mhc's b_res), float32 numbers.
std::vector<Mat<double>> sk_logits(int n, int count, double scale, std::uint64_t seed) {
  Normal N(seed);
  std::vector<Mat<double>> b;
  for (int c = 0; c < count; ++c) {
    Mat<double> m(n, n);
    for (Eigen::Index i = 0; i < m.size(); ++i) m(i) = on_f32(0.5 * scale * N());
    b.push_back(m);
  }
  return b;
}

/// Sinkhorn in the log domain: l <- l - logsumexp over each column, then over
/// each row (max subtracted: no overflow), t rounds, exp at the end. Equal in
/// exact arithmetic to mhc_sinkhorn with eps = 0.
template <class T>
Mat<T> sinkhorn_log(Mat<T> l, int t) {
  using std::exp;
  using std::log;
  const Eigen::Index n = l.rows();
  auto lse = [&](auto get) {
    T m = get(0);
    for (Eigen::Index i = 1; i < n; ++i) m = get(i) < m ? m : get(i);
    T s(0);
    for (Eigen::Index i = 0; i < n; ++i) s += exp(get(i) - m);
    return m + log(s);
  };
  for (int r = 0; r < t; ++r) {
    for (Eigen::Index j = 0; j < n; ++j) {
      const T c = lse([&](Eigen::Index i) { return l(i, j); });
      for (Eigen::Index i = 0; i < n; ++i) l(i, j) = l(i, j) - c;
    }
    for (Eigen::Index i = 0; i < n; ++i) {
      const T c = lse([&](Eigen::Index j) { return l(i, j); });
      for (Eigen::Index j = 0; j < n; ++j) l(i, j) = l(i, j) - c;
    }
  }
  return l.unaryExpr([](const T& x) { return T(exp(x)); });
}

template <class T>
Mat<T> sinkhorn_of(const Mat<double>& logits, int t, SkVariant v, const FloatFormat* logit_store) {
  Mat<T> l = convert<T>(logits);
  if (logit_store) store_in(*logit_store, l);
  if (v == SkVariant::log_domain) return sinkhorn_log<T>(l, t);
  const T e = v == SkVariant::eps ? T(on_f32(1e-6)) : T(0);
  return mhc_sinkhorn<T>(l, t, e, e);
}

/// Largest |row sum - 1| and |column sum - 1| of M, in double: the distance from doubly stochastic.
double ds_residual(const Eigen::MatrixXd& M) {
  if (!M.allFinite()) return std::numeric_limits<double>::infinity();
  return std::max((M.rowwise().sum().array() - 1).abs().maxCoeff(), (M.colwise().sum().transpose().array() - 1).abs().maxCoeff());
}

struct SkProblem {
  int n = 4, rounds = 50, layers = 0;
  SkVariant v = SkVariant::paper;
  std::vector<Mat<double>> logits;
};

/// sweep "rounds": step l runs l + 1 Sinkhorn rounds on every matrix of the batch
/// (read: the matrices; mem: the residual of each). "bf16:f32" stores the
/// logits in bfloat16 and computes in float32.
template <class T>
class SkRoundsStepper : public Stepper {
 public:
  SkRoundsStepper(const SkProblem& p, Storage store) : p_(p), store_(store) {}
  void step(int l) override { t_ = l + 1; }
  void snap(Snap& s, bool) override {
    const Eigen::Index n = p_.n;
    s.read.resize(static_cast<Eigen::Index>(p_.logits.size()) * n * n);
    s.mem.resize(static_cast<Eigen::Index>(p_.logits.size()));
    for (std::size_t b = 0; b < p_.logits.size(); ++b) {
      const Eigen::VectorXd m = to_d<T>(sinkhorn_of<T>(p_.logits[b], t_, p_.v, store_.f));  // column-major
      const Eigen::MatrixXd M = Eigen::Map<const Eigen::MatrixXd>(m.data(), n, n);
      s.read.segment(static_cast<Eigen::Index>(b) * n * n, n * n) = m;
      s.mem(static_cast<Eigen::Index>(b)) = ds_residual(M);
    }
    s.finite = s.read.allFinite();
  }

 private:
  const SkProblem& p_;
  Storage store_;
  int t_ = 0;
};

/// sweep "composite": layer l maps with H_l = Sinkhorn(logits of l mod bank, 20
/// rounds) and the composite C_l = H_l C_{l-1} (C_{-1} = I) is kept in T (stored
/// in the 16-bit format for bf16:f32); read: C; mem: its gain, the largest
/// absolute row sum (1 for a doubly stochastic product; the mHC paper's measure).
template <class T>
class SkCompositeStepper : public Stepper {
 public:
  SkCompositeStepper(const SkProblem& p, Storage store) : p_(p), store_(store), C_(Mat<T>::Identity(p.n, p.n)) {}
  void step(int l) override {
    C_ = Mat<T>(sinkhorn_of<T>(p_.logits[l % p_.logits.size()], 20, p_.v, store_.f) * C_);
    if (store_.f) store_in(*store_.f, C_);
  }
  void snap(Snap& s, bool) override {
    s.read = to_d<T>(C_);  // column-major
    const Eigen::MatrixXd C = Eigen::Map<const Eigen::MatrixXd>(s.read.data(), p_.n, p_.n);
    s.mem = Eigen::VectorXd::Constant(1, C.allFinite() ? C.cwiseAbs().rowwise().sum().maxCoeff()
                                                       : std::numeric_limits<double>::infinity());
    s.finite = C.allFinite();
  }

 private:
  const SkProblem& p_;
  Storage store_;
  Mat<T> C_;
};

std::vector<Result> run_sinkhorn(bool composite, SkVariant v, double scale, int layers, std::uint64_t seed) {
  SkProblem p;
  p.v = v;
  p.layers = composite ? layers : 50;
  p.logits = sk_logits(p.n, 16, scale, seed);
  Result meta;
  meta.scheme = "sinkhorn";
  meta.sweep = composite ? "composite" : "rounds";
  meta.form = sk_name(v);
  // One metric list for both sweeps (they share layers_sinkhorn.csv): residual for "rounds", gain for "composite".
  meta.metrics = {"err_readout", "residual", "gain"};
  meta.config = {{"logit_scale", num(scale)}};
  const std::vector<Dtype> dts{Dtype::fp64, Dtype::fp32, Dtype::bf16, Dtype::fp16, Dtype::bf16_store};
  std::vector<Result> out;
  const MetricFn metric = [composite](const Snap& a, const Snap& r, bool) {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    if (composite) return std::vector<double>{rel_err(a.read, r.read), nan, a.mem(0)};
    return std::vector<double>{rel_err(a.read, r.read), a.mem.allFinite() ? a.mem.maxCoeff() : inf, nan};
  };
  if (composite) {
    SkCompositeStepper<Ref> ref(p, Storage{});
    auto cands = candidates(meta, dts, [&](Dtype d) { return make_stepper<SkCompositeStepper>(d, p); });
    lockstep(ref, cands, p.layers, metric, out);
  } else {
    SkRoundsStepper<Ref> ref(p, Storage{});
    auto cands = candidates(meta, dts, [&](Dtype d) { return make_stepper<SkRoundsStepper>(d, p); });
    lockstep(ref, cands, p.layers, metric, out);
  }
  return out;
}

}  // namespace

std::vector<Task> sinkhorn_tasks(const Sizes& z) {
  std::vector<Task> t;
  std::uint64_t seed = 0x5c0000;
  for (bool composite : {false, true})
    for (SkVariant v : {SkVariant::paper, SkVariant::eps, SkVariant::log_domain})
      for (double sc : {1.0, 4.0, 16.0, 32.0})
        seeded(t, z, ++seed, [composite, v, sc, L = z.mhc_layers](std::uint64_t s) { return run_sinkhorn(composite, v, sc, L, s); });
  return t;
}

}  // namespace dmref::stability
