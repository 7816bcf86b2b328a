// bench/bench_conformance.cpp: golden generation and verification costs
// (docs/performance.md).
//
//   e2e/<case>/<how>   the reference on a whole corpus case (conf::make_problem):
//                      float (what the dtype baselines run) and double; point
//                      MPFR at 128, 576, 2048 bits (38, 173, 616 digits: the
//                      limb-aligned Boost precisions nearest the ladder); Balls
//                      at 128, 512, 2048 bits (one evaluation each, the rungs of
//                      kZivBits); `certified` = certified_outputs on one thread
//                      (Ziv token by token: layout in float, then Balls at 128,
//                      512, 2048, 8192 bits until every element certifies);
//                      `fixture` = build_fixture (certified + the per-dtype
//                      baselines), what `dmref generate` does per case.
//   verify/read        reading every fixture file and the candidate file
//   verify/verify      reading them and judging the candidate (verify_case),
//                      as `dmref verify` does; bytes/s over both files.
//
// Cases: ldm_rls.model.g16_dk16_d256_h64.L48 (d = 256, G = 16, dk = 16,
// L = 48, 2 tokens, layer MLPs hidden 64) and the committed kernel-level
// ldm_rls.kernel.g16_dk16_d256.L48. `--dmref-smoke` shrinks them.
#include "dmref/conformance/evaluate_impl.hpp"
#include "dmref/conformance/generate.hpp"
#include "dmref/conformance/verify.hpp"
#include "dmref/scalar.hpp"  // Boost's MPFR numbers

#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#ifndef DMREF_SOURCE_DIR
#error "DMREF_SOURCE_DIR must name the source tree (bench/CMakeLists.txt sets it)"
#endif

namespace dmref::bench {

namespace {

namespace fs = std::filesystem;
using namespace dmref::conf;

CaseSpec find_case(const std::string& id) {
  for (const auto& c : corpus())
    if (c.id == id) return c;
  throw std::runtime_error("bench: no corpus case " + id);
}

/// The corpus case, or in smoke mode the same case shrunk (d 16, G 2, dk 4, L 3).
CaseSpec bench_case(const std::string& id, bool smoke) {
  CaseSpec c = find_case(id);
  if (smoke) {
    c.config["d"] = 16;
    c.config["groups"] = 2;
    c.config["dk"] = 4;
    c.config["layers"] = 3;
    c.config["tokens"] = 1;
    if (c.config.contains("hidden")) c.config["hidden"] = 8;
  }
  return c;
}

enum class How { f32, f64, mpfr128, ball128, mpfr576, ball512, mpfr2048, ball2048, certified, fixture };

/// One Ball evaluation of p at `bits` (a rung of Ziv's ladder).
std::size_t ball_eval(const Problem& p, int bits) {
  const BallPrecision prec(bits);
  return evaluate<Ball>(p).t.size();
}

template <class S>
std::size_t point_eval(const Problem& p) {  // double and MPFR: only the LDM path is instantiated here
  Outputs<S> o;
  evaluate_ldm<S>(p, schema_of(p), o);
  return o.t.size();
}

void bm_e2e(benchmark::State& st, CaseSpec c, How how) {
  const Problem p = make_problem(c);
  int certified_bits = 0;
  for (auto _ : st) {
    switch (how) {
      case How::f32: benchmark::DoNotOptimize(evaluate<float>(p).t.size()); break;
      case How::f64: benchmark::DoNotOptimize(point_eval<double>(p)); break;
      case How::mpfr128: benchmark::DoNotOptimize(point_eval<mpfr<38>>(p)); break;
      case How::ball128: benchmark::DoNotOptimize(ball_eval(p, 128)); break;
      case How::mpfr576: benchmark::DoNotOptimize(point_eval<mpfr<173>>(p)); break;
      case How::ball512: benchmark::DoNotOptimize(ball_eval(p, 512)); break;
      case How::mpfr2048: benchmark::DoNotOptimize(point_eval<mpfr<616>>(p)); break;
      case How::ball2048: benchmark::DoNotOptimize(ball_eval(p, 2048)); break;
      case How::certified: {
        const Golden g = certified_outputs(p);
        certified_bits = g.bits;
        break;
      }
      case How::fixture: {
        const io::File f = build_fixture(c, "bench");
        certified_bits = std::stoi(f.metadata.at("precision_bits"));
        break;
      }
    }
  }
  const auto T = p.integer("tokens"), L = p.integer("layers");
  st.counters["tokens"] = double(T);
  st.counters["layers"] = double(L);
  st.counters["d"] = double(p.integer("d"));
  if (certified_bits) st.counters["certified_bits"] = certified_bits;
  st.SetItemsProcessed(st.iterations() * T * L);  // token-layers
}

// ------------------------------------------------------------------ verify
struct VerifySet {
  std::vector<std::string> fixtures;
  std::string candidate;
  std::int64_t bytes = 0;  // all fixture files + the candidate file

  explicit VerifySet(bool smoke) {
    for (const auto& e : fs::directory_iterator(fs::path(DMREF_SOURCE_DIR) / "fixtures" / "golden"))
      if (e.path().extension() == ".safetensors") fixtures.push_back(e.path().string());
    std::sort(fixtures.begin(), fixtures.end());
    if (smoke && fixtures.size() > 3) fixtures.resize(3);
    // The candidate: every fixture's golden outputs rounded to float32, as a
    // correct float32 implementation would store them.
    io::File cand;
    for (const auto& f : fixtures) {
      const io::File fx = io::read(f);
      const std::string id = fx.metadata.at("case");
      for (const auto& [name, t] : fx.tensors) {
        if (name.rfind("output.", 0) != 0 || (name.size() > 3 && name.compare(name.size() - 3, 3, ".lo") == 0)) continue;
        io::Tensor x{"F32", t.shape, {}};
        for (double v : t.values) x.values.push_back(round_to(float32, v));
        cand.tensors[id + "/" + name] = std::move(x);
      }
      bytes += std::int64_t(fs::file_size(f));
    }
    candidate = (fs::temp_directory_path() / ("dmref_bench_candidate_" + std::to_string(getpid()) + ".safetensors")).string();
    io::write(candidate, cand);
    bytes += std::int64_t(fs::file_size(candidate));
  }
  ~VerifySet() {
    std::error_code ec;
    fs::remove(candidate, ec);
  }
};

/// Built on first use, so that a filtered run does not pay for it.
std::shared_ptr<VerifySet> verify_set(bool smoke) {
  static std::shared_ptr<VerifySet> set;
  if (!set) set = std::make_shared<VerifySet>(smoke);
  return set;
}

void bm_verify(benchmark::State& st, bool smoke, bool judge) {
  const std::shared_ptr<VerifySet> set = verify_set(smoke);
  VerifyOptions opt;
  opt.dtype = "f32";
  std::int64_t failed = 0;
  for (auto _ : st) {
    const io::File cand = io::read(set->candidate);
    for (const auto& f : set->fixtures) {
      const io::File fx = io::read(f);
      if (judge) failed += !verify_case(fx, cand, opt, false, 20).pass;
      benchmark::DoNotOptimize(fx.tensors.size());
    }
  }
  if (failed) st.SkipWithError("verify: a correct candidate failed");
  st.SetBytesProcessed(st.iterations() * set->bytes);
  st.counters["files"] = double(set->fixtures.size() + 1);
  st.counters["bytes"] = double(set->bytes);
}

}  // namespace

void register_conformance(bool smoke) {
  const std::vector<std::pair<std::string, std::vector<How>>> cases = {
      // certified at 512 bits: the point and ball evaluations at the first two rungs
      {"ldm_rls.kernel.g16_dk16_d256.L48.bf16.s1",
       {How::f32, How::f64, How::mpfr128, How::ball128, How::mpfr576, How::ball512, How::certified, How::fixture}},
      // certified at 2048 bits (Ziv: 128, 512, 2048)
      {"ldm_rls.model.g16_dk16_d256_h64.L48.bf16.s1",
       {How::f32, How::f64, How::mpfr128, How::ball128, How::mpfr2048, How::ball2048, How::certified}},
  };
  const char* names[] = {"float",   "double",   "mpfr128",  "ball128",   "mpfr576",
                         "ball512", "mpfr2048", "ball2048", "certified", "fixture"};
  for (const auto& [id, hows] : cases) {
    const CaseSpec c = bench_case(id, smoke);
    for (How h : hows)
      benchmark::RegisterBenchmark(("e2e/" + id + "/" + names[int(h)]).c_str(), bm_e2e, c, h)
          ->Unit(benchmark::kMillisecond);
  }
  const int reps = smoke ? 1 : 3;  // the fastest of 3 (scripts/bench)
  benchmark::RegisterBenchmark("verify/read", bm_verify, smoke, false)
      ->Unit(benchmark::kMillisecond)
      ->Repetitions(reps);
  benchmark::RegisterBenchmark("verify/verify", bm_verify, smoke, true)
      ->Unit(benchmark::kMillisecond)
      ->Repetitions(reps);
}

}  // namespace dmref::bench
