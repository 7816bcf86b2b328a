// The backward mutants (mutants.hpp): the reference's forward, a Backward<M>
// wrong in one adjoint term. Each is a scheme type that inherits everything
// from the reference class, with a Backward specialization that inherits
// everything from the reference's Backward but the one term. Evaluated at
// double on the gradient problem (p.grad), through the reference adapters
// (run_plain, run_ldm, run_mhc, run_hc), so only the wrong term differs.
#include "mutants.hpp"

#include <type_traits>

namespace dmref::mutants {
namespace {

using S = double;

/// AttnRes: the softmax Jacobian without its normalisation term,
/// dz_i = a_i da_i instead of a_i (da_i - sum_j a_j da_j).
struct NoNormAttnRes : AttentionResiduals<S> {
  using AttentionResiduals<S>::AttentionResiduals;
};
/// LDM RLS: P treated as a constant (no adjoint flows through the P update).
template <class A>
struct FrozenPLdm : LinearDepthMemory<S, A> {
  using LinearDepthMemory<S, A>::LinearDepthMemory;
};
/// mHC: the residual mix's adjoint applied untransposed, dX = H_res dX'
/// instead of H_res^T dX' (the forward kernel reused for the backward).
struct UntransposedMhc : Mhc<S> {
  using Mhc<S>::Mhc;
};
/// mHC: the backward replays one Sinkhorn round fewer than the forward ran
/// (t_max - 1 in every coefficient the backward recomputes and differentiates).
struct ShortSinkhornMhc : Mhc<S> {
  Mhc<S> short_rounds;
  explicit ShortSinkhornMhc(const MhcConfig<S>& c) : Mhc<S>(c), short_rounds(minus_one(c)) {}
  static MhcConfig<S> minus_one(MhcConfig<S> c) {
    c.t_max = std::max(1, c.t_max - 1);
    return c;
  }
};

/// PreLN: no gradient through the read (h_l treated as a detached copy of
/// the stream), so dv_l = d out only, without the later layers' dh_i.
struct DetachedReadPreLN : PreLN<S> {};
/// HC: the stream-mixing adjoint with the forward's orientation reused: the
/// forward mixes H'_i = sum_j A_r[j,i] H_j, the mutant's adjoint gives
/// dH_j = sum_i A_r[i,j] dH'_i instead of sum_i A_r[j,i] dH'_i.
struct UntransposedHc : HyperConnections<S> {
  using HyperConnections<S>::HyperConnections;
};
/// HC: the width-connection gradient with its two stream axes swapped,
/// dA_r[j,i] = dH'_j . H_i instead of dH'_i . H_j.
struct SwappedDarHc : HyperConnections<S> {
  using HyperConnections<S>::HyperConnections;
};
/// DenseFormer: the DWA adjoint with alpha transposed, dX_j += a_{j,i} dY_i.
struct TransposedAlphaDenseFormer : DenseFormer<S> {
  using DenseFormer<S>::DenseFormer;
};
/// DenseFormer: d a_{i,j} against the DWA's own block output X_i instead of
/// its source X_j (the loop index of the output reused for the source).
struct OwnOutputDalphaDenseFormer : DenseFormer<S> {
  using DenseFormer<S>::DenseFormer;
};

/// The reference's DenseFormer Backward (dwa_vjp as in denseformer_backward.hpp)
/// with the DWA weight a_{i,j} and the source X_j it differentiates against
/// taken from D (weight, source), so a mutant replaces just one of them
/// (CRTP: final and read, the callers, are not virtual).
template <class D>
struct DenseFormerBackwardWith : Backward<DenseFormer<S>> {
  using State = DenseFormer<S>::State;
  S weight(int i, int j) const { return this->scheme.config().a(i, j); }
  const Vec<S>& source(const std::vector<Vec<S>>& X, int, int j) const { return X[j]; }
  void dwa_vjp(const std::vector<Vec<S>>& X, int i, const Vec<S>& dy, Adjoint& a, Grad& da) const {
    const auto& c = this->scheme.config();
    if (i == 0 || i % c.period != 0) {
      a.X[i] += dy;
      return;
    }
    for (int j = i % c.dilation; j <= i; j += c.dilation) {
      a.X[j] += self().weight(i, j) * dy;
      da(i, j) += dy.dot(self().source(X, i, j));
    }
  }
  Adjoint final(const State& s, const Vec<S>& dout, Grad& da) const {
    Adjoint a{std::vector<Vec<S>>(s.X.size(), Vec<S>::Zero(dout.size()))};
    dwa_vjp(s.X, static_cast<int>(s.X.size()) - 1, dout, a, da);
    return a;
  }
  void read(const State& before, int l, const Vec<S>& dh, Adjoint& a, Grad& da) const { dwa_vjp(before.X, l, dh, a, da); }
  const D& self() const { return static_cast<const D&>(*this); }
};

/// mhc_ops's post backward with the residual mix untransposed: dR = H_res dY
/// instead of H_res^T dY.
struct OpsBwPostUntransposed : conf::MhcOpsSteps<S> {
  Mat<S> update_vjp(const Mat<S>& X, const MhcCoefficients<S>& k, const Vec<S>& x, const Mat<S>& dY, Mat<S>& dres,
                    Vec<S>& dpost, Vec<S>& dx) const {
    const Mat<S> dX = B::update_vjp(X, k, x, dY, dres, dpost, dx);
    return dX + (k.res - k.res.transpose()) * dY;  // H^T dY + (H - H^T) dY = H dY
  }
};
/// mhc_ops's pre backward with the pre mix detached: dH_pre gets only its
/// upstream, not dh . X_j (layer_input's dependence on H_pre dropped).
struct OpsBwPreMixDetached : conf::MhcOpsSteps<S> {
  Vec<S> mix_vjp(const Mat<S>& X, const Vec<S>& w, const Vec<S>& dh, Mat<S>& dX) const {
    (void)B::mix_vjp(X, w, dh, dX);
    return Vec<S>::Zero(X.rows());
  }
};
/// mhc_ops's post backward without the upstream of output.residual (in
/// post_pre only pre's adjoint reaches post; in post alone nothing does).
struct OpsBwResidualUpstreamDropped : conf::MhcOpsSteps<S> {
  void add_residual_upstream(Mat<S>& dY, const Mat<S>& up) const {
    (void)dY;
    (void)up;
  }
};

}  // namespace
}  // namespace dmref::mutants

namespace dmref {

template <>
struct Backward<mutants::DetachedReadPreLN> : Backward<PreLN<double>> {
  using Base = Backward<PreLN<double>>;
  explicit Backward(const mutants::DetachedReadPreLN& m) : Base{m} {}
  void read(const PreLN<double>::State&, int, const Vec<double>&, Adjoint&, Grad&) const {}  // the dropped a.x += dh
};

template <>
struct Backward<mutants::UntransposedHc> : Backward<HyperConnections<double>> {
  using S = double;
  using Base = Backward<HyperConnections<S>>;
  explicit Backward(const mutants::UntransposedHc& m) : Base{m} {}
  Vec<S> write(const State& before, int l, const Vec<S>& v, Adjoint& a, Grad& gr) const {
    const Mat<S> dY = a.H;                               // rows dH'_i
    const Vec<S> dv = Base::write(before, l, v, a, gr);  // the right adjoint, then the wrong mixing path:
    const Mat<S> Ar = this->scheme.coefficients(before.H, l).ar;
    a.H += (Ar.transpose() - Ar) * dY;  // A_r dH' + (A_r^T - A_r) dH' = A_r^T dH'
    return dv;
  }
};

template <>
struct Backward<mutants::SwappedDarHc> : Backward<HyperConnections<double>> {
  using S = double;
  using Base = Backward<HyperConnections<S>>;
  explicit Backward(const mutants::SwappedDarHc& m) : Base{m} {}
  Vec<S> write(const State& before, int l, const Vec<S>& v, Adjoint& a, Grad& gr) const {
    const Mat<S> D = before.H * a.H.transpose();         // D(j,i) = H_j . dH'_i, the right dA_r
    const Vec<S> dv = Base::write(before, l, v, a, gr);  // the right adjoint, then the swap's difference:
    const int n = this->scheme.config().n;
    // coefficients_vjp is linear in dc: adding its VJP of D^T - D turns dA_r = D into D^T
    coefficients_vjp(before.H, l, {Vec<S>::Zero(n), Mat<S>(D.transpose() - D), Vec<S>::Zero(n)}, a.H, gr);
    return dv;
  }
};

template <>
struct Backward<mutants::TransposedAlphaDenseFormer>
    : mutants::DenseFormerBackwardWith<Backward<mutants::TransposedAlphaDenseFormer>> {
  using S = double;
  explicit Backward(const mutants::TransposedAlphaDenseFormer& m) : DenseFormerBackwardWith{{m}} {}
  double weight(int i, int j) const { return this->scheme.config().a(j, i); }  // a(j, i) for a(i, j)
};

template <>
struct Backward<mutants::OwnOutputDalphaDenseFormer>
    : mutants::DenseFormerBackwardWith<Backward<mutants::OwnOutputDalphaDenseFormer>> {
  using S = double;
  explicit Backward(const mutants::OwnOutputDalphaDenseFormer& m) : DenseFormerBackwardWith{{m}} {}
  const Vec<double>& source(const std::vector<Vec<double>>& X, int i, int) const { return X[i]; }  // X[i] for X[j]
};

template <>
struct Backward<mutants::NoNormAttnRes> : Backward<AttentionResiduals<double>> {
  using S = double;
  using Base = Backward<AttentionResiduals<S>>;
  using typename Base::Adjoint;
  using typename Base::Grad;
  using State = AttentionResiduals<S>::State;
  explicit Backward(const mutants::NoNormAttnRes& m) : Base{m} {}
  void mix_vjp(const State& s, int r, const Vec<S>& dh, Adjoint& a, Grad& gr) const {
    const auto& c = this->scheme.config();
    const auto src = this->scheme.sources(s);
    const Vec<S> w = attnres_weights<S>(src, c.w[r], c.g[r], c.eps);
    for (std::size_t i = 0; i < src.size(); ++i) {
      const S dz = w(i) * dh.dot(src[i]);  // the dropped term: - w(i) * sum_j w(j) da_j
      gr.w[r] += dz * rms_norm<S>(src[i], c.eps, c.g[r]);
      const Vec<S> d = w(i) * dh + rms_norm_vjp<S>(src[i], c.eps, c.g[r], Vec<S>(dz * c.w[r]), &gr.g[r]);
      if (i < s.sources.size()) a.sources[i] += d;
      else a.partial += d;
    }
  }
  Adjoint final(const State& s, const Vec<S>& dout, Grad& gr) const {
    const int d = this->scheme.config().d;
    Adjoint a{std::vector<Vec<S>>(s.sources.size(), Vec<S>::Zero(d)), Vec<S>::Zero(d)};
    mix_vjp(s, this->scheme.config().layers, dout, a, gr);
    return a;
  }
  void read(const State& before, int l, const Vec<S>& dh, Adjoint& a, Grad& gr) const { mix_vjp(before, l, dh, a, gr); }
};

template <class A>
struct Backward<mutants::FrozenPLdm<A>> : Backward<LinearDepthMemory<double, A>> {
  using S = double;
  using Base = Backward<LinearDepthMemory<S, A>>;
  using typename Base::Adjoint;
  using typename Base::Grad;
  explicit Backward(const mutants::FrozenPLdm<A>& m) : Base{m} {}
  Vec<S> write(const typename LinearDepthMemory<S, A>::State& before, int l, const Vec<S>& v, Adjoint& a, Grad& gr) const {
    for (auto& P : a.P) P.setZero();
    Vec<S> dv = Base::write(before, l, v, a, gr);
    for (auto& P : a.P) P.setZero();
    return dv;
  }
};

template <>
struct Backward<mutants::UntransposedMhc> : Backward<Mhc<double>> {
  using S = double;
  using Base = Backward<Mhc<S>>;
  using typename Base::Adjoint;
  using typename Base::Grad;
  explicit Backward(const mutants::UntransposedMhc& m) : Base{m} {}
  Vec<S> write(const Mhc<S>::State& before, int l, const Vec<S>& v, Adjoint& a, Grad& gr) const {
    const Mat<S> dY = a.X;
    const Vec<S> dv = Base::write(before, l, v, a, gr);  // the right adjoint, then the wrong residual path:
    const Mat<S> H = this->scheme.coefficients(before.X, l).res;
    a.X += (H - H.transpose()) * dY;  // H^T dY + (H - H^T) dY = H dY
    return dv;
  }
};

template <>
struct Backward<mutants::ShortSinkhornMhc> : Backward<Mhc<double>> {
  using Base = Backward<Mhc<double>>;
  explicit Backward(const mutants::ShortSinkhornMhc& m) : Base{m.short_rounds} {}
};

}  // namespace dmref

namespace dmref::mutants {

std::vector<Mutant> catalogue() {
  std::vector<Mutant> m;
  const auto f32 = variants<float>();
  const auto f64 = variants<double>();
  for (std::size_t i = 0; i < f32.size(); ++i)
    m.push_back({f32[i].scheme, f32[i].name, f32[i].what, f32[i].eval, f64.at(i).eval, {}});
  auto add = [&](std::string scheme, std::string name, std::string what, std::function<Outputs<S>(const Problem&)> f) {
    m.push_back({scheme, scheme + "." + name, std::move(what), {}, {}, std::move(f)});
  };
  using namespace conf;
  add("attnres", "bw_softmax_no_norm", "backward: softmax Jacobian without its normalisation term (dz_i = a_i da_i)",
      [](const Problem& p) {
        Outputs<S> o;
        const Schema sch = schema_of(p);
        const Dims D = dims(sch);
        run_plain<S>(p, D, o, NoNormAttnRes(attnres_config<S>(p, D)), [](const auto& g) { return attnres_param_grads<S>(g); });
        return o;
      });
  add("ldm", "bw_P_constant", "backward: RLS P treated as a constant (no adjoint through the P update)",
      [](const Problem& p) {
        Outputs<S> o;
        const Schema sch = schema_of(p);
        const Dims D = dims(sch);
        run_ldm<S>(p, D, o, ldm_config<S>(p, D), [](const LdmConfig<S>& c, auto a) { return FrozenPLdm<decltype(a)>(c, a); });
        return o;
      });
  add("mhc", "bw_res_untransposed", "backward: residual mix adjoint H_res dX' instead of H_res^T dX'", [](const Problem& p) {
    Outputs<S> o;
    const Schema sch = schema_of(p);
    const Dims D = dims(sch);
    run_mhc<S>(p, D, o, UntransposedMhc(mhc_config_of<S>(p, D)));
    return o;
  });
  add("mhc", "bw_sinkhorn_round_missing", "backward: replays t_max - 1 Sinkhorn rounds (the forward ran t_max)",
      [](const Problem& p) {
        Outputs<S> o;
        const Schema sch = schema_of(p);
        const Dims D = dims(sch);
        run_mhc<S>(p, D, o, ShortSinkhornMhc(mhc_config_of<S>(p, D)));
        return o;
      });
  add("preln", "bw_read_detached", "backward: no gradient through the read (h_l a detached copy: dv_l = d out only)",
      [](const Problem& p) {
        Outputs<S> o;
        const Schema sch = schema_of(p);
        run_plain<S>(p, dims(sch), o, DetachedReadPreLN{});
        return o;
      });
  add("hc", "bw_mix_untransposed", "backward: stream-mixing adjoint untransposed (dH_j = sum_i A_r[i,j] dH'_i)", [](const Problem& p) {
    Outputs<S> o;
    const Schema sch = schema_of(p);  // D refers to it
    const Dims D = dims(sch);
    run_hc<S>(p, D, o, UntransposedHc(hc_config<S>(p, D)));
    return o;
  });
  add("hc", "bw_dar_swapped", "backward: width-connection gradient dA_r[j,i] = dH'_j . H_i (stream axes swapped)",
      [](const Problem& p) {
        Outputs<S> o;
        const Schema sch = schema_of(p);  // D refers to it
        const Dims D = dims(sch);
        run_hc<S>(p, D, o, SwappedDarHc(hc_config<S>(p, D)));
        return o;
      });
  auto denseformer = [](auto scheme) {
    return [](const Problem& p) {
      Outputs<S> o;
      const Schema sch = schema_of(p);  // D refers to it
      const Dims D = dims(sch);
      run_denseformer<S>(p, D, o, typename decltype(scheme)::type(denseformer_config<S>(p, D)));
      return o;
    };
  };
  add("denseformer", "bw_alpha_transposed", "backward: DWA adjoint with alpha transposed (dX_j += a_{j,i} dY_i)",
      denseformer(std::type_identity<TransposedAlphaDenseFormer>{}));
  add("denseformer", "bw_dalpha_own_output", "backward: d a_{i,j} = dY_i . X_i (the DWA's own output for its source X_j)",
      denseformer(std::type_identity<OwnOutputDalphaDenseFormer>{}));
  auto ops = [](auto steps) {
    return [steps](const Problem& p) {
      Outputs<S> o;
      run_mhc_ops<S>(p, schema_of(p), o, steps);
      return o;
    };
  };
  add("mhc_ops", "bw_post_res_untransposed", "backward of post: dR = H_res dY instead of H_res^T dY",
      ops(OpsBwPostUntransposed{}));
  add("mhc_ops", "bw_pre_mix_detached", "backward of pre: H_pre detached from layer_input (dH_pre = upstream only)",
      ops(OpsBwPreMixDetached{}));
  add("mhc_ops", "bw_post_pre_residual_upstream_dropped",
      "backward of post_pre: the upstream of output.residual dropped (only pre's adjoint reaches post)",
      ops(OpsBwResidualUpstreamDropped{}));
  return m;
}

}  // namespace dmref::mutants
