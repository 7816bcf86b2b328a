// The conformance gate on gradients (backward cases, ids "*.kernel_grad.*", "*.model_grad.*"): verify
// judges grad.* tensors exactly like outputs. It must accept the golden
// gradients rounded to each dtype and the dtype-emulated reference (float32
// backward on inputs and upstream gradients in the dtype: the baseline), and
// reject, at every dtype, a gradient 10x off its tolerance and known-wrong
// backward passes.
#include "gate.hpp"

#include "dmref/conformance/evaluate_impl.hpp"
#include "dmref/conformance/generate.hpp"
#include "dmref/io/safetensors.hpp"

#include <catch2/catch.hpp>

#include <cmath>

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

/// Every backward case of the corpus at dtype dt.
std::vector<CaseSpec> grad_cases(const std::string& dt) {
  std::vector<CaseSpec> r;
  for (const auto& c : corpus())
    if (c.grad && c.dtype == dt) r.push_back(c);
  return r;
}

/// The backward of a problem computed by run_tokens (the evaluator's own
/// token loop) with the scheme `make(t)` returns, in double: how the tests
/// plug in a deliberately wrong Backward<M> and judge what it produces.
template <class Make, class ParamGrads, class StateUp = NoStateUpstream>
Outputs<double> backward_with(const Problem& p, Make&& make, ParamGrads&& pg, const std::vector<std::string>& sg = {},
                              StateUp&& su = {}) {
  Outputs<double> o;
  run_tokens<double>(p, dims(p), o, make, [](auto, const auto&, const auto&) {}, false, pg, sg, su);
  return o;
}

/// The golden candidate at dtype dt with its grad.* replaced by those of `o`.
io::File with_grads(const io::File& fx, const Outputs<double>& o, const std::string& dt) {
  io::File c = golden_rounded(fx, format_of(dt));
  for (auto& [name, t] : candidate_from(o, format_of(dt)).tensors)
    if (name.rfind("grad.", 0) == 0) c.tensors[name] = t;
  return c;
}

// Known-wrong backward passes, each a scheme type whose Backward differs from
// the reference's in one term.

/// AttnRes: the softmax Jacobian without its normalisation term,
/// dz_i = a_i da_i instead of a_i (da_i - sum_j a_j da_j).
template <class S>
struct NoNormAttnRes : AttentionResiduals<S> {
  using AttentionResiduals<S>::AttentionResiduals;
};
/// LDM RLS: P treated as a constant (no adjoint flows through the P update).
template <class S>
struct FrozenPLdm : LdmKernel<S> {
  using LdmKernel<S>::LdmKernel;
};
/// mHC: the residual mix's adjoint applied untransposed, dX = H_res dX'
/// instead of H_res^T dX' (the forward kernel reused for the backward).
template <class S>
struct UntransposedMhc : Mhc<S> {
  using Mhc<S>::Mhc;
};

}  // namespace

template <class S>
struct dmref::Backward<NoNormAttnRes<S>> : Backward<AttentionResiduals<S>> {
  using Base = Backward<AttentionResiduals<S>>;
  using typename Base::Adjoint;
  using typename Base::Grad;
  using State = typename AttentionResiduals<S>::State;
  explicit Backward(const NoNormAttnRes<S>& m) : Base{m} {}
  void mix_vjp(const State& s, int r, const Vec<S>& dh, Adjoint& a, Grad& gr) const {
    const auto& c = this->scheme.config();
    const auto src = this->scheme.sources(s);
    const Vec<S> w = attnres_weights<S>(src, c.w[r], c.g[r], c.eps);
    for (std::size_t i = 0; i < src.size(); ++i) {
      const S dz = w(i) * dh.dot(src[i]);  // the dropped term: - w(i) * sum_j w(j) da_j
      gr.w[r] += dz * rms_norm<S>(src[i], c.eps, c.g[r]);
      const Vec<S> d = w(i) * dh + rms_norm_vjp<S>(src[i], c.eps, c.g[r], Vec<S>(dz * c.w[r]), &gr.g[r]);
      if (i < s.sources.size()) a.sources[i] += d;
      else a.partial += d;
    }
  }
  Adjoint final(const State& s, const Vec<S>& dout, Grad& gr) const {
    const int d = this->scheme.config().d;
    Adjoint a{std::vector<Vec<S>>(s.sources.size(), Vec<S>::Zero(d)), Vec<S>::Zero(d)};
    mix_vjp(s, this->scheme.config().layers, dout, a, gr);
    return a;
  }
  void read(const State& before, int l, const Vec<S>& dh, Adjoint& a, Grad& gr) const { mix_vjp(before, l, dh, a, gr); }
};

template <class S>
struct dmref::Backward<FrozenPLdm<S>> : Backward<LdmKernel<S>> {
  using Base = Backward<LdmKernel<S>>;
  using typename Base::Adjoint;
  using typename Base::Grad;
  explicit Backward(const FrozenPLdm<S>& m) : Base{m} {}
  Vec<S> write(const typename LdmKernel<S>::State& before, int l, const Vec<S>& v, Adjoint& a, Grad& gr) const {
    for (auto& P : a.P) P.setZero();
    Vec<S> dv = Base::write(before, l, v, a, gr);
    for (auto& P : a.P) P.setZero();
    return dv;
  }
};

template <class S>
struct dmref::Backward<UntransposedMhc<S>> : Backward<Mhc<S>> {
  using Base = Backward<Mhc<S>>;
  using typename Base::Adjoint;
  using typename Base::Grad;
  explicit Backward(const UntransposedMhc<S>& m) : Base{m} {}
  Vec<S> write(const typename Mhc<S>::State& before, int l, const Vec<S>& v, Adjoint& a, Grad& gr) const {
    const Mat<S> dY = a.X;
    const Vec<S> dv = Base::write(before, l, v, a, gr);  // the right adjoint, then the wrong residual path:
    const Mat<S> H = this->scheme.coefficients(before.X, l).res;
    a.X += (H - H.transpose()) * dY;  // H^T dY + (H - H^T) dY = H dY
    return dv;
  }
};

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
        CHECK(r.worst_ratio <= 0.5 + 1e-12);  // its error is the baseline: err/tol <= b / (2 b) = 1/2
      }
    }
}

TEST_CASE("verify rejects one gradient element off by 10x its tolerance, at every dtype", "[fixtures][grad]") {
  for (const char* dt : kDtypes)
    for (const auto& c : grad_cases(dt)) {
      INFO(c.id);
      const io::File fx = committed(c);
      io::File cand = golden_rounded(fx, format_of(dt));
      const auto base = json::parse(fx.metadata.at("baselines"))[dt]["grad.input.e"]["max_abs"].get<double>();
      auto& g = cand.tensors.at("grad.input.e").values;
      const std::size_t k = 3;
      const double tol = 2 * base + 4 * ulp_in(dt, fx.tensors.at("grad.input.e").values[k]);
      g[k] = fx.tensors.at("grad.input.e").values[k] + 10 * tol;
      const auto v = verify_case(fx, cand, opts(dt), true, 5);
      CHECK_FALSE(v.pass);
      CHECK(v.failed == 1);
      REQUIRE(v.failures.size() == 1);
      CHECK(v.failures[0].tensor == "grad.input.e");
    }
}

namespace {

/// Runs the known-wrong backward of a case and judges it at dtype dt; the
/// control (the right backward through the same path, in double) must pass.
template <class Wrong, class Right, class ParamGrads, class StateUp = NoStateUpstream>
void check_rejects(const char* what, const std::string& id, const std::string& dt, const Wrong& wrong, const Right& right,
                   const ParamGrads& pg, const std::vector<std::string>& sg = {}, const StateUp& su = {}) {
  const CaseSpec c = find_case(id);
  INFO(c.id << ": " << what);
  const io::File fx = committed(c);
  const Problem p = make_problem(c);
  CHECK(verify_case(fx, with_grads(fx, backward_with(p, right, pg, sg, su), dt), opts(dt), true, 5).pass);
  const auto v = verify_case(fx, with_grads(fx, backward_with(p, wrong, pg, sg, su), dt), opts(dt), true, 5);
  CHECK_FALSE(v.pass);
  REQUIRE_FALSE(v.failures.empty());
  CHECK(v.failures[0].tensor.rfind("grad.", 0) == 0);
  WARN(c.id << ": " << what << ": " << v.failed << " of " << v.checked << " rejected, worst err/tol " << v.worst_ratio);
}

}  // namespace

TEST_CASE("verify rejects an AttnRes backward without the softmax normalisation term, at every dtype",
          "[fixtures][grad]") {
  for (const char* dt : kDtypes)
    for (const char* id : {"attnres_full.kernel_grad.d8.L6.", "attnres_block.kernel_grad.d8_S3.L6."}) {
      const Problem p = make_problem(find_case(std::string(id) + dt + ".s1"));
      const auto cfg = attnres_config<double>(p, dims(p));
      check_rejects(
          "no softmax normalisation term", std::string(id) + dt + ".s1", dt,
          [&](std::int64_t) { return NoNormAttnRes<double>(cfg); },
          [&](std::int64_t) { return AttentionResiduals<double>(cfg); },
          [](const auto& g) { return attnres_param_grads<double>(g); });
    }
}

TEST_CASE("verify rejects an RLS backward that treats P as a constant, at every dtype", "[fixtures][grad]") {
  for (const char* dt : kDtypes) {
    const std::string id = std::string("ldm_rls.kernel_grad.g2_dk4_d8.L6.") + dt + ".s1";
    const Problem p = make_problem(find_case(id));
    const Dims D = dims(p);
    const auto cfg = ldm_config<double>(p, D);
    check_rejects(
        "P treated as constant", id, dt,
        [&](std::int64_t t) { return FrozenPLdm<double>(cfg, ldm_addresses<double>(p, D, cfg, t)); },
        [&](std::int64_t t) { return LdmKernel<double>(cfg, ldm_addresses<double>(p, D, cfg, t)); },
        [&](const auto& g) { return ldm_kernel_grads<double>(cfg, g); }, ldm_state_grads(cfg),
        ldm_state_upstream<double>(p, D, cfg));
  }
}

TEST_CASE("verify rejects an mHC backward with an untransposed residual mix, at every dtype", "[fixtures][grad]") {
  for (const char* dt : kDtypes)
    for (const char* id : {"mhc.kernel_grad.n4_d8.L6.paper.", "mhc.kernel_grad.n4_d8.L6.deepseek-v4."}) {
      const Problem p = make_problem(find_case(std::string(id) + dt + ".s1"));
      const auto cfg = mhc_config_of<double>(p, dims(p));
      check_rejects(
          "dX = H_res dX' (untransposed)", std::string(id) + dt + ".s1", dt,
          [&](std::int64_t) { return UntransposedMhc<double>(cfg); }, [&](std::int64_t) { return Mhc<double>(cfg); },
          [](const auto& g) { return mhc_param_grads<double>(g, false, false, 4); },  // default layouts, n = 4
          mhc_state_grads(), mhc_state_upstream<double>(p, dims(p)));
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
