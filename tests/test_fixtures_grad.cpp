// The conformance gate on gradients (backward cases, ids "*.kernel_grad.*", "*.model_grad.*"): verify
// judges grad.* tensors exactly like outputs. It must accept the golden
// gradients rounded to each dtype and the dtype-emulated reference (float32
// backward on inputs and upstream gradients in the dtype: the baseline), and
// reject, at every dtype, a gradient 10x off its tolerance. That it rejects
// known-wrong backward passes at every dtype is CTest `mutants`
// (tests/mutants/<s>.cpp, backward_<s>: the backward mutants, on every gradient
// fixture, with the reference's own backward through the same path as the
// control).
#include "gate.hpp"

#include "dmref/conformance/generate.hpp"
#include "dmref/io/safetensors.hpp"

#include <catch2/catch.hpp>


using namespace dmref;
using namespace dmref::conf;
using namespace dmref::test;

namespace {

const char* kDtypes[] = {"f32", "bf16", "f16"};

/// The committed fixture of a case (fixtures/golden/): read, not regenerated,
/// so that these tests take seconds; that the committed files are what
/// generation produces is checked by fixtures_manifest_ci_subset and
/// scripts/fixtures (the whole corpus).
io::File committed(const CaseSpec& c) {
  return io::read(std::string(DMREF_SOURCE_DIR) + "/fixtures/golden/" + c.id + ".safetensors");
}

/// Every committed backward case of the corpus at dtype dt (the generate-only
/// ones, CaseSpec::committed false, have no file in fixtures/golden/).
std::vector<CaseSpec> grad_cases(const std::string& dt) {
  std::vector<CaseSpec> r;
  for (const auto& c : corpus())
    if (c.grad && c.dtype == dt && c.committed) r.push_back(c);
  return r;
}

}  // namespace

TEST_CASE("verify accepts golden gradients rounded to each dtype and the dtype-emulated backward", "[fixtures][grad]") {
  for (const char* dt : kDtypes)
    for (const auto& c : grad_cases(dt)) {
      const io::File fx = committed(c);
      std::size_t grads = 0;
      for (const auto& [name, t] : fx.tensors) grads += name.rfind("grad.", 0) == 0;
      CHECK(grads >= 4);  // grad.input.e and at least one more, each with .lo
      for (const char* cdt : kDtypes) {
        INFO(c.id << " judged as " << cdt);
        const auto g = verify_case(fx, golden_rounded(fx, format_of(cdt)), opts(cdt), true, 5);
        CHECK(g.pass);
        const Problem p = rounded(make_problem(c), format_of(cdt));
        const auto r = verify_case(fx, candidate_from(evaluate<float>(p), format_of(cdt)), opts(cdt), true, 5);
        CHECK(r.pass);
        // Its margin: test_fixtures.cpp, and the faithful catalogue.
      }
    }
}

TEST_CASE("verify rejects one gradient element off by 10x its tolerance, at every dtype", "[fixtures][grad]") {
  for (const char* dt : kDtypes)
    for (const auto& c : grad_cases(dt)) {
      INFO(c.id);
      const io::File fx = committed(c);
      io::File cand = golden_rounded(fx, format_of(dt));
      // grad.input.e where the scheme has it (the layered schemes); an op's first input gradient otherwise.
      std::string name = fx.tensors.count("grad.input.e") ? "grad.input.e" : "";
      for (const auto& [n, t] : fx.tensors)
        if (name.empty() && n.rfind("grad.input.", 0) == 0 && t.values.size() > 3) name = n;
      REQUIRE(!name.empty());
      auto& g = cand.tensors.at(name).values;
      const std::size_t k = 3;
      const double bound = fx.tensors.at(std::string("bound.") + dt + "." + name).values.at(k);
      const double tol = tolerance(kToleranceFactor, bound, kToleranceFloorUlps, dt, fx.tensors.at(name).values[k]);
      g[k] = fx.tensors.at(name).values[k] + 10 * tol;
      const auto v = verify_case(fx, cand, opts(dt), true, 5);
      CHECK_FALSE(v.pass);
      CHECK(v.failed == 1);
      REQUIRE(v.failures.size() == 1);
      CHECK(v.failures[0].tensor == name);
    }
}

TEST_CASE("backward problems: upstream gradients are required, and never ignored", "[fixtures][grad]") {
  Problem p = make_problem(find_case("preln.kernel_grad.d8.L6.f32.s1"));
  p.grad = false;  // upstream given but no backward asked for
  CHECK_THROWS_WITH(evaluate<float>(p), Catch::Contains("input.grad.h") && Catch::Contains("--grad"));
  p.grad = true;
  p.tensors.erase("input.grad.out");
  CHECK_THROWS_WITH(evaluate<float>(p), Catch::Contains("input.grad.out") && Catch::Contains("missing"));
  p = make_problem(find_case("preln.kernel_grad.d8.L6.f32.s1"));
  p.tensors["input.grad.M"] = p.tensors.at("input.grad.out");
  CHECK_THROWS_WITH(evaluate<float>(p), Catch::Contains("input.grad.M") && Catch::Contains("no backward"));
  // mHC: the final streams and every per-layer coefficient output take one.
  for (const char* name : {"input.grad.X", "input.grad.H_pre", "input.grad.H_post", "input.grad.H_res", "input.grad.Ht_res"}) {
    Problem mhc = make_problem(find_case("mhc.kernel_grad.n4_d8.L6.paper.f32.s1"));
    mhc.tensors.erase(name);
    CHECK_THROWS_WITH(evaluate<float>(mhc), Catch::Contains(name) && Catch::Contains("missing"));
  }
  Problem mhc = make_problem(find_case("mhc.kernel_grad.n4_d8.L6.paper.f32.s1"));
  mhc.tensors["input.grad.Ht_pre"] = io::Tensor{"F64", {2, 6, 4}, std::vector<double>(48, 0.5)};  // not an output
  CHECK_THROWS_WITH(evaluate<float>(mhc), Catch::Contains("input.grad.Ht_pre") && Catch::Contains("no backward through"));
}
