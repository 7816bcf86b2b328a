// tests/mutants/ldm_ops.cpp: the mutants of Linear Depth Memory at op level
// (mutants.hpp; docs/fixtures.md, "Mutation score"): forward_ldm_ops<F>
// (instantiated at float and double) and backward_ldm_ops. Each is the
// reference's op runner (run_ldm_ops) with one of its steps (LdmOpsSteps)
// replaced by a plausible wrong kernel.
#include "common.hpp"

#include "dmref/conformance/schemes/ldm_ops.hpp"

namespace dmref::mutants {

using namespace dmref::conf;

namespace {

// ------------------------------------------------------------------ forward
/// The group pieces of an op's write: M_g, P_g, k_g, v_g, omega_g, lambda_g.
template <class F, class Body>
void per_group(const LdmKernel<F>& m, typename LdmKernel<F>::State& s, const Vec<F>& v, const Body& body) {
  const auto& c = m.config();
  const Address<F>& a = m.addresser().a.at(0);
  for (int g = 0; g < c.groups; ++g)
    body(s.mem[g].M, s.mem[g].P, Vec<F>(a.k.segment(g * c.dk, c.dk)), Vec<F>(v.segment(g * c.dv(), c.dv())), a.omega(g),
         c.write == MemoryWrite::rls ? c.lambda(0, g) : F(1), g);
  s.q = a.q;
}

/// rls with omega not square-rooted: the kernel weights key and value by
/// omega (kb = omega k, vb = omega v), so the step sees the weight omega^2.
template <class F>
struct OpsOmegaSquared : LdmOpsSteps<F> {
  void write(const LdmKernel<F>& m, typename LdmKernel<F>::State& s, const Vec<F>& v) const {
    if (m.config().write != MemoryWrite::rls) return m.write(s, 0, v);
    per_group<F>(m, s, v, [&](Mat<F>& M, Mat<F>& P, const Vec<F>& k, const Vec<F>& vg, const F& w, const F& lam, int) {
      rls_step<F>(M, P, k, vg, F(w * w), lam, m.config().p_update);
    });
  }
};
/// rls with the gain's denominator lambda + k^T P k, omega left out of it
/// (the update itself still weighted by omega).
template <class F>
struct OpsGainWithoutOmega : LdmOpsSteps<F> {
  void write(const LdmKernel<F>& m, typename LdmKernel<F>::State& s, const Vec<F>& v) const {
    if (m.config().write != MemoryWrite::rls) return m.write(s, 0, v);
    per_group<F>(m, s, v, [&](Mat<F>& M, Mat<F>& P, const Vec<F>& k, const Vec<F>& vg, const F& w, const F& lam, int) {
      const Vec<F> pi = P * k;
      const F gamma = lam + k.dot(pi);
      const Vec<F> g = pi / gamma;
      const Vec<F> u = vg - M * k;
      M.noalias() += (w * u) * g.transpose();
      const Mat<F> Q = (P - (w * g) * pi.transpose()) / lam;
      P = (Q + Q.transpose()) / F(2);
    });
  }
};
/// rls with the forgetting factor applied to M instead of P: M' = (M + w u g^T) / lambda,
/// P' = P - w g pi^T.
template <class F>
struct OpsLambdaOnM : LdmOpsSteps<F> {
  void write(const LdmKernel<F>& m, typename LdmKernel<F>::State& s, const Vec<F>& v) const {
    if (m.config().write != MemoryWrite::rls) return m.write(s, 0, v);
    per_group<F>(m, s, v, [&](Mat<F>& M, Mat<F>& P, const Vec<F>& k, const Vec<F>& vg, const F& w, const F& lam, int) {
      rls_step<F>(M, P, k, vg, w, lam, m.config().p_update);
      P *= lam;
      M /= lam;
    });
  }
};
/// delta with the step size dropped (beta = 1).
template <class F>
struct OpsDeltaWithoutBeta : LdmOpsSteps<F> {
  void write(const LdmKernel<F>& m, typename LdmKernel<F>::State& s, const Vec<F>& v) const {
    if (m.config().write != MemoryWrite::delta) return m.write(s, 0, v);
    per_group<F>(m, s, v, [&](Mat<F>& M, Mat<F>&, const Vec<F>& k, const Vec<F>& vg, const F&, const F&, int) {
      const Vec<F> u = vg - M * k;
      M.noalias() += u * k.transpose();
    });
  }
};
/// outer with the key and value roles swapped in the readout's memory: the
/// write M + v k^T as M + v (k reversed)^T (a kernel indexing k backwards).
template <class F>
struct OpsOuterKeyReversed : LdmOpsSteps<F> {
  void write(const LdmKernel<F>& m, typename LdmKernel<F>::State& s, const Vec<F>& v) const {
    if (m.config().write != MemoryWrite::outer_product) return m.write(s, 0, v);
    per_group<F>(m, s, v, [&](Mat<F>& M, Mat<F>&, const Vec<F>& k, const Vec<F>& vg, const F&, const F&, int) {
      M.noalias() += vg * Vec<F>(k.reverse()).transpose();
    });
  }
};
/// The readout from the memory before the write (M q instead of M' q).
template <class F>
struct OpsReadoutOldM : LdmOpsSteps<F> {
  Vec<F> readout(const LdmKernel<F>& m, const typename LdmKernel<F>::State& before,
                 const typename LdmKernel<F>::State& after) const {
    typename LdmKernel<F>::State s = before;
    s.q = after.q;
    return m.readout(s);
  }
};

/// The op problem through run_ldm_ops with the steps `Steps`.
template <class Steps, class F>
Outputs<F> ops_with(const Problem& p) {
  Outputs<F> o;
  run_ldm_ops<F>(p, schema_of(p), o, Steps{});
  return o;
}

// ----------------------------------------------------------------- backward
using S = double;

/// P treated as a constant: the adjoint of P' passes to P unchanged and
/// nothing flows through the P update (a "frozen covariance" backward).
struct OpsBwPFrozen : LdmOpsSteps<S> {
  Vec<S> write_vjp(const B& b, const State& before, const Vec<S>& v, typename B::Adjoint& a, typename B::Grad& g) const {
    const auto dP = a.P;
    for (auto& x : a.P) x.setZero();
    const Vec<S> dv = b.write(before, 0, v, a, g);
    a.P = dP;
    return dv;
  }
};
/// The forgetting factors' gradient left zero.
struct OpsBwLambdaGradDropped : LdmOpsSteps<S> {
  Vec<S> write_vjp(const B& b, const State& before, const Vec<S>& v, typename B::Adjoint& a, typename B::Grad& g) const {
    const Vec<S> dv = b.write(before, 0, v, a, g);
    g.lambda.setZero();
    return dv;
  }
};
/// The readout's adjoint without its path to the query (dq = 0).
struct OpsBwReadoutQueryDropped : LdmOpsSteps<S> {
  void read_vjp(const B& b, const State& after, const Vec<S>& dr, typename B::Adjoint& a, typename B::Grad& g) const {
    b.read(after, 0, dr, a, g);
    a.q.setZero();
  }
};
/// The adjoint of the incoming memory taken as dM' (the -du k^T of the
/// prediction error dropped: M treated as passing straight through).
struct OpsBwMemoryPassThrough : LdmOpsSteps<S> {
  Vec<S> write_vjp(const B& b, const State& before, const Vec<S>& v, typename B::Adjoint& a, typename B::Grad& g) const {
    const auto dM = a.M;
    const Vec<S> dv = b.write(before, 0, v, a, g);
    if (b.scheme.config().write != MemoryWrite::outer_product) a.M = dM;
    return dv;
  }
};

}  // namespace

template <class F>
std::vector<Variant<F>> forward_ldm_ops() {
  ForwardList<F> m{"ldm_ops", {}};
  m.add("rls_omega_squared", "rls: key and value weighted by omega, not sqrt(omega) (the step sees omega^2)",
        ops_with<OpsOmegaSquared<F>, F>);
  m.add("rls_gain_without_omega", "rls: gain denominator lambda + k^T P k, omega left out",
        ops_with<OpsGainWithoutOmega<F>, F>);
  m.add("rls_lambda_on_M", "rls: the forgetting factor divides M instead of P", ops_with<OpsLambdaOnM<F>, F>);
  m.add("delta_without_beta", "delta: M + (v - M k) k^T, the step size dropped", ops_with<OpsDeltaWithoutBeta<F>, F>);
  m.add("outer_key_reversed", "outer: M + v k^T with k indexed backwards", ops_with<OpsOuterKeyReversed<F>, F>);
  m.add("readout_old_M", "the readout from the memory before the write (M q, not M' q)", ops_with<OpsReadoutOldM<F>, F>);
  return m.m;
}
DMREF_INSTANTIATE_MUTANTS(ldm_ops)

std::vector<Mutant> backward_ldm_ops() {
  BackwardList m{"ldm_ops", {}};
  m.add("bw_P_frozen", "backward of rls: P a constant (dP = dP', nothing through the P update)", ops_with<OpsBwPFrozen, S>);
  m.add("bw_lambda_grad_dropped", "backward of rls: grad.param.lambda left zero", ops_with<OpsBwLambdaGradDropped, S>);
  m.add("bw_readout_query_dropped", "backward: the readout's adjoint without dq = M'^T dr",
        ops_with<OpsBwReadoutQueryDropped, S>);
  m.add("bw_memory_pass_through", "backward of rls and delta: dM = dM' (the prediction error's -du k^T dropped)",
        ops_with<OpsBwMemoryPassThrough, S>);
  return m.m;
}

}  // namespace dmref::mutants
