// Unit tests of Hyper-Connections at op level (docs/hc_ops.md; binding
// conformance/schemes/hc_ops.hpp) against the independent transcription of
// lucidrains' width_connection / depth_connection
// (oracles/include/dmref/oracles/hc_ops_lucidrains.hpp), on problems drawn as
// the corpus draws them, at 667 bits (mp200).
//
// Tolerances. Forward: two evaluations of the same real function at unit
// roundoff u = 2^-667 ~ 1e-201; each output is a composition of at most
// ~ 4C + 3n + 10 < 200 roundings here (C <= 17, n <= 8), each amplified by at
// most the condition of the map: the norm divides by sqrt(mean(x^2) + eps)
// >= 1e-3 at these draws (|x| ~ U[-1, 1), C >= 3: mean(x^2) < 1e-6 has
// probability < 1e-9 per row), tanh' <= 1, coefficients O(1): < 1e3 x 200 x
// 1e-201 x (the outputs' scale <= n + 1) ~ 1e-195; checked at 1e-180.
// Backward: the adjoints against central differences of the oracle (h =
// 2^-200): rounding 2^-667 / 2^-200 ~ 1e-141, truncation h^2 |f'''| / 6 ~
// 1e-121 |f'''| with |f'''| of these tanh / rsqrt maps O(10^3) at most: checked
// at 1e-100 relative to the sum of |terms| (a wrong adjoint is off by O(1)).
// Width then depth against hc's read and write: the same operations in the
// same order on the same doubles, so bit for bit (==).
#include "dmref/conformance/corpus.hpp"
#include "dmref/conformance/generate.hpp"  // validate
#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/schemes/hc_ops.hpp"
#include "dmref/oracles/central_difference.hpp"
#include "dmref/oracles/hc_ops_lucidrains.hpp"
#include "dmref/scalar.hpp"
#include "ops_check.hpp"

#include <catch2/catch.hpp>

using namespace dmref;
using namespace dmref::conf;
using testing::Hi;

namespace {

json variant(const std::string& v) {
  if (v == "static") return json::object();
  if (v == "layernorm") return {{"dynamic", true}};
  if (v == "rmsnorm_notanh") return {{"dynamic", true}, {"norm", "rmsnorm"}, {"tanh", false}, {"ln_eps", "1e-30"}};
  return {{"dynamic", true}, {"norm", "rmsnorm"}, {"ln_eps", "1e-30"}};  // lucidrains' default
}

CaseSpec spec(const std::string& op, int n, int C, const std::string& v, bool grad, std::uint64_t seed = 1) {
  json c = {{"op", op}, {"tokens", 2}, {"n", n}, {"d", C}};
  if (op != "depth") c.update(variant(v));
  CaseSpec s = forward_case("test.hc_ops", "hc_ops", "default", "f32", c);
  s.seed = seed;
  s.grad = grad;
  return s;
}

using testing::Values;
using testing::values_of;
using testing::mat;
/// The layer in the oracle's terms; eps as the config states it (decimal string) or hc's documented 1e-5.
oracle::LucidrainsHc<Hi> oracle_layer(const Problem& p, const Values& v) {
  oracle::LucidrainsHc<Hi> m;
  m.n = p.config.at("n").get<int>();
  m.C = p.config.at("d").get<int>();
  m.dynamic = p.config.value("dynamic", false);
  m.tanh = p.config.value("tanh", true);
  m.layernorm = p.config.value("norm", std::string("layernorm")) == "layernorm";
  m.eps = p.config.contains("ln_eps") ? Hi(p.config["ln_eps"].get<std::string>()) : Hi("1e-5");
  m.static_alpha = mat(v, "param.static_alpha", 0, m.n, m.n + 1);
  m.static_beta = v.at("param.static_beta");
  if (m.dynamic) {
    m.dynamic_alpha_fn = mat(v, "param.dynamic_alpha_fn", 0, m.C, m.n + 1);
    m.dynamic_beta_fn = v.at("param.dynamic_beta_fn");
    m.alpha_scale = v.at("param.dynamic_alpha_scale")(0);
    m.beta_scale = v.at("param.dynamic_beta_scale")(0);
    m.gain = v.at("param.norm_gain");
    if (m.layernorm) m.bias = v.at("param.norm_bias");
  }
  return m;
}

Values oracle_outputs(const Problem& p, const Values& v) {
  const auto op = p.config.at("op").get<std::string>();
  const auto T = p.config.at("tokens").get<std::int64_t>(), n = p.config.at("n").get<std::int64_t>(),
             C = p.config.at("d").get<std::int64_t>();
  std::map<std::string, std::vector<Hi>> o;
  auto put = [&](const std::string& k, const Mat<Hi>& m) {
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      for (Eigen::Index j = 0; j < m.cols(); ++j) o["output." + k].push_back(m(i, j));
  };
  const bool width = op != "depth", depth = op != "width";
  const auto layer = width ? oracle_layer(p, v) : oracle::LucidrainsHc<Hi>{};
  for (std::int64_t t = 0; t < T; ++t) {
    Mat<Hi> H;
    if (depth) {
      H = oracle::lucidrains_depth<Hi>(Vec<Hi>(mat(v, "input.branch_output", t * C, C, 1)),
                                       mat(v, "input.carried", t * n * C, n, C), Vec<Hi>(mat(v, "input.beta", t * n, n, 1)));
      put("residual", H);
    } else {
      H = mat(v, "input.residual", t * n * C, n, C);
    }
    if (width) {
      const auto r = oracle::lucidrains_width<Hi>(layer, H);
      put("branch_input", r.branch_input.transpose());
      put("carried", r.carried);
      put("alpha", r.alpha);
      put("beta", r.beta.transpose());
    }
  }
  Values out;
  for (auto& [k, x] : o) out[k] = Eigen::Map<Vec<Hi>>(x.data(), Eigen::Index(x.size()));
  return out;
}

template <class S>
Outputs<S> reference(const Problem& p) {
  Outputs<S> o;
  evaluate_hc_ops<S>(p, schema_of(p), o);
  return o;
}

double max_abs_diff(const std::vector<Hi>& a, const Vec<Hi>& b) {
  REQUIRE(Eigen::Index(a.size()) == b.size());
  double m = 0;
  for (Eigen::Index i = 0; i < b.size(); ++i) m = std::max(m, to_double(abs(a[std::size_t(i)] - b(i))));
  return m;
}

const char* kOps[] = {"width", "depth", "depth_width"};
const char* kVariants[] = {"rmsnorm_tanh", "rmsnorm_notanh", "static", "layernorm"};

}  // namespace

TEST_CASE("hc_ops forward equals lucidrains' computation (oracle) at 667 bits", "[hc_ops]") {
  for (const char* op : kOps)
    for (const int n : {1, 2, 4, 8})
      for (const char* v : kVariants)
        for (const std::uint64_t seed : {1, 2}) {
          if (std::string(op) == "depth" && std::string(v) != "static") continue;  // depth has no variants
          INFO(op << " n=" << n << " " << v << " seed " << seed);
          const Problem p = make_problem(spec(op, n, 16 / n + 1, v, false, seed));
          const Outputs<Hi> ref = reference<Hi>(p);
          const auto orc = oracle_outputs(p, values_of(p));
          REQUIRE(ref.t.size() == orc.size());
          for (const auto& [k, y] : orc) {
            INFO(k);
            CHECK(max_abs_diff(ref.t.at(k).values, y) < 1e-180);
          }
        }
}

TEST_CASE("hc_ops backward: the adjoints match central differences of the oracle", "[hc_ops]") {
  for (const char* op : kOps)
    for (const int n : {2, 4})
      for (const char* v : kVariants) {
        if (std::string(op) == "depth" && std::string(v) != "static") continue;
        INFO(op << " n=" << n << " " << v);
        const Problem p = make_problem(spec(op, n, 3, v, true));
        testing::check_adjoints(p, reference<Hi>(p), oracle_outputs);  // tolerance derived in ops_check.hpp
      }
}

TEST_CASE("hc_ops: width then depth is one layer of hc's read and write, bit for bit", "[hc_ops]") {
  for (const char* v : kVariants) {
    INFO(v);
    const Problem pw = make_problem(spec("width", 4, 16, v, false, 5));
    const Outputs<double> w = reference<double>(pw);
    Problem pd = make_problem(spec("depth", 4, 16, "static", false, 6));  // its branch_output is the layer output
    pd.tensors.at("input.carried").values.assign(w.t.at("output.carried").values.begin(), w.t.at("output.carried").values.end());
    pd.tensors.at("input.beta").values.assign(w.t.at("output.beta").values.begin(), w.t.at("output.beta").values.end());
    const Outputs<double> d = reference<double>(pd);
    const Schema s = schema_of(pw);
    HcConfig<double> c = hc_constants<double>(s, 4, 16);
    c.layers.push_back(hc_layer_from_lucidrains<double>(pw, s, c));
    const HyperConnections<double> m(c);
    for (std::int64_t t = 0; t < 2; ++t) {
      typename HyperConnections<double>::State st;
      st.H = mat_at<double>(pw.tensors.at("input.residual"), t * 64, 4, 16);
      const Vec<double> h = m.read(st, 0);
      m.write(st, 0, vec_at<double>(pd.tensors.at("input.branch_output"), t * 16, 16));
      for (int k = 0; k < 16; ++k) CHECK(w.t.at("output.branch_input").values[std::size_t(t * 16 + k)] == h(k));
      for (int i = 0; i < 4; ++i)
        for (int k = 0; k < 16; ++k) CHECK(d.t.at("output.residual").values[std::size_t(t * 64 + i * 16 + k)] == st.H(i, k));
    }
  }
}

TEST_CASE("hc_ops: a key or tensor of another op is refused, naming it", "[hc_ops]") {
  Problem q = make_problem(spec("depth", 2, 3, "static", false));
  q.config["dynamic"] = true;
  try {
    validate(q);
    FAIL("accepted config.dynamic for op depth");
  } catch (const io::BadInput& e) {
    CHECK(std::string(e.what()).find("config.dynamic") != std::string::npos);
  }
  Problem r = make_problem(spec("width", 2, 3, "static", false));
  r.tensors["input.beta"] = r.tensors.at("param.static_beta");
  try {
    validate(r);
    FAIL("accepted input.beta for op width");
  } catch (const io::BadInput& e) {
    CHECK(std::string(e.what()).find("input.beta") != std::string::npos);
  }
}
