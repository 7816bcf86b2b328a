// Properties of Linear Depth Memory at op level (docs/ldm_ops.md): the op is
// one layer of the ldm scheme, and the identities of its equations that hold
// exactly. Cases: G = 1..4 groups, dk = 1..6, dv = 1..4, M = 1..3 tokens, the
// three ops and the three P updates, inputs drawn as the corpus draws them
// (seeded). The reference runs in double; each relation below compares the
// same operations on the same doubles (or operations that are exact in
// binary floating point, said where used), so each is checked for exact
// equality: any difference is a wrong index, orientation, order or formula,
// never rounding.
//   - one op step == layer L of an ldm kernel problem (the ldm binding, memory
//     read alone, no residual) on the state its first L layers reached:
//     output.M, output.P and the readout (ldm's output.out) forward; grad.input.q,
//     k, v, omega and grad.param.lambda / beta (ldm's layer-L rows) backward,
//     for the upstream of output.M, output.P and output.out. L = 0..4 for
//     the symmetric P update; L = 0 (P = alpha I) for joseph and naive, whose
//     P after a layer is not symmetric to the last bit, which the op refuses;
//   - P' is symmetric bit for bit (symmetric update: (Q + Q^T) / 2 rounds
//     a + b and b + a alike) and positive definite (Cholesky succeeds);
//   - omega = 0: the rls op leaves M as it is and P' = P / lambda for every
//     P update (w = 0 makes the gain terms exact zeros; (x + x) / 2 = x), and
//     reads the same as the outer op on the same M with v = 0;
//   - outer on M = 0 is v k^T (one rounded product per entry); delta with
//     beta = 0 leaves M; delta with M = 0 and beta = 1 equals outer on M = 0
//     (u = v - 0 is v exactly);
//   - each (token, group) alone (a one-token, one-group problem on its
//     slices) gives that token's and group's outputs and gradients, lambda's
//     and beta's gradients summed over the tokens in token order.
#include "harness.hpp"
#include "ops_harness.hpp"

#include "dmref/conformance/corpus.hpp"
#include "dmref/conformance/evaluate.hpp"
#include "dmref/conformance/registry.hpp"

#include <Eigen/Cholesky>

#include <sstream>

using namespace dmref;
using namespace dmref::conf;

namespace {

struct OpCase {
  int op = 0;  // 0 rls, 1 outer, 2 delta
  int pu = 0;  // rls: 0 symmetric, 1 joseph, 2 naive
  int G = 2, dk = 4, dv = 4, M = 2, L = 1;
  std::uint64_t seed = 1;
  std::string op_name() const { return op == 0 ? "rls" : op == 1 ? "outer" : "delta"; }
  std::string pu_name() const { return pu == 0 ? "symmetric" : pu == 1 ? "joseph" : "naive"; }
  std::string str() const {
    std::ostringstream o;
    o << "op=" << op_name() << (op == 0 ? " p_update=" + pu_name() : "") << " G=" << G << " dk=" << dk << " dv=" << dv
      << " M=" << M << " L=" << L << " seed=" << seed;
    return o.str();
  }
};

rc::Gen<OpCase> gen_case() {
  return rc::gen::apply(
      [](int op, int pu, int G, int dk, int dv, int M, int L, int seed) {
        return OpCase{op, op == 0 ? pu : 0, G, dk, dv, M, L, std::uint64_t(seed)};
      },
      rc::gen::inRange(0, 3), rc::gen::inRange(0, 3), rc::gen::inRange(1, 5), rc::gen::inRange(1, 7), rc::gen::inRange(1, 5),
      rc::gen::inRange(1, 4), rc::gen::inRange(0, 5), rc::gen::inRange(1, 1 << 30));
}

json op_config(const OpCase& c) {
  json cfg = {{"op", c.op_name()}, {"tokens", c.M}, {"d", c.G * c.dv}, {"groups", c.G}, {"dk", c.dk}};
  if (c.op == 0) cfg["p_update"] = c.pu_name();
  return cfg;
}

Problem draw(const OpCase& c, bool grad) {
  CaseSpec s = forward_case("prop.ldm_ops", "ldm_ops", "default", "f32", op_config(c));
  s.seed = c.seed;
  s.grad = grad;
  return make_problem(s);
}

using prop::from;
using prop::tensor;
const std::vector<double>& values(const Outputs<double>& o, const std::string& name) { return o.t.at(name).values; }

/// Rows [from, from + n) of the second axis of a [T, L, X] tensor (or of the
/// first axis of an [L, X] one, with T = 0): layers of an ldm tensor.
io::Tensor layers(const io::Tensor& t, std::int64_t from, std::int64_t n, bool per_token) {
  const std::int64_t T = per_token ? t.shape[0] : 1, L = per_token ? t.shape[1] : t.shape[0];
  const std::int64_t X = std::int64_t(t.values.size()) / (T * L);
  io::Tensor r{"F64", t.shape, {}};
  r.shape[per_token ? 1 : 0] = n;
  for (std::int64_t a = 0; a < T; ++a)
    for (std::int64_t l = from; l < from + n; ++l)
      for (std::int64_t x = 0; x < X; ++x) r.values.push_back(t.values[std::size_t((a * L + l) * X + x)]);
  return r;
}
/// The same with the layer axis dropped (one layer).
io::Tensor layer(const io::Tensor& t, std::int64_t l, bool per_token) {
  io::Tensor r = layers(t, l, 1, per_token);
  r.shape.erase(r.shape.begin() + (per_token ? 1 : 0));
  return r;
}

inline void showValue(const OpCase& c, std::ostream& os) { os << c.str(); }

}  // namespace

TEST_CASE("one op step == layer L of the ldm scheme on the state its first L layers reached", "[property][ldm_ops]") {
  prop::check("op step == one layer of ldm", 100, [] {
    OpCase c = *gen_case();
    if (c.op == 0 && c.pu != 0) c.L = 0;  // joseph / naive: P after a layer is not exactly symmetric
    const std::string where = c.str();
    const std::string write = c.op == 0 ? "rls" : c.op == 1 ? "outer_product" : "delta";
    json cfg = {{"tokens", c.M}, {"layers", c.L + 1}, {"d", c.G * c.dv}, {"groups", c.G}, {"dk", c.dk}, {"write", write},
                {"read_residual", false}, {"write_residual", false}};
    if (c.op == 0) {
      cfg["alpha"] = 1.0;
      cfg["p_update"] = c.pu_name();
    }
    CaseSpec s = forward_case("prop.ldm", "ldm", "default", "f32", cfg);
    s.seed = c.seed;
    s.grad = true;
    const Problem full = make_problem(s);
    const Outputs<double> all = evaluate<double>(full);
    // The state after layers 0..L-1: the same problem cut to L layers (forward).
    const std::int64_t T = c.M, G = c.G, dk = c.dk, dv = c.dv;
    io::Tensor M0 = tensor({T, G, dv, dk}, std::vector<double>(std::size_t(T * G * dv * dk), 0.0));
    io::Tensor P0 = tensor({T, G, dk, dk}, {});
    for (std::int64_t b = 0; b < T * G; ++b)
      for (std::int64_t i = 0; i < dk; ++i)
        for (std::int64_t j = 0; j < dk; ++j) P0.values.push_back(i == j ? 1.0 : 0.0);  // alpha I, alpha = 1
    if (c.L > 0) {
      Problem head = full;
      head.grad = false;
      head.config["layers"] = c.L;
      for (auto it = head.tensors.begin(); it != head.tensors.end();)
        it = it->first.rfind("input.grad.", 0) == 0 ? head.tensors.erase(it) : std::next(it);
      for (auto& [name, t] : head.tensors)
        if (name != "input.e") t = layers(full.tensors.at(name), 0, c.L, name.rfind("input.", 0) == 0);
      const Outputs<double> h = evaluate<double>(head);
      M0 = from(h, "output.M");
      if (c.op == 0) P0 = from(h, "output.P");
    }
    Problem op;
    op.source = "property";
    op.scheme = "ldm_ops";
    op.config = op_config(c);
    op.grad = true;
    op.tensors["input.M"] = M0;
    for (const char* k : {"input.q", "input.k", "input.v"}) op.tensors[k] = layer(full.tensors.at(k), c.L, true);
    for (auto& k : {"input.q", "input.k"}) op.tensors[k].shape = {T, G, dk};
    if (c.op == 0) {
      op.tensors["input.P"] = P0;
      op.tensors["input.omega"] = layer(full.tensors.at("input.omega"), c.L, true);
      op.tensors["param.lambda"] = layer(full.tensors.at("param.lambda"), c.L, false);
      op.tensors["input.grad.P"] = full.tensors.at("input.grad.P");
    }
    if (c.op == 2) op.tensors["param.beta"] = layer(full.tensors.at("param.beta"), c.L, false);
    op.tensors["input.grad.M"] = full.tensors.at("input.grad.M");
    op.tensors["input.grad.r"] = full.tensors.at("input.grad.out");
    const Outputs<double> o = evaluate<double>(op);
    DMREF_PROP_TRUE("output.M == ldm's output.M", values(o, "output.M") == values(all, "output.M"), where);
    DMREF_PROP_TRUE("output.r == ldm's output.out (the memory read)", values(o, "output.r") == values(all, "output.out"), where);
    if (c.op == 0) DMREF_PROP_TRUE("output.P == ldm's output.P", values(o, "output.P") == values(all, "output.P"), where);
    for (const char* k : {"input.q", "input.k", "input.v", "input.omega"}) {
      if (c.op != 0 && std::string(k) == "input.omega") continue;
      DMREF_PROP_TRUE(std::string("grad.") + k + " == ldm's layer-L rows",
                      values(o, std::string("grad.") + k) == layer(from(all, std::string("grad.") + k), c.L, true).values, where);
    }
    for (const char* k : {"param.lambda", "param.beta"}) {
      if ((c.op == 0) != (std::string(k) == "param.lambda") || c.op == 1) continue;
      DMREF_PROP_TRUE(std::string("grad.") + k + " == ldm's layer-L row",
                      values(o, std::string("grad.") + k) == layer(from(all, std::string("grad.") + k), c.L, false).values, where);
    }
  });
}

TEST_CASE("P' of the symmetric update is symmetric bit for bit and positive definite", "[property][ldm_ops]") {
  prop::check("P' symmetric and positive definite", 100, [] {
    OpCase c = *gen_case();
    c.op = 0;
    c.pu = 0;
    const std::string where = c.str();
    const Outputs<double> o = evaluate<double>(draw(c, false));
    const auto& P = values(o, "output.P");
    for (std::int64_t b = 0; b < std::int64_t(c.M) * c.G; ++b) {
      Mat<double> A(c.dk, c.dk);
      for (int i = 0; i < c.dk; ++i)
        for (int j = 0; j < c.dk; ++j) A(i, j) = P[std::size_t((b * c.dk + i) * c.dk + j)];
      DMREF_PROP_TRUE("P' == P'^T", A == A.transpose(), where);
      DMREF_PROP_TRUE("P' positive definite (Cholesky)", Eigen::LLT<Mat<double>>(A).info() == Eigen::Success, where);
    }
  });
}

TEST_CASE("rls with omega = 0 keeps M, sets P' = P / lambda, and reads like outer with v = 0", "[property][ldm_ops]") {
  prop::check("omega = 0: M' = M, P' = P / lambda", 100, [] {
    OpCase c = *gen_case();
    c.op = 0;
    const std::string where = c.str();
    Problem p = draw(c, false);
    for (double& w : p.tensors.at("input.omega").values) w = 0;
    const Outputs<double> o = evaluate<double>(p);
    DMREF_PROP_TRUE("M' == M", values(o, "output.M") == p.tensors.at("input.M").values, where);
    const auto& P = p.tensors.at("input.P").values;
    const auto& lam = p.tensors.at("param.lambda").values;
    std::vector<double> want(P.size());
    for (std::size_t i = 0; i < P.size(); ++i) want[i] = P[i] / lam[(i / std::size_t(c.dk * c.dk)) % std::size_t(c.G)];
    DMREF_PROP_TRUE("P' == P / lambda", values(o, "output.P") == want, where);
    OpCase oc = c;
    oc.op = 1;
    Problem q = draw(oc, false);
    for (const char* k : {"input.M", "input.q", "input.k"}) q.tensors[k] = p.tensors.at(k);
    for (double& x : q.tensors.at("input.v").values) x = 0;
    const Outputs<double> r = evaluate<double>(q);
    DMREF_PROP_TRUE("outer with v = 0 leaves M", values(r, "output.M") == p.tensors.at("input.M").values, where);
    DMREF_PROP_TRUE("readout == outer's with v = 0", values(o, "output.r") == values(r, "output.r"), where);
  });
}

TEST_CASE("outer on M = 0 is v k^T, delta with beta = 0 keeps M, delta on M = 0 with beta = 1 is outer",
          "[property][ldm_ops]") {
  prop::check("outer and delta special cases", 100, [] {
    OpCase c = *gen_case();
    const std::string where = c.str();
    c.op = 1;
    Problem outer = draw(c, false);
    for (double& x : outer.tensors.at("input.M").values) x = 0;
    const Outputs<double> a = evaluate<double>(outer);
    const auto& k = outer.tensors.at("input.k").values;
    const auto& v = outer.tensors.at("input.v").values;
    std::vector<double> vk;
    for (int t = 0; t < c.M; ++t)
      for (int g = 0; g < c.G; ++g)
        for (int i = 0; i < c.dv; ++i)
          for (int j = 0; j < c.dk; ++j)
            vk.push_back(v[std::size_t((t * c.G + g) * c.dv + i)] * k[std::size_t((t * c.G + g) * c.dk + j)]);
    DMREF_PROP_TRUE("outer on M = 0: M' == v k^T", values(a, "output.M") == vk, where);
    c.op = 2;
    Problem delta = draw(c, false);
    for (double& b : delta.tensors.at("param.beta").values) b = 0;
    const Outputs<double> d0 = evaluate<double>(delta);
    DMREF_PROP_TRUE("delta with beta = 0: M' == M", values(d0, "output.M") == delta.tensors.at("input.M").values, where);
    for (const char* n : {"input.M", "input.q", "input.k", "input.v"}) delta.tensors[n] = outer.tensors.at(n);
    for (double& b : delta.tensors.at("param.beta").values) b = 1;
    const Outputs<double> d1 = evaluate<double>(delta);
    DMREF_PROP_TRUE("delta on M = 0, beta = 1: M' == outer's", values(d1, "output.M") == values(a, "output.M"), where);
    DMREF_PROP_TRUE("delta on M = 0, beta = 1: r == outer's", values(d1, "output.r") == values(a, "output.r"), where);
  });
}

TEST_CASE("each (token, group) alone gives its outputs and gradients (forward and backward)", "[property][ldm_ops]") {
  prop::check("tokens and groups are independent", 100, [] {
    const OpCase c = *gen_case();
    const std::string where = c.str();
    const Problem p = draw(c, true);
    const Outputs<double> o = evaluate<double>(p);
    const std::int64_t G = c.G, dk = c.dk, dv = c.dv;
    // Per tensor: its per-(token, group) block size and whether it is per token (else per group: lambda, beta).
    auto block = [&](const std::string& name) -> std::pair<std::int64_t, bool> {
      const std::string b = name.substr(name.rfind('.') + 1);  // input.M, grad.input.M, input.grad.M: M
      if (b == "M") return {dv * dk, true};
      if (b == "P") return {dk * dk, true};
      if (b == "q" || b == "k") return {dk, true};
      if (b == "v" || b == "r") return {dv, true};
      if (b == "omega") return {1, true};
      return {1, false};  // param.lambda, param.beta: [G]
    };
    std::map<std::string, std::vector<double>> param_sum;  // grad.param.*, summed over the tokens in token order
    for (std::int64_t t = 0; t < c.M; ++t)
      for (std::int64_t g = 0; g < G; ++g) {
        Problem one = p;
        one.config["tokens"] = 1;
        one.config["groups"] = 1;
        one.config["d"] = dv;
        for (auto& [name, x] : one.tensors) {
          const auto [n, per_token] = block(name);
          const std::int64_t at = per_token ? (t * G + g) * n : g;
          x.values.assign(p.tensors.at(name).values.begin() + at, p.tensors.at(name).values.begin() + at + n);
          x.shape[0] = 1;
          if (per_token && x.shape.size() > 1 && name.substr(name.size() - 2) != ".v" && name.substr(name.size() - 2) != ".r")
            x.shape[1] = 1;
          if (name.substr(name.size() - 2) == ".v" || name.substr(name.size() - 2) == ".r") x.shape[1] = dv;
        }
        const Outputs<double> a = evaluate<double>(one);
        for (const auto& [name, y] : a.t) {
          const auto [n, per_token] = block(name);
          if (!per_token) {
            auto& s = param_sum[name];
            s.resize(std::size_t(G), 0.0);
            s[std::size_t(g)] += y.values[0];
            continue;
          }
          const std::vector<double> want(o.t.at(name).values.begin() + (t * G + g) * n,
                                         o.t.at(name).values.begin() + (t * G + g) * n + n);
          DMREF_PROP_TRUE(name + " of (token, group) alone", y.values == want, where + " token " + std::to_string(t) +
                                                                                    " group " + std::to_string(g));
        }
      }
    for (const auto& [name, s] : param_sum)
      DMREF_PROP_TRUE(name + " == the sum over tokens of each alone", s == values(o, name), where);
  });
}
