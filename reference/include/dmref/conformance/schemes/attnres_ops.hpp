// dmref/conformance/schemes/attnres_ops.hpp: Block Attention Residuals at op
// level (docs/attnres_ops.md): the ops a block kernel computes, M tokens at
// once, with the statistics of the paper's two-phase (online softmax) block
// algorithm as tensors (names after the public flash-attn-res kernels):
//   partial_sum  output.partial = input.partial + input.v     b_n^i = b_n^{i-1} + v
//   readout      output.h = softmax readout of w, g over input.blocks [M, N, C]
//                (and input.partial when config.partial)
//   phase1       output.o [M, S, C], output.lse [M, S]: the statistics of the
//                S queries param.w [S, C] over input.blocks (attnres_stats)
//   phase2       output.h, output.lse: input.o, input.lse merged with the
//                partial sum input.partial (attnres_merge)
// Every number comes from attnres.hpp / attnres_backward.hpp; this file only
// moves tensors. Schema, corpus rows, registry entry:
// src/conformance/schemes/attnres_ops.cpp.
#pragma once

#include "dmref/attnres_backward.hpp"
#include "dmref/conformance/binding.hpp"

namespace dmref::conf {

enum class AttnResOp { readout, phase1, phase2, partial_sum };
inline AttnResOp attnres_op_named(const std::string& o) {
  return o == "readout" ? AttnResOp::readout
         : o == "phase1" ? AttnResOp::phase1
         : o == "phase2" ? AttnResOp::phase2
                         : AttnResOp::partial_sum;
}

/// The steps of the ops, each the reference's own function (tests/mutants
/// replaces one at a time by hiding a member in a derived struct).
template <class S>
struct AttnResOpsSteps {
  Vec<S> partial_sum(const Vec<S>& b, const Vec<S>& v) const { return b + v; }
  /// readout: the source list (blocks, then the partial when read).
  std::vector<Vec<S>> sources(std::vector<Vec<S>> blocks, const Vec<S>* partial) const {
    if (partial) blocks.push_back(*partial);
    return blocks;
  }
  Vec<S> readout(const std::vector<Vec<S>>& src, const Vec<S>& w, const Vec<S>& g, const S& eps) const {
    return attnres_mix<S>(src, w, g, eps);
  }
  /// phase1: the query row of statistics row s.
  int query(int s, int S_) const {
    (void)S_;
    return s;
  }
  AttnResStats<S> stats(const std::vector<Vec<S>>& src, const Vec<S>& w, const Vec<S>& g, const S& eps) const {
    return attnres_stats<S>(src, w, g, eps);
  }
  AttnResStats<S> merge(const AttnResStats<S>& st, const Vec<S>& b, const Vec<S>& w, const Vec<S>& g, const S& eps) const {
    return attnres_merge<S>(st, b, w, g, eps);
  }
  // ---- backward
  void readout_vjp(const std::vector<Vec<S>>& src, const Vec<S>& w, const Vec<S>& g, const S& eps, const Vec<S>& dh,
                   std::vector<Vec<S>>& dsrc, Vec<S>& dw, Vec<S>& dg) const {
    attnres_mix_vjp<S>(src, w, g, eps, dh, dsrc, dw, dg);
  }
  void stats_vjp(const std::vector<Vec<S>>& src, const Vec<S>& w, const Vec<S>& g, const S& eps, const Vec<S>& dout,
                 const S& dlse, std::vector<Vec<S>>& dsrc, Vec<S>& dw, Vec<S>& dg) const {
    attnres_stats_vjp<S>(src, w, g, eps, dout, dlse, dsrc, dw, dg);
  }
  void merge_vjp(const AttnResStats<S>& st, const Vec<S>& b, const Vec<S>& w, const Vec<S>& g, const S& eps,
                 const Vec<S>& dh, const S& dlse_out, Vec<S>& dout, S& dlse, Vec<S>& db, Vec<S>& dw, Vec<S>& dg) const {
    attnres_merge_vjp<S>(st, b, w, g, eps, dh, dlse_out, dout, dlse, db, dw, dg);
  }
};

/// The scheme's validation of a pseudo-query / gain pair read by a readout
/// over n sources (AttentionResiduals::validate: widths, finiteness, the
/// logit bound within S's exp range); its ParameterError names w or g.
template <class S>
void attnres_ops_check_pair(const Vec<S>& w, const Vec<S>& g, const S& eps, int n) {
  AttnResConfig<S> c;
  c.d = int(w.size());
  c.layers = n - 1;
  c.eps = eps;
  c.w.assign(std::size_t(n), w);
  c.g.assign(std::size_t(n), g);
  (void)AttentionResiduals<S>(std::move(c));
}

/// Token by token: the op, and with p.grad its VJP; parameter gradients summed over tokens in token order.
template <class S, class Steps = AttnResOpsSteps<S>>
void run_attnres_ops(const Problem& p, const Schema& s, Outputs<S>& o, const Steps& st = {}) {
  const AttnResOp op = attnres_op_named(s.text("op"));
  const std::int64_t M = s.integer("tokens"), C = s.integer("d");
  check_upstream(p, s);
  const bool blocks_in = op == AttnResOp::readout || op == AttnResOp::phase1;
  const std::int64_t N = blocks_in ? s.integer("sources") : 0;
  const std::int64_t Q = op == AttnResOp::phase1 ? s.integer("queries") : 1;
  const bool reads_partial = op == AttnResOp::phase2 || op == AttnResOp::partial_sum ||
                             (op == AttnResOp::readout && s.flag("partial"));
  const io::Tensor* B = blocks_in ? &s.read(p, "input.blocks") : nullptr;
  const io::Tensor* P = reads_partial ? &s.read(p, "input.partial") : nullptr;
  const io::Tensor* V = op == AttnResOp::partial_sum ? &s.read(p, "input.v") : nullptr;
  const io::Tensor* O = op == AttnResOp::phase2 ? &s.read(p, "input.o") : nullptr;
  const io::Tensor* LSE = op == AttnResOp::phase2 ? &s.read(p, "input.lse") : nullptr;
  std::vector<Vec<S>> w, g;
  S eps = S(0);
  if (op != AttnResOp::partial_sum) {
    eps = s.real<S>("eps");
    const auto& W = s.read(p, "param.w");
    const auto& G = s.read(p, "param.g");
    const int n = int(op == AttnResOp::phase2 ? 2 : N + (reads_partial ? 1 : 0));
    for (std::int64_t q = 0; q < Q; ++q) {
      w.push_back(vec_at<S>(W, q * C, C));
      g.push_back(vec_at<S>(G, q * C, C));
      attnres_ops_check_pair<S>(w.back(), g.back(), eps, n);
    }
  }
  if (LSE) {  // exp(lse) must be a normal number of S, as every logit's (attnres.hpp)
    const double lim = AttentionResiduals<S>::logit_limit(2);
    for (std::size_t t = 0; t < LSE->values.size(); ++t)
      if (!(std::abs(LSE->values[t]) <= lim))
        throw ParameterError("attnres", "lse[" + std::to_string(t) + "]",
                             show(LSE->values[t]) + " is outside the exp range of " + scalar_name<S>() + " (|lse| <= " +
                                 show(lim) + ")");
  }
  std::vector<std::string> outs;
  if (op == AttnResOp::partial_sum) outs = {"partial"};
  else if (op == AttnResOp::readout) outs = {"h"};
  else if (op == AttnResOp::phase1) outs = {"o", "lse"};
  else outs = {"h", "lse"};
  OpOutputs<S> ports = op_outputs(p, s, o, outs);
  if (p.layout_only) return;
  auto& up = ports.up;
  auto& out = ports.out;
  std::vector<Vec<S>> dw(std::size_t(Q), Vec<S>::Zero(C)), dg(std::size_t(Q), Vec<S>::Zero(C));
  InputGrads<S> gi{p, {}};  // grad.input.*, token after token
  for (std::int64_t t = 0; t < M; ++t) {
    std::vector<Vec<S>> blocks;
    for (std::int64_t i = 0; i < N; ++i) blocks.push_back(vec_at<S>(*B, (t * N + i) * C, C));
    Vec<S> b = P ? vec_at<S>(*P, t * C, C) : Vec<S>();
    if (op == AttnResOp::partial_sum) {
      Outputs<S>::append(*out["partial"], st.partial_sum(b, vec_at<S>(*V, t * C, C)).transpose());
      if (p.grad) {
        const Vec<S> dy = vec_at<S>(*up["partial"], t * C, C);  // b' = b + v: both get dy
        Outputs<S>::append(gi["grad.input.partial"], dy.transpose());
        Outputs<S>::append(gi["grad.input.v"], dy.transpose());
      }
      continue;
    }
    if (op == AttnResOp::readout) {
      const auto src = st.sources(blocks, P ? &b : nullptr);
      Outputs<S>::append(*out["h"], st.readout(src, w[0], g[0], eps).transpose());
      if (!p.grad) continue;
      std::vector<Vec<S>> d(src.size(), Vec<S>::Zero(C));
      st.readout_vjp(src, w[0], g[0], eps, vec_at<S>(*up["h"], t * C, C), d, dw[0], dg[0]);
      for (std::int64_t i = 0; i < N; ++i) Outputs<S>::append(gi["grad.input.blocks"], d[std::size_t(i)].transpose());
      if (P) Outputs<S>::append(gi["grad.input.partial"], d.back().transpose());
      continue;
    }
    if (op == AttnResOp::phase1) {
      std::vector<Vec<S>> d(blocks.size(), Vec<S>::Zero(C));
      for (std::int64_t q = 0; q < Q; ++q) {
        const auto k = std::size_t(st.query(int(q), int(Q)));
        const AttnResStats<S> r = st.stats(blocks, w[k], g[k], eps);
        Outputs<S>::append(*out["o"], r.o.transpose());
        Outputs<S>::append(*out["lse"], Vec<S>::Constant(1, r.lse));
        if (p.grad)
          st.stats_vjp(blocks, w[k], g[k], eps, vec_at<S>(*up["o"], (t * Q + q) * C, C),
                       S(up["lse"]->values[std::size_t(t * Q + q)]), d, dw[k], dg[k]);
      }
      if (p.grad)
        for (const auto& x : d) Outputs<S>::append(gi["grad.input.blocks"], x.transpose());
      continue;
    }
    const AttnResStats<S> in{vec_at<S>(*O, t * C, C), S(LSE->values[std::size_t(t)])};
    const AttnResStats<S> r = st.merge(in, b, w[0], g[0], eps);
    Outputs<S>::append(*out["h"], r.o.transpose());
    Outputs<S>::append(*out["lse"], Vec<S>::Constant(1, r.lse));
    if (!p.grad) continue;
    Vec<S> dout = Vec<S>::Zero(C), db = Vec<S>::Zero(C);
    S dlse = S(0);
    st.merge_vjp(in, b, w[0], g[0], eps, vec_at<S>(*up["h"], t * C, C), S(up["lse"]->values[std::size_t(t)]), dout, dlse,
                 db, dw[0], dg[0]);
    Outputs<S>::append(gi["grad.input.o"], dout.transpose());
    Outputs<S>::append(gi["grad.input.lse"], Vec<S>::Constant(1, dlse));
    Outputs<S>::append(gi["grad.input.partial"], db.transpose());
  }
  if (!p.grad) return;
  gi.into(o);
  if (op == AttnResOp::partial_sum) return;
  std::vector<ParamGrad<S>> params{{"param.w", {}}, {"param.g", {}}};
  for (std::int64_t q = 0; q < Q; ++q) {
    params[0].add(dw[std::size_t(q)].transpose());
    params[1].add(dg[std::size_t(q)].transpose());
  }
  for (auto& pg : params) o.add("grad." + pg.name, p.tensors.at(pg.name).shape).values = std::move(pg.values);
}

template <class S>
void evaluate_attnres_ops(const Problem& p, const Schema& s, Outputs<S>& o) {
  run_attnres_ops<S>(p, s, o);
}

}  // namespace dmref::conf
