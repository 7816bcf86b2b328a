// Unit tests of Block AttnRes at op level (docs/attnres_ops.md; binding
// conformance/schemes/attnres_ops.hpp) against the independent transcription
// of the public two-phase kernels (oracles/include/dmref/oracles/attnres_ops_flash.hpp),
// on problems drawn as the corpus draws them, both at 667 bits (mp200).
//
// Tolerances. Forward: reference and oracle evaluate the same real function at
// u = 2^-667 ~ 1e-201 with different operations (norm before / after the
// projection, exp without / with the max, lse as log(sum) / m + log(l), the
// merge as a two-term softmax / o + sigmoid (b - o)). Each output is a
// composition of < 10^3 roundings here (C <= 16, N <= 4 sources), each
// amplified by at most the condition of the map: the logits are bounded by
// |z| < sqrt(C) ||w||_2 ||g||_inf (attnres.hpp) with ||w||_2 <= 2 (drawn
// uniform x 2/sqrt(C)) and g < 1.5, so |z| < 3 sqrt(C) = 12 at C = 16, and
// exp and the softmax amplify by < e^24 ~ 3e10 (lse in [0, 2) for phase2):
// |ref - oracle| < 1e3 x 3e10 x 1e-201 ~ 3e-188; checked at 1e-150.
// Backward: the reference's adjoints against central differences of the
// oracle's forward, step h = 2^-200: rounding 2^-667 / 2^-200 ~ 1e-141,
// truncation h^2 |f'''| / 6 ~ 1e-121 |f'''| with |f'''| of these smooth O(1)
// maps below 1e6 (the softmax's third derivative at |z| < 12 times the
// norm's): < 1e-114; checked at 1e-100 relative to the sum of |terms| (a
// wrong adjoint is off by O(1)).
#include "dmref/conformance/corpus.hpp"
#include "dmref/conformance/generate.hpp"  // validate
#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/schemes/attnres_ops.hpp"
#include "dmref/oracles/attnres_ops_flash.hpp"
#include "dmref/scalar.hpp"

#include "ops_check.hpp"

#include <catch2/catch.hpp>

using namespace dmref;
using namespace dmref::conf;
using namespace dmref::testing;

namespace {

CaseSpec spec(const json& c, bool grad, std::uint64_t seed = 1) {
  CaseSpec s = forward_case("test.attnres_ops", "attnres_ops", "default", "f32", c);
  s.seed = seed;
  s.grad = grad;
  return s;
}

Vec<Hi> row(const Values& v, const std::string& k, std::int64_t off, std::int64_t n) {
  return v.at(k).segment(off, n);
}

/// Every output of the op by the oracle on the tensor values v.
Values oracle_outputs(const Problem& p, const Values& v) {
  const auto op = p.config.at("op").get<std::string>();
  const auto M = p.config.at("tokens").get<std::int64_t>(), C = p.config.at("d").get<std::int64_t>();
  const Hi eps("1e-6");
  std::map<std::string, std::vector<Hi>> o;
  auto put = [&](const std::string& k, const Vec<Hi>& x) {
    for (Eigen::Index i = 0; i < x.size(); ++i) o["output." + k].push_back(x(i));
  };
  for (std::int64_t t = 0; t < M; ++t) {
    if (op == "partial_sum") {
      put("partial", Vec<Hi>(row(v, "input.partial", t * C, C) + row(v, "input.v", t * C, C)));
      continue;
    }
    if (op == "phase2") {
      const oracle::FlashStats<Hi> in{row(v, "input.o", t * C, C), v.at("input.lse")(t)};
      const auto r = oracle::flash_phase2<Hi>(in, row(v, "input.partial", t * C, C), v.at("param.w"), v.at("param.g"), eps);
      put("h", r.o);
      put("lse", Vec<Hi>::Constant(1, r.lse));
      continue;
    }
    const auto N = p.config.at("sources").get<std::int64_t>();
    std::vector<Vec<Hi>> src;
    for (std::int64_t i = 0; i < N; ++i) src.push_back(row(v, "input.blocks", (t * N + i) * C, C));
    if (op == "readout") {
      if (p.config.value("partial", true)) src.push_back(row(v, "input.partial", t * C, C));
      put("h", oracle::flash_phase1<Hi>(src, v.at("param.w"), v.at("param.g"), eps).o);
      continue;
    }
    const auto Q = p.config.at("queries").get<std::int64_t>();
    for (std::int64_t q = 0; q < Q; ++q) {
      const auto r = oracle::flash_phase1<Hi>(src, row(v, "param.w", q * C, C), row(v, "param.g", q * C, C), eps);
      put("o", r.o);
      o["output.lse"].push_back(r.lse);  // [M, S]: token-major
    }
  }
  Values out;
  for (auto& [k, x] : o) out[k] = Eigen::Map<Vec<Hi>>(x.data(), Eigen::Index(x.size()));
  return out;
}

Outputs<Hi> reference(const Problem& p) {
  Outputs<Hi> o;
  evaluate_attnres_ops<Hi>(p, schema_of(p), o);
  return o;
}

double max_abs_diff(const std::vector<Hi>& a, const Vec<Hi>& b) {
  REQUIRE(Eigen::Index(a.size()) == b.size());
  double m = 0;
  for (Eigen::Index i = 0; i < b.size(); ++i) m = std::max(m, to_double(abs(a[std::size_t(i)] - b(i))));
  return m;
}

const json kConfigs[] = {
    {{"op", "readout"}, {"tokens", 2}, {"d", 16}, {"sources", 3}},
    {{"op", "readout"}, {"tokens", 2}, {"d", 5}, {"sources", 1}, {"partial", false}},
    {{"op", "readout"}, {"tokens", 3}, {"d", 7}, {"sources", 4}, {"partial", false}},
    {{"op", "phase1"}, {"tokens", 2}, {"d", 16}, {"sources", 3}, {"queries", 4}},
    {{"op", "phase1"}, {"tokens", 1}, {"d", 6}, {"sources", 1}, {"queries", 2}},
    {{"op", "phase2"}, {"tokens", 3}, {"d", 16}},
    {{"op", "partial_sum"}, {"tokens", 2}, {"d", 9}},
};

}  // namespace

TEST_CASE("attnres_ops forward equals the two-phase kernels' computation (oracle) at 667 bits", "[attnres_ops]") {
  for (const auto& c : kConfigs)
    for (const std::uint64_t seed : {1, 2}) {
      INFO(c.dump() << " seed " << seed);
      const Problem p = make_problem(spec(c, false, seed));
      const Outputs<Hi> ref = reference(p);
      const auto orc = oracle_outputs(p, values_of(p));
      REQUIRE(ref.t.size() == orc.size());
      for (const auto& [k, y] : orc) {
        INFO(k);
        CHECK(max_abs_diff(ref.t.at(k).values, y) < 1e-150);
      }
    }
}

TEST_CASE("attnres_ops: phase 1 then phase 2 is the direct softmax over all the sources", "[attnres_ops]") {
  // The two-phase algorithm's claim (docs/attnres_ops.md): the statistics of
  // the cached blocks merged with the partial sum give the readout over the
  // blocks and the partial, and their lse. Same bound as above (the two
  // evaluations differ in < 10^3 roundings at 667 bits).
  for (const std::uint64_t seed : {1, 2, 3}) {
    const Problem p = make_problem(spec(kConfigs[0], false, seed));
    const Values v = values_of(p);
    const std::int64_t C = 16, N = 3;
    const Hi eps("1e-6");
    for (std::int64_t t = 0; t < 2; ++t) {
      std::vector<Vec<Hi>> src;
      for (std::int64_t i = 0; i < N; ++i) src.push_back(row(v, "input.blocks", (t * N + i) * C, C));
      const Vec<Hi> b = row(v, "input.partial", t * C, C), &w = v.at("param.w"), &g = v.at("param.g");
      const auto merged = attnres_merge<Hi>(attnres_stats<Hi>(src, w, g, eps), b, w, g, eps);
      auto all = src;
      all.push_back(b);
      const auto direct = attnres_stats<Hi>(all, w, g, eps);
      CHECK(to_double((merged.o - direct.o).cwiseAbs().maxCoeff()) < 1e-150);
      CHECK(to_double(abs(merged.lse - direct.lse)) < 1e-150);
      CHECK(to_double((direct.o - attnres_mix<Hi>(all, w, g, eps)).cwiseAbs().maxCoeff()) == 0);  // o is the readout, ==
    }
  }
}

TEST_CASE("attnres_ops backward: the adjoints match central differences of the oracle", "[attnres_ops]") {
  for (const auto& c : kConfigs) {
    INFO(c.dump());
    const Problem p = make_problem(spec(c, true));
    check_adjoints(p, reference(p), oracle_outputs);
  }
}

TEST_CASE("attnres_ops: a key or tensor of another op is refused, naming it", "[attnres_ops]") {
  for (const auto& [op, key] : {std::pair{"phase2", "sources"}, std::pair{"readout", "queries"},
                                std::pair{"partial_sum", "eps"}, std::pair{"phase1", "partial"}}) {
    INFO(op << " given " << key);
    json c = {{"op", op}, {"tokens", 1}, {"d", 4}};
    if (std::string(op) == "phase1") c.update({{"sources", 2}, {"queries", 2}});
    if (std::string(op) == "readout") c["sources"] = 2;
    Problem q = make_problem(spec(c, false));
    q.config[key] = std::string(key) == "partial" ? json(true) : std::string(key) == "eps" ? json("0.5") : json(3);
    try {
      validate(q);
      FAIL("accepted config." << key << " for op " << op);
    } catch (const io::BadInput& e) {
      CHECK(std::string(e.what()).find(std::string("config.") + key) != std::string::npos);
    }
  }
}

TEST_CASE("attnres_ops: an lse past the type's exp range is refused, naming input.lse", "[attnres_ops]") {
  Problem q = make_problem(spec({{"op", "phase2"}, {"tokens", 2}, {"d", 4}}, false));
  q.tensors.at("input.lse").values[1] = 1e6;  // exp(1e6) overflows double
  try {
    (void)evaluate<double>(q);
    FAIL("accepted lse = 1e6");
  } catch (const io::BadInput& e) {
    CHECK(std::string(e.what()).find("input.lse[1]") != std::string::npos);
  }
}
