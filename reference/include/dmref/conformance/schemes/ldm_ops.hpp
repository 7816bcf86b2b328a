// dmref/conformance/schemes/ldm_ops.hpp: Linear Depth Memory at op level
// (docs/ldm_ops.md): one layer's memory write and read over G groups for M
// tokens at once, as a GPU kernel computes it, in a kernel author's storage
// (row-major):
//   input.M      [M, G, dv, dk]  the memories before the write (dv = d / G)
//   input.P      [M, G, dk, dk]  rls: the inverse key covariances before it
//   input.q, input.k [M, G, dk]  the layer's queries and keys
//   input.v      [M, d]          the layer output (group g: columns g dv .. g dv + dv - 1)
//   input.omega  [M, G]          rls: importance weights (>= 0)
//   param.lambda [G]             rls: the layer's forgetting factors in (0, 1]
//   param.beta   [G]             delta: the layer's step sizes
//   output.M, output.P           the memories (and P) after the write
//   output.r     [M, d]          the readout concat_g M'_g q_g
// Ops: rls (the RLS step kernel), outer (M' = M + v k^T), delta
// (M' = M + beta (v - M k) k^T). Every number comes from the ldm scheme's own
// functions: one op step is LinearDepthMemory::write of layer 0 on the given
// state followed by its readout (ldm.hpp: rls_step, the outer and delta
// writes), the backward Backward<LinearDepthMemory>::read and ::write
// (ldm_backward.hpp: rls_step_vjp, which gives the adjoints of the incoming
// M and P and of lambda). Storage: M' (and its adjoint) is stored in the
// activation dtype before the readout reads it, P' (and its adjoint) stays
// float32, as the ldm scheme's State::stored / Adjoint::stored say.
// Schema, corpus rows, registry entry: src/conformance/schemes/ldm_ops.cpp.
#pragma once

#include "dmref/conformance/binding.hpp"
#include "dmref/conformance/schemes/ldm.hpp"

namespace dmref::conf {

enum class LdmOp { rls, outer, delta };
inline LdmOp ldm_op_named(const std::string& o) {
  return o == "rls" ? LdmOp::rls : o == "outer" ? LdmOp::outer : LdmOp::delta;
}
inline MemoryWrite ldm_op_write(LdmOp op) {
  return op == LdmOp::rls ? MemoryWrite::rls : op == LdmOp::outer ? MemoryWrite::outer_product : MemoryWrite::delta;
}

/// The one-layer kernel-level scheme of an op: the ldm scheme's config with
/// lambda / beta as its layer-0 row, no residual in the write or the read
/// (the op returns the memory readout alone).
template <class S>
LdmConfig<S> ldm_ops_config(const Problem& p, const Schema& s) {
  LdmConfig<S> c;
  c.d = int(s.integer("d"));
  c.groups = int(s.integer("groups"));
  c.dk = int(s.integer("dk"));
  ldm_validate_shape(c.d, c.groups, c.dk);  // the ldm scheme's rules, before the tensors these shape are read
  const LdmOp op = ldm_op_named(s.text("op"));
  c.write = ldm_op_write(op);
  c.read_residual = false;
  c.write_residual = false;
  if (op == LdmOp::rls) {
    const std::string pu = s.text("p_update");
    c.p_update = pu == "joseph" ? PUpdate::joseph : pu == "naive" ? PUpdate::naive : PUpdate::symmetric;
    c.lambda = mat_at<S>(s.read(p, "param.lambda"), 0, 1, c.groups);  // validated by LinearDepthMemory
  }
  if (op == LdmOp::delta) c.beta = mat_at<S>(s.read(p, "param.beta"), 0, 1, c.groups);
  return c;
}

/// The steps of the op, each the ldm scheme's own function (tests/mutants
/// replaces one at a time: a struct deriving from this one hides a member).
template <class S>
struct LdmOpsSteps {
  using Scheme = LdmKernel<S>;
  using State = typename Scheme::State;
  using B = Backward<Scheme>;
  /// The write of layer 0 (M, P updated per group; s.q = the query).
  void write(const Scheme& m, State& s, const Vec<S>& v) const { m.write(s, 0, v); }
  /// The readout concat_g M_g q_g of the state after the write (`before`: the state it started from).
  Vec<S> readout(const Scheme& m, const State& before, const State& after) const {
    (void)before;
    return m.readout(after);
  }
  // ---- backward
  void read_vjp(const B& b, const State& after, const Vec<S>& dr, typename B::Adjoint& a, typename B::Grad& g) const {
    b.read(after, 0, dr, a, g);
  }
  Vec<S> write_vjp(const B& b, const State& before, const Vec<S>& v, typename B::Adjoint& a, typename B::Grad& g) const {
    return b.write(before, 0, v, a, g);
  }
};

/// Token by token: the state (M, P) and the address (q, k, omega) read from
/// the op's tensors, the scheme's write of layer 0, the stored streams
/// (framework.hpp: M in the activation dtype, P float32), the readout; with
/// p.grad, the readout's adjoint plus the upstream of output.M / output.P,
/// stored likewise, then the write's adjoint; lambda's / beta's gradients
/// summed over the tokens in token order.
template <class S, class Steps = LdmOpsSteps<S>>
void run_ldm_ops(const Problem& p, const Schema& s, Outputs<S>& o, const Steps& st = {}) {
  const LdmConfig<S> cfg = ldm_ops_config<S>(p, s);
  const bool rls = cfg.write == MemoryWrite::rls;
  const std::int64_t T = s.integer("tokens"), G = cfg.groups, dk = cfg.dk, dv = cfg.dv(), d = cfg.d;
  check_upstream(p, s);
  const io::Tensor& TM = s.read(p, "input.M");
  const io::Tensor* TP = rls ? &s.read(p, "input.P") : nullptr;
  const io::Tensor& TQ = s.read(p, "input.q");
  const io::Tensor& TK = s.read(p, "input.k");
  const io::Tensor& TV = s.read(p, "input.v");
  const io::Tensor* TW = rls ? &s.read(p, "input.omega") : nullptr;
  if (TW) ldm_check_omega(p, *TW);
  if (TP)  // an inverse covariance: symmetric, exactly (its gradient is taken among symmetric matrices)
    for (std::int64_t b = 0; b < T * G; ++b)
      for (std::int64_t i = 0; i < dk; ++i)
        for (std::int64_t j = i + 1; j < dk; ++j)
          if (TP->values[(b * dk + i) * dk + j] != TP->values[(b * dk + j) * dk + i])
            p.fail("input.P", "token " + std::to_string(b / G) + " group " + std::to_string(b % G) + " is not symmetric (entry " +
                                  std::to_string(i) + "," + std::to_string(j) + ")");
  std::vector<std::string> outs{"M", "r"};
  if (rls) outs.insert(outs.begin() + 1, "P");
  OpOutputs<S> ports = op_outputs(p, s, o, outs);  // under layout_only with the gradients' layout
  auto& up = ports.up;
  auto& out = ports.out;
  using Scheme = LdmKernel<S>;
  using B = Backward<Scheme>;
  auto address = [&](std::int64_t t) {
    Address<S> a{vec_at<S>(TQ, t * G * dk, G * dk), vec_at<S>(TK, t * G * dk, G * dk),
                 TW ? vec_at<S>(*TW, t * G, G) : Vec<S>(Vec<S>::Zero(G))};
    return GivenAddresses<S>{{std::move(a)}};
  };
  if (p.layout_only) {
    (void)Scheme(cfg, address(0));  // validates lambda (ParameterError names the field)
    return;
  }
  InputGrads<S> g{p, {}};  // grad.input.*, token after token
  Mat<S> dlambda = Mat<S>::Zero(1, G), dbeta = Mat<S>::Zero(1, G);
  for (std::int64_t t = 0; t < T; ++t) {
    const Scheme m(cfg, address(t));  // validates lambda, beta
    typename Scheme::State before = m.init(Vec<S>(Vec<S>::Zero(d)));
    for (std::int64_t j = 0; j < G; ++j) {
      before.mem[j].M = mat_at<S>(TM, (t * G + j) * dv * dk, dv, dk);
      if (rls) before.mem[j].P = mat_at<S>(*TP, (t * G + j) * dk * dk, dk, dk);
    }
    const Vec<S> v = vec_at<S>(TV, t * d, d);
    typename Scheme::State after = before;
    st.write(m, after, v);
    store_streams<S>(after);  // M' in the activation dtype (P' float32), as between two layers of ldm
    for (const auto& mg : after.mem) {
      Outputs<S>::append(*out["M"], mg.M);
      if (rls) Outputs<S>::append(*out["P"], mg.P);
    }
    Outputs<S>::append(*out["r"], st.readout(m, before, after).transpose());
    if (!p.grad) continue;
    const B b{m};
    typename B::Grad gr = b.zero_grad();
    typename B::Adjoint a = b.zero_adjoint(after);
    st.read_vjp(b, after, vec_at<S>(*up["r"], t * d, d), a, gr);
    for (std::int64_t j = 0; j < G; ++j) {
      a.M[j] += mat_at<S>(*up["M"], (t * G + j) * dv * dk, dv, dk);
      if (rls) a.P[j] += mat_at<S>(*up["P"], (t * G + j) * dk * dk, dk, dk);
    }
    store_streams<S>(a);  // the adjoint of what was stored (framework.hpp: dM stored, dP float32)
    const Vec<S> dvv = st.write_vjp(b, before, v, a, gr);
    for (std::int64_t j = 0; j < G; ++j) {
      Outputs<S>::append(g["grad.input.M"], a.M[j]);
      // P is symmetric (checked): its gradient is the one in the symmetric matrices,
      // (dP + dP^T) / 2, the same for every P update equal on symmetric P (docs/ldm_ops.md).
      if (rls) Outputs<S>::append(g["grad.input.P"], Mat<S>((a.P[j] + a.P[j].transpose()) / S(2)));
    }
    Outputs<S>::append(g["grad.input.q"], gr.address[0].q.transpose());
    Outputs<S>::append(g["grad.input.k"], gr.address[0].k.transpose());
    Outputs<S>::append(g["grad.input.v"], dvv.transpose());
    if (rls) Outputs<S>::append(g["grad.input.omega"], gr.address[0].omega.transpose());
    dlambda += gr.lambda.size() ? gr.lambda : Mat<S>(Mat<S>::Zero(1, G));
    dbeta += gr.beta.size() ? gr.beta : Mat<S>(Mat<S>::Zero(1, G));
  }
  if (!p.grad) return;
  g.into(o);
  if (rls) Outputs<S>::append(o.add("grad.param.lambda", p.tensors.at("param.lambda").shape), dlambda);
  if (cfg.write == MemoryWrite::delta) Outputs<S>::append(o.add("grad.param.beta", p.tensors.at("param.beta").shape), dbeta);
}

template <class S>
void evaluate_ldm_ops(const Problem& p, const Schema& s, Outputs<S>& o) {
  run_ldm_ops<S>(p, s, o);
}

}  // namespace dmref::conf
