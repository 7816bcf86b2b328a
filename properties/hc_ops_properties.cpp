// Properties of Hyper-Connections at op level (docs/hc_ops.md). Cases: n =
// 1..6 streams, C = 1..8, M = 1..3 tokens, inputs drawn as the corpus draws
// them (seeded); the reference in double.
//   - n = 1 static HC with A_m = A_r = B = 1 is PreLN's residual add: width
//     returns branch_input = carried = H_0 and depth returns x + H'_0, exactly
//     (multiplications by 1 and one addition);
//   - zero dynamic weights equal static HC: W_m = W_r = W_b = 0 make every
//     act(.) term s act(0) = 0 (tanh(0) = 0 exactly), so alpha, beta and every
//     output equal the static problem's exactly.
#include "harness.hpp"

#include "dmref/conformance/corpus.hpp"
#include "dmref/conformance/evaluate.hpp"
#include "dmref/conformance/registry.hpp"

#include <sstream>

using namespace dmref;
using namespace dmref::conf;

namespace {

struct OpCase {
  int n = 4, C = 4, M = 2;
  bool rms = true, tanh = true;
  std::uint64_t seed = 1;
  std::string str() const {
    std::ostringstream o;
    o << "n=" << n << " C=" << C << " M=" << M << " norm=" << (rms ? "rmsnorm" : "layernorm") << " tanh=" << tanh
      << " seed=" << seed;
    return o.str();
  }
};

rc::Gen<OpCase> gen_case() {
  return rc::gen::apply(
      [](int n, int C, int M, bool rms, bool th, int seed) { return OpCase{n, C, M, rms, th, std::uint64_t(seed)}; },
      rc::gen::inRange(1, 7), rc::gen::inRange(1, 9), rc::gen::inRange(1, 4), rc::gen::arbitrary<bool>(),
      rc::gen::arbitrary<bool>(), rc::gen::inRange(1, 1 << 30));
}

Problem draw(const OpCase& c, const std::string& op, const json& extra) {
  json cfg = {{"op", op}, {"tokens", c.M}, {"n", c.n}, {"d", c.C}};
  cfg.update(extra);
  CaseSpec s = forward_case("prop.hc_ops", "hc_ops", "default", "f32", cfg);
  s.seed = c.seed;
  return make_problem(s);
}

inline void showValue(const OpCase& c, std::ostream& os) { os << c.str(); }

}  // namespace

TEST_CASE("n = 1 static HC with A_m = A_r = B = 1 is PreLN's residual add", "[property][hc_ops]") {
  prop::check("n = 1 static unit HC is PreLN", 100, [] {
    OpCase c = *gen_case();
    c.n = 1;
    const std::string where = c.str();
    Problem w = draw(c, "width", json::object());
    w.tensors.at("param.static_alpha").values = {1.0, 1.0};
    w.tensors.at("param.static_beta").values = {1.0};
    const Outputs<double> a = evaluate<double>(w);
    const auto& R = w.tensors.at("input.residual").values;
    DMREF_PROP_TRUE("branch_input == H_0", a.t.at("output.branch_input").values == R, where);
    DMREF_PROP_TRUE("carried == H_0", a.t.at("output.carried").values == R, where);
    Problem d = draw(c, "depth", json::object());
    d.tensors.at("input.beta").values.assign(std::size_t(c.M), 1.0);
    const Outputs<double> b = evaluate<double>(d);
    const auto &x = d.tensors.at("input.branch_output").values, &h = d.tensors.at("input.carried").values;
    for (std::size_t k = 0; k < x.size(); ++k)
      DMREF_PROP_TRUE("residual == x + H'", b.t.at("output.residual").values[k] == x[k] + h[k], where);
  });
}

TEST_CASE("zero dynamic weights equal static HC", "[property][hc_ops]") {
  prop::check("zero dynamic weights == static", 100, [] {
    const OpCase c = *gen_case();
    const std::string where = c.str();
    json dyn = {{"dynamic", true}, {"norm", c.rms ? "rmsnorm" : "layernorm"}, {"tanh", c.tanh}};
    Problem pd = draw(c, "width", dyn), ps = draw(c, "width", json::object());
    for (const char* k : {"param.dynamic_alpha_fn", "param.dynamic_beta_fn"})
      std::fill(pd.tensors.at(k).values.begin(), pd.tensors.at(k).values.end(), 0.0);
    for (const char* k : {"input.residual", "param.static_alpha", "param.static_beta"}) ps.tensors[k] = pd.tensors.at(k);
    const Outputs<double> a = evaluate<double>(pd), b = evaluate<double>(ps);
    for (const char* k : {"output.branch_input", "output.carried", "output.alpha", "output.beta"})
      DMREF_PROP_TRUE(std::string(k) + " dynamic(0) == static", a.t.at(k).values == b.t.at(k).values, where);
  });
}
