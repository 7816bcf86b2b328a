// The conformance gate on gradients (backward cases, ids "*.kernel_grad.*", "*.model_grad.*"): verify
// judges grad.* tensors exactly like outputs. It must accept the golden
// gradients rounded to each dtype and the dtype-emulated reference (float32
// backward on inputs and upstream gradients in the dtype: the baseline), and
// reject, at every dtype, a gradient 10x off its tolerance and known-wrong
// backward passes.
#include "gate.hpp"

#include "dmref/attnres_backward.hpp"
#include "dmref/conformance/generate.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace dmref;
using namespace dmref::conf;
using namespace dmref::test;

namespace {

const char* kDtypes[] = {"f32", "bf16", "f16"};

/// Every backward case of the corpus at dtype dt.
std::vector<CaseSpec> grad_cases(const std::string& dt) {
  std::vector<CaseSpec> r;
  for (const auto& c : corpus())
    if (c.grad && c.dtype == dt) r.push_back(c);
  return r;
}

// ---- a wrong AttnRes backward: the softmax Jacobian without its
// normalisation term, dz_i = a_i da_i instead of a_i (da_i - sum_j a_j da_j).
template <class S>
struct NoNormAttnRes : AttentionResiduals<S> {
  using AttentionResiduals<S>::AttentionResiduals;
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

namespace {

/// The kernel-level AttnRes gradients of a problem by backward pass B
/// (scheme type M), in double, as a candidate would report them.
template <class M>
void attnres_grads(const Problem& p, io::File& cand) {
  const auto T = p.integer("tokens"), L = p.integer("layers"), d = p.integer("d");
  AttnResConfig<double> c;
  c.d = int(d);
  c.layers = int(L);
  c.variant = p.text("variant", "full") == "full" ? AttnResVariant::full : AttnResVariant::block;
  if (c.variant == AttnResVariant::block) c.block_size = int(p.integer("block_size"));
  for (std::int64_t l = 0; l <= L; ++l) {
    c.w.push_back(vec_at<double>(p.tensors.at("param.w"), l * d, d));
    c.g.push_back(vec_at<double>(p.tensors.at("param.g"), l * d, d));
  }
  const M m(c);
  auto& ge = cand.tensors.at("grad.input.e").values;
  auto& gv = cand.tensors.at("grad.input.v").values;
  auto& gw = cand.tensors.at("grad.param.w").values;
  auto& gg = cand.tensors.at("grad.param.g").values;
  std::fill(gw.begin(), gw.end(), 0.0);
  std::fill(gg.begin(), gg.end(), 0.0);
  for (std::int64_t t = 0; t < T; ++t) {
    std::vector<Vec<double>> v;
    Upstream<double, typename Backward<M>::Adjoint> up;
    for (std::int64_t l = 0; l < L; ++l) {
      v.push_back(vec_at<double>(p.tensors.at("input.v"), (t * L + l) * d, d));
      up.h.push_back(vec_at<double>(p.tensors.at("input.grad.h"), (t * L + l) * d, d));
    }
    up.out = vec_at<double>(p.tensors.at("input.grad.out"), t * d, d);
    const Vec<double> e = vec_at<double>(p.tensors.at("input.e"), t * d, d);
    const auto g = backward(m, e, forward(m, e, int(L), GivenOutputs<double>{&v}), GivenOutputsVjp{}, up);
    for (std::int64_t k = 0; k < d; ++k) ge[t * d + k] = g.e(k);
    for (std::int64_t l = 0; l < L; ++l)
      for (std::int64_t k = 0; k < d; ++k) gv[(t * L + l) * d + k] = g.v[l](k);
    for (std::int64_t l = 0; l <= L; ++l)
      for (std::int64_t k = 0; k < d; ++k) {
        gw[l * d + k] += g.param.w[l](k);
        gg[l * d + k] += g.param.g[l](k);
      }
  }
}

}  // namespace

TEST_CASE("verify accepts golden gradients rounded to each dtype and the dtype-emulated backward", "[fixtures][grad]") {
  for (const char* dt : kDtypes)
    for (const auto& c : grad_cases(dt)) {
      const io::File fx = build_fixture(c, "test");
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
      const io::File fx = build_fixture(c, "test");
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

TEST_CASE("verify rejects an AttnRes backward without the softmax normalisation term, at every dtype",
          "[fixtures][grad]") {
  for (const char* dt : kDtypes)
    for (const char* id : {"attnres_full.kernel_grad.d8.L6.", "attnres_block.kernel_grad.d8_S3.L6."}) {
      const CaseSpec c = find_case(std::string(id) + dt + ".s1");
      INFO(c.id);
      const io::File fx = build_fixture(c, "test");
      const Problem p = make_problem(c);
      io::File right = golden_rounded(fx, format_of(dt)), wrong = right;
      attnres_grads<AttentionResiduals<double>>(p, right);  // control: the right backward in double passes
      attnres_grads<NoNormAttnRes<double>>(p, wrong);
      for (io::File* f : {&right, &wrong})
        for (auto& [name, t] : f->tensors)
          for (auto& x : t.values) x = round_to(format_of(dt), x);
      CHECK(verify_case(fx, right, opts(dt), true, 5).pass);
      const auto v = verify_case(fx, wrong, opts(dt), true, 5);
      CHECK_FALSE(v.pass);
      WARN(c.id << ": no-normalisation backward: " << v.failed << " of " << v.checked << " rejected, worst err/tol "
                << v.worst_ratio);
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
  Problem ldm = make_problem(find_case("ldm_rls.kernel.g2_dk4_d8.L8.f32.s1"));
  ldm.grad = true;
  ldm.tensors["input.grad.h"] = io::Tensor{"F64", {2, 8, 8}, std::vector<double>(128, 0.5)};
  ldm.tensors["input.grad.out"] = io::Tensor{"F64", {2, 8}, std::vector<double>(16, 0.5)};
  CHECK_THROWS_WITH(evaluate<float>(ldm), Catch::Contains("no backward for scheme \"ldm\""));
}
