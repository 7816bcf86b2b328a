// dmref/conformance/schemes/attnres.hpp: the Attention Residuals binding
// (full and block variants). Schema, corpus rows and registry entry:
// src/conformance/schemes/attnres.cpp; the block layout's rules are the
// scheme's own (AttentionResiduals::validate, naming config.block_size and
// config.blocks).
#pragma once

#include "dmref/attnres_backward.hpp"
#include "dmref/conformance/binding.hpp"

namespace dmref::conf {

template <class S>
AttnResConfig<S> attnres_config(const Problem& p, const Dims& D) {
  const Schema& s = D.sch();
  AttnResConfig<S> c;
  c.d = int(D.d);
  c.layers = int(D.L);
  c.variant = s.text("variant") == "block" ? AttnResVariant::block : AttnResVariant::full;
  if (c.variant == AttnResVariant::block) {
    c.block_size = int(s.integer("block_size"));
    c.num_blocks = int(s.integer("blocks"));
  }
  c.eps = s.real<S>("eps");
  const auto& w = s.read(p, "param.w");
  const auto& g = s.read(p, "param.g");
  for (std::int64_t l = 0; l <= D.L; ++l) {
    c.w.push_back(vec_at<S>(w, l * D.d, D.d));
    c.g.push_back(vec_at<S>(g, l * D.d, D.d));
  }
  return c;
}

/// grad.param.w, grad.param.g of an AttnRes backward.
template <class S, class G>
std::vector<ParamGrad<S>> attnres_param_grads(const G& g) {
  std::vector<ParamGrad<S>> r{{"param.w", {}}, {"param.g", {}}};
  for (const auto& x : g.w) r[0].add(x.transpose());
  for (const auto& x : g.g) r[1].add(x.transpose());
  return r;
}

template <class S>
void evaluate_attnres(const Problem& p, const Schema& s, Outputs<S>& o) {
  const Dims D = dims(s);
  run_plain<S>(p, D, o, AttentionResiduals<S>(attnres_config<S>(p, D)),
               [](const auto& g) { return attnres_param_grads<S>(g); });
}

}  // namespace dmref::conf
