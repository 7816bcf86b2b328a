// Linear Depth Memory at op level in the conformance layer: schema, corpus
// rows, registry entry (binding: conformance/schemes/ldm_ops.hpp;
// docs/ldm_ops.md). The rules on the values are the ldm scheme's own
// (ldm_validate_shape; LinearDepthMemory::validate for lambda; ldm_check_omega),
// reported as the config field or tensor they name.
#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/schemes/ldm_ops.hpp"

namespace dmref::conf {
namespace {

Schema schema(const Problem& p, const json& opt) {
  SchemaBuilder b(p, opt);
  const std::string o = b.choice("op", {"rls", "outer", "delta"},
                                 "the fused op: rls (the RLS step kernel), outer (M' = M + v k^T), delta "
                                 "(M' = M + beta (v - M k) k^T); each returns M' and the readout M' q");
  const LdmOp op = ldm_op_named(o);
  const Dim M{b.integer("tokens", "M: tokens, each an independent problem"), "M"};
  const Dim d{b.integer("d", "the model width (G dv)"), "d"};
  const Dim G{b.integer("groups", "memory groups G (divides d)"), "G"};
  const Dim dk{b.integer("dk", "key width per group"), "dk"};
  // groups divides d, dk > 0: the ldm scheme's rule (ldm_validate_shape), which
  // the binding applies before it reads any tensor these dims shape.
  const Dim dv = d / G;
  const std::string is = "(config.op is " + o + ")";
  if (op == LdmOp::rls) {
    b.choice("p_update", {"symmetric", "joseph", "naive"}, "the update of P (docs/ldm.md)");
  } else {
    b.unread("p_update", "the update of P, which only op rls keeps " + is);
    for (const char* t : {"input.P", "input.omega", "param.lambda"}) b.unread_tensor(t, "read only by op rls " + is);
  }
  if (op != LdmOp::delta) b.unread_tensor("param.beta", "the step sizes of op delta " + is);
  b.input("input.M", {M, G, dv, dk}, "the memories M_g before the write, row-major [dv, dk] per group",
          uniform(0.5, "uniform[-1, 1) x 0.5"));
  if (op == LdmOp::rls) {
    // Symmetric and diagonally dominant (so positive definite): the diagonal
    // 1 + x/2 in [0.5, 1.5), the upper triangle x / (2 dk) mirrored (every
    // row's off-diagonal sum < 1/2).
    Draw pd = uniform(1.0, "symmetric: diagonal 1 + u/2, off-diagonal u / (2 dk) (upper triangle mirrored), u uniform[-1, 1)");
    const std::int64_t n = dk.n;
    pd.adjust = [n](std::vector<double>& v, const std::function<double(double)>& round) {
      for (std::size_t b0 = 0; b0 < v.size(); b0 += std::size_t(n * n))
        for (std::int64_t i = 0; i < n; ++i)
          for (std::int64_t j = i; j < n; ++j) {
            double& x = v[b0 + i * n + j];
            x = i == j ? round(1.0 + 0.5 * x) : round(x / (2.0 * double(n)));
            v[b0 + j * n + i] = x;
          }
    };
    b.input("input.P", {M, G, dk, dk}, "the inverse key covariances P_g before the write (float32 in 16-bit recipes)",
            std::move(pd));
  }
  const std::string unit = "each group's dk entries uniform[-1, 1), scaled to unit L2 norm";
  b.input("input.q", {M, G, dk}, "the queries q_g", unit_groups(1, unit));
  b.input("input.k", {M, G, dk}, "the keys k_g", unit_groups(1, unit));
  b.input("input.v", {M, d}, "the layer output v (group g: columns g*dv .. g*dv + dv - 1)", uniform(1.0, "uniform[-1, 1)"));
  if (op == LdmOp::rls) {
    b.input("input.omega", {M, G}, "importance weights omega_g (>= 0)", range(0.0, 2.0, "uniform on [0, 2)"));
    b.param("param.lambda", {G}, "the layer's forgetting factors lambda_g in (0, 1]",
            range(b.option("lambda_min", 0.5), 1.0, "uniform on [lambda_min (0.5), 1)"));
  }
  if (op == LdmOp::delta) b.param("param.beta", {G}, "the layer's delta-rule step sizes", range(0.0, 1.0, "uniform on [0, 1)"));
  b.output("output.M", {M, G, dv, dk}, "the memories M'_g after the write");
  if (op == LdmOp::rls) b.output("output.P", {M, G, dk, dk}, "P'_g after the write (float32 in 16-bit recipes)");
  b.output("output.r", {M, d}, "the readout concat_g M'_g q_g");
  if (p.grad) {
    b.upstream("M");
    if (op == LdmOp::rls) b.upstream("P");
    b.upstream("r");
  }
  return std::move(b.s);
}

void corpus(std::vector<CaseSpec>& v) {
  for (const char* dt : kCorpusDtypes) {
    const std::string s = std::string(".") + dt + ".s1";
    for (const char* op : {"rls", "outer", "delta"}) {
      const std::string o = op;
      const json c = {{"op", o}, {"tokens", 2}, {"d", 8}, {"groups", 2}, {"dk", 4}};
      v.push_back(forward_case("ldm_ops." + o + ".g2_dk4_d8.M2" + s, "ldm_ops", "default", dt, c));
      v.push_back(grad_case("ldm_ops." + o + "_grad.g2_dk4_d8.M2", "ldm_ops", "default", dt, c));
    }
    // The other P updates of the RLS step, forward and backward.
    for (const char* pu : {"joseph", "naive"}) {
      const json c = {{"op", "rls"}, {"tokens", 2}, {"d", 8}, {"groups", 2}, {"dk", 4}, {"p_update", pu}};
      v.push_back(forward_case(std::string("ldm_ops_") + pu + ".rls.g2_dk4_d8.M2" + s, "ldm_ops", "default", dt, c));
      v.push_back(grad_case(std::string("ldm_ops_") + pu + ".rls_grad.g2_dk4_d8.M2", "ldm_ops", "default", dt, c));
    }
  }
  // A kernel's width: the paper's 16 groups, d = 1024 (dv = 64), one token,
  // bf16 storage, dk = 16; forward and backward for every op (committed). The
  // kernel shape dk = dv = 64 with two tokens (about 5 MB a forward file,
  // 11 MB a backward one: more than half the committed corpus) is generated on
  // demand only (dmref generate --all).
  for (const char* op : {"rls", "outer", "delta"}) {
    const std::string o = op;
    for (const auto& [dk, T, committed] : {std::tuple{16, 1, true}, std::tuple{64, 2, false}}) {
      const json c = {{"op", o}, {"tokens", T}, {"d", 1024}, {"groups", 16}, {"dk", dk}};
      const std::string sh = ".g16_dk" + std::to_string(dk) + "_d1024.M" + std::to_string(T);
      v.push_back(forward_case("ldm_ops." + o + sh + ".bf16.s1", "ldm_ops", "default", "bf16", c, committed, false));
      CaseSpec g = grad_case("ldm_ops." + o + "_grad" + sh, "ldm_ops", "default", "bf16", c);
      g.committed = committed;
      g.ci = false;
      v.push_back(std::move(g));
    }
  }
}

}  // namespace

const SchemeInfo ldm_ops_info{
    "ldm_ops.md", "Linear Depth Memory at op level: one layer's RLS, outer-product or delta write and its readout, M tokens",
    &schema, &corpus,
    {{{"op", "rls"}, {"tokens", 2}, {"d", 4}, {"groups", 2}, {"dk", 2}},
     {{"op", "outer"}, {"tokens", 2}, {"d", 4}, {"groups", 2}, {"dk", 2}},
     {{"op", "delta"}, {"tokens", 2}, {"d", 4}, {"groups", 2}, {"dk", 2}}}};

}  // namespace dmref::conf
