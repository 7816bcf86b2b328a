// tests/mutants/mhc.cpp: mHC's mutants (mutants.hpp; docs/fixtures.md,
// "Mutation score"): forward_mhc<F> (instantiated at float and double) and
// backward_mhc.
#include "common.hpp"

#include <cmath>

namespace dmref::mutants {

using namespace dmref::conf;

namespace {

// ------------------------------------------------------------------ forward
/// A copy of the problem with one config value changed (a legitimate option
/// set to the wrong value).
Problem with(const Problem& p, const std::string& key, const json& value) {
  Problem q = p;
  q.config[key] = value;
  return q;
}

/// mHC with the reference's write and final, and coefficients from `coef`.
template <class F, class Coef>
struct MhcWith : Mhc<F> {
  using Base = Mhc<F>;
  using typename Base::State;
  Coef coef;
  MhcWith(MhcConfig<F> c, Coef f) : Base(std::move(c)), coef(f) {}
  Vec<F> read(const State& s, int l) const {
    s.coef = coef(this->config(), this->layer(l), s.X);
    s.layer = l;
    return mhc_mix<F>(s.X, s.coef.pre);
  }
};

template <class F, class Coef>
Outputs<F> mhc_with(const Problem& p, Coef coef) {
  return outputs_of<F>(p, [&](const Dims& D, Outputs<F>& o) {
    run_mhc<F>(p, D, o, MhcWith<F, Coef>(mhc_config_of<F>(p, D), coef));
  });
}
template <class F>
Outputs<F> mhc_config_edit(const Problem& p, const std::function<void(MhcConfig<F>&)>& edit) {
  return outputs_of<F>(p, [&](const Dims& D, Outputs<F>& o) {
    MhcConfig<F> c = mhc_config_of<F>(p, D);
    edit(c);
    run_mhc<F>(p, D, o, Mhc<F>(c));
  });
}
template <class M, class F>
Outputs<F> mhc_as(const Problem& p) {
  return outputs_of<F>(p, [&](const Dims& D, Outputs<F>& o) { run_mhc<F>(p, D, o, M(mhc_config_of<F>(p, D))); });
}

/// Sinkhorn with every later epsilon outside the quotient, M / s + eps,
/// instead of inside the denominator, M / (s + eps).
template <class F>
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
template <class F>
struct MhcResTransposed : Mhc<F> {
  using Base = Mhc<F>;
  using typename Base::State;
  using Base::Base;
  void write(State& s, int, const Vec<F>& v) const {
    MhcCoefficients<F> k = s.coef;
    k.res.transposeInPlace();
    s.X = mhc_update<F>(s.X, k, v);
    s.layer = -1;
  }
};

/// The post gate on both branches, X_i <- H_post[i] (sum_j H_res[i,j] X_j + v)
/// instead of sum_j H_res[i,j] X_j + H_post[i] v (as in a public MLX port).
template <class F>
struct MhcPostOnBoth : Mhc<F> {
  using Base = Mhc<F>;
  using typename Base::State;
  using Base::Base;
  void write(State& s, int, const Vec<F>& v) const {
    MhcCoefficients<F> k = s.coef;
    k.post = Vec<F>::Ones(k.post.size());
    s.X = mhc_update<F>(s.X, k, v);
    for (Eigen::Index i = 0; i < s.X.rows(); ++i) s.X.row(i) *= s.coef.post(i);
    s.layer = -1;
  }
};

/// final = the mean of the streams instead of their sum.
template <class F>
struct MhcFinalMean : Mhc<F> {
  using Base = Mhc<F>;
  using typename Base::State;
  using Base::Base;
  using Base::config;
  Vec<F> final(const State& s) const { return Base::final(s) / F(config().n); }
};

// ----------------------------------------------------------------- backward
using S = double;

/// The residual mix's adjoint applied untransposed, dX = H_res dX'
/// instead of H_res^T dX' (the forward kernel reused for the backward).
struct UntransposedMhc : Mhc<S> {
  using Mhc<S>::Mhc;
};
/// The backward replays one Sinkhorn round fewer than the forward ran
/// (t_max - 1 in every coefficient the backward recomputes and differentiates).
struct ShortSinkhornMhc : Mhc<S> {
  Mhc<S> short_rounds;
  explicit ShortSinkhornMhc(const MhcConfig<S>& c) : Mhc<S>(c), short_rounds(minus_one(c)) {}
  static MhcConfig<S> minus_one(MhcConfig<S> c) {
    c.t_max = std::max(1, c.t_max - 1);
    return c;
  }
};

}  // namespace
}  // namespace dmref::mutants

namespace dmref {

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

template <class F>
std::vector<Variant<F>> forward_mhc() {
  ForwardList<F> m{"mhc", {}};
  m.add("sinkhorn_row_first", "Sinkhorn normalises rows before columns", [](const Problem& p) {
    return mhc_with<F>(p, [](const MhcConfig<F>& c, const MhcLayer<F>& q, const Mat<F>& X) {
      MhcCoefficients<F> k = mhc_coefficients<F>(c, q, X);
      k.res = mhc_sinkhorn<F>(Mat<F>(k.res_logits.transpose()), c.t_max, c.res_eps_add, c.res_eps_den).transpose();
      return k;
    });
  });
  m.add("res_transposed", "the write applies H_res transposed", mhc_as<MhcResTransposed<F>, F>);
  m.add("post_gate_on_both", "H_post gates the residual branch too (found in a public MLX port)",
        mhc_as<MhcPostOnBoth<F>, F>);
  m.add("rmsnorm_per_stream", "RMSNorm per stream (C values) instead of over all n*C", [](const Problem& p) {
    return mhc_with<F>(p, [](const MhcConfig<F>& c, const MhcLayer<F>& q, const Mat<F>& X) {
      Vec<F> xn(X.size());
      for (Eigen::Index j = 0; j < X.rows(); ++j) xn.segment(j * X.cols(), X.cols()) = rms_norm<F>(X.row(j).transpose(), c.rms_eps);
      return mhc_coefficients_of<F>(c, q, xn);
    });
  });
  m.add("sinkhorn_eps_outside", "Sinkhorn eps added to the quotient instead of the denominator", [](const Problem& p) {
    return mhc_with<F>(p, [](const MhcConfig<F>& c, const MhcLayer<F>& q, const Mat<F>& X) {
      MhcCoefficients<F> k = mhc_coefficients<F>(c, q, X);
      k.res = sinkhorn_eps_outside<F>(k.res_logits, c.t_max, c.res_eps_add, c.res_eps_den);
      return k;
    });
  });
  m.add("t_max_minus_one", "one Sinkhorn round fewer than configured", [](const Problem& p) {
    return mhc_config_edit<F>(p, [](MhcConfig<F>& c) { c.t_max = std::max(1, c.t_max - 1); });
  });
  m.add("post_scale_one", "H_post = sigmoid instead of 2 sigmoid (option post_scale = 1)",
        [](const Problem& p) { return mhc_config_edit<F>(p, [](MhcConfig<F>& c) { c.post_scale = F(c.post_scale) / F(2); }); });
  m.add("pre_2sigmoid", "H_pre = 2 sigmoid instead of sigmoid (option pre_scale = 2)",
        [](const Problem& p) { return mhc_config_edit<F>(p, [](MhcConfig<F>& c) { c.pre_scale = F(2) * c.pre_scale; }); });
  m.add("preset_swapped", "the other preset's constants (paper <-> deepseek-v4)", [](const Problem& p) {
    return evaluate<F>(with(p, "preset", p.text("preset", "paper") == "paper" ? "deepseek-v4" : "paper"));
  });
  m.add("final_mean", "final returns the mean of the streams instead of their sum", mhc_as<MhcFinalMean<F>, F>);
  return m.m;
}
DMREF_INSTANTIATE_MUTANTS(mhc)

std::vector<Mutant> backward_mhc() {
  BackwardList m{"mhc", {}};
  m.add("bw_res_untransposed", "backward: residual mix adjoint H_res dX' instead of H_res^T dX'",
        mhc_as<UntransposedMhc, S>);
  m.add("bw_sinkhorn_round_missing", "backward: replays t_max - 1 Sinkhorn rounds (the forward ran t_max)",
        mhc_as<ShortSinkhornMhc, S>);
  return m.m;
}

}  // namespace dmref::mutants
