// Unit tests of the stability sweeps' machinery (reference/include/dmref/stability.hpp,
// reference/src/stability/): sampling, the error measure, the input grid, the
// lockstep engine's bookkeeping, and one real (fast) sweep end to end. The
// numbers the sweeps produce are docs/stability.md's subject; `dmref stability
// --quick` in CI checks the LDM reference against the 667-bit closed form.
#include "check.hpp"

#include "dmref/dtype.hpp"
#include "dmref/ldm.hpp"
#include "dmref/oracles/ldm_rls_closed_form.hpp"
#include "dmref/rls_forms.hpp"
#include "dmref/stability.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <tuple>
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
    s.alarms = {char(l_ >= 15), char(l_ == 3 || l_ >= 25)};  // detector "a" from layer 15, "b" at 3 only (before death)
  }

 private:
  int dies_, l_ = -1;
};

/// Options of a quick sweep of one part (`only`) into a fresh temporary directory.
StabilityOptions quick_sweep(const std::string& only, const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(dir);
  StabilityOptions o;
  o.quick = true;
  o.out_dir = dir.string();
  o.only = only;
  return o;
}

}  // namespace

TEST_CASE("sample_layers: dense (every layer to 20, then 20 per decade) or 1-2-5 x 10^k, and the last layer, 0-based",
          "[stability]") {
  std::vector<int> all12(12);
  for (int i = 0; i < 12; ++i) all12[i] = i;
  CHECK(sample_layers(12) == all12);
  // Above layer 20: l + 1 = round(10^(i/20)), i = 27, 28, ...: 22, 25, 28, 32, 35, 40, 45, 50, 56, 63, 71, 79, 89, 100.
  const auto d100 = sample_layers(100);
  CHECK(d100.size() == 20 + 14);
  CHECK(std::vector<int>(d100.begin() + 20, d100.end()) ==
        std::vector<int>{21, 24, 27, 31, 34, 39, 44, 49, 55, 62, 70, 78, 88, 99});
  const auto d1000 = sample_layers(1000);
  CHECK(std::count_if(d1000.begin(), d1000.end(), [](int l) { return l >= 100; }) == 20);  // 112 ... 1000
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

TEST_CASE("inputs lie on the grid that bfloat16 and float16 share, parameters are float32", "[stability]") {
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
  cands[0].meta.alarms = {"a", "b"};
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
  CHECK(r.first_alarm == std::vector<int>{15, 3});
  CHECK(r.err_final == kInf);
  CHECK(r.err_max == kInf);
  // Samples at layers 0 ... 19 (the dense series: every layer to the 20th), then the layer it died.
  std::vector<int> layers, want;
  for (const auto& s : r.samples) layers.push_back(s.first);
  for (int l = 0; l <= 20; ++l) want.push_back(l);
  CHECK(layers == want);
  CHECK(r.samples[0].second[0] == Approx(1e-6));
  CHECK(out[1].samples.empty());
  CHECK(out[1].note == "rejected: for the test");
}

TEST_CASE("the PreLN sweep end to end: files written, float64 exact on grid inputs", "[stability]") {
  namespace fs = std::filesystem;
  StabilityOptions o = quick_sweep("preln", "dmref_test_stability");
  const fs::path dir = o.out_dir;
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
  // Layers are counted from 1 in the files, as in the docs.
  const auto layers = read_csv(dir / "layers_preln.csv");
  REQUIRE(!layers.empty());
  int lo = 1 << 30, hi = 0;
  for (const auto& r : layers) lo = std::min(lo, std::stoi(r.at("layer"))), hi = std::max(hi, std::stoi(r.at("layer")));
  CHECK(lo == 1);
  CHECK(hi == sizes(true).preln_layers);
  // Bad options are rejected.
  o.only = "nope";
  CHECK_THROWS_AS(run_stability(o), std::invalid_argument);
  fs::remove_all(dir);
}

TEST_CASE("quantile: linear interpolation between order statistics (numpy's default), +inf above every number",
          "[stability]") {
  // numpy.percentile([1, 2, 3, 4, 5], [10, 50, 90]) = [1.4, 3, 4.6]
  CHECK(quantile({5, 1, 4, 2, 3}, 0.5) == 3);
  CHECK(quantile({5, 1, 4, 2, 3}, 0.1) == Approx(1.4).epsilon(1e-15));
  CHECK(quantile({5, 1, 4, 2, 3}, 0.9) == Approx(4.6).epsilon(1e-15));
  CHECK(quantile({7}, 0.9) == 7);
  CHECK(quantile({1, 2, kInf}, 0.5) == 2);      // h = 1: exactly the middle order statistic
  CHECK(quantile({1, 2, kInf}, 0.9) == kInf);   // interpolates towards +inf
  CHECK(quantile({1, std::nan(""), 3}, 0.5) == 2);  // NaN is no draw
  CHECK(std::isnan(quantile({}, 0.5)));
}

TEST_CASE("the RLS forms of rls_forms.hpp equal the decayed-ridge closed form (oracle), every layer", "[stability]") {
  // One fixed problem at 257 bits against oracle::rls_closed_form at 667 bits:
  // dk = 5, dv = 3, 40 layers, lambda in [0.5, 1] (one layer at exactly 1),
  // omega in [0.1, 10] with two exact zeros. The tolerance is the properties'
  // (properties/stability_properties.cpp, where the factor is derived):
  // 4 K::rls eps cond1 for a form that carries a factor of P or R (Potter,
  // inverse QR, QR, U-D), K::rls eps cond1 (dk + 1) for the information form,
  // cond1 = ||R||_1 ||R^-1||_1 of the layer (at most 2e2 here), and 4 (dk + 1)
  // K::rls for QR, whose memory is a triangular solve like the information form's.
  using S = mp77;
  using Hi = mp200;
  const int dk = 5, dv = 3, n = 40;
  Normal N(0x0dac1e);
  oracle::DepthRegression<double> p;
  p.K.resize(dk, n);
  p.V.resize(dv, n);
  p.omega.resize(n);
  p.lambda.resize(n);
  p.alpha = 0.5;
  for (int l = 0; l < n; ++l) {
    for (int i = 0; i < dk; ++i) p.K(i, l) = N();
    for (int i = 0; i < dv; ++i) p.V(i, l) = N();
    p.omega(l) = (l == 7 || l == 20) ? 0.0 : std::pow(10.0, N.uniform());
    p.lambda(l) = l == 11 ? 1.0 : 0.75 + 0.25 * N.uniform();
  }
  const auto ps = p.to<S>();
  Mat<S> Mp = Mat<S>::Zero(dv, dk), F = rls_potter_init<S>(dk, ps.alpha);
  Mat<S> Mi = Mat<S>::Zero(dv, dk), Si = rls_inverse_qr_init<S>(dk, ps.alpha);
  Mat<S> C, Z, Mu = Mat<S>::Zero(dv, dk), U;
  Vec<S> D;
  rls_qr_init<S>(dk, dv, ps.alpha, C, Z);
  rls_ud_init<S>(dk, ps.alpha, U, D);
  Mat<S> R = Mat<S>::Identity(dk, dk) / ps.alpha, B = Mat<S>::Zero(dv, dk);
  const double eps = to_double(epsilon<S>());
  double worst = 0;
  for (int l = 0; l < n; ++l) {
    const Vec<S> k = ps.K.col(l), v = ps.V.col(l);
    rls_potter_step<S>(Mp, F, k, v, ps.omega(l), ps.lambda(l));
    rls_inverse_qr_step<S>(Mi, Si, k, v, ps.omega(l), ps.lambda(l));
    rls_qr_step<S>(C, Z, k, v, ps.omega(l), ps.lambda(l));
    rls_ud_step<S>(Mu, U, D, k, v, ps.omega(l), ps.lambda(l));
    rls_information_step<S>(R, B, k, v, ps.omega(l), ps.lambda(l));
    const auto cf = oracle::rls_closed_form(p.to<Hi>().head(l));
    const double cond = to_double(cf.cond1);
    Mat<S> Pq, Pc;
    const Mat<S> Mq = rls_qr_memory<S>(C, Z, &Pq), Mc = rls_closed_form_solve<S>(R, B, &Pc);
    const std::vector<std::tuple<const char*, Mat<S>, Mat<S>, double>> forms{
        {"potter", Mp, F * F.transpose(), 4 * test::K::rls},
        {"inverse-qr", Mi, Si * Si.transpose(), 4 * test::K::rls},
        {"qr", Mq, Pq, 4 * test::K::rls * (dk + 1)},
        {"ud", Mu, rls_ud_P<S>(U, D), 4 * test::K::rls},
        {"information", Mc, Pc, test::K::rls * (dk + 1)}};
    for (const auto& [name, M, P, k] : forms) {
      const double eM = to_double(Hi((M.template cast<Hi>() - cf.M).norm() / cf.M.norm()));
      const double eP = to_double(Hi((P.template cast<Hi>() - cf.Rinv).norm() / cf.Rinv.norm()));
      INFO(name << " layer " << l << " cond1 " << cond << " errors " << eM << " " << eP);
      CHECK(eM <= k * eps * cond);
      CHECK(eP <= k * eps * cond);
      worst = std::max({worst, eM / (eps * cond), eP / (eps * cond)});
    }
  }
  // Structure the forms promise: S lower and C upper triangular, U unit upper triangular, D > 0.
  CHECK(Mat<S>(Si.template triangularView<Eigen::StrictlyUpper>()).isZero(0));
  CHECK(Mat<S>(C.template triangularView<Eigen::StrictlyLower>()).isZero(0));
  CHECK(Mat<S>(U.template triangularView<Eigen::StrictlyLower>()).isZero(0));
  CHECK(U.diagonal() == Vec<S>::Ones(dk));
  CHECK(D.minCoeff() > 0);
  std::cout << "  RLS forms vs closed form: worst error / (eps cond1) = " << worst << "\n";
}

TEST_CASE("directional forgetting (rls_forms.hpp): its information recursion, lambda = 1 is RLS, no wind-up",
          "[stability]") {
  const int dk = 4, dv = 3, n = 12;
  Normal N(0xd1f0);
  auto draw = [&](int m) {
    Vec<double> x(m);
    for (int i = 0; i < m; ++i) x(i) = N();
    return x;
  };
  SECTION("P_l^-1 = P^-1 - (1 - lambda) k k^T / (k^T P k) + w k k^T, at 257 bits") {
    using S = mp77;
    Mat<S> M = Mat<S>::Zero(dv, dk), P = Mat<S>::Identity(dk, dk);
    for (int l = 0; l < n; ++l) {
      const Vec<S> k = draw(dk).cast<S>(), v = draw(dv).cast<S>();
      const S w(std::pow(10.0, N.uniform())), lambda(0.75 + 0.25 * N.uniform());
      const Mat<S> R = P.inverse();
      const S s = k.dot(P * k);
      const Mat<S> R_next = R - ((S(1) - lambda) / s) * k * k.transpose() + w * k * k.transpose();
      rls_directional_step<S>(M, P, k, v, w, lambda);
      const Mat<S> Rl = P.inverse();
      // First-order rounding: one step perturbs P by at most gamma_{2 dk + 8}
      // ||P|| (a dot product of dk terms, the rank-1 update, the average), and
      // inverting amplifies a relative perturbation by cond(P); both sides'
      // inverses add as much again. Bound: 4 (2 dk + 8) eps cond(P)^2 relative.
      const double cond = to_double(P.norm() * Rl.norm());
      const double err = to_double((Rl - R_next).norm() / R_next.norm());
      const double eps = to_double(std::numeric_limits<S>::epsilon());
      INFO("layer " << l << " cond " << cond << " err " << err);
      CHECK(err <= 4 * (2 * dk + 8) * eps * cond * cond);
    }
  }
  SECTION("lambda = 1: bit for bit the symmetric RLS step (double)") {
    Mat<double> M1 = Mat<double>::Zero(dv, dk), P1 = Mat<double>::Identity(dk, dk), M2 = M1, P2 = P1;
    for (int l = 0; l < n; ++l) {
      const Vec<double> k = draw(dk), v = draw(dv);
      const double w = std::pow(10.0, N.uniform());
      rls_directional_step<double>(M1, P1, k, v, w, 1.0);
      rls_step<double>(M2, P2, k, v, w, 1.0, PUpdate::symmetric);
    }
    CHECK((M1.array() == M2.array()).all());
    CHECK((P1.array() == P2.array()).all());
  }
  SECTION("keys that never excite the last two coordinates: P stays alpha there, exactly (RLS: alpha / prod lambda)") {
    Mat<double> M = Mat<double>::Zero(dv, dk), P = 0.5 * Mat<double>::Identity(dk, dk);
    Mat<double> Mr = M, Pr = P;
    double grow = 0.5;
    for (int l = 0; l < n; ++l) {
      Vec<double> k = draw(dk);
      k.tail(2).setZero();
      const Vec<double> v = draw(dv);
      rls_directional_step<double>(M, P, k, v, 1.0, 0.5);
      rls_step<double>(Mr, Pr, k, v, 1.0, 0.5, PUpdate::symmetric);
      grow /= 0.5;
    }
    // pi = P k is exactly 0 on the unexcited coordinates while P is block
    // diagonal, so nothing there changes (0 * x and x - 0 are exact).
    CHECK(P(2, 2) == 0.5);
    CHECK(P(3, 3) == 0.5);
    CHECK(P(2, 3) == 0.0);
    CHECK(P.block(0, 2, 2, 2).isZero(0.0));
    CHECK(Pr(2, 2) == grow);  // 0.5 / 0.5^12: a power of two, exact
  }
}

TEST_CASE("the gradient sweep end to end: every scheme at depths 1..16, finite errors, the reference better than float32",
          "[stability]") {
  namespace fs = std::filesystem;
  const StabilityOptions o = quick_sweep("gradients", "dmref_test_stability_grad");
  const fs::path dir = o.out_dir;
  REQUIRE(run_stability(o) == 0);
  const auto runs = read_csv(dir / "runs.csv");
  REQUIRE(runs.size() == 8 * 4);  // 8 scheme variants x 4 modes, one draw
  const auto layers = read_csv(dir / "layers_gradients.csv");
  std::map<std::string, const std::map<std::string, std::string>*> by_id;
  for (const auto& r : runs) by_id[r.at("id")] = &r;
  int points = 0;
  std::map<std::pair<std::string, std::string>, std::map<std::string, double>> err;  // (form, L) -> dtype -> error
  for (const auto& s : layers) {
    const auto& r = *by_id.at(s.at("id"));
    INFO(r.at("form") << " " << r.at("dtype") << " L " << s.at("layer") << " " << s.at("grad_input"));
    CHECK(r.at("note").find("rejected") == std::string::npos);
    const double e = std::stod(s.at("grad_input"));
    REQUIRE(std::isfinite(e));
    err[{r.at("form"), s.at("layer")}][r.at("dtype")] = e;
    ++points;
  }
  // The reference is float64; the f64 recipe's model (every operation
  // perturbed by 2^-53) measures its own error. Where float32 errs at all,
  // the reference must err less than what it judges.
  for (const auto& [at, e] : err) {
    INFO(at.first << " L " << at.second);
    if (e.at("float32") > 0) CHECK(e.at("float64 (model)") < e.at("float32"));
  }
  CHECK(points == 8 * 4 * 5);  // depths 1, 2, 4, 8, 16
  const std::string report = [&] {
    std::ifstream in(dir / "report.md");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  CHECK(report.find("## Gradients over depth") != std::string::npos);
  CHECK(report.find("## Recommendations") != std::string::npos);
  CHECK(report.find("gradients.png") != std::string::npos);
  fs::remove_all(dir);
}
