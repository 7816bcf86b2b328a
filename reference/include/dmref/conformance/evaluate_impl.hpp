// dmref/conformance/evaluate_impl.hpp: run the reference on a Problem at
// scalar S (declared in evaluate.hpp, instantiated in reference/src/evaluate_*.cpp).
// One adapter per scheme turns the config and tensors into the scheme's
// parameters, runs every token through `forward`, and names the outputs:
//   output.h   [T, L, d]  input of every layer (h_0 included)
//   output.v   [T, L, d]  output of every layer (model level only)
//   output.out [T, d]     final(streams)
// plus each scheme's own state outputs (docs/fixtures.md).
// Levels: "kernel" (layer outputs given as input.v, and for LDM q/k/omega
// given) and "model" (the layer function W2 tanh(W1 RMSNorm(h)) from
// param.W1 [L, hidden, d], param.W2 [L, d, hidden]).
// Each adapter is two parts: <scheme>_config reads the config and tensors
// into the scheme's parameters, run_<scheme> runs any scheme class with that
// State through the tokens and names its outputs. evaluate() joins them for
// the reference; tests/mutants joins them with deliberately wrong variants.
#pragma once

#include "dmref/attnres.hpp"
#include "dmref/conformance/evaluate.hpp"
#include "dmref/denseformer.hpp"
#include "dmref/hc.hpp"
#include "dmref/mhc.hpp"
#include "dmref/ldm.hpp"
#include "dmref/model.hpp"
#include "dmref/preln.hpp"

#include <functional>
#include <optional>

namespace dmref::conf {

struct Dims {
  std::int64_t T, L, d;
  bool model;
};

inline Dims dims(const Problem& p) {
  Dims D{p.integer("tokens"), p.integer("layers"), p.integer("d"), false};
  const std::string level = p.text("level", "kernel");
  if (level != "kernel" && level != "model") p.fail("config.level", "must be \"kernel\" or \"model\", got \"" + level + "\"");
  D.model = level == "model";
  return D;
}

/// The model's layer function F_l(h) = W2_l tanh(W1_l RMSNorm(h)), read from
/// param.W1 / param.W2 one layer at a time: only layer l is ever held at S.
/// (Converting the whole stack up front held L x 2 x hidden x d intervals:
/// 1.5 GiB for d = 256, hidden 64, L = 48 at 533 bits.) Converting a double to
/// S is exact, so the values are those of TanhMlpStack<S>.
template <class S>
struct TensorMlpStack {
  const io::Tensor *W1, *W2;
  std::int64_t hidden, d;
  Vec<S> operator()(int l, const Vec<S>& h) const {
    const TanhMlpLayer<S> layer{mat_at<S>(*W1, l * hidden * d, hidden, d), mat_at<S>(*W2, l * d * hidden, d, hidden)};
    return layer(h);
  }
};

template <class S>
TensorMlpStack<S> layer_stack(const Problem& p, const Dims& D) {
  const auto hidden = p.integer("hidden");
  return {&p.tensor("param.W1", {D.L, hidden, D.d}), &p.tensor("param.W2", {D.L, D.d, hidden}), hidden, D.d};
}

/// Runs each token through `make_scheme(t)` and records h, v, out; `extra`
/// is called with (token, final state) for scheme-specific outputs.
template <class S, class MakeScheme, class Extra>
void run_tokens(const Problem& p, const Dims& D, Outputs<S>& o, MakeScheme&& make_scheme, Extra&& extra,
                bool record_states = false) {
  const auto& E = p.tensor("input.e", {D.T, D.d});
  std::optional<TensorMlpStack<S>> stack;
  const io::Tensor* V = nullptr;
  if (D.model) stack = layer_stack<S>(p, D);
  else V = &p.tensor("input.v", {D.T, D.L, D.d});
  auto& h = o.add("output.h", {D.T, D.L, D.d});
  auto* v = D.model ? &o.add("output.v", {D.T, D.L, D.d}) : nullptr;
  auto& out = o.add("output.out", {D.T, D.d});
  if (p.layout_only) {  // validate(): every token's scheme is built (and checks itself), nothing runs
    for (std::int64_t t = 0; t < D.T; ++t) (void)make_scheme(t);
    return;
  }
  for (std::int64_t t = 0; t < D.T; ++t) {
    const auto& scheme = make_scheme(t);  // a reference to one shared scheme, or a per-token temporary
    const Vec<S> e = vec_at<S>(E, t * D.d, D.d);
    std::vector<Vec<S>> given;
    if (!D.model)
      for (std::int64_t l = 0; l < D.L; ++l) given.push_back(vec_at<S>(*V, (t * D.L + l) * D.d, D.d));
    const auto tr = D.model ? forward(scheme, e, int(D.L), *stack, record_states)
                            : forward(scheme, e, int(D.L), GivenOutputs<S>{&given}, record_states);
    for (const auto& x : tr.h) Outputs<S>::append(h, x.transpose());
    if (v)
      for (const auto& x : tr.v) Outputs<S>::append(*v, x.transpose());
    Outputs<S>::append(out, tr.out.transpose());
    extra(t, scheme, tr);
  }
}

/// Schemes with no outputs beyond h, v, out (PreLN, AttnRes, DenseFormer).
template <class S, class M>
void run_plain(const Problem& p, const Dims& D, Outputs<S>& o, const M& scheme) {
  run_tokens<S>(p, D, o, [&](std::int64_t) -> const auto& { return scheme; }, [](auto, const auto&, const auto&) {});
}

// ---------------------------------------------------------------- PreLN
template <class S>
void eval_preln(const Problem& p, Outputs<S>& o) {
  const Dims D = dims(p);
  run_plain<S>(p, D, o, PreLN<S>{});
}

// ---------------------------------------------------------------- LDM
template <class S>
LdmConfig<S> ldm_config(const Problem& p, const Dims& D) {
  LdmConfig<S> c;
  c.d = int(D.d);
  c.groups = int(p.integer("groups"));
  c.dk = int(p.integer("dk"));
  if (D.d % c.groups != 0) p.fail("config.groups", std::to_string(c.groups) + " does not divide d = " + std::to_string(D.d));
  const std::string w = p.text("write", "rls");
  if (w == "rls") c.write = MemoryWrite::rls;
  else if (w == "outer_product") c.write = MemoryWrite::outer_product;
  else if (w == "delta") c.write = MemoryWrite::delta;
  else p.fail("config.write", "must be rls, outer_product or delta, got \"" + w + "\"");
  const std::string pu = p.text("p_update", "symmetric");
  if (pu == "symmetric") c.p_update = PUpdate::symmetric;
  else if (pu == "joseph") c.p_update = PUpdate::joseph;
  else if (pu == "naive") c.p_update = PUpdate::naive;
  else p.fail("config.p_update", "must be symmetric, joseph or naive, got \"" + pu + "\"");
  c.read_residual = p.flag("read_residual", true);
  c.write_residual = p.flag("write_residual", true);
  if (D.model) {  // kernel level: q, k, omega are inputs, so there is no key source to choose
    const std::string ks = p.text("keys_from", "x_l");
    if (ks == "x_l") c.keys = KeySource::layer_output;
    else if (ks == "x_prev") c.keys = KeySource::layer_input;
    else p.fail("config.keys_from", "must be x_l or x_prev, got \"" + ks + "\"");
  }
  if (c.write == MemoryWrite::rls) {
    const double a = p.number("alpha");
    if (!(a > 0)) p.fail("config.alpha", "must be > 0, got " + show(a));
    c.alpha = S(a);
    const auto& lam = p.tensor("param.lambda", {D.L, c.groups});
    for (std::size_t i = 0; i < lam.values.size(); ++i)
      if (!(lam.values[i] > 0 && lam.values[i] <= 1))
        p.fail("param.lambda", "element " + std::to_string(i) + " = " + show(lam.values[i]) + " is outside (0, 1]");
    c.lambda = mat_at<S>(lam, 0, D.L, c.groups);
  }
  if (c.write == MemoryWrite::delta) c.beta = mat_at<S>(p.tensor("param.beta", {D.L, c.groups}), 0, D.L, c.groups);
  return c;
}

template <class S>
SmallMlp<S> small_mlp(const Problem& p, const std::string& name, std::int64_t in, std::int64_t out) {
  SmallMlp<S> m;
  // Required, no default: 0 (a linear map) and the paper's nonlinear MLP are
  // both common, so a config must say which (and the tensors it names must match).
  const std::int64_t hidden = p.integer(name + "_hidden", 0);
  if (hidden == 0) {
    m.W2 = mat_at<S>(p.tensor("param." + name + ".W", {out, in}), 0, out, in);
  } else {
    m.W1 = mat_at<S>(p.tensor("param." + name + ".W1", {hidden, in}), 0, hidden, in);
    m.W2 = mat_at<S>(p.tensor("param." + name + ".W2", {out, hidden}), 0, out, hidden);
  }
  return m;
}

/// The reference scheme for a config and an addresser.
struct MakeLdm {
  template <class S, class A>
  LinearDepthMemory<S, A> operator()(const LdmConfig<S>& c, A a) const {
    return LinearDepthMemory<S, A>(c, std::move(a));
  }
};

/// Runs the scheme `make(cfg, addresser)` builds (MakeLdm: the reference).
template <class S, class Make>
void run_ldm(const Problem& p, const Dims& D, Outputs<S>& o, const LdmConfig<S>& cfg, const Make& make) {
  const std::int64_t G = cfg.groups, dk = cfg.dk, dv = cfg.dv(), n = G * dk;
  auto& M = o.add("output.M", {D.T, G, dv, dk});
  auto* P = cfg.write == MemoryWrite::rls ? &o.add("output.P", {D.T, G, dk, dk}) : nullptr;
  auto record = [&](const auto& st) {
    for (const auto& g : st.mem) {
      Outputs<S>::append(M, g.M);
      if (P) Outputs<S>::append(*P, g.P);
    }
  };
  if (D.model) {
    MlpAddresses<S> addr{small_mlp<S>(p, "mlp_q", D.d, n), small_mlp<S>(p, "mlp_k", D.d, n + G), int(G), int(dk)};
    const auto scheme = make(cfg, addr);
    run_tokens<S>(p, D, o, [&](std::int64_t) -> const auto& { return scheme; },
                  [&](std::int64_t, const auto&, const auto& tr) { record(tr.last); });
  } else {
    const auto& Q = p.tensor("input.q", {D.T, D.L, n});
    const auto& K = p.tensor("input.k", {D.T, D.L, n});
    const auto& W = p.tensor("input.omega", {D.T, D.L, G});
    for (std::size_t i = 0; i < W.values.size(); ++i)
      if (!(W.values[i] >= 0)) p.fail("input.omega", "element " + std::to_string(i) + " = " + show(W.values[i]) + " is negative");
    run_tokens<S>(
        p, D, o,
        [&](std::int64_t t) {
          std::vector<Address<S>> a;
          for (std::int64_t l = 0; l < D.L; ++l)
            a.push_back({vec_at<S>(Q, (t * D.L + l) * n, n), vec_at<S>(K, (t * D.L + l) * n, n),
                         vec_at<S>(W, (t * D.L + l) * G, G)});
          return make(cfg, GivenAddresses<S>{std::move(a)});
        },
        [&](std::int64_t, const auto&, const auto& tr) { record(tr.last); });
  }
}

template <class S>
void eval_ldm(const Problem& p, Outputs<S>& o) {
  const Dims D = dims(p);
  run_ldm<S>(p, D, o, ldm_config<S>(p, D), MakeLdm{});
}

// ---------------------------------------------------------------- AttnRes
template <class S>
AttnResConfig<S> attnres_config(const Problem& p, const Dims& D) {
  AttnResConfig<S> c;
  c.d = int(D.d);
  c.layers = int(D.L);
  const std::string variant = p.text("variant", "full");
  if (variant == "full") c.variant = AttnResVariant::full;
  else if (variant == "block") c.variant = AttnResVariant::block;
  else p.fail("config.variant", "must be full or block, got \"" + variant + "\"");
  if (c.variant == AttnResVariant::block) {  // exactly one layout: fixed size S, or N blocks
    c.block_size = int(p.integer_or("block_size", 0, 1));
    c.num_blocks = int(p.integer_or("blocks", 0, 1));
    if ((c.block_size > 0) == (c.num_blocks > 0))
      p.fail("config.block_size", "block AttnRes needs exactly one of block_size (fixed size) and blocks (N blocks)");
    if (c.num_blocks > D.L)
      p.fail("config.blocks", std::to_string(c.num_blocks) + " blocks for " + std::to_string(D.L) + " layers");
  }
  c.eps = p.real<S>("eps", "1e-6");
  const auto& w = p.tensor("param.w", {D.L + 1, D.d});
  const auto& g = p.tensor("param.g", {D.L + 1, D.d});
  for (std::int64_t l = 0; l <= D.L; ++l) {
    c.w.push_back(vec_at<S>(w, l * D.d, D.d));
    c.g.push_back(vec_at<S>(g, l * D.d, D.d));
  }
  return c;
}

template <class S>
void eval_attnres(const Problem& p, Outputs<S>& o) {
  const Dims D = dims(p);
  run_plain<S>(p, D, o, AttentionResiduals<S>(attnres_config<S>(p, D)));
}

// ---------------------------------------------------------------- HC
template <class S>
HcConfig<S> hc_config(const Problem& p, const Dims& D) {
  const auto n = p.integer("n"), d = D.d;
  HcConfig<S> c;
  c.n = int(n);
  c.d = int(d);
  c.dynamic = p.flag("dynamic", false);
  c.tanh = p.flag("tanh", true);
  if (c.dynamic) {  // static HC has no norm
    c.ln_eps = p.real<S>("ln_eps", "1e-5");
    const std::string norm = p.text("norm", "layernorm");
    if (norm == "layernorm") c.norm = HcNorm::layer;
    else if (norm == "rmsnorm") c.norm = HcNorm::rms;
    else p.fail("config.norm", "must be layernorm or rmsnorm, got \"" + norm + "\"");
  }
  const auto& am = p.tensor("param.am", {D.L, n});
  const auto& ar = p.tensor("param.ar", {D.L, n, n});
  const auto& b = p.tensor("param.b", {D.L, n});
  const io::Tensor *g = nullptr, *bias = nullptr, *wm = nullptr, *wr = nullptr, *wb = nullptr, *sc = nullptr;
  if (c.dynamic) {
    g = &p.tensor("param.ln_gain", {D.L, d});
    if (c.norm == HcNorm::layer) bias = &p.tensor("param.ln_bias", {D.L, d});
    wm = &p.tensor("param.wm", {D.L, d});
    wr = &p.tensor("param.wr", {D.L, d, n});
    wb = &p.tensor("param.wb", {D.L, d});
    sc = &p.tensor("param.scale", {D.L, 2});
  }
  for (std::int64_t l = 0; l < D.L; ++l) {
    HcLayer<S> q;
    q.am = vec_at<S>(am, l * n, n);
    q.ar = mat_at<S>(ar, l * n * n, n, n);
    q.b = vec_at<S>(b, l * n, n);
    if (c.dynamic) {
      q.ln_gain = vec_at<S>(*g, l * d, d);
      if (bias) q.ln_bias = vec_at<S>(*bias, l * d, d);
      q.wm = vec_at<S>(*wm, l * d, d);
      q.wr = mat_at<S>(*wr, l * d * n, d, n);
      q.wb = vec_at<S>(*wb, l * d, d);
      q.s_a = S(sc->values[2 * l]);
      q.s_b = S(sc->values[2 * l + 1]);
    }
    c.layers.push_back(std::move(q));
  }
  return c;
}

/// Runs any scheme with HyperConnections' State; output.H as well.
template <class S, class M>
void run_hc(const Problem& p, const Dims& D, Outputs<S>& o, const M& scheme) {
  auto& H = o.add("output.H", {D.T, scheme.config().n, D.d});
  run_tokens<S>(p, D, o, [&](std::int64_t) -> const auto& { return scheme; },
                [&](std::int64_t, const auto&, const auto& tr) { Outputs<S>::append(H, tr.last.H); });
}

template <class S>
void eval_hc(const Problem& p, Outputs<S>& o) {
  const Dims D = dims(p);
  run_hc<S>(p, D, o, HyperConnections<S>(hc_config<S>(p, D)));
}

// ---------------------------------------------------------------- mHC
/// How the residual matrix travels in files: "out_in" (paper: entry (i, j) weighs
/// stream j into stream i; phi_res column i*n + j) or "in_out" (DeepSeek-V4's
/// comb matrix, the transpose). Applies to param.phi_res, param.b_res and the
/// outputs H_res, Ht_res.
inline bool mhc_res_in_out(const Problem& p) {
  const std::string r = p.text("res_layout", "out_in");
  if (r != "out_in" && r != "in_out") p.fail("config.res_layout", "must be out_in or in_out, got \"" + r + "\"");
  return r == "in_out";
}

template <class S>
MhcConfig<S> mhc_config_of(const Problem& p, const Dims& D) {
  const auto n = p.integer("n"), C = D.d, nC = n * C;
  const std::string preset = p.text("preset", "paper");
  MhcPreset pr = MhcPreset::paper;
  if (preset == "deepseek-v4") pr = MhcPreset::deepseek_v4;
  else if (preset != "paper") p.fail("config.preset", "must be paper or deepseek-v4, got \"" + preset + "\"");
  MhcConfig<S> c = mhc_config<S>(pr, int(n), int(C));
  // The knobs production kernels expose; each defaults to the preset's value.
  c.t_max = int(p.integer_or("t_max", c.t_max, 1, p.limits.max_iterations));
  auto knob = [&](const char* key, S& x, bool nonnegative) {
    if (!p.config.contains(key)) return;
    x = p.real<S>(key, "0");
    if (nonnegative && !(to_double(x) >= 0)) p.fail(std::string("config.") + key, "must be >= 0");
  };
  knob("rms_eps", c.rms_eps, true);
  knob("pre_eps", c.pre_eps, true);
  knob("res_eps_add", c.res_eps_add, true);
  knob("res_eps_den", c.res_eps_den, true);
  knob("pre_scale", c.pre_scale, false);
  knob("post_scale", c.post_scale, false);
  // Projections stored [nC, out] (x' phi, default "in_out") or [out, nC]
  // (a torch.nn.Linear weight, "out_in").
  const std::string pl = p.text("phi_layout", "in_out");
  if (pl != "in_out" && pl != "out_in") p.fail("config.phi_layout", "must be in_out or out_in, got \"" + pl + "\"");
  const bool phi_t = pl == "out_in", res_t = mhc_res_in_out(p);
  auto phi_tensor = [&](const std::string& name, std::int64_t out) -> const io::Tensor& {
    return phi_t ? p.tensor(name, {D.L, out, nC}) : p.tensor(name, {D.L, nC, out});
  };
  const auto& phi_pre = phi_tensor("param.phi_pre", n);
  const auto& phi_post = phi_tensor("param.phi_post", n);
  const auto& phi_res = phi_tensor("param.phi_res", n * n);
  auto phi = [&](const io::Tensor& t, std::int64_t l, std::int64_t out) {
    return phi_t ? Mat<S>(mat_at<S>(t, l * nC * out, out, nC).transpose()) : mat_at<S>(t, l * nC * out, nC, out);
  };
  const auto& a = p.tensor("param.a", {D.L, 3});
  const auto& b_pre = p.tensor("param.b_pre", {D.L, n});
  const auto& b_post = p.tensor("param.b_post", {D.L, n});
  const auto& b_res = p.tensor("param.b_res", {D.L, n, n});
  for (std::int64_t l = 0; l < D.L; ++l) {
    MhcLayer<S> q;
    q.phi_pre = phi(phi_pre, l, n);
    q.phi_post = phi(phi_post, l, n);
    q.phi_res = phi(phi_res, l, n * n);
    if (res_t) q.phi_res = mhc_res_columns_transpose<S>(q.phi_res, int(n));
    q.a_pre = S(a.values[3 * l]);
    q.a_post = S(a.values[3 * l + 1]);
    q.a_res = S(a.values[3 * l + 2]);
    q.b_pre = vec_at<S>(b_pre, l * n, n);
    q.b_post = vec_at<S>(b_post, l * n, n);
    q.b_res = mat_at<S>(b_res, l * n * n, n, n);
    if (res_t) q.b_res = mhc_from_storage<S>(q.b_res);
    c.layers.push_back(std::move(q));
  }
  return c;
}

/// Runs any scheme with Mhc's State; output.X and the per-layer coefficients.
template <class S, class M>
void run_mhc(const Problem& p, const Dims& D, Outputs<S>& o, const M& scheme) {
  const std::int64_t n = scheme.config().n, C = D.d;
  const bool res_t = mhc_res_in_out(p);
  auto& X = o.add("output.X", {D.T, n, C});
  auto& Hpre = o.add("output.H_pre", {D.T, D.L, n});
  auto& Hpost = o.add("output.H_post", {D.T, D.L, n});
  auto& Hres = o.add("output.H_res", {D.T, D.L, n, n});
  auto& Htres = o.add("output.Ht_res", {D.T, D.L, n, n});
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
      true);
}

template <class S>
void eval_mhc(const Problem& p, Outputs<S>& o) {
  const Dims D = dims(p);
  run_mhc<S>(p, D, o, Mhc<S>(mhc_config_of<S>(p, D)));
}

// ---------------------------------------------------------------- DenseFormer
template <class S>
DenseFormerConfig<S> denseformer_config(const Problem& p, const Dims& D) {
  DenseFormerConfig<S> c;
  c.d = int(D.d);
  c.dilation = int(p.integer_or("dilation", 1, 1));
  c.period = int(p.integer_or("period", 1, 1));
  c.a = mat_at<S>(p.tensor("param.a", {D.L + 1, D.L + 1}), 0, D.L + 1, D.L + 1);
  return c;
}

template <class S>
void eval_denseformer(const Problem& p, Outputs<S>& o) {
  const Dims D = dims(p);
  run_plain<S>(p, D, o, DenseFormer<S>(denseformer_config<S>(p, D)));
}

// ---------------------------------------------------------------- dispatch
template <class S>
Outputs<S> evaluate(const Problem& p) {
  Outputs<S> o;
  o.problem = &p;
  if (p.scheme == "preln") eval_preln<S>(p, o);
  else if (p.scheme == "ldm") eval_ldm<S>(p, o);
  else if (p.scheme == "attnres") eval_attnres<S>(p, o);
  else if (p.scheme == "hc") eval_hc<S>(p, o);
  else if (p.scheme == "mhc") eval_mhc<S>(p, o);
  else if (p.scheme == "denseformer") eval_denseformer<S>(p, o);
  else p.fail("scheme", "unknown scheme \"" + p.scheme + "\" (preln, ldm, attnres, hc, mhc, denseformer)");
  o.problem = nullptr;  // p may be a temporary
  return o;
}

}  // namespace dmref::conf
