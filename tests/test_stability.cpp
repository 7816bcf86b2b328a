// Unit tests of the stability sweeps' machinery (reference/include/dmref/stability.hpp,
// reference/src/stability/): sampling, the error measure, the input grid, the
// lockstep engine's bookkeeping, and one real (fast) sweep end to end. The
// numbers the sweeps produce are docs/stability.md's subject; `dmref stability
// --quick` in CI checks the LDM reference against the 667-bit closed form.
#include "dmref/dtype.hpp"
#include "dmref/stability.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace dmref;
using namespace dmref::stability;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<std::map<std::string, std::string>> read_csv(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  std::vector<std::string> head;
  std::vector<std::map<std::string, std::string>> rows;
  auto split = [](const std::string& s) {
    std::vector<std::string> f;
    std::string cur;
    bool quoted = false;
    for (char c : s) {
      if (c == '"') quoted = !quoted;
      else if (c == ',' && !quoted) f.push_back(cur), cur.clear();
      else cur += c;
    }
    f.push_back(cur);
    return f;
  };
  if (std::getline(in, line)) head = split(line);
  while (std::getline(in, line)) {
    const auto f = split(line);
    std::map<std::string, std::string> r;
    for (std::size_t i = 0; i < head.size() && i < f.size(); ++i) r[head[i]] = f[i];
    rows.push_back(r);
  }
  return rows;
}

/// A synthetic run: readout 1 + 1e-6 2^l (so its relative error against the
/// reference's 1 is 1e-6 2^l), inf from layer `dies` on.
class Doubling : public Stepper {
 public:
  explicit Doubling(int dies) : dies_(dies) {}
  void step(int l) override { l_ = l; }
  void snap(Snap& s, bool) override {
    s.read = Eigen::VectorXd::Constant(1, l_ >= dies_ ? kInf : 1 + 1e-6 * std::ldexp(1.0, l_));
    s.finite = std::isfinite(s.read(0));
  }

 private:
  int dies_, l_ = -1;
};

}  // namespace

TEST_CASE("sample_layers: 1-2-3-5-7 (or 1-2-5) x 10^k and the last layer, 0-based", "[stability]") {
  CHECK(sample_layers(12) == std::vector<int>{0, 1, 2, 4, 6, 9, 11});
  CHECK(sample_layers(12, false) == std::vector<int>{0, 1, 4, 9, 11});
  CHECK(sample_layers(100, false) == std::vector<int>{0, 1, 4, 9, 19, 49, 99});
  CHECK(sample_layers(1) == std::vector<int>{0});
  CHECK(sample_layers(0).empty());
}

TEST_CASE("rel_err: normwise relative error, scaled, +inf for a non-finite run", "[stability]") {
  Eigen::VectorXd r(2), a(2);
  r << 3, 4;  // ||r|| = 5
  a << 3, 4 + 5e-3;
  CHECK(rel_err(a, r) == Approx(1e-3).epsilon(1e-12));
  CHECK(rel_err(r, r) == 0);
  // Entries near the top of double's range: no overflow in the norms.
  CHECK(rel_err(a * 1e300, r * 1e300) == Approx(1e-3).epsilon(1e-12));
  a(0) = std::numeric_limits<double>::quiet_NaN();
  CHECK(rel_err(a, r) == kInf);
  a(0) = kInf;
  CHECK(rel_err(a, r) == kInf);
  // A zero reference: the absolute error.
  CHECK(rel_err(r, Eigen::VectorXd::Zero(2)) == 5);
  // A reference that is itself not finite in double gives no number.
  CHECK(std::isnan(rel_err(r, Eigen::VectorXd::Constant(2, kInf))));
}

TEST_CASE("inputs lie on the grid that bfloat16 and float16 share; parameters are float32", "[stability]") {
  Normal N(5);
  for (int i = 0; i < 100000; ++i) {
    const double x = N() * std::ldexp(1.0, static_cast<int>(8 * N.uniform()));
    const double g = on_grid(x);
    INFO(x);
    REQUIRE(round_to(bfloat16, g) == g);
    REQUIRE(round_to(float16, g) == g);
    REQUIRE(on_f32(x) == static_cast<double>(static_cast<float>(x)));
  }
  CHECK(on_grid(0x1p-15) == 0);  // below float16's normal range: flushed
  CHECK(on_grid(0x1p-14) == 0x1p-14);
}

TEST_CASE("Normal: the same seed gives the same numbers", "[stability]") {
  Normal a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 1000; ++i) {
    const double x = a(), y = b(), z = c();
    REQUIRE(x == y);
    differs = differs || x != z;
  }
  CHECK(differs);
}

TEST_CASE("lockstep: threshold crossings, first non-finite layer, samples", "[stability]") {
  // Error 1e-6 2^l crosses 1e-3 at l = 10, 1e-2 at l = 14, 1e-1 at l = 17; inf at l = 20.
  std::vector<Candidate> cands(2);
  cands[0].meta.metrics = {"err"};
  cands[0].stepper = std::make_unique<Doubling>(20);
  cands[1].meta.note = "rejected: for the test";
  std::vector<Result> out;
  const MetricFn metric = [](const Snap& a, const Snap& r, bool) {
    return std::vector<double>{a.read(0) == kInf ? kInf : std::fabs(a.read(0) - r.read(0)) / std::fabs(r.read(0))};
  };
  // The reference: a constant readout 1.
  class One : public Stepper {
   public:
    void step(int) override {}
    void snap(Snap& s, bool) override { s.read = Eigen::VectorXd::Ones(1); }
  } one;
  lockstep(one, cands, 30, metric, out);
  REQUIRE(out.size() == 2);
  const Result& r = out[0];
  CHECK(r.layers == 30);
  CHECK(r.first_over == std::array<int, 3>{10, 14, 17});
  CHECK(r.first_nonfinite == 20);
  CHECK(r.err_final == kInf);
  CHECK(r.err_max == kInf);
  // Samples at layers 0, 1, 2, 4, 6, 9, 19 (the dense series below 30), then the layer it died.
  std::vector<int> layers;
  for (const auto& s : r.samples) layers.push_back(s.first);
  CHECK(layers == std::vector<int>{0, 1, 2, 4, 6, 9, 19, 20});
  CHECK(r.samples[0].second[0] == Approx(1e-6));
  CHECK(out[1].samples.empty());
  CHECK(out[1].note == "rejected: for the test");
}

TEST_CASE("the PreLN sweep end to end: files written, float64 exact on grid inputs", "[stability]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "dmref_test_stability";
  fs::remove_all(dir);
  StabilityOptions o;
  o.quick = true;
  o.out_dir = dir.string();
  o.only = "preln";
  REQUIRE(run_stability(o) == 0);
  for (const char* f : {"runs.csv", "layers_preln.csv", "report.md"}) CHECK(fs::exists(dir / f));
  const auto runs = read_csv(dir / "runs.csv");
  REQUIRE(runs.size() == 8);  // 2 value families x 4 dtypes
  for (const auto& r : runs) {
    INFO(r.at("dtype") << " " << r.at("values") << " err_final " << r.at("err_final"));
    CHECK(r.at("scheme") == "preln");
    CHECK(r.at("layers") == std::to_string(sizes(true).preln_layers));
    // Every input has 8 significant bits and magnitude at least 2^-14, so all
    // are multiples of 2^-21; the sums stay below 2^20: 41 bits, float64 is exact.
    if (r.at("dtype") == "float64") CHECK(r.at("err_final") == "0");
    if (r.at("dtype") != "float64") CHECK(std::stod(r.at("err_final")) > 0);
  }
  // Bad options are rejected.
  o.only = "nope";
  CHECK_THROWS_AS(run_stability(o), std::invalid_argument);
  fs::remove_all(dir);
}
