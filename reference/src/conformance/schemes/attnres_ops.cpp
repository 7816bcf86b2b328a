// Block Attention Residuals at op level in the conformance layer: schema,
// corpus rows, registry entry (binding: conformance/schemes/attnres_ops.hpp;
// docs/attnres_ops.md).
#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/schemes/attnres_ops.hpp"

namespace dmref::conf {
namespace {

Schema schema(const Problem& p, const json& opt) {
  SchemaBuilder b(p, opt);
  const std::string o = b.choice("op", {"readout", "phase1", "phase2", "partial_sum"},
                                 "the op: readout (one layer's softmax over the block sums), phase1 (the statistics of "
                                 "a block's S queries over the cached blocks), phase2 (those statistics merged with the "
                                 "partial sum: the layer input), partial_sum (b_n^i = b_n^{i-1} + v)");
  const AttnResOp op = attnres_op_named(o);
  const Dim M{b.integer("tokens", "M: tokens, each an independent problem"), "M"};
  const Dim C{b.integer("d", "C: the model width"), "C"};
  const bool blocks = op == AttnResOp::readout || op == AttnResOp::phase1;
  const std::string why_op = " (config.op is " + o + ")";
  Dim N{0, "N"}, Q{1, "1"};
  if (blocks) N = Dim{b.integer("sources", "N: finished block sums read, b_0 = e included (readout, phase1)"), "N"};
  else b.unread("sources", "read only by ops readout and phase1" + why_op);
  if (op == AttnResOp::phase1) Q = Dim{b.integer("queries", "S: the block's queries (layers) phase1 serves at once"), "S"};
  else b.unread("queries", "read only by op phase1" + why_op);
  bool partial = op == AttnResOp::phase2 || op == AttnResOp::partial_sum;
  if (op == AttnResOp::readout)
    partial = b.flag("partial", true, "the layer also reads the open block's partial sum (false: the first layer of a block)");
  else b.unread("partial", "read only by op readout" + why_op);
  if (op != AttnResOp::partial_sum) {
    b.real("eps", "1e-6", "RMSNorm epsilon of the keys (> 0)");
    const Draw wd = uniform(2.0 / std::sqrt(double(C.n)), "uniform[-1, 1) x 2/sqrt(C) (logits O(1))");
    const Draw gd = range(0.5, 1.5, "uniform on [0.5, 1.5)");
    if (op == AttnResOp::phase1) {
      b.param("param.w", {Q, C}, "the block's pseudo-queries w_l, one row per layer (pseudo_queries)", wd);
      b.param("param.g", {Q, C}, "their RMSNorm gains of the keys", gd);
    } else {
      b.param("param.w", {C}, "the layer's pseudo-query w_l (pseudo_query)", wd);
      b.param("param.g", {C}, "its RMSNorm gain of the keys", gd);
    }
  } else {
    b.unread("eps", "no readout in op partial_sum");
    for (const char* t : {"param.w", "param.g"}) b.unread_tensor(t, "no readout in op partial_sum");
  }
  if (blocks)
    b.input("input.blocks", {M, N, C}, "the finished block sums b_0 = e, b_1, .., b_{N-1} (block_representations)",
            uniform(1.0, "uniform[-1, 1)"));
  else b.unread_tensor("input.blocks", "read only by ops readout and phase1" + why_op);
  if (partial)
    b.input("input.partial", {M, C}, "the open block's partial sum b_n^{i-1} (intrablock_partial_sum)",
            uniform(1.0, "uniform[-1, 1)"));
  else b.unread_tensor("input.partial", "read only with config.partial true, by phase2 and partial_sum");
  if (op == AttnResOp::partial_sum) b.input("input.v", {M, C}, "the layer output v", uniform(1.0, "uniform[-1, 1)"));
  else b.unread_tensor("input.v", "read only by op partial_sum" + why_op);
  if (op == AttnResOp::phase2) {
    b.input("input.o", {M, C}, "phase 1's normalised numerator for this layer (interblock_normalized_output)",
            uniform(1.0, "uniform[-1, 1): a convex combination of sources"));
    b.input("input.lse", {M}, "phase 1's log-sum-exp for this layer (interblock_lse)",
            range(0.0, 2.0, "uniform on [0, 2): log of N exponentials of O(1) logits"));
  } else {
    for (const char* t : {"input.o", "input.lse"}) b.unread_tensor(t, "read only by op phase2" + why_op);
  }
  switch (op) {
    case AttnResOp::partial_sum:
      b.output("output.partial", {M, C}, "b_n^i = b_n^{i-1} + v");
      break;
    case AttnResOp::readout:
      b.output("output.h", {M, C}, "h = sum_i a_i b_i, a = softmax_i(w . RMSNorm_g(b_i)) over the blocks (and the partial)");
      break;
    case AttnResOp::phase1:
      b.output("output.o", {M, Q, C}, "per query: the normalised numerator o = sum_i a_i b_i (softmax_outputs)");
      b.output("output.lse", {M, Q}, "per query: lse = log sum_i exp(z_i) (lses)");
      break;
    case AttnResOp::phase2:
      b.output("output.h", {M, C}, "the layer input: (e^lse o + e^z b) / (e^lse + e^z), z = w . RMSNorm_g(b) (merged_output)");
      b.output("output.lse", {M}, "the merged statistics' lse' = log(e^lse + e^z)");
      break;
  }
  if (p.grad) {
    if (op == AttnResOp::partial_sum) b.upstream("partial");
    if (op == AttnResOp::readout || op == AttnResOp::phase2) b.upstream("h");
    if (op == AttnResOp::phase1) b.upstream("o");
    if (op == AttnResOp::phase1 || op == AttnResOp::phase2) b.upstream("lse");
  }
  return std::move(b.s);
}

void corpus(std::vector<CaseSpec>& v) {
  const std::string sc = "attnres_ops";
  for (const char* dt : kCorpusDtypes) {
    const std::string s = std::string(".") + dt + ".s1";
    const json readout = {{"op", "readout"}, {"tokens", 2}, {"d", 16}, {"sources", 3}};
    json first = readout;
    first["partial"] = false;
    const json phase1 = {{"op", "phase1"}, {"tokens", 2}, {"d", 16}, {"sources", 3}, {"queries", 4}};
    const json phase2 = {{"op", "phase2"}, {"tokens", 2}, {"d", 16}};
    const json psum = {{"op", "partial_sum"}, {"tokens", 2}, {"d", 16}};
    v.push_back(forward_case(sc + ".readout.N3_C16.M2" + s, sc, "default", dt, readout));
    v.push_back(grad_case(sc + ".readout_grad.N3_C16.M2", sc, "default", dt, readout));
    v.push_back(forward_case(sc + ".readout_first.N3_C16.M2" + s, sc, "default", dt, first));
    v.push_back(forward_case(sc + ".phase1.N3_S4_C16.M2" + s, sc, "default", dt, phase1));
    v.push_back(grad_case(sc + ".phase1_grad.N3_S4_C16.M2", sc, "default", dt, phase1));
    v.push_back(forward_case(sc + ".phase2.C16.M2" + s, sc, "default", dt, phase2));
    v.push_back(grad_case(sc + ".phase2_grad.C16.M2", sc, "default", dt, phase2));
    v.push_back(forward_case(sc + ".partial_sum.C16.M2" + s, sc, "default", dt, psum));
    v.push_back(grad_case(sc + ".partial_sum_grad.C16.M2", sc, "default", dt, psum));
  }
  // Every op at a kernel width (C = 1024, one token, bf16 storage), forward and backward.
  const json wide[] = {{{"op", "readout"}, {"tokens", 1}, {"d", 1024}, {"sources", 4}},
                       {{"op", "phase1"}, {"tokens", 1}, {"d", 1024}, {"sources", 4}, {"queries", 2}},
                       {{"op", "phase2"}, {"tokens", 1}, {"d", 1024}},
                       {{"op", "partial_sum"}, {"tokens", 1}, {"d", 1024}}};
  const char* shape[] = {"N4_C1024", "N4_S2_C1024", "C1024", "C1024"};
  for (int k = 0; k < 4; ++k) {
    const std::string op = wide[k].at("op").get<std::string>();
    v.push_back(forward_case(sc + "." + op + "." + shape[k] + ".M1.bf16.s1", sc, "default", "bf16", wide[k], true, false));
    v.push_back(grad_case(sc + "." + op + "_grad." + shape[k] + ".M1", sc, "default", "bf16", wide[k]));
  }
}

}  // namespace

const SchemeInfo attnres_ops_info{
    "attnres_ops.md",
    "Block AttnRes at op level: the partial sum, the readout and the two-phase (online softmax) merge, M tokens at once",
    &schema,
    &corpus,
    {{{"op", "readout"}, {"tokens", 2}, {"d", 4}, {"sources", 3}},
     {{"op", "phase1"}, {"tokens", 2}, {"d", 4}, {"sources", 3}, {"queries", 2}},
     {{"op", "phase2"}, {"tokens", 2}, {"d", 4}},
     {{"op", "partial_sum"}, {"tokens", 2}, {"d", 4}}}};

}  // namespace dmref::conf
