// Backward passes (VJPs) of every scheme against oracle 1, the adjoint
// identity <u, J w> = <J^T u, w> with J w from central differences of the
// forward at 667 bits (tests/support/grad_check.hpp: step, tolerance and its
// derivation), at kernel level (layer outputs given) and at model level
// (W2 tanh(W1 RMSNorm h), layers_backward.hpp), one token each (tokens are
// independent). The structural oracles (oracle 2) are in the properties.
#include "grad_check.hpp"

#include "dmref/attnres_backward.hpp"
#include "dmref/denseformer_backward.hpp"
#include "dmref/hc_backward.hpp"
#include "dmref/layers_backward.hpp"
#include "dmref/preln_backward.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace dmref;
using namespace dmref::test;
using S = GradHi;

namespace {

std::uint64_t next_seed = 1;
Vec<S> rnd(int n, double scale = 1) { return oracle::random_direction<S>(n, next_seed++) * S(scale); }
Mat<S> rnd(int r, int c, double scale) { return Mat<S>(rnd(r * c, scale).reshaped(r, c)); }

/// One token through a scheme (`Spec`: its parameters, scheme() and the
/// pairing of parameters with their gradients) at kernel level (layer outputs
/// v given) or model level (TanhMlp stack). Inputs: e, then v or the stack
/// weights, then the scheme's parameters. Outputs: every h_l, every v_l
/// (model level), then out.
template <class Spec>
struct GradProblem : Spec {
  int L = 0;
  bool model = false;
  Vec<S> e;
  std::vector<Vec<S>> v;
  TanhMlpStack<S> stack;

  GradProblem(Spec spec, int d, int layers, bool model_level) : Spec(std::move(spec)), L(layers), model(model_level) {
    e = rnd(d);
    if (model) {
      for (int l = 0; l < L; ++l) stack.layers.push_back({rnd(d + 2, d, 1 / std::sqrt(d)), rnd(d, d + 2, 1 / std::sqrt(d + 2))});
    } else {
      for (int l = 0; l < L; ++l) v.push_back(rnd(d));
    }
  }

  Flat<S> inputs() {
    Flat<S> f;
    f.add(e);
    if (model)
      for (auto& q : stack.layers) f.add(q.W1).add(q.W2);
    else
      f.add(v);
    this->add_params(f);
    return f;
  }

  auto run() const {
    const auto m = this->scheme();
    return model ? forward(m, e, L, stack) : forward(m, e, L, GivenOutputs<S>{&v});
  }

  Vec<S> outputs() const {
    const auto tr = run();
    std::vector<Vec<S>> parts = tr.h;
    if (model) parts.insert(parts.end(), tr.v.begin(), tr.v.end());
    parts.push_back(tr.out);
    return concat(parts);
  }

  Vec<S> vjp(const Vec<S>& u) const {
    const auto m = this->scheme();
    const auto tr = run();
    using B = Backward<std::decay_t<decltype(m)>>;
    Upstream<S, typename B::Adjoint> up;
    const Eigen::Index d = e.size();
    Eigen::Index k = 0;
    for (int l = 0; l < L; ++l, k += d) up.h.push_back(u.segment(k, d));
    if (model)
      for (int l = 0; l < L; ++l, k += d) up.v.push_back(u.segment(k, d));
    up.out = u.segment(k, d);
    Flat<S> f;
    if (model) {
      TanhMlpStackVjp<S> fv(stack);
      auto g = backward(m, e, tr, fv, up);
      f.add(g.e);
      for (auto& q : fv.grad) f.add(q.W1).add(q.W2);
      this->add_grads(g.param, f);
      return f.get();
    }
    auto g = backward(m, e, tr, GivenOutputsVjp{}, up);
    f.add(g.e).add(g.v);
    this->add_grads(g.param, f);
    return f.get();
  }
};

template <class Spec>
void check_both_levels(const std::string& name, const Spec& spec, int d, int L) {
  for (bool model : {false, true}) {
    const GradProblem<Spec> p(spec, d, L, model);
    CHECK(check_adjoint(name + (model ? " model" : " kernel"), p, 77 + L) < 1);
  }
}

// ---------------------------------------------------------------- specs
struct PrelnSpec {
  PreLN<S> scheme() const { return {}; }
  void add_params(Flat<S>&) {}
  template <class G>
  void add_grads(G&, Flat<S>&) const {}
};

struct DenseFormerSpec {
  DenseFormerConfig<S> c;
  DenseFormerSpec(int d, int L, int k, int p) {
    c.d = d;
    c.dilation = k;
    c.period = p;
    c.a = Mat<S>::Identity(L + 1, L + 1);
    for (int i = 1; i <= L; ++i)
      for (int j = 0; j <= i; ++j)
        if (free(i, j)) c.a(i, j) += rnd(1, 0.3)(0);
  }
  bool free(int i, int j) const { return i > 0 && i % c.period == 0 && c.in_pattern(i, j); }
  DenseFormer<S> scheme() const { return DenseFormer<S>(c); }
  template <class A>
  void pairs(A& a, Flat<S>& f) const {
    for (int i = 0; i < a.rows(); ++i)
      for (int j = 0; j < a.cols(); ++j)
        if (free(i, j)) f.add(a(i, j));
  }
  void add_params(Flat<S>& f) { pairs(c.a, f); }
  void add_grads(Mat<S>& g, Flat<S>& f) const { pairs(g, f); }
};

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

struct HcSpec {
  HcConfig<S> c;
  HcSpec(int n, int d, int L, bool dynamic, bool use_tanh) {
    c = hc_paper_init<S>(n, d, L, dynamic);
    c.tanh = use_tanh;
    for (auto& q : c.layers) {
      q.am += rnd(n, 0.2);
      q.ar += rnd(n, n, 0.2);
      q.b += rnd(n, 0.2);
      if (!dynamic) continue;
      q.ln_gain = Vec<S>(rnd(d, 0.5).array() + S(1));
      q.ln_bias = rnd(d, 0.1);
      q.wm = rnd(d, 1 / std::sqrt(d));
      q.wr = rnd(d, n, 1 / std::sqrt(d));
      q.wb = rnd(d, 1 / std::sqrt(d));
      q.s_a = S(0.05);
      q.s_b = S(0.07);
    }
  }
  HyperConnections<S> scheme() const { return HyperConnections<S>(c); }
  void pairs(std::vector<HcLayer<S>>& ls, Flat<S>& f) const {
    for (auto& q : ls) {
      f.add(q.am).add(q.ar).add(q.b);
      if (c.dynamic) f.add(q.ln_gain).add(q.ln_bias).add(q.wm).add(q.wr).add(q.wb).add(q.s_a).add(q.s_b);
    }
  }
  void add_params(Flat<S>& f) { pairs(c.layers, f); }
  void add_grads(std::vector<HcLayer<S>>& g, Flat<S>& f) const { pairs(g, f); }
};

}  // namespace

TEST_CASE("preln backward: adjoint identity", "[backward][preln]") {
  check_both_levels("preln d5 L4", PrelnSpec{}, 5, 4);
  check_both_levels("preln d3 L0", PrelnSpec{}, 3, 0);
}

TEST_CASE("denseformer backward: adjoint identity", "[backward][denseformer]") {
  check_both_levels("denseformer 1x1 d4 L5", DenseFormerSpec(4, 5, 1, 1), 4, 5);
  check_both_levels("denseformer 2x3 d4 L7", DenseFormerSpec(4, 7, 2, 3), 4, 7);
}

TEST_CASE("attnres backward: adjoint identity", "[backward][attnres]") {
  check_both_levels("attnres full d4 L5", AttnResSpec(4, 5, AttnResVariant::full, 0), 4, 5);
  check_both_levels("attnres block S2 d4 L5", AttnResSpec(4, 5, AttnResVariant::block, 2), 4, 5);
  check_both_levels("attnres block S3 d3 L7", AttnResSpec(3, 7, AttnResVariant::block, 3), 3, 7);
}

TEST_CASE("hc backward: adjoint identity", "[backward][hc]") {
  check_both_levels("hc static n3 d4 L4", HcSpec(3, 4, 4, false, true), 4, 4);
  check_both_levels("hc dynamic n3 d4 L4", HcSpec(3, 4, 4, true, true), 4, 4);
  check_both_levels("hc dynamic-no-tanh n2 d4 L3", HcSpec(2, 4, 3, true, false), 4, 3);
}

namespace {
/// A problem whose VJP is off by a relative 2^-250 (far below any real bug):
/// the identity must still see it, or the tolerance could not fail.
struct Skewed : GradProblem<AttnResSpec> {
  using GradProblem<AttnResSpec>::GradProblem;
  Vec<S> vjp(const Vec<S>& u) const { return GradProblem<AttnResSpec>::vjp(u) * (S(1) + pow(S(2), -250)); }
};
}  // namespace

TEST_CASE("adjoint identity: rejects a VJP off by a relative 2^-250", "[backward]") {
  const Skewed p(AttnResSpec(4, 5, AttnResVariant::full, 0), 4, 5, false);
  CHECK(check_adjoint("attnres full, J^T u * (1 + 2^-250)", p, 3) > 1);
}
