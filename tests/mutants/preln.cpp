// tests/mutants/preln.cpp: PreLN's mutants (mutants.hpp; docs/fixtures.md,
// "Mutation score"): forward_preln<F> (instantiated at float and double) and
// backward_preln.
#include "common.hpp"

#include <cmath>

namespace dmref::mutants {

using namespace dmref::conf;

namespace {

// ------------------------------------------------------------------ forward
// The pre-norm of the model's layer function F(h) = W2 tanh(W1 RMSNorm(h)):
// the reference takes h / sqrt(mean(h^2) + eps); this one h / (sqrt(mean(h^2)) + eps).
template <class F>
Outputs<F> preln_eps_outside(const Problem& p) {
  const Schema sch = schema_of(p);
  const Dims D = dims(sch);
  if (!D.model) return evaluate<F>(p);  // no norm at kernel level: the mutation does not apply
  const TanhMlpStack<F> stack = layer_stack<F>(p, D).all_layers();
  const F eps = F(1) / F(1000000);
  auto layer = [&](int l, const Vec<F>& h) {
    const F ms = h.squaredNorm() / F(h.size());
    const Vec<F> z = h / (std::sqrt(ms) + eps);
    const auto& L = stack.layers[l];
    return Vec<F>(L.W2 * Vec<F>((L.W1 * z).unaryExpr([](F t) { return std::tanh(t); })));
  };
  Outputs<F> o;
  const auto& E = p.tensor("input.e", {D.T, D.d});
  auto& h = o.add("output.h", {D.T, D.L, D.d});
  auto& v = o.add("output.v", {D.T, D.L, D.d});
  auto& out = o.add("output.out", {D.T, D.d});
  for (std::int64_t t = 0; t < D.T; ++t) {
    const auto tr = forward(PreLN<F>{}, vec_at<F>(E, t * D.d, D.d), int(D.L), layer);
    for (std::int64_t l = 0; l < D.L; ++l) {
      Outputs<F>::append(h, tr.h[l].transpose());
      Outputs<F>::append(v, tr.v[l].transpose());
    }
    Outputs<F>::append(out, tr.out.transpose());
  }
  return o;
}

// ----------------------------------------------------------------- backward
/// No gradient through the read (h_l treated as a detached copy of the
/// stream), so dv_l = d out only, without the later layers' dh_i.
struct DetachedReadPreLN : PreLN<double> {};

}  // namespace
}  // namespace dmref::mutants

namespace dmref {

template <>
struct Backward<mutants::DetachedReadPreLN> : Backward<PreLN<double>> {
  using Base = Backward<PreLN<double>>;
  explicit Backward(const mutants::DetachedReadPreLN& m) : Base{m} {}
  void read(const PreLN<double>::State&, int, const Vec<double>&, Adjoint&, Grad&) const {}  // the dropped a.x += dh
};

}  // namespace dmref

namespace dmref::mutants {

template <class F>
std::vector<Variant<F>> forward_preln() {
  ForwardList<F> m{"preln", {}};
  m.add("norm_eps_outside_sqrt", "layer pre-norm h / (sqrt(mean h^2) + eps) instead of h / sqrt(mean h^2 + eps)",
        preln_eps_outside<F>);
  return m.m;
}
DMREF_INSTANTIATE_MUTANTS(preln)

std::vector<Mutant> backward_preln() {
  using S = double;
  BackwardList m{"preln", {}};
  m.add("bw_read_detached", "backward: no gradient through the read (h_l a detached copy: dv_l = d out only)",
        [](const Problem& p) {
          return outputs_of<S>(p, [&](const Dims& D, Outputs<S>& o) { run_plain<S>(p, D, o, DetachedReadPreLN{}); });
        });
  return m.m;
}

}  // namespace dmref::mutants
