// tests/support/mhc_cases.hpp: what the mHC tests and properties share
// (docs/mhc.md): the oracle's view of one reference layer.
#pragma once

#include "dmref/mhc.hpp"
#include "dmref/oracles/mhc_layer.hpp"

namespace dmref::test {

/// Layer l of a reference configuration as the independent layer oracle
/// (oracles/.../mhc_layer.hpp) takes it: the same numbers, field by field.
template <class T>
oracle::MhcLayerInput<T> mhc_oracle_input(const MhcConfig<T>& c, int l) {
  const MhcLayer<T>& p = c.layers[l];
  oracle::MhcLayerInput<T> in;
  in.n = c.n;
  in.C = c.C;
  in.phi_pre = p.phi_pre;
  in.phi_post = p.phi_post;
  in.phi_res = p.phi_res;
  in.a_pre = p.a_pre;
  in.a_post = p.a_post;
  in.a_res = p.a_res;
  in.b_pre = p.b_pre;
  in.b_post = p.b_post;
  in.b_res = p.b_res;
  in.rms_eps = c.rms_eps;
  in.pre_eps = c.pre_eps;
  in.eps_add = c.res_eps_add;
  in.eps_den = c.res_eps_den;
  in.post_scale = c.post_scale;
  in.rounds = c.t_max;
  return in;
}

/// A double layer converted to scalar S, field by field (each number rounded once).
template <class S>
MhcLayer<S> convert_layer(const MhcLayer<double>& p) {
  MhcLayer<S> q;
  q.phi_pre = convert<S>(p.phi_pre);
  q.phi_post = convert<S>(p.phi_post);
  q.phi_res = convert<S>(p.phi_res);
  q.a_pre = S(p.a_pre);
  q.a_post = S(p.a_post);
  q.a_res = S(p.a_res);
  q.b_pre = convert<S>(p.b_pre);
  q.b_post = convert<S>(p.b_post);
  q.b_res = convert<S>(p.b_res);
  return q;
}

}  // namespace dmref::test
