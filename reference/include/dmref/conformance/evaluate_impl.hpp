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
#pragma once

#include "dmref/conformance/evaluate.hpp"
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

template <class S>
TanhMlpStack<S> layer_stack(const Problem& p, const Dims& D) {
  const auto hidden = p.integer("hidden");
  const auto& W1 = p.tensor("param.W1", {D.L, hidden, D.d});
  const auto& W2 = p.tensor("param.W2", {D.L, D.d, hidden});
  TanhMlpStack<S> st;
  for (std::int64_t l = 0; l < D.L; ++l)
    st.layers.push_back({mat_at<S>(W1, l * hidden * D.d, hidden, D.d), mat_at<S>(W2, l * D.d * hidden, D.d, hidden)});
  return st;
}

/// Runs each token through `make_scheme(t)` and records h, v, out; `extra`
/// is called with (token, final state) for scheme-specific outputs.
template <class S, class MakeScheme, class Extra>
void run_tokens(const Problem& p, const Dims& D, Outputs<S>& o, MakeScheme&& make_scheme, Extra&& extra) {
  const auto& E = p.tensor("input.e", {D.T, D.d});
  std::optional<TanhMlpStack<S>> stack;
  const io::Tensor* V = nullptr;
  if (D.model) stack = layer_stack<S>(p, D);
  else V = &p.tensor("input.v", {D.T, D.L, D.d});
  auto& h = o.add("output.h", {D.T, D.L, D.d});
  auto* v = D.model ? &o.add("output.v", {D.T, D.L, D.d}) : nullptr;
  auto& out = o.add("output.out", {D.T, D.d});
  for (std::int64_t t = 0; t < D.T; ++t) {
    const auto scheme = make_scheme(t);
    const Vec<S> e = vec_at<S>(E, t * D.d, D.d);
    std::vector<Vec<S>> given;
    if (!D.model)
      for (std::int64_t l = 0; l < D.L; ++l) given.push_back(vec_at<S>(*V, (t * D.L + l) * D.d, D.d));
    const auto tr = D.model ? forward(scheme, e, int(D.L), *stack, false)
                            : forward(scheme, e, int(D.L), GivenOutputs<S>{&given}, false);
    for (const auto& x : tr.h) Outputs<S>::append(h, x.transpose());
    if (v)
      for (const auto& x : tr.v) Outputs<S>::append(*v, x.transpose());
    Outputs<S>::append(out, tr.out.transpose());
    extra(t, scheme, tr);
  }
}

// ---------------------------------------------------------------- PreLN
template <class S>
void eval_preln(const Problem& p, Outputs<S>& o) {
  const Dims D = dims(p);
  run_tokens<S>(p, D, o, [](std::int64_t) { return PreLN<S>{}; }, [](auto, const auto&, const auto&) {});
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
  if (c.write == MemoryWrite::rls) {
    const double a = p.number("alpha");
    if (!(a > 0)) p.fail("config.alpha", "must be > 0, got " + std::to_string(a));
    c.alpha = S(a);
    const auto& lam = p.tensor("param.lambda", {D.L, c.groups});
    for (std::size_t i = 0; i < lam.values.size(); ++i)
      if (!(lam.values[i] > 0 && lam.values[i] <= 1))
        p.fail("param.lambda", "element " + std::to_string(i) + " = " + std::to_string(lam.values[i]) + " is outside (0, 1]");
    c.lambda = mat_at<S>(lam, 0, D.L, c.groups);
  }
  if (c.write == MemoryWrite::delta) c.beta = mat_at<S>(p.tensor("param.beta", {D.L, c.groups}), 0, D.L, c.groups);
  return c;
}

template <class S>
SmallMlp<S> small_mlp(const Problem& p, const std::string& name, std::int64_t in, std::int64_t out) {
  SmallMlp<S> m;
  const std::int64_t hidden = p.integer_or(name + "_hidden", 0);
  if (hidden == 0) {
    m.W2 = mat_at<S>(p.tensor("param." + name + ".W", {out, in}), 0, out, in);
  } else {
    m.W1 = mat_at<S>(p.tensor("param." + name + ".W1", {hidden, in}), 0, hidden, in);
    m.W2 = mat_at<S>(p.tensor("param." + name + ".W2", {out, hidden}), 0, out, hidden);
  }
  return m;
}

template <class S>
void eval_ldm(const Problem& p, Outputs<S>& o) {
  const Dims D = dims(p);
  const LdmConfig<S> cfg = ldm_config<S>(p, D);
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
    const LdmModel<S> scheme(cfg, addr);
    run_tokens<S>(p, D, o, [&](std::int64_t) { return scheme; },
                  [&](std::int64_t, const auto&, const auto& tr) { record(tr.last); });
  } else {
    const auto& Q = p.tensor("input.q", {D.T, D.L, n});
    const auto& K = p.tensor("input.k", {D.T, D.L, n});
    const auto& W = p.tensor("input.omega", {D.T, D.L, G});
    for (std::size_t i = 0; i < W.values.size(); ++i)
      if (!(W.values[i] >= 0)) p.fail("input.omega", "element " + std::to_string(i) + " = " + std::to_string(W.values[i]) + " is negative");
    run_tokens<S>(
        p, D, o,
        [&](std::int64_t t) {
          std::vector<Address<S>> a;
          for (std::int64_t l = 0; l < D.L; ++l)
            a.push_back({vec_at<S>(Q, (t * D.L + l) * n, n), vec_at<S>(K, (t * D.L + l) * n, n),
                         vec_at<S>(W, (t * D.L + l) * G, G)});
          return LdmKernel<S>(cfg, GivenAddresses<S>{std::move(a)});
        },
        [&](std::int64_t, const auto&, const auto& tr) { record(tr.last); });
  }
}

// ---------------------------------------------------------------- dispatch
template <class S>
Outputs<S> evaluate(const Problem& p) {
  Outputs<S> o;
  if (p.scheme == "preln") eval_preln<S>(p, o);
  else if (p.scheme == "ldm") eval_ldm<S>(p, o);
  else p.fail("scheme", "unknown scheme \"" + p.scheme + "\" (preln, ldm, attnres, hc, mhc, denseformer)");
  return o;
}

}  // namespace dmref::conf
