// Properties of Block AttnRes at op level (docs/attnres_ops.md): the ops
// compose to the scheme. Cases: C = 1..8, N = 1..5 cached blocks, S = 1..4
// queries, M = 1..3 tokens, inputs drawn as the corpus draws them (seeded).
//   - readout == AttentionResiduals::read of a Block AttnRes state holding the
//     same finished blocks and partial sum (double, exact: the same function
//     on the same doubles);
//   - phase1's row s == readout with (w_s, g_s) and no partial (double, exact);
//   - phase2 on phase1's statistics == the readout over the blocks and the
//     partial, and its lse == phase1's lse over all of them (257 bits:
//     u = 2^-257 ~ 4e-78, < 10^3 roundings, each amplified by at most e^(2 |z|)
//     with |z| < 3 sqrt(C) <= 8.5 (attnres.hpp's bound at these draws):
//     < 1e3 x 2.4e7 x 4e-78 ~ 1e-67; checked at 1e-60).
#include "harness.hpp"

#include "dmref/conformance/corpus.hpp"
#include "dmref/conformance/evaluate.hpp"
#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/schemes/attnres_ops.hpp"
#include "dmref/scalar.hpp"

#include <sstream>

using namespace dmref;
using namespace dmref::conf;

namespace {

struct OpCase {
  int C = 4, N = 3, Q = 2, M = 2;
  std::uint64_t seed = 1;
  std::string str() const {
    std::ostringstream o;
    o << "C=" << C << " N=" << N << " S=" << Q << " M=" << M << " seed=" << seed;
    return o.str();
  }
};

rc::Gen<OpCase> gen_case() {
  return rc::gen::apply([](int C, int N, int Q, int M, int seed) { return OpCase{C, N, Q, M, std::uint64_t(seed)}; },
                        rc::gen::inRange(1, 9), rc::gen::inRange(1, 6), rc::gen::inRange(1, 5), rc::gen::inRange(1, 4),
                        rc::gen::inRange(1, 1 << 30));
}

Problem draw(const OpCase& c, json cfg) {
  cfg["tokens"] = c.M;
  cfg["d"] = c.C;
  CaseSpec s = forward_case("prop.attnres_ops", "attnres_ops", "default", "f32", cfg);
  s.seed = c.seed;
  return make_problem(s);
}

template <class S>
std::vector<Vec<S>> blocks_of(const Problem& p, std::int64_t t, std::int64_t N, std::int64_t C) {
  std::vector<Vec<S>> b;
  for (std::int64_t i = 0; i < N; ++i) b.push_back(vec_at<S>(p.tensors.at("input.blocks"), (t * N + i) * C, C));
  return b;
}

}  // namespace

TEST_CASE("readout == AttentionResiduals::read of the same state, phase1 rows == readouts", "[property][attnres_ops]") {
  prop::check("readout == Block AttnRes read, phase1 row == readout", 100, [] {
    const OpCase c = *gen_case();
    const std::string where = c.str();
    const Problem r = draw(c, {{"op", "readout"}, {"sources", c.N}});
    const Outputs<double> h = evaluate<double>(r);
    for (std::int64_t t = 0; t < c.M; ++t) {
      AttnResConfig<double> cfg;
      cfg.d = c.C;
      cfg.layers = c.N + 1;  // N - 1 finished blocks after e, then a block of size 2 half written
      cfg.variant = AttnResVariant::block;
      cfg.block_size = 1;
      const Vec<double> w = vec_at<double>(r.tensors.at("param.w"), 0, c.C), g = vec_at<double>(r.tensors.at("param.g"), 0, c.C);
      cfg.w.assign(std::size_t(cfg.layers + 1), w);
      cfg.g.assign(std::size_t(cfg.layers + 1), g);
      const AttentionResiduals<double> m(cfg);
      AttentionResiduals<double>::State st;
      st.sources = blocks_of<double>(r, t, c.N, c.C);
      st.partial = vec_at<double>(r.tensors.at("input.partial"), t * c.C, c.C);
      st.in_block = 1;
      st.written = c.N - 1;
      const Vec<double> ref = m.read(st, c.N - 1);
      for (int k = 0; k < c.C; ++k)
        DMREF_PROP_TRUE("readout == AttentionResiduals::read", h.t.at("output.h").values[std::size_t(t * c.C + k)] == ref(k), where);
    }
    const Problem p1 = draw(c, {{"op", "phase1"}, {"sources", c.N}, {"queries", c.Q}});
    const Outputs<double> s1 = evaluate<double>(p1);
    for (int q = 0; q < c.Q; ++q) {
      Problem rq = draw(c, {{"op", "readout"}, {"sources", c.N}, {"partial", false}});
      rq.tensors["input.blocks"] = p1.tensors.at("input.blocks");
      for (const char* k : {"param.w", "param.g"}) {
        const auto& all = p1.tensors.at(k).values;
        rq.tensors[k] = io::Tensor{"F64", {c.C}, {all.begin() + q * c.C, all.begin() + (q + 1) * c.C}};
      }
      const Outputs<double> hq = evaluate<double>(rq);
      for (std::int64_t t = 0; t < c.M; ++t)
        for (int k = 0; k < c.C; ++k)
          DMREF_PROP_TRUE("phase1 o row == readout",
                          s1.t.at("output.o").values[std::size_t((t * c.Q + q) * c.C + k)] ==
                              hq.t.at("output.h").values[std::size_t(t * c.C + k)],
                          where);
    }
  });
}

TEST_CASE("phase2 on phase1's statistics == the direct softmax over all the sources (257 bits)", "[property][attnres_ops]") {
  prop::check("phase2(phase1) == direct readout and lse", 100, [] {
    const OpCase c = *gen_case();
    const std::string where = c.str();
    const Problem r = draw(c, {{"op", "readout"}, {"sources", c.N}});
    const mp77 eps = mp77(1) / mp77(1000000);
    const Vec<mp77> w = vec_at<mp77>(r.tensors.at("param.w"), 0, c.C), g = vec_at<mp77>(r.tensors.at("param.g"), 0, c.C);
    for (std::int64_t t = 0; t < c.M; ++t) {
      auto src = blocks_of<mp77>(r, t, c.N, c.C);
      const Vec<mp77> b = vec_at<mp77>(r.tensors.at("input.partial"), t * c.C, c.C);
      const auto merged = attnres_merge<mp77>(attnres_stats<mp77>(src, w, g, eps), b, w, g, eps);
      src.push_back(b);
      const auto direct = attnres_stats<mp77>(src, w, g, eps);
      DMREF_PROP_CLOSE("phase2(phase1) h == readout", to_double((merged.o - direct.o).cwiseAbs().maxCoeff()), 1e-60, where);
      DMREF_PROP_CLOSE("phase2(phase1) lse == lse", to_double(abs(merged.lse - direct.lse)), 1e-60, where);
    }
  });
}
