// The conformance gate: verify must accept correct candidates (golden rounded
// to the candidate dtype; the dtype-emulated reference itself) and reject
// wrong ones (one element 10x off, NaN); config layouts that are the same
// problem stored differently give the same outputs.
#include "check.hpp"
#include "gate.hpp"

#include "dmref/conformance/evaluate.hpp"
#include "dmref/conformance/gate.hpp"
#include "dmref/conformance/generate.hpp"
#include "dmref/conformance/load_problem.hpp"
#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/verify.hpp"
#include "dmref/mhc.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

using namespace dmref;
using namespace dmref::conf;

namespace {

using test::candidate_from;
using test::find_case;
using test::golden_rounded;
using test::opts;
using test::rounded;

const char* kCases[] = {"preln.model.d8_h8.L6.bf16.s1", "ldm_rls.kernel.g2_dk4_d8.L8.f32.s1",
                        "ldm_rls.model.g2_dk4_d8_h8.L8.f16.s1", "ldm_delta.kernel.g2_dk4_d8.L8.bf16.s1",
                        "attnres_block.kernel.d8_S3.L8.f32.s1", "attnres_full.kernel.d8.L8.f16.s1",
                        "hc_dynamic.kernel.n4_d8.L6.bf16.s1",   "hc_static.kernel.n4_d8.L6.f32.s1",
                        "mhc.kernel.n4_d8.L6.paper.f32.s1",     "mhc.model.n4_d8_h8.L6.deepseek-v4.bf16.s1",
                        "denseformer.model.d8_h8.L6.f16.s1"};

}  // namespace

TEST_CASE("verify accepts the golden values rounded to each dtype and the dtype-emulated reference", "[fixtures]") {
  for (const char* id : kCases) {
    const CaseSpec c = find_case(id);
    const io::File fx = build_fixture(c, "test");
    for (const char* dt : {"f32", "bf16", "f16"}) {
      INFO(id << " as " << dt);
      const auto g = verify_case(fx, golden_rounded(fx, format_of(dt)), opts(dt), true, 5);
      CHECK(g.pass);
      CHECK(g.problem.empty());
      const Problem p = rounded(make_problem(c), format_of(dt));
      const auto r = verify_case(fx, candidate_from(evaluate<float>(p), format_of(dt)), opts(dt), true, 5);
      CHECK(r.pass);
      // Its margin is measured, per variant and dtype, by the faithful catalogue
      // (docs/fixtures.md "Faithful variants"): judged in another dtype than its
      // inputs', the shared input-rounding shift puts it near 1 by design.
    }
  }
}

TEST_CASE("verify rejects one element off by 10x its tolerance, and a NaN", "[fixtures]") {
  const io::File fx = build_fixture(find_case("ldm_rls.kernel.g2_dk4_d8.L8.f32.s1"), "test");
  io::File cand = golden_rounded(fx, float32);
  const double bound = fx.tensors.at("bound.f32.output.h").values.at(37);
  auto& h = cand.tensors.at("output.h").values;
  const std::size_t k = 37;
  const double tol = tolerance(kToleranceFactor, bound, kToleranceFloorUlps, "f32", fx.tensors.at("output.h").values[k]);
  h[k] += 10 * tol;
  auto v = verify_case(fx, cand, opts("f32"), true, 5);
  CHECK_FALSE(v.pass);
  CHECK(v.failed == 1);
  REQUIRE(v.failures.size() == 1);
  CHECK(v.failures[0].tensor == "output.h");
  CHECK(v.failures[0].err > 9 * v.failures[0].tol);
  h[k] = std::nan("");
  v = verify_case(fx, cand, opts("f32"), true, 5);
  CHECK_FALSE(v.pass);
  CHECK(v.failed == 1);
}

// Wrong implementations (undecayed ridge, 1/sqrt(d) logits, transposed H_res,
// row-first Sinkhorn, ...) are the mutant catalogue's job, at every dtype:
// tests/mutants, CTest `mutants`, docs/fixtures.md "Mutation score".

TEST_CASE("mHC storage layouts: DeepSeek's transposed comb and torch's [out, in] projections are the same problem",
          "[fixtures][mhc][layout]") {
  // res_layout = in_out stores b_res, the phi_res columns and the outputs
  // H_res, Ht_res transposed; phi_layout = out_in stores each projection as
  // [out, nC]. Converting the tensors and reading them back is a permutation:
  // the outputs are bit for bit those of the paper layout (transposed where stored so).
  const CaseSpec c = find_case("mhc.kernel.n4_d8.L6.deepseek-v4.f32.s1");
  const Problem p = make_problem(c);
  const auto L = p.integer("layers"), n = p.integer("n"), nC = n * p.integer("d");
  Problem q = p;
  q.config["res_layout"] = "in_out";
  q.config["phi_layout"] = "out_in";
  auto transpose_blocks = [](io::Tensor& t, std::int64_t blocks, std::int64_t r, std::int64_t cols) {
    io::Tensor u = t;
    for (std::int64_t b = 0; b < blocks; ++b)
      for (std::int64_t i = 0; i < r; ++i)
        for (std::int64_t j = 0; j < cols; ++j) u.values[b * r * cols + j * r + i] = t.values[b * r * cols + i * cols + j];
    u.shape = {blocks, cols, r};
    t = u;
  };
  auto& res = q.tensors.at("param.phi_res");  // column a*n + b <- paper column b*n + a
  io::Tensor perm = res;
  for (std::int64_t l = 0; l < L; ++l)
    for (std::int64_t r = 0; r < nC; ++r)
      for (std::int64_t a = 0; a < n; ++a)
        for (std::int64_t b = 0; b < n; ++b)
          perm.values[(l * nC + r) * n * n + a * n + b] = res.values[(l * nC + r) * n * n + b * n + a];
  res = perm;
  transpose_blocks(q.tensors.at("param.phi_pre"), L, nC, n);
  transpose_blocks(q.tensors.at("param.phi_post"), L, nC, n);
  transpose_blocks(res, L, nC, n * n);
  transpose_blocks(q.tensors.at("param.b_res"), L, n, n);
  q.tensors.at("param.b_res").shape = {L, n, n};
  const auto o = evaluate<float>(p), ot = evaluate<float>(q);
  for (const auto& [name, t] : o.t) {
    INFO(name);
    if (name != "output.H_res" && name != "output.Ht_res") {
      CHECK(ot.t.at(name).values == t.values);
      continue;
    }
    const auto& u = ot.t.at(name).values;
    for (std::size_t b = 0; b < t.values.size(); b += n * n)
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < n; ++j) CHECK(u[b + j * n + i] == t.values[b + i * n + j]);
  }
}

TEST_CASE("verify reports a missing or misshapen candidate tensor", "[fixtures]") {
  const io::File fx = build_fixture(find_case("preln.kernel.d8.L6.f32.s1"), "test");
  io::File cand = golden_rounded(fx, float32);
  cand.tensors.erase("output.out");
  auto v = verify_case(fx, cand, opts("f32"), true, 5);
  CHECK_FALSE(v.pass);
  CHECK_THAT(v.problem, Catch::Contains("output.out"));
  cand = golden_rounded(fx, float32);
  cand.tensors.at("output.h").shape = {6, 2, 8};
  v = verify_case(fx, cand, opts("f32"), true, 5);
  CHECK_FALSE(v.pass);
  CHECK_THAT(v.problem, Catch::Contains("wrong shape"));
}

TEST_CASE("fixture generation is deterministic", "[fixtures]") {
  const CaseSpec c = find_case("ldm_rls.kernel.g2_dk4_d8.L8.bf16.s1");
  CHECK(io::serialize(build_fixture(c, "x")) == io::serialize(build_fixture(c, "x")));
}

TEST_CASE("certification climbs Ziv's ladder token by token, the file takes the highest step", "[fixtures]") {
  // PreLN kernel, h_1 = e + v_0 (exact sums). Token 0's sums fit in 128 bits,
  // so its enclosures are points at the first step; token 1's h_1[0] =
  // 2^100 + 2^-100 needs 201 bits: at 128 bits its enclosure has two ends
  // whose remainders differ (0 and one ulp), at 512 bits (the second rung of
  // kZivBits) it is the point.
  Problem p;
  p.source = "test";
  p.scheme = "preln";
  p.config = {{"tokens", 2}, {"layers", 2}, {"d", 2}, {"level", "kernel"}};
  p.tensors["input.e"] = {"F64", {2, 2}, {1.5, -0.25, 0x1p100, 1.0}};
  p.tensors["input.v"] = {"F64", {2, 2, 2}, {0.5, 0.125, 3.0, 4.0, 0x1p-100, 2.0, 1.0, 1.0}};
  const auto tokens = certify_tokens(p, {0, 1}, 2);
  CHECK(tokens.at(0).c.bits == 128);
  CHECK(tokens.at(1).c.bits == 512);
  const Golden g = certified_outputs(p, 2);
  CHECK(g.bits == 512);
  const auto& h = g.tensors.at("output.h");
  CHECK(h.shape == std::vector<std::int64_t>{2, 2, 2});
  CHECK(h.values.at(6) == 0x1p100);  // [token 1, layer 1, 0]: hi, lo of 2^100 + 2^-100
  CHECK(g.tensors.at("output.h.lo").values.at(6) == 0x1p-100);
  CHECK(h.values.at(2) == 2.0);  // [token 0, layer 1, 0] = 1.5 + 0.5
  // The same file whatever the split: all tokens at once, one thread, or
  // certified separately and assembled (what MPI ranks do).
  const auto bytes = io::serialize(run_problem(p, "x", "", 1));
  CHECK(io::serialize(run_problem(p, "x", "", 3)) == bytes);
  std::vector<TokenGolden> split{certify_tokens(p, {0}, 1).at(0), certify_tokens(p, {1}, 1).at(0)};
  CHECK(io::serialize(run_file(p, split, "x")) == bytes);
}

TEST_CASE("every committed fixture's config and inputs are accepted by dmref run as they stand", "[fixtures]") {
  // A config that `generate` writes into a fixture is one `run` accepts: the
  // fixture's metadata config, scheme and input.* / param.* tensors go through
  // conf::validate (what `dmref run` does before any work; unknown keys and
  // unused tensors are refused there). A generator-only option belongs in
  // CaseSpec::inputs (metadata input_options), never in the config.
  int checked = 0;
  for (const auto& e : std::filesystem::directory_iterator(DMREF_SOURCE_DIR "/fixtures/golden")) {
    if (e.path().extension() != ".safetensors") continue;
    try {
      (void)validate(load_problem(e.path().string()));  // as `dmref run` takes it (--grad with input.grad.*)
    } catch (const std::exception& x) {
      FAIL_CHECK(x.what());
    }
    ++checked;
  }
  CHECK(checked > 100);  // the committed corpus (fixtures/manifest.json lists 141 cases)
}

namespace {
/// Problem p with `T` tokens: every per-token input tiled from token 0 (a
/// layout is all these tests need: validate() evaluates nothing).
Problem with_tokens(const Problem& p, std::int64_t T) {
  Problem q = p;
  const std::int64_t T0 = p.integer("tokens");
  q.config["tokens"] = T;
  for (auto& [name, x] : q.tensors) {
    if (name.rfind("input.", 0) != 0 || x.shape.empty() || x.shape[0] != T0) continue;
    const std::size_t row = x.values.size() / std::size_t(T0);
    std::vector<double> v;
    for (std::int64_t t = 0; t < T; ++t) v.insert(v.end(), x.values.begin(), x.values.begin() + std::ptrdiff_t(row));
    x.values = std::move(v);
    x.shape[0] = T;
  }
  return q;
}

std::string refusal(const Problem& p) {
  try {
    validate(p);
  } catch (const io::BadInput& e) {
    return e.what();
  }
  return "";
}
}  // namespace

// Every problem is certified one token at a time, so the resource limit
// bounds one token's evaluation (and the file 16x that). Found by issue 14's
// own LDM case (T = 64, d = 1024, L = 96, G = 16, dk = 64: 2.3e5 outputs a
// token, 1.5e7 in all), which a bound of 2^22 on all tokens together refused,
// although one token's balls take at most ~0.25 GiB (8192 bits); and for a
// backward problem by issue 20's own shape (mhc_ops pre, M = 1024, C = 4096:
// 2e7 outputs and gradients), refused while a backward problem was bounded
// whole although its tokens are evaluated one by one too: one token's
// evaluation is its rows and the sums over tokens whole (its terms of them).
TEST_CASE("the resource limit bounds one token's evaluation, forward or backward, and the file 16x that",
          "[fixtures][limits]") {
  Problem p = make_problem(find_case("ldm_rls.kernel.g2_dk4_d8.L8.f32.s1"));
  p.limits.max_elements = 512;
  const auto one = validate(with_tokens(p, 1));
  const std::int64_t row = one.total;  // outputs of one token
  REQUIRE(row < 512);
  const std::int64_t T = 512 / row + 1;  // all tokens past the limit, each token within it
  const Problem many = with_tokens(p, T);
  CHECK(refusal(many).empty());
  CHECK(validate(many).total == T * row);
  // every evaluation of a validated problem stays within its bounds (fuzz_run's invariant)
  CHECK(evaluate<float>(many).total == T * row);
  const std::int64_t too_many = 16 * 512 / row + 1;
  CHECK_THAT(refusal(with_tokens(p, too_many)), Catch::Contains("the outputs of all tokens past 8192 elements"));
  Problem small = with_tokens(p, 1);
  small.limits.max_elements = row - 1;
  CHECK_THAT(refusal(small), Catch::Contains("one token's outputs past " + std::to_string(row - 1) + " elements"));
  // backward: one token's evaluation is its rows (outputs, grad.input.*) and every sum over tokens
  // (grad.param.*) whole; the file holds the rows of every token and the sums once
  Problem g = make_problem(find_case("ldm_rls.kernel_grad.g2_dk4_d8.L6.f32.s1"));
  REQUIRE(g.grad);
  const auto g1 = validate(with_tokens(g, 1));
  const std::int64_t grow = g1.per_token, gsum = g1.summed;
  REQUIRE(grow > 0);
  REQUIRE(gsum > 0);
  REQUIRE(g1.total == grow + gsum);
  const std::int64_t limit = grow + gsum + 1;  // one token's evaluation fits, several tokens' rows do not
  const std::int64_t Tg = 3 * limit / grow;
  Problem big = with_tokens(g, Tg);
  big.limits.max_elements = limit;
  CHECK(refusal(big).empty());
  CHECK(validate(big).total == Tg * grow + gsum);
  Problem tight = with_tokens(g, 1);
  tight.limits.max_elements = grow + gsum - 1;
  CHECK_THAT(refusal(tight), Catch::Contains("one token's outputs past " + std::to_string(grow + gsum - 1) + " elements"));
  Problem many_g = with_tokens(g, (16 * limit - gsum) / grow + 1);  // rows of all tokens and the sums past 16x
  many_g.limits.max_elements = limit;
  CHECK_THAT(refusal(many_g), Catch::Contains("past " + std::to_string(16 * limit) + " elements"));
}

// Issue 24: a knob that has no effect for the chosen variant (HC's tanh
// without dynamic, LDM's p_update without the rls write) is declared where
// the variant is chosen (Problem::unread, unread_tensor), so that a config
// giving it is refused with the reason instead of ignored. The declarations
// are complete when every case of a scheme accounts for every key and tensor
// any case of that scheme reads or declares: read, or declared unread.
TEST_CASE("every key and tensor of a scheme is read or declared unread by every variant", "[fixtures][strict]") {
  struct Seen {
    std::string id;
    std::set<std::string> keys, tensors;
  };
  std::map<std::string, std::vector<Seen>> by_scheme;
  for (const auto& c : corpus()) {
    Problem q = make_problem(c);
    q.layout_only = true;  // as validate(), keeping the records
    {
      const BallPrecision bits(kZivBits.at(0));
      (void)evaluate<Ball>(q);
    }
    Seen s{c.id, q.keys_asked, {}};
    for (const auto& [k, why] : q.keys_unread) s.keys.insert(k);
    for (const auto* names : {&q.tensors_used, &q.tensors_asked})
      for (const auto& n : *names)
        if (n.rfind("input.grad.", 0) != 0) s.tensors.insert(n);  // upstream gradients: check_upstream's rule
    for (const auto& [n, why] : q.tensors_unread) s.tensors.insert(n);
    // The issue's three instances are declared (not read) where they do nothing.
    if (c.id == "hc_static.kernel.n4_d8.L6.f32.s1") CHECK(q.keys_unread.count("tanh") == 1);
    if (c.id == "ldm_outer.kernel.g2_dk4_d8.L8.f32.s1") CHECK(q.keys_unread.count("p_update") == 1);
    if (c.id == "ldm_delta.kernel.g2_dk4_d8.L8.f32.s1") CHECK(q.keys_unread.count("p_update") == 1);
    by_scheme[c.scheme].push_back(std::move(s));
  }
  REQUIRE(by_scheme.size() == registry().size());  // every registered scheme has corpus cases
  for (const auto& [scheme, cases] : by_scheme) {
    std::set<std::string> keys, tensors;
    for (const auto& s : cases) {
      keys.insert(s.keys.begin(), s.keys.end());
      tensors.insert(s.tensors.begin(), s.tensors.end());
    }
    CHECK(cases.size() >= 6);  // every scheme has several variants and levels in the corpus
    for (const auto& s : cases) {
      for (const auto& k : keys)
        if (!s.keys.count(k)) FAIL_CHECK(s.id + ": config key " + k + " of scheme " + scheme + " is neither read nor declared unread");
      for (const auto& t : tensors)
        if (!s.tensors.count(t)) FAIL_CHECK(s.id + ": tensor " + t + " of scheme " + scheme + " is neither read nor declared unread");
    }
  }
}

// Issue 24: every bound is checked on the validated problem, before any
// evaluation. Before, validate() named only the outputs: a backward
// problem's gradients were bounded (or not: grad.input.*) after the work, and
// a forward problem's tokens cost nothing but their outputs.
TEST_CASE("validate bounds a backward problem's gradients and every token's bookkeeping before any work",
          "[fixtures][limits]") {
  Problem g = make_problem(find_case("preln.kernel_grad.d8.L6.f32.s1"));
  REQUIRE(g.grad);
  // outputs h [2,6,8] + out [2,8] = 112; gradients grad.input.e [2,8] + grad.input.v [2,6,8] = 112
  const Outputs<Ball> whole = validate(g);
  CHECK(whole.total == 224);
  CHECK(whole.t.count("grad.input.e") == 1);
  CHECK(whole.t.at("grad.input.v").shape == std::vector<std::int64_t>{2, 6, 8});
  // One token's evaluation: h [1,6,8] + out [1,8] = 56 outputs and 56 gradients.
  g.limits.max_elements = 112;
  CHECK(refusal(g).empty());
  g.limits.max_elements = 100;  // a token's outputs alone fit, not with its gradients
  CHECK_THAT(refusal(g), Catch::Contains("output grad.input.") && Catch::Contains("one token's outputs past 100 elements"));
  // The layout validation promises is the evaluation's, gradients included (fuzz_run's invariant).
  for (const char* id : {"ldm_rls.kernel_grad.g2_dk4_d8.L6.f32.s1", "mhc.kernel_grad.n4_d8.L6.paper.f32.s1",
                         "ldm_rls.model_grad.g2_dk4_d8_h8.L6.f32.s1", "hc_dynamic_rmsnorm.kernel_grad.n4_d8.L6.f32.s1"}) {
    const Problem b = make_problem(find_case(id));
    const Outputs<Ball> layout = validate(b);
    const Outputs<float> o = evaluate<float>(b);
    CHECK(o.t.size() == layout.t.size());
    for (const auto& [name, out] : o.t) {
      INFO(id << ": " << name);
      REQUIRE(layout.t.count(name) == 1);
      CHECK(layout.t.at(name).shape == out.shape);
    }
  }
  // Many tiny tokens: each counts as at least kTokenCharge outputs.
  Problem p = make_problem(find_case("preln.kernel.d8.L6.f32.s1"));
  p.limits.max_elements = 512;
  const std::int64_t file = 512 * Outputs<Ball>::kFileFactor, row = validate(with_tokens(p, 1)).total;
  REQUIRE(row >= Outputs<Ball>::kTokenCharge);  // a big token: its outputs are its charge
  CHECK(refusal(with_tokens(p, file / row)).empty());
  p.config["layers"] = 1;
  p.config["d"] = 1;
  p.tensors["input.e"] = io::Tensor{"F64", {2, 1}, {0.5, 0.25}};
  p.tensors["input.v"] = io::Tensor{"F64", {2, 1, 1}, {0.5, 0.25}};
  REQUIRE(validate(with_tokens(p, 1)).total == 2);  // h [1,1,1], out [1,1]
  const std::int64_t most = file / Outputs<Ball>::kTokenCharge;
  CHECK(refusal(with_tokens(p, most)).empty());
  CHECK_THAT(refusal(with_tokens(p, most + 1)),  // before: accepted up to file / 2 tokens
             Catch::Contains("config.tokens") && Catch::Contains("counts as at least"));
}

// ---- The gate as a library (gate.hpp): what `dmref verify` prints is
// rendered here, from verdicts built by hand, so each line below is the
// expected text written out (the CLI tests, tests/cli, run the same through
// the command).

namespace {

TensorVerdict judged(const std::string& name, std::int64_t checked, double worst, std::vector<std::int64_t> at) {
  TensorVerdict t;
  t.name = name;
  t.checked = checked;
  t.worst_ratio = worst;
  t.worst = std::move(at);
  t.axes = axes_of(name, t.worst.size());
  return t;
}

}  // namespace

TEST_CASE("problem_of takes a fixture's problem as dmref run does", "[fixtures][gate]") {
  const std::string path = DMREF_SOURCE_DIR "/fixtures/golden/preln.kernel_grad.d8.L6.f32.s1.safetensors";
  const Problem p = load_problem(path);
  CHECK(p.scheme == "preln");
  CHECK(p.grad);  // it has upstream gradients input.grad.*: `run --grad`
  CHECK(p.source == path);
  for (const auto& [name, t] : p.tensors) CHECK((name.rfind("input.", 0) == 0 || name.rfind("param.", 0) == 0));
  CHECK(p.tensors.count("input.grad.out") == 1);
  CHECK(load_problem(DMREF_SOURCE_DIR "/fixtures/golden/preln.kernel.d8.L6.f32.s1.safetensors").grad == false);
  io::File f = io::read(path);
  f.metadata.erase("scheme");
  CHECK_THROWS_WITH(problem_of(f), Catch::Contains("__metadata__.scheme: missing"));
  f = io::read(path);
  f.metadata["config"] = "[1]";
  CHECK_THROWS_WITH(problem_of(f), Catch::Contains("__metadata__.config: must be a JSON object"));
  f.metadata["config"] = R"({"d": 1, "d": 2})";
  CHECK_THROWS_AS(problem_of(f), io::BadInput);  // parsed strictly: a duplicate key
}

TEST_CASE("manifest_json is what parse_manifest reads back", "[fixtures][gate]") {
  const std::vector<ManifestCase> cases = {{"a.b", "a.b.safetensors", "dmref generate --case 'a.b'", std::string(64, 'e'), 128},
                                           {"c", "c.safetensors", "", std::string(64, '0'), 8192}};
  const auto back = parse_manifest(manifest_json(cases), "m.json");
  REQUIRE(back.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(back[i].id == cases[i].id);
    CHECK(back[i].file == cases[i].file);
    CHECK(back[i].command == cases[i].command);
    CHECK(back[i].sha256 == cases[i].sha256);
    CHECK(back[i].precision_bits == cases[i].precision_bits);
  }
}

TEST_CASE("io::unflatten is row-major and takes zero extents as index 0", "[fixtures][gate]") {
  CHECK(io::unflatten(0, {}).empty());
  CHECK(io::unflatten(5, {2, 3}) == std::vector<std::int64_t>{1, 2});
  CHECK(io::unflatten(7, {2, 2, 2}) == std::vector<std::int64_t>{1, 1, 1});
  CHECK(io::unflatten(3, {4, 0}) == std::vector<std::int64_t>{0, 0});
}

TEST_CASE("worst_tensor: the first judged tensor of the largest err/tol", "[fixtures][gate]") {
  CaseVerdict v;
  CHECK(worst_tensor(v) == nullptr);
  v.tensors = {judged("output.a", 0, 0, {}), judged("output.h", 4, 0.5, {0, 1, 2}), judged("output.out", 4, 0.5, {1, 0}),
               judged("output.z", 0, 9, {})};  // z: nothing judged (an empty tensor), never the worst
  REQUIRE(worst_tensor(v) != nullptr);
  CHECK(worst_tensor(v)->name == "output.h");
  CHECK(worst_tensor(v, /*with_grid=*/true) == nullptr);  // none has a grid
  v.tensors[2].grid = {0.5};
  REQUIRE(worst_tensor(v, true) != nullptr);
  CHECK(worst_tensor(v, true)->name == "output.out");
}

TEST_CASE("render_text, render_json, render_junit of a Report", "[fixtures][gate]") {
  Report r;
  r.dtype = "bf16";
  r.manifest = "fixtures/manifest.json";
  r.keep_failures = 1;
  CaseVerdict pass;
  pass.id = "p";
  pass.checked = 8;
  pass.worst_ratio = 0.5;
  pass.tensors = {judged("output.h", 8, 0.5, {0, 1, 2})};
  CaseVerdict fail;
  fail.id = "f\nPASS x";  // names are data
  fail.pass = false;
  fail.checked = 4;
  fail.failed = 2;
  fail.worst_ratio = 3;
  fail.tensors = {judged("output.out", 4, 3, {1, 0})};
  fail.failures = {{"output.out", {1, 0}, 1.5, 1.0, 0.5, 0.25}, {"output.out", {1, 1}, 2.0, 1.0, 1.0, 0.25}};
  fail.not_judged = {{"output.P", "beyond double's range"}};
  r.cases = {pass, fail};
  CHECK(r.failed() == 1);
  CHECK(render_text(r) ==
        "f\\x0aPASS x:output.out[1,0] observed 1.5 expected 1 err=0.5 tol=0.25\n"  // keep_failures = 1: one line
        "PASS p: 8 elements, worst err/tol 0.5 (output.h [token 0, layer 1, i 2])\n"
        "FAIL f\\x0aPASS x: 2 of 4 elements out of tolerance, worst err/tol 3 (output.out [token 1, i 0])\n"
        "NOT JUDGED f\\x0aPASS x:output.P: the fixture has no golden for it (beyond double's range)\n"
        "verify (bf16): 1 passed, 1 failed; fixtures checked against fixtures/manifest.json\n");
  const json j = json::parse(render_json(r));
  CHECK(j["passed"] == 1);
  CHECK(j["failed"] == 1);
  CHECK(j["manifest"] == "fixtures/manifest.json");
  CHECK(j["cases"][1]["id"] == "f\nPASS x");
  CHECK(j["cases"][1]["failures"].size() == 2);
  CHECK(j["cases"][0]["tensors"][0]["where"] == "token 0, layer 1, i 2");
  const std::string x = render_junit(r);
  CHECK_THAT(x, Catch::Contains("<testsuite name=\"dmref verify\" tests=\"2\" failures=\"1\">"));
  CHECK_THAT(x, Catch::Contains("<testcase classname=\"dmref.bf16\" name=\"f\\x0aPASS x\"><failure message=\"2 of 4 "
                                "elements out of tolerance\">output.out[1,0] observed 1.5 expected 1 err=0.5 tol=0.25\n"));
  CHECK_THAT(x, Catch::Contains("<system-out>NOT JUDGED f\\x0aPASS x:output.P: the fixture has no golden for it "
                                "(beyond double&apos;s range)</system-out>"));
}
