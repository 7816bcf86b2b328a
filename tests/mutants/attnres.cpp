// tests/mutants/attnres.cpp: Attention Residuals' mutants (mutants.hpp;
// docs/fixtures.md, "Mutation score"): forward_attnres<F> (instantiated at
// float and double) and backward_attnres.
#include "common.hpp"

#include <cmath>
#include <optional>

namespace dmref::mutants {

using namespace dmref::conf;

namespace {

// ------------------------------------------------------------------ forward
/// The softmax readout with a pluggable key function (the reference: RMSNorm_g).
template <class F, class Key>
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
template <class F, class Edit, class Key>
struct AttnResWith : AttentionResiduals<F> {
  using Base = AttentionResiduals<F>;
  using typename Base::State;
  using Base::config;
  using Base::sources;
  Edit edit;  // (const State&, sources) -> sources
  Key key;    // (g, eps, v) -> k
  AttnResWith(AttnResConfig<F> c, Edit e, Key k) : Base(std::move(c)), edit(e), key(k) {}
  Vec<F> readout(const State& s, int l) const {
    const auto& c = config();
    const auto src = edit(s, sources(s));
    if (src.size() == 1) return src[0];
    return mix<F>(src, c.w[l], [&](const Vec<F>& v) { return key(c.g[l], c.eps, v); });
  }
  Vec<F> read(const State& s, int l) const { return readout(s, l); }
  Vec<F> final(const State& s) const { return readout(s, config().layers); }
};

template <class F>
const auto same_sources = [](const typename AttentionResiduals<F>::State&, std::vector<Vec<F>> src) { return src; };
template <class F>
const auto rms_key = [](const Vec<F>& g, F eps, const Vec<F>& v) { return rms_norm<F>(v, eps, g); };

template <class F, class Edit, class Key>
Outputs<F> attnres_with(const Problem& p, Edit edit, Key key) {
  return outputs_of<F>(p, [&](const Dims& D, Outputs<F>& o) {
    run_plain<F>(p, D, o, AttnResWith<F, Edit, Key>(attnres_config<F>(p, D), edit, key));
  });
}
template <class F>
Outputs<F> attnres_config_edit(const Problem& p, const std::function<void(AttnResConfig<F>&)>& edit) {
  return outputs_of<F>(p, [&](const Dims& D, Outputs<F>& o) {
    AttnResConfig<F> c = attnres_config<F>(p, D);
    edit(c);
    run_plain<F>(p, D, o, AttentionResiduals<F>(c));
  });
}

/// Softmax over the token axis instead of the depth axis: a_{t,i} =
/// exp(z_{t,i}) / sum_t' exp(z_{t',i}). Tokens run in lockstep (the mistake
/// couples them), each with the reference's state and writes.
template <class F>
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
  std::vector<typename AttentionResiduals<F>::State> st;
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

/// The readout mixes the normalised keys instead of the raw sources.
template <class F>
struct NormalizedValues : AttentionResiduals<F> {
  using Base = AttentionResiduals<F>;
  using typename Base::State;
  using Base::Base;
  using Base::config;
  using Base::sources;
  Vec<F> mixk(const State& s, int l) const {  // the reference's logits, h = sum_i a_i k_i
    const auto& c = config();
    std::vector<Vec<F>> k;
    for (const auto& v : sources(s)) k.push_back(rms_norm<F>(v, c.eps, c.g[l]));
    return mix<F>(k, c.w[l], [](const Vec<F>& key) { return key; });
  }
  Vec<F> read(const State& s, int l) const { return mixk(s, l); }
  Vec<F> final(const State& s) const { return mixk(s, config().layers); }
};

// ----------------------------------------------------------------- backward
using S = double;

/// The softmax Jacobian without its normalisation term,
/// dz_i = a_i da_i instead of a_i (da_i - sum_j a_j da_j).
struct NoNormAttnRes : AttentionResiduals<S> {
  using AttentionResiduals<S>::AttentionResiduals;
};

}  // namespace
}  // namespace dmref::mutants

namespace dmref {

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

}  // namespace dmref

namespace dmref::mutants {

template <class F>
std::vector<Variant<F>> forward_attnres() {
  ForwardList<F> m{"attnres", {}};
  m.add("inv_sqrt_d", "logits scaled by 1/sqrt(d) (attention habit; AttnRes has no temperature)",
        [](const Problem& p) {
          return attnres_config_edit<F>(p, [](AttnResConfig<F>& c) {
            for (auto& w : c.w) w /= std::sqrt(F(c.d));
          });
        });
  m.add("no_key_norm", "keys g * v without RMSNorm", [](const Problem& p) {
    return attnres_with<F>(p, same_sources<F>, [](const Vec<F>& g, F, const Vec<F>& v) { return Vec<F>(g.cwiseProduct(v)); });
  });
  m.add("block_off_by_one", "block boundary one layer late (block size S+1, or N+1 blocks)", [](const Problem& p) {
    return attnres_config_edit<F>(p, [](AttnResConfig<F>& c) {
      if (c.block_size > 0) ++c.block_size;
      else if (c.num_blocks > 0 && c.num_blocks < c.layers) ++c.num_blocks;
    });
  });
  m.add("zero_partial_source", "a zero partial sum is a source at the start of every block",
        [](const Problem& p) {
          return attnres_with<F>(
              p,
              [](const typename AttentionResiduals<F>::State& s, std::vector<Vec<F>> src) {
                if (s.in_block == 0) src.push_back(Vec<F>::Zero(src[0].size()));
                return src;
              },
              rms_key<F>);
        });
  m.add("embedding_not_source", "the embedding is not a source (layer 0 reads e directly)", [](const Problem& p) {
    return attnres_with<F>(
        p,
        [](const typename AttentionResiduals<F>::State&, std::vector<Vec<F>> src) {
          if (src.size() > 1) src.erase(src.begin());
          return src;
        },
        rms_key<F>);
  });
  m.add("normalized_values", "the readout mixes the normalised keys instead of the raw sources",
        [](const Problem& p) {
          return outputs_of<F>(p, [&](const Dims& D, Outputs<F>& o) {
            run_plain<F>(p, D, o, NormalizedValues<F>(attnres_config<F>(p, D)));
          });
        });
  m.add("softmax_over_tokens", "softmax over the token axis instead of the depth (source) axis",
        attnres_softmax_over_tokens<F>);
  return m.m;
}
DMREF_INSTANTIATE_MUTANTS(attnres)

std::vector<Mutant> backward_attnres() {
  BackwardList m{"attnres", {}};
  m.add("bw_softmax_no_norm", "backward: softmax Jacobian without its normalisation term (dz_i = a_i da_i)",
        [](const Problem& p) {
          return outputs_of<S>(p, [&](const Dims& D, Outputs<S>& o) {
            run_plain<S>(p, D, o, NoNormAttnRes(attnres_config<S>(p, D)), [](const auto& g) { return attnres_param_grads<S>(g); });
          });
        });
  return m.m;
}

}  // namespace dmref::mutants
