// Every registered scheme has every stem (issue 21; docs/framework.md,
// "Adding a scheme"): a missing piece fails here, in the build's tests, not
// in a user's run. What is checked for each entry of DMREF_SCHEMES:
//   - its doc page docs/<page> exists and carries the generated Files section
//     (its content is checked by CTest schema_docs);
//   - an oracle (oracles/include/dmref/oracles/<s>_*.hpp), a unit test
//     (tests/test_<s>.cpp), a property file (properties/<s>_properties.cpp),
//     faithful variants (tests/faithful/<s>.py);
//   - mutants in the catalogue: at least one forward mutant and one backward
//     mutant of the scheme (its tests/mutants/<s>.cpp defines forward_<s> and
//     backward_<s>, declared for every DMREF_SCHEMES line in mutants.hpp:
//     without the file this test does not link; here, that neither is empty);
//   - committed corpus cases at f32, bf16 and f16, forward and backward (the
//     backward cases are what exercise its Backward specialization);
//   - a schema that declares what its binding reads: on every committed
//     case, the layout-only pass (validate) reads exactly the declared
//     input/param/upstream tensors and names exactly the declared outputs
//     (plus grad.<tensor> of each input and param read, for a backward case).
#include "dmref/conformance/generate.hpp"
#include "dmref/conformance/registry.hpp"

#include "mutants/mutants.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

using namespace dmref;
using namespace dmref::conf;
namespace fs = std::filesystem;

namespace {
const fs::path kRoot = DMREF_SOURCE_DIR;

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
}  // namespace

TEST_CASE("every registered scheme has its doc page, oracle, test, properties and faithful variants", "[registry]") {
  REQUIRE(registry().size() >= 6);
  for (const auto& e : registry()) {
    INFO("scheme " << e.name);
    const fs::path page = kRoot / "docs" / e.info->page;
    REQUIRE(fs::exists(page));
    const std::string text = slurp(page);
    CHECK(text.find("<!-- schema: begin") != std::string::npos);
    CHECK(text.find("## Backward") != std::string::npos);
    CHECK(text.find("## Sources") != std::string::npos);
    bool oracle = false;
    for (const auto& f : fs::directory_iterator(kRoot / "oracles/include/dmref/oracles"))
      oracle |= f.path().filename().string().rfind(e.name + "_", 0) == 0;
    CHECK(oracle);
    CHECK(fs::exists(kRoot / "tests" / ("test_" + e.name + ".cpp")));
    CHECK(fs::exists(kRoot / "properties" / (e.name + "_properties.cpp")));
    CHECK(fs::exists(kRoot / "tests/faithful" / (e.name + ".py")));
  }
}

TEST_CASE("every registered scheme has forward and backward mutants", "[registry]") {
  std::map<std::string, int> forward, backward;
  for (const auto& m : mutants::catalogue()) {
    if (m.eval) ++forward[m.scheme];
    if (m.backward64) ++backward[m.scheme];
  }
  for (const auto& e : registry()) {
    INFO("scheme " << e.name);
    CHECK(forward[e.name] >= 1);
    CHECK(backward[e.name] >= 1);
  }
}

TEST_CASE("every registered scheme has committed cases at f32, bf16 and f16, forward and backward", "[registry]") {
  std::map<std::string, std::set<std::string>> have;  // scheme -> {"f32 forward", ...}
  for (const auto& c : corpus())
    if (c.committed) have[c.scheme].insert(c.dtype + (c.grad ? " backward" : " forward"));
  for (const auto& e : registry()) {
    INFO("scheme " << e.name);
    for (const char* dt : kCorpusDtypes)
      for (const char* kind : {" forward", " backward"}) CHECK(have[e.name].count(dt + std::string(kind)) == 1);
  }
  for (const auto& [scheme, kinds] : have) {  // no case of an unregistered scheme
    INFO("scheme " << scheme);
    CHECK(std::any_of(registry().begin(), registry().end(), [&](const auto& e) { return e.name == scheme; }));
  }
}

TEST_CASE("each schema declares exactly what its binding reads and outputs", "[registry]") {
  int checked = 0;
  for (const auto& c : corpus()) {
    if (!c.committed) continue;
    INFO(c.id);
    const Problem p = make_problem(c);
    const Schema s = schema_of(p);
    Problem q = p;
    q.layout_only = true;
    const BallPrecision bits(kZivBits.at(0));
    const Outputs<Ball> layout = evaluate<Ball>(q);
    std::set<std::string> declared_in, declared_out, read(q.tensors_used.begin(), q.tensors_used.end());
    for (const auto& t : s.tensors) {
      if (t.role == Role::output) declared_out.insert(t.name);
      else declared_in.insert(t.name);
    }
    CHECK(read == declared_in);
    std::set<std::string> out;
    for (const auto& [name, o] : layout.t) {
      if (name.rfind("grad.", 0) == 0) continue;
      out.insert(name);
      CHECK(o.shape == s.shape(name));
    }
    CHECK(out == declared_out);
    for (const auto& [name, t] : p.tensors) CHECK(t.shape == s.shape(name));  // the draw used the declared shapes
    ++checked;
  }
  CHECK(checked >= 100);
}
