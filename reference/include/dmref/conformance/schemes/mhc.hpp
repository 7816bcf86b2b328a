// dmref/conformance/schemes/mhc.hpp: the manifold-constrained
// Hyper-Connections binding (paper and DeepSeek-V4 presets, the production
// knobs, the file layouts phi_layout and res_layout). Schema, corpus rows and
// registry entry: src/conformance/schemes/mhc.cpp.
#pragma once

#include "dmref/conformance/binding.hpp"
#include "dmref/conformance/schemes/mhc_constants.hpp"
#include "dmref/mhc_backward.hpp"

namespace dmref::conf {

/// How the residual matrix travels in files: "out_in" (paper: entry (i, j) weighs
/// stream j into stream i; phi_res column i*n + j) or "in_out" (DeepSeek-V4's
/// comb matrix, the transpose). Applies to param.phi_res, param.b_res and the
/// outputs H_res, Ht_res.
inline bool mhc_res_in_out(const Dims& D) { return D.sch().text("res_layout") == "in_out"; }
inline bool mhc_phi_out_in(const Dims& D) { return D.sch().text("phi_layout") == "out_in"; }


template <class S>
MhcConfig<S> mhc_config_of(const Problem& p, const Dims& D) {
  const Schema& s = D.sch();
  const auto n = s.integer("n"), C = D.d, nC = n * C;
  MhcConfig<S> c = mhc_constants<S>(s, n, C);
  const bool phi_t = mhc_phi_out_in(D), res_t = mhc_res_in_out(D);
  const auto& phi_pre = s.read(p, "param.phi_pre");  // [L, nC, out], or [L, out, nC] with phi_layout out_in
  const auto& phi_post = s.read(p, "param.phi_post");
  const auto& phi_res = s.read(p, "param.phi_res");
  // Layer l's parameters are converted when Mhc::layer(l) asks for them (one
  // layer held at a time, as TensorMlpStack does): the tensors belong to p,
  // which outlives the scheme; everything else is captured by value.
  auto phi = [phi_t, nC](const io::Tensor& t, std::int64_t l, std::int64_t out) {
    return phi_t ? Mat<S>(mat_at<S>(t, l * nC * out, out, nC).transpose()) : mat_at<S>(t, l * nC * out, nC, out);
  };
  c.layer_count = int(D.L);
  // Pointers into p's tensors (looked up, and their shapes checked, here).
  c.layer_source = [phi, res_t, n, phi_pre = &phi_pre, phi_post = &phi_post, phi_res = &phi_res,
                    a = &s.read(p, "param.a"), b_pre = &s.read(p, "param.b_pre"), b_post = &s.read(p, "param.b_post"),
                    b_res = &s.read(p, "param.b_res")](int l) {
    MhcLayer<S> q;
    q.phi_pre = phi(*phi_pre, l, n);
    q.phi_post = phi(*phi_post, l, n);
    q.phi_res = phi(*phi_res, l, n * n);
    if (res_t) q.phi_res = mhc_res_columns_transpose<S>(q.phi_res, int(n));
    q.a_pre = S(a->values[3 * l]);
    q.a_post = S(a->values[3 * l + 1]);
    q.a_res = S(a->values[3 * l + 2]);
    q.b_pre = vec_at<S>(*b_pre, l * n, n);
    q.b_post = vec_at<S>(*b_post, l * n, n);
    q.b_res = mat_at<S>(*b_res, l * n * n, n, n);
    if (res_t) q.b_res = mhc_from_storage<S>(q.b_res);
    return q;
  };
  return c;
}

/// grad.param.* of an mHC backward, in the layouts of the param tensors.
/// With phi_layout "out_in" the projections' gradients are transposed back,
/// with res_layout "in_out" the residual ones are permuted back: both maps are
/// permutations, so a gradient goes back the way its parameter came in.
template <class S, class G>
std::vector<ParamGrad<S>> mhc_param_grads(const G& g, bool phi_t, bool res_t, int n) {
  auto phi = [&](const Mat<S>& x) { return phi_t ? Mat<S>(x.transpose()) : x; };
  std::vector<ParamGrad<S>> r;
  for (const char* k : {"param.phi_pre", "param.phi_post", "param.phi_res", "param.a", "param.b_pre", "param.b_post",
                        "param.b_res"})
    r.push_back({k, {}});
  for (const auto& q : g.layers) {
    r[0].add(phi(q.phi_pre));
    r[1].add(phi(q.phi_post));
    r[2].add(phi(res_t ? mhc_res_columns_transpose<S>(q.phi_res, n) : q.phi_res));
    r[3].add(q.a_pre).add(q.a_post).add(q.a_res);
    r[4].add(q.b_pre.transpose());
    r[5].add(q.b_post.transpose());
    r[6].add(res_t ? mhc_to_storage<S>(q.b_res) : q.b_res);
  }
  return r;
}

/// input.grad.X of token t as the adjoint of the final streams, and
/// input.grad.H_pre/H_post/H_res/Ht_res of its layer l as the adjoint of the
/// coefficients kept in the streams after write l (H_res, Ht_res in the
/// file's res_layout, brought back to the paper orientation).
template <class S>
auto mhc_state_upstream(const Problem& p, const Dims& D) {
  return [&p, D, n = D.sch().integer("n"), res_t = mhc_res_in_out(D)](std::int64_t t, const auto&, auto& up) {
    const Schema& s = D.sch();
    up.last.emplace();
    up.last->X = mat_at<S>(s.read(p, "input.grad.X"), t * n * D.d, n, D.d);
    const auto& pre = s.read(p, "input.grad.H_pre");
    const auto& post = s.read(p, "input.grad.H_post");
    const auto& res = s.read(p, "input.grad.H_res");
    const auto& tres = s.read(p, "input.grad.Ht_res");
    up.states.resize(std::size_t(D.L));
    for (std::int64_t l = 0; l < D.L; ++l) {
      auto& c = up.states[std::size_t(l)].coef;
      const std::int64_t tl = t * D.L + l;
      c.pre = vec_at<S>(pre, tl * n, n);
      c.post = vec_at<S>(post, tl * n, n);
      c.res = mat_at<S>(res, tl * n * n, n, n);
      c.res_logits = mat_at<S>(tres, tl * n * n, n, n);
      if (res_t) {
        c.res = mhc_from_storage<S>(c.res);
        c.res_logits = mhc_from_storage<S>(c.res_logits);
      }
    }
  };
}

/// Runs any scheme with Mhc's State; output.X and the per-layer coefficients.
template <class S, class M>
void run_mhc(const Problem& p, const Dims& D, Outputs<S>& o, const M& scheme) {
  const std::int64_t n = scheme.config().n;
  const bool res_t = mhc_res_in_out(D), phi_t = mhc_phi_out_in(D);
  const Schema& s = D.sch();
  auto& X = o.add("output.X", s.shape("output.X"));
  auto& Hpre = o.add("output.H_pre", s.shape("output.H_pre"));
  auto& Hpost = o.add("output.H_post", s.shape("output.H_post"));
  auto& Hres = o.add("output.H_res", s.shape("output.H_res"));
  auto& Htres = o.add("output.Ht_res", s.shape("output.Ht_res"));
  run_tokens<S>(
      p, D, o, [&](std::int64_t) -> const auto& { return scheme; },
      [&](std::int64_t, const auto&, const auto& tr) {
        Outputs<S>::append(X, tr.last.X);
        for (const auto& st : tr.states) {  // after write l: the coefficients of layer l
          Outputs<S>::append(Hpre, st.coef.pre.transpose());
          Outputs<S>::append(Hpost, st.coef.post.transpose());
          Outputs<S>::append(Hres, res_t ? mhc_to_storage<S>(st.coef.res) : st.coef.res);
          Outputs<S>::append(Htres, res_t ? mhc_to_storage<S>(st.coef.res_logits) : st.coef.res_logits);
        }
      },
      true, [&](const auto& g) { return mhc_param_grads<S>(g, phi_t, res_t, int(n)); },
      mhc_state_upstream<S>(p, D));
}

template <class S>
void evaluate_mhc(const Problem& p, const Schema& s, Outputs<S>& o) {
  const Dims D = dims(s);
  run_mhc<S>(p, D, o, Mhc<S>(mhc_config_of<S>(p, D)));
}

}  // namespace dmref::conf
