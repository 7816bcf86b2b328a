// The forward mutant catalogue: see mutants.hpp and docs/fixtures.md
// ("Mutation score"). Compiled twice: at F = float (the candidates judged on
// the forward fixtures) and, from catalogue_f64.cpp, at F = double (the
// forward whose central differences give the mutant's gradient, fd.hpp).
#include "mutants.hpp"

#include <cmath>

#ifndef DMREF_MUTANT_F
#define DMREF_MUTANT_F float
#endif

namespace dmref::mutants {

using namespace dmref::conf;

namespace {

using F = DMREF_MUTANT_F;

/// A copy of the problem with one config value changed (a legitimate option
/// set to the wrong value).
Problem with(const Problem& p, const std::string& key, const json& value) {
  Problem q = p;
  q.config[key] = value;
  return q;
}

// ======================================================================= PreLN
// The pre-norm of the model's layer function F(h) = W2 tanh(W1 RMSNorm(h)):
// the reference takes h / sqrt(mean(h^2) + eps); this one h / (sqrt(mean(h^2)) + eps).
Outputs<F> preln_eps_outside(const Problem& p) {
  const Schema sch = schema_of(p);
  const Dims D = dims(sch);
  if (!D.model) return evaluate<F>(p);  // no norm at kernel level: the mutation does not apply
  const TanhMlpStack<F> stack = layer_stack<F>(p, D).all_layers();
  const F eps = F(1) / F(1000000);
  auto layer = [&](int l, const Vec<F>& h) {
    const F ms = h.squaredNorm() / F(h.size());
    const Vec<F> z = h / (std::sqrt(ms) + eps);
    const auto& L = stack.layers[l];
    return Vec<F>(L.W2 * Vec<F>((L.W1 * z).unaryExpr([](F t) { return std::tanh(t); })));
  };
  Outputs<F> o;
  const auto& E = p.tensor("input.e", {D.T, D.d});
  auto& h = o.add("output.h", {D.T, D.L, D.d});
  auto& v = o.add("output.v", {D.T, D.L, D.d});
  auto& out = o.add("output.out", {D.T, D.d});
  for (std::int64_t t = 0; t < D.T; ++t) {
    const auto tr = forward(PreLN<F>{}, vec_at<F>(E, t * D.d, D.d), int(D.L), layer);
    for (std::int64_t l = 0; l < D.L; ++l) {
      Outputs<F>::append(h, tr.h[l].transpose());
      Outputs<F>::append(v, tr.v[l].transpose());
    }
    Outputs<F>::append(out, tr.out.transpose());
  }
  return o;
}

// ========================================================================= LDM
template <class Make>
Outputs<F> ldm_with(const Problem& p, const std::function<void(LdmConfig<F>&)>& edit, const Make& make) {
  Outputs<F> o;
  const Schema sch = schema_of(p);
  const Dims D = dims(sch);
  LdmConfig<F> c = ldm_config<F>(p, D);
  edit(c);
  run_ldm<F>(p, D, o, c, make);
  return o;
}
Outputs<F> ldm_config_edit(const Problem& p, const std::function<void(LdmConfig<F>&)>& edit) {
  return ldm_with(p, edit, MakeLdm{});
}

/// Group readouts interleaved: entry i of group g's readout lands at i*G + g
/// instead of g*dv + i.
template <class A>
struct LdmInterleaved : LinearDepthMemory<F, A> {
  using Base = LinearDepthMemory<F, A>;
  using typename Base::State;
  using Base::Base;
  Vec<F> read(const State& s, int) const {
    const auto& c = this->config();
    const int dv = c.dv(), dk = c.dk, G = c.groups;
    Vec<F> r(c.d);
    for (int g = 0; g < G; ++g) {
      const Vec<F> y = s.mem[g].M * s.q.segment(g * dk, dk);
      for (int i = 0; i < dv; ++i) r(i * G + g) = y(i);
    }
    return c.read_residual ? Vec<F>(s.x + r) : r;
  }
  Vec<F> final(const State& s) const { return read(s, -1); }
};

/// A write that keeps its own copy of the addresser (the reference's is private).
template <class A>
struct LdmOwnWrite : LinearDepthMemory<F, A> {
  using Base = LinearDepthMemory<F, A>;
  A addr;
  LdmOwnWrite(const LdmConfig<F>& c, A a) : Base(c, a), addr(std::move(a)) {}
  /// x += v (if configured), then the address exactly as the reference computes it.
  template <class State>
  Address<F> advance(State& s, int l, const Vec<F>& v) const {
    const auto& c = this->config();
    const Vec<F> x_in = s.x;
    if (c.write_residual) s.x += v;
    return addr(l, s.x, c.keys == KeySource::layer_input ? x_in : s.x);
  }
};

/// omega applied once, to the key (k -> omega k, v unchanged, unit weight),
/// instead of sqrt(omega) on both key and value.
template <class A>
struct LdmOmegaOnce : LdmOwnWrite<A> {
  using LdmOwnWrite<A>::LdmOwnWrite;
  using State = typename LinearDepthMemory<F, A>::State;
  void write(State& s, int l, const Vec<F>& v) const {
    const auto& c = this->config();
    if (c.write != MemoryWrite::rls) return LinearDepthMemory<F, A>::write(s, l, v);
    Address<F> a = this->advance(s, l, v);
    for (int g = 0; g < c.groups; ++g)
      rls_step<F>(s.mem[g].M, s.mem[g].P, Vec<F>(a.omega(g) * a.k.segment(g * c.dk, c.dk)),
                  Vec<F>(v.segment(g * c.dv(), c.dv())), F(1), c.lambda(l, g), c.p_update);
    s.q = a.q;
  }
};

/// Undecayed ridge: the forgetting factors decay the data but not the prior,
///   M = S (R + alpha^{-1} I)^{-1},  R <- lambda R + omega k k^T,  S <- lambda S + omega v k^T,
/// where the reference's objective decays the ridge term with the data.
template <class A>
struct LdmUndecayedRidge : LdmOwnWrite<A> {
  using LdmOwnWrite<A>::LdmOwnWrite;
  using BaseState = typename LinearDepthMemory<F, A>::State;
  struct State : BaseState {
    std::vector<Mat<F>> R, Sv;
  };
  State init(const Vec<F>& e) const {
    State s;
    static_cast<BaseState&>(s) = LinearDepthMemory<F, A>::init(e);
    const auto& c = this->config();
    s.R.assign(c.groups, Mat<F>::Zero(c.dk, c.dk));
    s.Sv.assign(c.groups, Mat<F>::Zero(c.dv(), c.dk));
    return s;
  }
  void write(State& s, int l, const Vec<F>& v) const {
    const auto& c = this->config();
    if (c.write != MemoryWrite::rls) return LinearDepthMemory<F, A>::write(s, l, v);
    Address<F> a = this->advance(s, l, v);
    for (int g = 0; g < c.groups; ++g) {
      const Vec<F> k = a.k.segment(g * c.dk, c.dk), vg = v.segment(g * c.dv(), c.dv());
      const F lam = c.lambda(l, g), w = a.omega(g);
      s.R[g] = lam * s.R[g] + w * k * k.transpose();
      s.Sv[g] = lam * s.Sv[g] + w * vg * k.transpose();
      s.mem[g].P = (s.R[g] + Mat<F>::Identity(c.dk, c.dk) / c.alpha).inverse();
      s.mem[g].M = s.Sv[g] * s.mem[g].P;
    }
    s.q = a.q;
  }
};

/// Model level without the L2 normalisation of queries and keys.
struct NoNormAddresses : MlpAddresses<F> {
  Address<F> operator()(int, const Vec<F>& x_q, const Vec<F>& x_k) const {
    const int n = this->groups * this->dk;
    const Vec<F> kq = this->mlp_k(x_k);
    Address<F> r;
    r.q = this->mlp_q(x_q);
    r.k = kq.head(n);
    r.omega = kq.tail(this->groups).unaryExpr([](F t) { return softplus(t); });
    return r;
  }
};

// ===================================================================== AttnRes
/// The softmax readout with a pluggable key function (the reference: RMSNorm_g).
template <class Key>
Vec<F> mix(const std::vector<Vec<F>>& src, const Vec<F>& w, const Key& key) {
  Vec<F> z(Eigen::Index(src.size()));
  for (std::size_t i = 0; i < src.size(); ++i) z(Eigen::Index(i)) = std::exp(w.dot(key(src[i])));
  z /= z.sum();
  Vec<F> h = Vec<F>::Zero(w.size());
  for (std::size_t i = 0; i < src.size(); ++i) h += z(Eigen::Index(i)) * src[i];
  return h;
}

/// AttnRes with the reference's state and writes, and readouts over an
/// edited source list or with another key function.
template <class Edit, class Key>
struct AttnResWith : AttentionResiduals<F> {
  Edit edit;  // (const State&, sources) -> sources
  Key key;    // (g, eps, v) -> k
  AttnResWith(AttnResConfig<F> c, Edit e, Key k) : AttentionResiduals<F>(std::move(c)), edit(e), key(k) {}
  Vec<F> readout(const State& s, int l) const {
    const auto& c = config();
    const auto src = edit(s, sources(s));
    if (src.size() == 1) return src[0];
    return mix(src, c.w[l], [&](const Vec<F>& v) { return key(c.g[l], c.eps, v); });
  }
  Vec<F> read(const State& s, int l) const { return readout(s, l); }
  Vec<F> final(const State& s) const { return readout(s, config().layers); }
};

const auto same_sources = [](const AttentionResiduals<F>::State&, std::vector<Vec<F>> src) { return src; };
const auto rms_key = [](const Vec<F>& g, F eps, const Vec<F>& v) { return rms_norm<F>(v, eps, g); };

template <class Edit, class Key>
Outputs<F> attnres_with(const Problem& p, Edit edit, Key key) {
  Outputs<F> o;
  const Schema sch = schema_of(p);
  const Dims D = dims(sch);
  run_plain<F>(p, D, o, AttnResWith<Edit, Key>(attnres_config<F>(p, D), edit, key));
  return o;
}
Outputs<F> attnres_config_edit(const Problem& p, const std::function<void(AttnResConfig<F>&)>& edit) {
  Outputs<F> o;
  const Schema sch = schema_of(p);
  const Dims D = dims(sch);
  AttnResConfig<F> c = attnres_config<F>(p, D);
  edit(c);
  run_plain<F>(p, D, o, AttentionResiduals<F>(c));
  return o;
}

/// Softmax over the token axis instead of the depth axis: a_{t,i} =
/// exp(z_{t,i}) / sum_t' exp(z_{t',i}). Tokens run in lockstep (the mistake
/// couples them), each with the reference's state and writes.
Outputs<F> attnres_softmax_over_tokens(const Problem& p) {
  const Schema sch = schema_of(p);
  const Dims D = dims(sch);
  const AttentionResiduals<F> scheme(attnres_config<F>(p, D));
  const auto& c = scheme.config();
  const auto& E = p.tensor("input.e", {D.T, D.d});
  std::optional<TanhMlpStack<F>> stack;
  const io::Tensor* V = nullptr;
  if (D.model) stack = layer_stack<F>(p, D).all_layers();
  else V = &p.tensor("input.v", {D.T, D.L, D.d});
  std::vector<AttentionResiduals<F>::State> st;
  for (std::int64_t t = 0; t < D.T; ++t) st.push_back(scheme.init(vec_at<F>(E, t * D.d, D.d)));
  auto readout = [&](int l) {  // h_t for every token with pair l
    std::vector<std::vector<Vec<F>>> src;
    for (const auto& s : st) src.push_back(scheme.sources(s));
    const std::size_t n = src[0].size();
    Mat<F> z(D.T, Eigen::Index(n));
    for (std::int64_t t = 0; t < D.T; ++t)
      for (std::size_t i = 0; i < n; ++i) z(t, Eigen::Index(i)) = std::exp(c.w[l].dot(rms_norm<F>(src[t][i], c.eps, c.g[l])));
    std::vector<Vec<F>> h;
    for (std::int64_t t = 0; t < D.T; ++t) {
      Vec<F> x = Vec<F>::Zero(D.d);
      for (std::size_t i = 0; i < n; ++i) x += (z(t, Eigen::Index(i)) / z.col(Eigen::Index(i)).sum()) * src[t][i];
      h.push_back(x);
    }
    return h;
  };
  std::vector<std::vector<Vec<F>>> H(D.T), Vs(D.T);
  for (int l = 0; l < int(D.L); ++l) {
    const auto h = readout(l);
    for (std::int64_t t = 0; t < D.T; ++t) {
      const Vec<F> v = D.model ? (*stack)(l, h[t]) : vec_at<F>(*V, (t * D.L + l) * D.d, D.d);
      scheme.write(st[t], l, v);
      H[t].push_back(h[t]);
      Vs[t].push_back(v);
    }
  }
  const auto fin = readout(int(D.L));
  Outputs<F> o;
  auto& h = o.add("output.h", {D.T, D.L, D.d});
  auto* v = D.model ? &o.add("output.v", {D.T, D.L, D.d}) : nullptr;
  auto& out = o.add("output.out", {D.T, D.d});
  for (std::int64_t t = 0; t < D.T; ++t) {
    for (std::int64_t l = 0; l < D.L; ++l) {
      Outputs<F>::append(h, H[t][l].transpose());
      if (v) Outputs<F>::append(*v, Vs[t][l].transpose());
    }
    Outputs<F>::append(out, fin[t].transpose());
  }
  return o;
}

// ========================================================================== HC
Outputs<F> hc_config_edit(const Problem& p, const std::function<void(HcConfig<F>&)>& edit) {
  Outputs<F> o;
  const Schema sch = schema_of(p);
  const Dims D = dims(sch);
  HcConfig<F> c = hc_config<F>(p, D);
  edit(c);
  run_hc<F>(p, D, o, HyperConnections<F>(c));
  return o;
}

/// The write weights B on the wrong side of the sum: H_i <- v + B[i] sum_j A_r[j,i] H_j.
struct HcBetaWrongSide : HyperConnections<F> {
  using HyperConnections<F>::HyperConnections;
  void write(State& s, int, const Vec<F>& v) const {
    const int n = config().n;
    Mat<F> next(n, config().d);
    for (int i = 0; i < n; ++i) {
      Vec<F> carried = s.coef.ar(0, i) * s.H.row(0).transpose();
      for (int j = 1; j < n; ++j) carried += s.coef.ar(j, i) * s.H.row(j).transpose();
      next.row(i) = (v + s.coef.b(i) * carried).transpose();
    }
    s.H = std::move(next);
    s.layer = -1;
  }
};

/// final = the mean of the streams instead of their sum.
struct HcFinalMean : HyperConnections<F> {
  using HyperConnections<F>::HyperConnections;
  Vec<F> final(const State& s) const { return HyperConnections<F>::final(s) / F(config().n); }
};

// ========================================================================= mHC
/// mHC with the reference's write and final, and coefficients from `coef`.
template <class Coef>
struct MhcWith : Mhc<F> {
  Coef coef;
  MhcWith(MhcConfig<F> c, Coef f) : Mhc<F>(std::move(c)), coef(f) {}
  Vec<F> read(const State& s, int l) const {
    s.coef = coef(config(), layer(l), s.X);
    s.layer = l;
    return mhc_mix<F>(s.X, s.coef.pre);
  }
};

template <class Coef>
Outputs<F> mhc_with(const Problem& p, Coef coef) {
  Outputs<F> o;
  const Schema sch = schema_of(p);
  const Dims D = dims(sch);
  run_mhc<F>(p, D, o, MhcWith<Coef>(mhc_config_of<F>(p, D), coef));
  return o;
}
Outputs<F> mhc_config_edit(const Problem& p, const std::function<void(MhcConfig<F>&)>& edit) {
  Outputs<F> o;
  const Schema sch = schema_of(p);
  const Dims D = dims(sch);
  MhcConfig<F> c = mhc_config_of<F>(p, D);
  edit(c);
  run_mhc<F>(p, D, o, Mhc<F>(c));
  return o;
}

// ================================================================ mHC ops
/// mhc_ops's post with comb_mix read as H_res itself: the [in, out] storage
/// of the kernels taken for the paper's [out, in] (comb not transposed).
struct OpsCombUntransposed : MhcOpsSteps<F> {
  Mat<F> comb(const Mat<F>& stored) const { return stored; }
};
/// mhc_ops's pre with a row-first Sinkhorn (rows of H_res normalised first).
struct OpsSinkhornRowFirst : MhcOpsSteps<F> {
  MhcCoefficients<F> coefficients(const Mhc<F>& m, const Mat<F>& X) const {
    MhcCoefficients<F> k = m.coefficients(X, 0);
    const auto& c = m.config();
    k.res = mhc_sinkhorn<F>(Mat<F>(k.res_logits.transpose()), c.t_max, c.res_eps_add, c.res_eps_den).transpose();
    return k;
  }
};
/// mhc_ops's post_pre with pre reading the residual before post (the fused
/// kernel's second pass over the old streams instead of the new ones).
struct OpsPreReadsOldResidual : MhcOpsSteps<F> {
  const Mat<F>& pre_input(const Mat<F>& R, const Mat<F>& Y) const {
    (void)Y;
    return R;
  }
};
template <class Steps>
Outputs<F> ops_with(const Problem& p) {
  Outputs<F> o;
  run_mhc_ops<F>(p, schema_of(p), o, Steps{});
  return o;
}

/// Sinkhorn with every later epsilon outside the quotient, M / s + eps,
/// instead of inside the denominator, M / (s + eps).
Mat<F> sinkhorn_eps_outside(const Mat<F>& L, int t_max, F add, F den) {
  Mat<F> M = L.unaryExpr([](F x) { return std::exp(x); });
  auto cols = [&](F e) {
    for (Eigen::Index j = 0; j < M.cols(); ++j) M.col(j) = (M.col(j) / M.col(j).sum()).array() + e;
  };
  auto rows = [&](F e) {
    for (Eigen::Index i = 0; i < M.rows(); ++i) M.row(i) = (M.row(i) / M.row(i).sum()).array() + e;
  };
  cols(add);
  rows(den);
  for (int t = 2; t <= t_max; ++t) {
    cols(den);
    rows(den);
  }
  return M;
}

/// The write with the transpose of H_res: X_i <- sum_j H_res[j,i] X_j + H_post[i] v
/// (the coefficients reported are the reference's).
struct MhcResTransposed : Mhc<F> {
  using Mhc<F>::Mhc;
  void write(State& s, int, const Vec<F>& v) const {
    MhcCoefficients<F> k = s.coef;
    k.res.transposeInPlace();
    s.X = mhc_update<F>(s.X, k, v);
    s.layer = -1;
  }
};

/// The post gate on both branches, X_i <- H_post[i] (sum_j H_res[i,j] X_j + v)
/// instead of sum_j H_res[i,j] X_j + H_post[i] v (as in a public MLX port).
struct MhcPostOnBoth : Mhc<F> {
  using Mhc<F>::Mhc;
  void write(State& s, int, const Vec<F>& v) const {
    MhcCoefficients<F> k = s.coef;
    k.post = Vec<F>::Ones(k.post.size());
    s.X = mhc_update<F>(s.X, k, v);
    for (Eigen::Index i = 0; i < s.X.rows(); ++i) s.X.row(i) *= s.coef.post(i);
    s.layer = -1;
  }
};

/// final = the mean of the streams instead of their sum.
struct MhcFinalMean : Mhc<F> {
  using Mhc<F>::Mhc;
  Vec<F> final(const State& s) const { return Mhc<F>::final(s) / F(config().n); }
};

// ================================================================ DenseFormer
/// DenseFormer with the reference's state, and a DWA with a shifted pattern.
template <bool PeriodShift>
struct DenseFormerShifted : DenseFormer<F> {
  using DenseFormer<F>::DenseFormer;
  Vec<F> dwa_shifted(const std::vector<Vec<F>>& X, int i) const {
    const int k = config().dilation, p = config().period;
    // period: DWA after 0-based block i-1 when p | (i-1) (reference: p | i);
    // dilation: X_j with j = 0 (mod k) (reference: j = i (mod k)).
    if (i == 0 || (PeriodShift ? (i - 1) % p != 0 : i % p != 0)) return X[i];
    int j = PeriodShift ? i % k : 0;
    Vec<F> y = config().a(i, j) * X[j];
    for (j += k; j <= i; j += k) y += config().a(i, j) * X[j];
    return y;
  }
  Vec<F> read(const State& s, int l) const { return dwa_shifted(s.X, l); }
  Vec<F> final(const State& s) const { return dwa_shifted(s.X, int(s.X.size()) - 1); }
};

/// The DWA without the embedding term: Y_i = sum_{j >= 1} a_{i,j} X_j (i >= 1).
struct DenseFormerNoEmbedding : DenseFormer<F> {
  using DenseFormer<F>::DenseFormer;
  Vec<F> dwa_no_e(const std::vector<Vec<F>>& X, int i) const {
    const Vec<F> y = dwa(X, i);
    const int k = config().dilation, p = config().period;
    if (i == 0 || i % p != 0 || i % k != 0) return y;  // no X_0 term to drop
    return y - config().a(i, 0) * X[0];
  }
  Vec<F> read(const State& s, int l) const { return dwa_no_e(s.X, l); }
  Vec<F> final(const State& s) const { return dwa_no_e(s.X, int(s.X.size()) - 1); }
};

template <class M>
Outputs<F> denseformer_as(const Problem& p) {
  Outputs<F> o;
  const Schema sch = schema_of(p);
  const Dims D = dims(sch);
  run_plain<F>(p, D, o, M(denseformer_config<F>(p, D)));
  return o;
}

}  // namespace

template <>
std::vector<Variant<F>> variants<F>() {
  std::vector<Variant<F>> m;
  auto add = [&](std::string scheme, std::string name, std::string what, std::function<Outputs<F>(const Problem&)> f) {
    m.push_back({scheme, scheme + "." + name, std::move(what), std::move(f)});
  };
  // ---- PreLN
  add("preln", "norm_eps_outside_sqrt", "layer pre-norm h / (sqrt(mean h^2) + eps) instead of h / sqrt(mean h^2 + eps)",
      preln_eps_outside);
  // ---- LDM
  add("ldm", "undecayed_ridge", "RLS prior alpha^-1 I not decayed by lambda with the data", [](const Problem& p) {
    return ldm_with(p, [](LdmConfig<F>&) {}, [](const LdmConfig<F>& c, auto a) { return LdmUndecayedRidge<decltype(a)>(c, a); });
  });
  add("ldm", "omega_once", "importance weight applied once to the key (omega k) instead of sqrt(omega) on key and value",
      [](const Problem& p) {
        return ldm_with(p, [](LdmConfig<F>&) {}, [](const LdmConfig<F>& c, auto a) { return LdmOmegaOnce<decltype(a)>(c, a); });
      });
  add("ldm", "lambda_shifted", "layer l uses the forgetting factors of layer l+1 (mod L)", [](const Problem& p) {
    return ldm_config_edit(p, [](LdmConfig<F>& c) {
      if (c.lambda.rows() < 2) return;
      Mat<F> s(c.lambda.rows(), c.lambda.cols());
      for (Eigen::Index l = 0; l < s.rows(); ++l) s.row(l) = c.lambda.row((l + 1) % s.rows());
      c.lambda = s;
    });
  });
  add("ldm", "keys_from_prev", "model level: keys and weights from x_{l-1} (option keys_from = x_prev) instead of x_l",
      [](const Problem& p) { return ldm_config_edit(p, [](LdmConfig<F>& c) { c.keys = KeySource::layer_input; }); });
  add("ldm", "no_l2_norm", "model level: queries and keys not L2-normalised per group", [](const Problem& p) {
    return ldm_with(p, [](LdmConfig<F>&) {}, [](const LdmConfig<F>& c, auto a) {
      if constexpr (std::is_same_v<decltype(a), MlpAddresses<F>>) return LinearDepthMemory<F, NoNormAddresses>(c, {a});
      else return LinearDepthMemory<F, decltype(a)>(c, a);
    });
  });
  add("ldm", "readout_interleaved", "group readouts interleaved (i*G + g) instead of concatenated (g*dv + i)",
      [](const Problem& p) {
        return ldm_with(p, [](LdmConfig<F>&) {}, [](const LdmConfig<F>& c, auto a) { return LdmInterleaved<decltype(a)>(c, a); });
      });
  add("ldm", "P0_inverse_alpha", "RLS P initialised to alpha^-1 I instead of alpha I",
      [](const Problem& p) { return ldm_config_edit(p, [](LdmConfig<F>& c) { c.alpha = F(1) / c.alpha; }); });
  // ---- AttnRes
  add("attnres", "inv_sqrt_d", "logits scaled by 1/sqrt(d) (attention habit; AttnRes has no temperature)",
      [](const Problem& p) {
        return attnres_config_edit(p, [](AttnResConfig<F>& c) {
          for (auto& w : c.w) w /= std::sqrt(F(c.d));
        });
      });
  add("attnres", "no_key_norm", "keys g * v without RMSNorm", [](const Problem& p) {
    return attnres_with(p, same_sources, [](const Vec<F>& g, F, const Vec<F>& v) { return Vec<F>(g.cwiseProduct(v)); });
  });
  add("attnres", "block_off_by_one", "block boundary one layer late (block size S+1, or N+1 blocks)", [](const Problem& p) {
    return attnres_config_edit(p, [](AttnResConfig<F>& c) {
      if (c.block_size > 0) ++c.block_size;
      else if (c.num_blocks > 0 && c.num_blocks < c.layers) ++c.num_blocks;
    });
  });
  add("attnres", "zero_partial_source", "a zero partial sum is a source at the start of every block",
      [](const Problem& p) {
        return attnres_with(
            p,
            [](const AttentionResiduals<F>::State& s, std::vector<Vec<F>> src) {
              if (s.in_block == 0) src.push_back(Vec<F>::Zero(src[0].size()));
              return src;
            },
            rms_key);
      });
  add("attnres", "embedding_not_source", "the embedding is not a source (layer 0 reads e directly)", [](const Problem& p) {
    return attnres_with(
        p,
        [](const AttentionResiduals<F>::State&, std::vector<Vec<F>> src) {
          if (src.size() > 1) src.erase(src.begin());
          return src;
        },
        rms_key);
  });
  add("attnres", "normalized_values", "the readout mixes the normalised keys instead of the raw sources",
      [](const Problem& p) {
        Outputs<F> o;
        const Schema sch = schema_of(p);
  const Dims D = dims(sch);
        struct NormalizedValues : AttentionResiduals<F> {
          using AttentionResiduals<F>::AttentionResiduals;
          Vec<F> mixk(const State& s, int l) const {  // the reference's logits, h = sum_i a_i k_i
            const auto& c = config();
            std::vector<Vec<F>> k;
            for (const auto& v : sources(s)) k.push_back(rms_norm<F>(v, c.eps, c.g[l]));
            return mix(k, c.w[l], [](const Vec<F>& key) { return key; });
          }
          Vec<F> read(const State& s, int l) const { return mixk(s, l); }
          Vec<F> final(const State& s) const { return mixk(s, config().layers); }
        };
        run_plain<F>(p, D, o, NormalizedValues(attnres_config<F>(p, D)));
        return o;
      });
  add("attnres", "softmax_over_tokens", "softmax over the token axis instead of the depth (source) axis",
      attnres_softmax_over_tokens);
  // ---- HC
  add("hc", "rmsnorm", "dynamic HC with RMSNorm (option norm = rmsnorm) instead of LayerNorm",
      [](const Problem& p) { return hc_config_edit(p, [](HcConfig<F>& c) { c.norm = HcNorm::rms; }); });
  add("hc", "tanh_dropped", "dynamic HC without the tanh (option tanh = false)",
      [](const Problem& p) { return hc_config_edit(p, [](HcConfig<F>& c) { c.tanh = false; }); });
  add("hc", "static_ar_transposed", "static A_r read transposed (A_r[i,j] weighs stream j into i)", [](const Problem& p) {
    return hc_config_edit(p, [](HcConfig<F>& c) {
      for (auto& l : c.layers) l.ar.transposeInPlace();
    });
  });
  add("hc", "beta_wrong_side", "write weights B scale the carried streams instead of the layer output",
      [](const Problem& p) {
        Outputs<F> o;
        const Schema sch = schema_of(p);
  const Dims D = dims(sch);
        run_hc<F>(p, D, o, HcBetaWrongSide(hc_config<F>(p, D)));
        return o;
      });
  add("hc", "final_mean", "final returns the mean of the streams instead of their sum", [](const Problem& p) {
    Outputs<F> o;
    const Schema sch = schema_of(p);
  const Dims D = dims(sch);
    run_hc<F>(p, D, o, HcFinalMean(hc_config<F>(p, D)));
    return o;
  });
  // ---- mHC
  add("mhc", "sinkhorn_row_first", "Sinkhorn normalises rows before columns", [](const Problem& p) {
    return mhc_with(p, [](const MhcConfig<F>& c, const MhcLayer<F>& q, const Mat<F>& X) {
      MhcCoefficients<F> k = mhc_coefficients<F>(c, q, X);
      k.res = mhc_sinkhorn<F>(Mat<F>(k.res_logits.transpose()), c.t_max, c.res_eps_add, c.res_eps_den).transpose();
      return k;
    });
  });
  add("mhc", "res_transposed", "the write applies H_res transposed", [](const Problem& p) {
    Outputs<F> o;
    const Schema sch = schema_of(p);
  const Dims D = dims(sch);
    run_mhc<F>(p, D, o, MhcResTransposed(mhc_config_of<F>(p, D)));
    return o;
  });
  add("mhc", "post_gate_on_both", "H_post gates the residual branch too (found in a public MLX port)", [](const Problem& p) {
    Outputs<F> o;
    const Schema sch = schema_of(p);
  const Dims D = dims(sch);
    run_mhc<F>(p, D, o, MhcPostOnBoth(mhc_config_of<F>(p, D)));
    return o;
  });
  add("mhc", "rmsnorm_per_stream", "RMSNorm per stream (C values) instead of over all n*C", [](const Problem& p) {
    return mhc_with(p, [](const MhcConfig<F>& c, const MhcLayer<F>& q, const Mat<F>& X) {
      Vec<F> xn(X.size());
      for (Eigen::Index j = 0; j < X.rows(); ++j) xn.segment(j * X.cols(), X.cols()) = rms_norm<F>(X.row(j).transpose(), c.rms_eps);
      return mhc_coefficients_of<F>(c, q, xn);
    });
  });
  add("mhc", "sinkhorn_eps_outside", "Sinkhorn eps added to the quotient instead of the denominator", [](const Problem& p) {
    return mhc_with(p, [](const MhcConfig<F>& c, const MhcLayer<F>& q, const Mat<F>& X) {
      MhcCoefficients<F> k = mhc_coefficients<F>(c, q, X);
      k.res = sinkhorn_eps_outside(k.res_logits, c.t_max, c.res_eps_add, c.res_eps_den);
      return k;
    });
  });
  add("mhc", "t_max_minus_one", "one Sinkhorn round fewer than configured", [](const Problem& p) {
    return mhc_config_edit(p, [](MhcConfig<F>& c) { c.t_max = std::max(1, c.t_max - 1); });
  });
  add("mhc", "post_scale_one", "H_post = sigmoid instead of 2 sigmoid (option post_scale = 1)",
      [](const Problem& p) { return mhc_config_edit(p, [](MhcConfig<F>& c) { c.post_scale = F(c.post_scale) / F(2); }); });
  add("mhc", "pre_2sigmoid", "H_pre = 2 sigmoid instead of sigmoid (option pre_scale = 2)",
      [](const Problem& p) { return mhc_config_edit(p, [](MhcConfig<F>& c) { c.pre_scale = F(2) * c.pre_scale; }); });
  add("mhc", "preset_swapped", "the other preset's constants (paper <-> deepseek-v4)", [](const Problem& p) {
    return evaluate<F>(with(p, "preset", p.text("preset", "paper") == "paper" ? "deepseek-v4" : "paper"));
  });
  add("mhc", "final_mean", "final returns the mean of the streams instead of their sum", [](const Problem& p) {
    Outputs<F> o;
    const Schema sch = schema_of(p);
  const Dims D = dims(sch);
    run_mhc<F>(p, D, o, MhcFinalMean(mhc_config_of<F>(p, D)));
    return o;
  });
  // ---- mHC at op level
  add("mhc_ops", "post_comb_untransposed", "post reads comb_mix [in, out] as H_res [out, in] (not transposed)",
      ops_with<OpsCombUntransposed>);
  add("mhc_ops", "pre_sinkhorn_row_first", "pre's Sinkhorn normalises rows before columns", ops_with<OpsSinkhornRowFirst>);
  add("mhc_ops", "post_pre_reads_old_residual", "post_pre's pre reads the residual before post instead of after",
      ops_with<OpsPreReadsOldResidual>);
  // ---- DenseFormer
  add("denseformer", "period_shifted", "DWA after 0-based block l with p | l instead of p | l+1",
      denseformer_as<DenseFormerShifted<true>>);
  add("denseformer", "dilation_shifted", "DWA averages X_j with j = 0 (mod k) instead of j = i (mod k)",
      denseformer_as<DenseFormerShifted<false>>);
  add("denseformer", "embedding_dropped", "the DWA leaves out the embedding X_0", denseformer_as<DenseFormerNoEmbedding>);
  return m;
}

}  // namespace dmref::mutants
