// The golden-fixture corpus: case list and seeded input generation.
#include "dmref/conformance/corpus.hpp"

#include "dmref/random.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace dmref::conf {

namespace {

/// Draws tensors from one SplitMix64 stream, in the order they are asked for,
/// each value rounded to the case's input dtype (docs/fixtures.md).
struct Gen {
  SplitMix64 rng;
  const FloatFormat& fmt;
  Problem& p;
  const json& opt;  // CaseSpec::inputs

  double option(const char* key, double dflt) const { return opt.value(key, dflt); }

  static std::int64_t count(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (auto s : shape) n *= s;
    return n;
  }
  io::Tensor& put(const std::string& name, std::vector<std::int64_t> shape) {
    io::Tensor& t = p.tensors[name];
    t.dtype = "F64";
    t.shape = std::move(shape);
    t.values.assign(count(t.shape), 0.0);
    return t;
  }
  /// uniform[-1, 1) * scale
  void uniform(const std::string& name, std::vector<std::int64_t> shape, double scale) {
    for (auto& x : put(name, std::move(shape)).values) x = round_to(fmt, rng.uniform() * scale);
  }
  /// uniform on [lo, hi)
  void range(const std::string& name, std::vector<std::int64_t> shape, double lo, double hi) {
    for (auto& x : put(name, std::move(shape)).values) x = round_to(fmt, lo + (hi - lo) * 0.5 * (rng.uniform() + 1));
  }
  /// last dimension split into `groups` slices, each scaled to unit L2 norm
  /// (in double), then rounded: keys and queries as the model produces them.
  void unit_groups(const std::string& name, std::vector<std::int64_t> shape, std::int64_t groups) {
    io::Tensor& t = put(name, std::move(shape));
    const std::int64_t w = t.shape.back() / groups;
    for (std::size_t i = 0; i < t.values.size(); i += w) {
      double ss = 0;
      for (std::int64_t j = 0; j < w; ++j) ss += (t.values[i + j] = rng.uniform()) * t.values[i + j];
      for (std::int64_t j = 0; j < w; ++j) t.values[i + j] = round_to(fmt, t.values[i + j] / std::sqrt(ss));
    }
  }
};

std::int64_t cfg_int(const json& c, const char* k) { return c.at(k).get<std::int64_t>(); }

void gen_layers(Gen& g, const json& c) {
  const auto T = cfg_int(c, "tokens"), L = cfg_int(c, "layers"), d = cfg_int(c, "d");
  g.uniform("input.e", {T, d}, g.option("e_scale", 1.0));
  if (c.value("level", "kernel") == "model") {
    const auto h = cfg_int(c, "hidden");
    g.uniform("param.W1", {L, h, d}, 1.0 / std::sqrt(double(d)));
    g.uniform("param.W2", {L, d, h}, 1.0 / std::sqrt(double(h)));
  } else {
    g.uniform("input.v", {T, L, d}, 1.0);
  }
}

void gen_ldm(Gen& g, const json& c) {
  gen_layers(g, c);
  const auto T = cfg_int(c, "tokens"), L = cfg_int(c, "layers"), d = cfg_int(c, "d");
  const auto G = cfg_int(c, "groups"), dk = cfg_int(c, "dk");
  const std::string w = c.value("write", "rls");
  if (c.value("level", "kernel") == "model") {
    const auto hq = c.value("mlp_q_hidden", 0), hk = c.value("mlp_k_hidden", 0);
    auto mlp = [&](const std::string& name, std::int64_t hidden, std::int64_t out) {
      if (hidden == 0) {
        g.uniform("param." + name + ".W", {out, d}, 1.0 / std::sqrt(double(d)));
      } else {
        g.uniform("param." + name + ".W1", {hidden, d}, 1.0 / std::sqrt(double(d)));
        g.uniform("param." + name + ".W2", {out, hidden}, 1.0 / std::sqrt(double(hidden)));
      }
    };
    mlp("mlp_q", hq, G * dk);
    mlp("mlp_k", hk, G * dk + G);
  } else {
    g.unit_groups("input.q", {T, L, G * dk}, G);
    g.unit_groups("input.k", {T, L, G * dk}, G);
    g.range("input.omega", {T, L, G}, 0.0, 2.0);
  }
  if (w == "rls") g.range("param.lambda", {L, G}, g.option("lambda_min", 0.5), 1.0);
  if (w == "delta") g.range("param.beta", {L, G}, 0.0, 1.0);
}

void gen_attnres(Gen& g, const json& c) {
  gen_layers(g, c);
  const auto L = cfg_int(c, "layers"), d = cfg_int(c, "d");
  g.uniform("param.w", {L + 1, d}, 2.0 / std::sqrt(double(d)));  // logits O(1): inside float's exp range
  g.range("param.g", {L + 1, d}, 0.5, 1.5);
}

void gen_hc(Gen& g, const json& c) {
  gen_layers(g, c);
  const auto L = cfg_int(c, "layers"), d = cfg_int(c, "d"), n = cfg_int(c, "n");
  // Around the paper's init (A_m = e_{l mod n}, A_r = I, B = 1), perturbed.
  g.uniform("param.am", {L, n}, 0.2);
  g.uniform("param.ar", {L, n, n}, 0.2);
  g.uniform("param.b", {L, n}, 0.2);
  auto& am = g.p.tensors["param.am"].values;
  auto& ar = g.p.tensors["param.ar"].values;
  auto& b = g.p.tensors["param.b"].values;
  for (std::int64_t l = 0; l < L; ++l) {
    am[l * n + l % n] = round_to(g.fmt, am[l * n + l % n] + 1);
    for (std::int64_t i = 0; i < n; ++i) ar[(l * n + i) * n + i] = round_to(g.fmt, ar[(l * n + i) * n + i] + 1);
    for (std::int64_t i = 0; i < n; ++i) b[l * n + i] = round_to(g.fmt, b[l * n + i] + 1);
  }
  if (c.value("dynamic", false)) {
    g.range("param.ln_gain", {L, d}, 0.5, 1.5);
    if (c.value("norm", "layernorm") == "layernorm") g.uniform("param.ln_bias", {L, d}, 0.1);
    const double w = g.option("w_scale", 1.0) / std::sqrt(double(d));
    g.uniform("param.wm", {L, d}, w);
    g.uniform("param.wr", {L, d, n}, w);
    g.uniform("param.wb", {L, d}, w);
    g.range("param.scale", {L, 2}, g.option("scale_min", 0.01), g.option("scale_max", 0.1));
  }
}

void gen_mhc(Gen& g, const json& c) {
  gen_layers(g, c);
  const auto L = cfg_int(c, "layers"), C = cfg_int(c, "d"), n = cfg_int(c, "n"), nC = n * C;
  const double s = 1.0 / std::sqrt(double(nC));  // x' is RMS-normalized: logits O(1)
  // Projections [L, nC, out], or [L, out, nC] with phi_layout out_in (torch.nn.Linear weights).
  const bool out_in = c.value("phi_layout", "in_out") == "out_in";
  auto phi = [&](std::int64_t out) { return out_in ? std::vector<std::int64_t>{L, out, nC} : std::vector<std::int64_t>{L, nC, out}; };
  g.uniform("param.phi_pre", phi(n), s);
  g.uniform("param.phi_post", phi(n), s);
  const double r = g.option("res_scale", 1.0);  // > 1: Sinkhorn far from uniform
  g.uniform("param.phi_res", phi(n * n), 2 * s * r);
  g.range("param.a", {L, 3}, 0.5, 1.5);
  g.uniform("param.b_pre", {L, n}, 0.5);
  g.uniform("param.b_post", {L, n}, 0.5);
  g.uniform("param.b_res", {L, n, n}, r);
}

void gen_denseformer(Gen& g, const json& c) {
  gen_layers(g, c);
  const auto L = cfg_int(c, "layers");
  const std::int64_t k = c.value("dilation", 1), per = c.value("period", 1);
  g.uniform("param.a", {L + 1, L + 1}, 0.3);
  auto& a = g.p.tensors["param.a"].values;
  for (std::int64_t i = 0; i <= L; ++i)
    for (std::int64_t j = 0; j <= L; ++j) {
      double& x = a[i * (L + 1) + j];
      if (j > i || (i - j) % k != 0 || (i % per != 0 && j != i)) x = 0;  // outside the k x p pattern
      else if (i == 0 || i % per != 0) x = 1;                          // Y_0 = X_0; no DWA: Y_i = X_i
      else if (j == i) x = round_to(g.fmt, 1 + x / 3);
    }
}

/// Upstream gradients of a backward case, drawn after every input (so the
/// inputs equal those of the forward case with the same seed): uniform[-1, 1)
/// for every output the backward takes (docs/fixtures.md, "Gradients").
void gen_upstream(Gen& g, const json& c) {
  const auto T = cfg_int(c, "tokens"), L = cfg_int(c, "layers"), d = cfg_int(c, "d");
  g.uniform("input.grad.h", {T, L, d}, 1.0);
  g.uniform("input.grad.out", {T, d}, 1.0);
  if (c.value("level", "kernel") == "model") g.uniform("input.grad.v", {T, L, d}, 1.0);
  // The final streams of the schemes that output them (output.H, .X, .M, .P).
  if (g.p.scheme == "hc") g.uniform("input.grad.H", {T, cfg_int(c, "n"), d}, 1.0);
  if (g.p.scheme == "mhc") {  // and every layer's coefficients (output.H_pre, .H_post, .H_res, .Ht_res)
    const auto n = cfg_int(c, "n");
    g.uniform("input.grad.X", {T, n, d}, 1.0);
    g.uniform("input.grad.H_pre", {T, L, n}, 1.0);
    g.uniform("input.grad.H_post", {T, L, n}, 1.0);
    g.uniform("input.grad.H_res", {T, L, n, n}, 1.0);
    g.uniform("input.grad.Ht_res", {T, L, n, n}, 1.0);
  }
  if (g.p.scheme == "ldm") {
    const auto G = cfg_int(c, "groups"), dk = cfg_int(c, "dk");
    g.uniform("input.grad.M", {T, G, d / G, dk}, 1.0);
    if (c.value("write", "rls") == "rls") g.uniform("input.grad.P", {T, G, dk, dk}, 1.0);
  }
}

CaseSpec make(std::string id, std::string scheme, std::string preset, std::string dtype, json config,
              bool committed = true, bool ci = true, json inputs = json::object()) {
  CaseSpec c;
  c.inputs = std::move(inputs);
  c.id = std::move(id);
  c.scheme = std::move(scheme);
  c.preset = std::move(preset);
  c.dtype = std::move(dtype);
  c.config = std::move(config);
  c.committed = committed;
  c.ci = ci;
  return c;
}

/// A backward case (issue 12): `id` without the dtype and seed suffix. mHC
/// backward goldens take seconds per case (the ball replay of the Sinkhorn
/// rounds widens fast, and exact zeros need the 2048-bit rung,
/// docs/precision.md), so they are committed but outside the CI regeneration
/// subset (scripts/fixtures checks them).
CaseSpec grad_case(const std::string& id, std::string scheme, std::string preset, const std::string& dt, json config,
                   json inputs = json::object()) {
  const bool ci = scheme != "mhc";
  CaseSpec c = make(id + "." + dt + ".s1", std::move(scheme), std::move(preset), dt, std::move(config), true, ci,
                    std::move(inputs));
  c.grad = true;
  return c;
}

}  // namespace

std::vector<CaseSpec> corpus() {
  std::vector<CaseSpec> v;
  const char* dtypes[] = {"f32", "bf16", "f16"};
  for (const char* dt : dtypes) {
    const std::string s = std::string(".") + dt + ".s1";
    v.push_back(make("preln.kernel.d8.L6" + s, "preln", "default", dt, {{"tokens", 2}, {"layers", 6}, {"d", 8}}));
    v.push_back(make("preln.model.d8_h8.L6" + s, "preln", "default", dt,
                     {{"level", "model"}, {"tokens", 2}, {"layers", 6}, {"d", 8}, {"hidden", 8}}));
    // alpha only where the write reads it (rls): a config key no write reads is refused.
    json ldm = {{"tokens", 2}, {"layers", 8}, {"d", 8}, {"groups", 2}, {"dk", 4}};
    ldm["write"] = "outer_product";
    v.push_back(make("ldm_outer.kernel.g2_dk4_d8.L8" + s, "ldm", "default", dt, ldm));
    ldm["write"] = "delta";
    v.push_back(make("ldm_delta.kernel.g2_dk4_d8.L8" + s, "ldm", "default", dt, ldm));
    ldm["write"] = "rls";
    ldm["alpha"] = 1.0;
    v.push_back(make("ldm_rls.kernel.g2_dk4_d8.L8" + s, "ldm", "default", dt, ldm));
    json model = ldm;
    model["level"] = "model";
    model["hidden"] = 8;
    model["mlp_q_hidden"] = 0;
    model["mlp_k_hidden"] = 6;
    v.push_back(make("ldm_rls.model.g2_dk4_d8_h8.L8" + s, "ldm", "default", dt, model));
  }
  for (const char* dt : dtypes) {
    const std::string s = std::string(".") + dt + ".s1";
    const json base = {{"tokens", 2}, {"layers", 8}, {"d", 8}};
    json full = base, block = base, model = base;
    full["variant"] = "full";
    block["variant"] = "block";
    block["block_size"] = 3;
    model["variant"] = "block";
    model["block_size"] = 2;
    model["level"] = "model";
    model["hidden"] = 8;
    v.push_back(make("attnres_full.kernel.d8.L8" + s, "attnres", "default", dt, full));
    v.push_back(make("attnres_block.kernel.d8_S3.L8" + s, "attnres", "default", dt, block));
    v.push_back(make("attnres_block.model.d8_S2_h8.L8" + s, "attnres", "default", dt, model));
  }
  v.push_back(make("attnres_block.kernel.d256_S6.L48.bf16.s1", "attnres", "default", "bf16",
                   {{"tokens", 1}, {"layers", 48}, {"d", 256}, {"variant", "block"}, {"block_size", 6}}, true, false));
  for (const char* dt : dtypes) {
    const std::string s = std::string(".") + dt + ".s1";
    const json hc = {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"n", 4}};
    json dyn = hc, notanh = hc, hcm = hc;
    dyn["dynamic"] = true;
    notanh["dynamic"] = true;
    notanh["tanh"] = false;
    hcm["dynamic"] = true;
    hcm["level"] = "model";
    hcm["hidden"] = 8;
    v.push_back(make("hc_static.kernel.n4_d8.L6" + s, "hc", "default", dt, hc));
    v.push_back(make("hc_dynamic.kernel.n4_d8.L6" + s, "hc", "default", dt, dyn));
    v.push_back(make("hc_dynamic_notanh.kernel.n4_d8.L6" + s, "hc", "default", dt, notanh));
    v.push_back(make("hc_dynamic.model.n4_d8_h8.L6" + s, "hc", "default", dt, hcm));
    json mhc = {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"n", 4}, {"preset", "paper"}};
    v.push_back(make("mhc.kernel.n4_d8.L6.paper" + s, "mhc", "paper", dt, mhc));
    mhc["preset"] = "deepseek-v4";
    v.push_back(make("mhc.kernel.n4_d8.L6.deepseek-v4" + s, "mhc", "deepseek-v4", dt, mhc));
    mhc["level"] = "model";
    mhc["hidden"] = 8;
    v.push_back(make("mhc.model.n4_d8_h8.L6.deepseek-v4" + s, "mhc", "deepseek-v4", dt, mhc));
    v.push_back(make("denseformer.kernel.d8.L6" + s, "denseformer", "default", dt,
                     {{"tokens", 2}, {"layers", 6}, {"d", 8}}));
    v.push_back(make("denseformer.model.d8_h8.L6" + s, "denseformer", "default", dt,
                     {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"level", "model"}, {"hidden", 8}}));
  }
  v.push_back(make("mhc.kernel.n4_d256.L48.paper.bf16.s1", "mhc", "paper", "bf16",
                   {{"tokens", 1}, {"layers", 48}, {"d", 256}, {"n", 4}, {"preset", "paper"}}, false, false));
  v.push_back(make("hc_dynamic.kernel.n4_d256.L48.bf16.s1", "hc", "default", "bf16",
                   {{"tokens", 1}, {"layers", 48}, {"d", 256}, {"n", 4}, {"dynamic", true}}, true, false));
  // Cases that separate mutants (docs/fixtures.md, "Mutation score"), and the
  // conventions real implementations use, at every dtype.
  for (const char* dt : dtypes) {
    const std::string s = std::string(".") + dt + ".s1";
    // Embeddings of RMS ~6e-4, so mean(h^2) ~ 3e-7 is comparable with the norm
    // epsilons (1e-6): eps inside vs outside the square root, paper vs
    // deepseek-v4 constants.
    const json tiny = {{"e_scale", 1e-3}};
    v.push_back(make("preln.model.d8_h8_e1e-3.L6" + s, "preln", "default", dt,
                     {{"level", "model"}, {"tokens", 2}, {"layers", 6}, {"d", 8}, {"hidden", 8}}, true, true, tiny));
    v.push_back(make("mhc.kernel.n4_d8_e1e-3.L6.paper" + s, "mhc", "paper", dt,
                     {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"n", 4}, {"preset", "paper"}}, true, true, tiny));
    // The production knobs away from their defaults, and residual logits 4x
    // wider (Sinkhorn far from uniform, 4 rounds: not yet converged).
    v.push_back(make("mhc_knobs.kernel.n4_d8_t4.L6.deepseek-v4" + s, "mhc", "deepseek-v4", dt,
                     {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"n", 4}, {"preset", "deepseek-v4"}, {"t_max", 4},
                      {"res_eps_add", "0.05"}, {"res_eps_den", "0.05"}, {"pre_scale", 1.5}, {"post_scale", 1.5}},
                     true, true, {{"res_scale", 4.0}}));
    // The paper preset (Sinkhorn eps 0) with residual logits 4x wider and 4
    // rounds: row-first vs column-first Sinkhorn differ by far more than
    // bf16/f16 resolution there (at unit-scale logits they pass each other).
    v.push_back(make("mhc_knobs.kernel.n4_d8_t4.L6.paper" + s, "mhc", "paper", dt,
                     {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"n", 4}, {"preset", "paper"}, {"t_max", 4}},
                     true, true, {{"res_scale", 4.0}}));
    v.push_back(make("hc_dynamic_rmsnorm.kernel.n4_d8.L6" + s, "hc", "default", dt,
                     {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"n", 4}, {"dynamic", true}, {"norm", "rmsnorm"}}));
    v.push_back(make("denseformer.kernel.d8_k2_p3.L6" + s, "denseformer", "default", dt,
                     {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"dilation", 2}, {"period", 3}}));
    v.push_back(make("attnres_block.kernel.d8_N3.L8" + s, "attnres", "default", dt,
                     {{"tokens", 2}, {"layers", 8}, {"d", 8}, {"variant", "block"}, {"blocks", 3}}));
    // The paper's main-model form: 16 groups, nonlinear query and key MLPs.
    v.push_back(make("ldm_rls.model.g16_dk4_d32_h16_mlp16.L6" + s, "ldm", "default", dt,
                     {{"level", "model"}, {"tokens", 2}, {"layers", 6}, {"d", 32}, {"hidden", 16}, {"groups", 16},
                      {"dk", 4}, {"alpha", 2.0}, {"write", "rls"}, {"mlp_q_hidden", 16}, {"mlp_k_hidden", 16}}));
  }
  // Realistic small shapes: the paper's 16 groups.
  v.push_back(make("ldm_rls.kernel.g16_dk16_d256.L48.bf16.s1", "ldm", "default", "bf16",
                   {{"tokens", 1}, {"layers", 48}, {"d", 256}, {"groups", 16}, {"dk", 16}, {"alpha", 1.0},
                    {"write", "rls"}},
                   true, false, {{"lambda_min", 0.7}}));
  v.push_back(make("ldm_rls.model.g16_dk16_d256_h64.L48.bf16.s1", "ldm", "default", "bf16",
                   {{"level", "model"}, {"tokens", 2}, {"layers", 48}, {"d", 256}, {"hidden", 64}, {"groups", 16},
                    {"dk", 16}, {"alpha", 1.0}, {"write", "rls"}, {"mlp_q_hidden", 0}, {"mlp_k_hidden", 0}},
                   false, false, {{"lambda_min", 0.7}}));
  // Backward cases of the variants that had none (issue 12, second pass):
  // dynamic HC with RMSNorm, LDM keys from x_prev (model level: at kernel
  // level the keys are given) with nonlinear query and key MLPs, the naive P
  // update, AttnRes with N blocks, and mHC in DeepSeek-V4's file layouts
  // (phi [out, nC], H_res transposed: the gradients go back the same way).
  for (const char* dt : dtypes) {
    auto grad = [&](const std::string& id, std::string scheme, std::string preset, json config) {
      v.push_back(grad_case(id, std::move(scheme), std::move(preset), dt, std::move(config)));
    };
    const json hc = {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"n", 4}, {"dynamic", true}, {"norm", "rmsnorm"}};
    json hcm = hc;
    hcm["level"] = "model";
    hcm["hidden"] = 8;
    grad("hc_dynamic_rmsnorm.kernel_grad.n4_d8.L6", "hc", "default", hc);
    grad("hc_dynamic_rmsnorm.model_grad.n4_d8_h8.L6", "hc", "default", hcm);
    const json ldm = {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"groups", 2}, {"dk", 4}, {"alpha", 1.0}, {"write", "rls"}};
    json xprev = ldm, naive = ldm;
    xprev["level"] = "model";
    xprev["hidden"] = 8;
    xprev["keys_from"] = "x_prev";
    xprev["mlp_q_hidden"] = 6;
    xprev["mlp_k_hidden"] = 6;
    naive["p_update"] = "naive";
    grad("ldm_rls_xprev.model_grad.g2_dk4_d8_h8_mlp6.L6", "ldm", "default", xprev);
    grad("ldm_rls_naive.kernel_grad.g2_dk4_d8.L6", "ldm", "default", naive);
    grad("attnres_block.kernel_grad.d8_N3.L6", "attnres", "default",
         {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"variant", "block"}, {"blocks", 3}});
    grad("mhc_layouts.kernel_grad.n4_d8.L6.deepseek-v4", "mhc", "deepseek-v4",
         {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"n", 4}, {"preset", "deepseek-v4"}, {"phi_layout", "out_in"},
          {"res_layout", "in_out"}});
  }
  // Backward cases (issue 12): the forward case's inputs plus upstream
  // gradients; their level is "kernel_grad" or "model_grad" in the id (so a
  // forward glob such as preln.kernel.* does not pick them up).
  for (const char* dt : dtypes) {
    auto grad = [&](const std::string& id, std::string scheme, std::string preset, json config) {
      v.push_back(grad_case(id, std::move(scheme), std::move(preset), dt, std::move(config)));
    };
    const json k = {{"tokens", 2}, {"layers", 6}, {"d", 8}};
    json m = k;
    m["level"] = "model";
    m["hidden"] = 8;
    grad("preln.kernel_grad.d8.L6", "preln", "default", k);
    grad("preln.model_grad.d8_h8.L6", "preln", "default", m);
    grad("denseformer.kernel_grad.d8.L6", "denseformer", "default", k);
    grad("denseformer.model_grad.d8_h8.L6", "denseformer", "default", m);
    json full = k, block = k, blockm = m;
    full["variant"] = "full";
    block["variant"] = "block";
    block["block_size"] = 3;
    blockm["variant"] = "block";
    blockm["block_size"] = 2;
    grad("attnres_full.kernel_grad.d8.L6", "attnres", "default", full);
    grad("attnres_block.kernel_grad.d8_S3.L6", "attnres", "default", block);
    grad("attnres_block.model_grad.d8_S2_h8.L6", "attnres", "default", blockm);
    json hc = k, dyn = k, dynm = m;
    hc["n"] = dyn["n"] = dynm["n"] = 4;
    dyn["dynamic"] = dynm["dynamic"] = true;
    grad("hc_static.kernel_grad.n4_d8.L6", "hc", "default", hc);
    grad("hc_dynamic.kernel_grad.n4_d8.L6", "hc", "default", dyn);
    json notanh = dyn;
    notanh["tanh"] = false;
    grad("hc_dynamic_notanh.kernel_grad.n4_d8.L6", "hc", "default", notanh);
    grad("hc_dynamic.model_grad.n4_d8_h8.L6", "hc", "default", dynm);
    json ldm = {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"groups", 2}, {"dk", 4}, {"alpha", 1.0}};
    for (const char* w : {"outer_product", "delta", "rls"}) {
      ldm["write"] = w;  // the last, rls, stays for the ablations below
      json c = ldm;
      if (c["write"] != "rls") c.erase("alpha");  // only the rls write reads alpha (strict configs)
      const std::string stem = std::string("ldm_") + (w == std::string("outer_product") ? "outer" : w);
      grad(stem + ".kernel_grad.g2_dk4_d8.L6", "ldm", "default", c);
    }
    // RLS ablations: the Joseph P update, memory-only read, no residual write.
    json jos = ldm, mem = ldm, nores = ldm;
    jos["p_update"] = "joseph";
    mem["read_residual"] = false;
    nores["write_residual"] = false;
    grad("ldm_rls_joseph.kernel_grad.g2_dk4_d8.L6", "ldm", "default", jos);
    grad("ldm_rls_memread.kernel_grad.g2_dk4_d8.L6", "ldm", "default", mem);
    grad("ldm_rls_nores.kernel_grad.g2_dk4_d8.L6", "ldm", "default", nores);
    json ldmm = ldm;
    ldmm["level"] = "model";
    ldmm["hidden"] = 8;
    ldmm["mlp_q_hidden"] = 0;
    ldmm["mlp_k_hidden"] = 6;
    grad("ldm_rls.model_grad.g2_dk4_d8_h8.L6", "ldm", "default", ldmm);
    json mhc = {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"n", 4}, {"preset", "paper"}};
    grad("mhc.kernel_grad.n4_d8.L6.paper", "mhc", "paper", mhc);
    mhc["preset"] = "deepseek-v4";
    grad("mhc.kernel_grad.n4_d8.L6.deepseek-v4", "mhc", "deepseek-v4", mhc);
    mhc["level"] = "model";
    mhc["hidden"] = 8;
    grad("mhc.model_grad.n4_d8_h8.L6.deepseek-v4", "mhc", "deepseek-v4", mhc);
  }
  // Backward cases that separate mutants on the gradient goldens
  // (docs/fixtures.md, "Mutants on the backward"): the forward separating
  // cases above, as backward cases. The backward cases above have
  // near-uniform mHC logits, DenseFormer k = p = 1 and embeddings of RMS ~0.6,
  // where those mutants differ from the reference by less than bf16/f16
  // resolution (or not at all).
  for (const char* dt : dtypes) {
    const json tiny = {{"e_scale", 1e-3}};  // mean(h^2) ~ 3e-7, comparable with the norm epsilons (1e-6)
    v.push_back(grad_case("preln.model_grad.d8_h8_e1e-3.L6", "preln", "default", dt,
                          {{"level", "model"}, {"tokens", 2}, {"layers", 6}, {"d", 8}, {"hidden", 8}}, tiny));
    v.push_back(grad_case("mhc.kernel_grad.n4_d8_e1e-3.L6.paper", "mhc", "paper", dt,
                          {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"n", 4}, {"preset", "paper"}}, tiny));
    v.push_back(grad_case("mhc_knobs.kernel_grad.n4_d8_t4.L6.deepseek-v4", "mhc", "deepseek-v4", dt,
                          {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"n", 4}, {"preset", "deepseek-v4"}, {"t_max", 4},
                           {"res_eps_add", "0.05"}, {"res_eps_den", "0.05"}, {"pre_scale", 1.5}, {"post_scale", 1.5}},
                          {{"res_scale", 4.0}}));
    v.push_back(grad_case("mhc_knobs.kernel_grad.n4_d8_t4.L6.paper", "mhc", "paper", dt,
                          {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"n", 4}, {"preset", "paper"}, {"t_max", 4}},
                          {{"res_scale", 4.0}}));
    v.push_back(grad_case("denseformer.kernel_grad.d8_k2_p3.L6", "denseformer", "default", dt,
                          {{"tokens", 2}, {"layers", 6}, {"d", 8}, {"dilation", 2}, {"period", 3}}));
  }
  std::sort(v.begin(), v.end(), [](const CaseSpec& a, const CaseSpec& b) { return a.id < b.id; });
  return v;
}

Problem make_problem(const CaseSpec& c) {
  Problem p;
  p.source = c.id;
  p.scheme = c.scheme;
  p.config = c.config;
  Gen g{SplitMix64(c.seed), format_of(c.dtype), p, c.inputs};
  if (c.scheme == "preln") gen_layers(g, c.config);
  else if (c.scheme == "ldm") gen_ldm(g, c.config);
  else if (c.scheme == "attnres") gen_attnres(g, c.config);
  else if (c.scheme == "hc") gen_hc(g, c.config);
  else if (c.scheme == "mhc") gen_mhc(g, c.config);
  else if (c.scheme == "denseformer") gen_denseformer(g, c.config);
  else throw std::invalid_argument("corpus: no input generator for scheme \"" + c.scheme + "\"");
  if (c.grad) gen_upstream(g, c.config);
  p.grad = c.grad;
  return p;
}

}  // namespace dmref::conf
