// tests/support/attnres_cases.hpp: random kernel-level Attention Residuals
// problems for the tests and the properties (docs/attnres.md). A case is fully
// determined by its shape and seed; every number is a double rounded to 30
// significant bits, exact at every precision the suite checks. At the end,
// grad::AttnResSpec: the backward problem of the adjoint identity (grad_cases.hpp).
#pragma once

#include "grad_cases.hpp"
#include "check.hpp"
#include "dmref/attnres.hpp"
#include "dmref/attnres_backward.hpp"
#include "dmref/oracles/attnres_direct.hpp"

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace dmref::test {

// A kernel-level AttnRes problem (all doubles, exact at every precision).
struct AttnResShape {
  int d = 4, layers = 8;
  int block = 0;           // 0: Full AttnRes; >= 1: Block AttnRes with this block size
  double w_scale = 1;      // w_j ~ N(0, w_scale^2 / d): logits of order w_scale
  bool unit_gain = false;  // g = 1 exactly, else g_j ~ N(1, 0.5^2)
  double eps = 1e-6;       // RMSNorm eps
  double spread = 0;       // output l scaled by 10^U(-spread, spread / 2)
  std::uint64_t seed = 1;
};

inline std::string describe(const AttnResShape& s) {
  std::ostringstream o;
  o << "d=" << s.d << " L=" << s.layers << " block=" << s.block << " w_scale=" << s.w_scale
    << " unit_gain=" << s.unit_gain << " eps=" << s.eps << " spread=" << s.spread << " seed=" << s.seed;
  return o.str();
}

struct AttnResCase {
  AttnResShape shape;
  Vec<double> e;
  std::vector<Vec<double>> v, w, g;

  template <class T>
  AttnResConfig<T> config() const {
    AttnResConfig<T> c;
    c.d = shape.d;
    c.layers = shape.layers;
    c.variant = shape.block == 0 ? AttnResVariant::full : AttnResVariant::block;
    c.block_size = shape.block;
    c.eps = T(shape.eps);
    for (const auto& x : w) c.w.push_back(convert<T>(x));
    for (const auto& x : g) c.g.push_back(convert<T>(x));
    return c;
  }
  template <class T>
  std::vector<Vec<T>> values() const {
    std::vector<Vec<T>> r;
    for (const auto& x : v) r.push_back(convert<T>(x));
    return r;
  }
  /// [e, v_0, .., v_{L-1}]: a source list for the mix-level properties.
  template <class T>
  std::vector<Vec<T>> all_sources() const {
    std::vector<Vec<T>> r{convert<T>(e)};
    for (const auto& x : v) r.push_back(convert<T>(x));
    return r;
  }
  /// Readout r (layer r's read; r = L: final) as the oracles see it.
  template <class T>
  oracle::DepthReadout<T> readout(int r) const {
    oracle::DepthReadout<T> p;
    const auto vt = values<T>();
    p.terms = shape.block == 0 ? oracle::attnres_full_terms<T>(convert<T>(e), vt, r)
                               : oracle::attnres_block_terms<T>(convert<T>(e), vt, shape.block, r);
    p.w = convert<T>(w[r]);
    p.g = convert<T>(g[r]);
    p.eps = T(shape.eps);
    return p;
  }
  /// The mix of all sources [e, v_0..v_{L-1}] with pair r, as the oracle sees it.
  template <class T>
  oracle::DepthReadout<T> mix_readout(int r) const {
    oracle::DepthReadout<T> p;
    for (const auto& x : all_sources<T>()) p.terms.push_back(Mat<T>(x));
    p.w = convert<T>(w[r]);
    p.g = convert<T>(g[r]);
    p.eps = T(shape.eps);
    return p;
  }
};


inline AttnResCase make_attnres_case(const AttnResShape& s) {
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<double> N(0, 1);
  std::uniform_real_distribution<double> U(0, 1);
  AttnResCase c;
  c.shape = s;
  auto vec = [&](double scale) {
    Vec<double> x(s.d);
    for (int j = 0; j < s.d; ++j) x(j) = round30(scale * N(rng));
    return x;
  };
  c.e = vec(1);
  for (int l = 0; l < s.layers; ++l) c.v.push_back(vec(std::pow(10.0, s.spread * (1.5 * U(rng) - 1))));
  for (int l = 0; l <= s.layers; ++l) {
    c.w.push_back(vec(s.w_scale / std::sqrt(double(s.d))));
    Vec<double> g = Vec<double>::Ones(s.d);
    if (!s.unit_gain) g = (g + 0.5 * vec(1)).unaryExpr([](double t) { return round30(t); });
    c.g.push_back(g);
  }
  return c;
}

// ------------------------------------------------------------------ backward
// The backward problem of the adjoint identity (grad_cases.hpp's GradProblem;
// tests/test_backward.cpp, properties/grad_properties.cpp).
namespace grad {

struct AttnResSpec {
  AttnResConfig<S> c;
  AttnResSpec(int d, int L, AttnResVariant var, int block) {
    c.d = d;
    c.layers = L;
    c.variant = var;
    c.block_size = block;
    for (int l = 0; l <= L; ++l) {
      c.w.push_back(rnd(d, 2 / std::sqrt(d)));
      c.g.push_back(Vec<S>(rnd(d, 0.5).array() + S(1)));
    }
  }
  AttentionResiduals<S> scheme() const { return AttentionResiduals<S>(c); }
  void add_params(Flat<S>& f) { f.add(c.w).add(c.g); }
  template <class G>
  void add_grads(G& g, Flat<S>& f) const {
    f.add(g.w).add(g.g);
  }
};

}  // namespace grad

}  // namespace dmref::test
