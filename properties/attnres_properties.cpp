// Properties of Attention Residuals (docs/attnres.md). The reference runs at
// 257 bits (mp77); oracles at 667 bits (mp200). Generated cases cover width
// d up to 16, depth up to 40, Full and Block AttnRes with every block size
// from 1 to past the depth, logits from nearly uniform to nearly one-hot
// (w_scale up to 30), unit and random gains, eps from 1e-6 to 1 and layer
// outputs spread over six decades (so that eps matters for the small ones).
#include "check.hpp"
#include "harness.hpp"

#include "attnres_cases.hpp"
#include "dmref/attnres.hpp"
#include "dmref/oracles/attnres_direct.hpp"
#include "dmref/oracles/attnres_mean.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace dmref;
using dmref::test::K;
using S = mp77;
using Hi = mp200;

namespace dmref::test {
inline void showValue(const AttnResShape& s, std::ostream& os) { os << describe(s); }
}  // namespace dmref::test

namespace {

using Shape = test::AttnResShape;
using Case = test::AttnResCase;
inline Case make_case(const Shape& s) { return test::make_attnres_case(s); }

rc::Gen<Shape> gen_shape() {
  return rc::gen::mapcat(rc::gen::inRange(0, 41), [](int layers) {
    return rc::gen::build<Shape>(
        rc::gen::set(&Shape::d, rc::gen::inRange(1, 17)), rc::gen::set(&Shape::layers, rc::gen::just(layers)),
        rc::gen::set(&Shape::block, rc::gen::oneOf(rc::gen::just(0), rc::gen::inRange(1, layers + 3))),
        rc::gen::set(&Shape::w_scale, rc::gen::element(0.1, 1.0, 3.0, 10.0, 30.0)),
        rc::gen::set(&Shape::unit_gain, rc::gen::arbitrary<bool>()),
        rc::gen::set(&Shape::eps, rc::gen::element(1e-6, 1e-3, 0.1, 1.0)),
        rc::gen::set(&Shape::spread, rc::gen::element(0.0, 1.0, 2.0, 4.0)),
        rc::gen::set(&Shape::seed, rc::gen::arbitrary<std::uint64_t>()));
  });
}

double norm_hi(const Vec<Hi>& x) { return to_double(Hi(x.norm())); }

template <class A>
double dist_hi(const A& a, const Vec<Hi>& b) {
  return to_double(Hi((a.template cast<Hi>() - b).norm()));
}

const double eps = to_double(epsilon<S>());

}  // namespace

TEST_CASE("AttnRes readout == direct softmax over the sources (Full and Block, every readout)",
          "[property][attnres]") {
  static double worst_eps = 0, worst_ratio = 0;
  prop::check("AttnRes readout == direct softmax over the sources (Full and Block, every readout)", 300, [] {
    const auto shape = *gen_shape();
    const auto c = make_case(shape);
    const auto t = attnres_kernel<S>(c.config<S>(), convert<S>(c.e), c.values<S>());
    for (int r = 0; r <= shape.layers; ++r) {
      const auto o = oracle::attnres_direct(c.readout<Hi>(r));
      const Vec<S>& got = r < shape.layers ? t.h[r] : t.out;
      const double err = dist_hi(got, o.h), tol = K::attnres * eps * to_double(o.cond);
      DMREF_PROP_CLOSE("h_r == sum_i softmax(w^T RMSNorm(b_i)) b_i", err, tol,
                       describe(shape) + " readout " + std::to_string(r));
      worst_eps = std::max(worst_eps, err / (eps * norm_hi(o.h)));
      worst_ratio = std::max(worst_ratio, err / tol);
    }
  });
  std::cout << "  worst AttnRes-vs-direct error at " << bits<S>() << " bits: " << worst_eps
            << " eps (normwise relative); worst error/tolerance: " << worst_ratio << "\n";
}

TEST_CASE("Block AttnRes with block size 1 == Full AttnRes (bit for bit)", "[property][attnres]") {
  prop::check("Block AttnRes with block size 1 == Full AttnRes (bit for bit)", 200, [] {
    auto shape = *gen_shape();
    shape.block = 0;
    const auto c = make_case(shape);
    auto cfg = c.config<S>();
    const auto full = attnres_kernel<S>(cfg, convert<S>(c.e), c.values<S>());
    cfg.variant = AttnResVariant::block;
    cfg.block_size = 1;
    const auto block = attnres_kernel<S>(cfg, convert<S>(c.e), c.values<S>());
    for (int l = 0; l < shape.layers; ++l)
      DMREF_PROP_TRUE("h_l(block, S = 1) == h_l(full)", block.h[l] == full.h[l], describe(shape));
    DMREF_PROP_TRUE("final(block, S = 1) == final(full)", block.out == full.out, describe(shape));
  });
}

TEST_CASE("w = 0: readout == mean of the sources", "[property][attnres]") {
  static double worst = 0;
  prop::check("w = 0: readout == mean of the sources", 200, [] {
    const auto shape = *gen_shape();
    const auto c = make_case(shape);
    const auto src = c.all_sources<S>();
    const int n = static_cast<int>(src.size());
    const Vec<S> w0 = Vec<S>::Zero(shape.d), g = convert<S>(c.g[0]);
    // Logits are exactly 0 and exp(0) = 1: the weights are 1/n rounded once.
    DMREF_PROP_TRUE("softmax weights at w = 0 == fl(1/n)",
                    attnres_weights<S>(src, w0, g, S(shape.eps)) == Vec<S>::Constant(n, S(1) / S(n)),
                    describe(shape));
    auto p = c.mix_readout<Hi>(0);
    const Vec<Hi> mean = oracle::attnres_mean(p.terms);
    Vec<Hi> abs_sum = Vec<Hi>::Zero(shape.d);
    for (const auto& x : p.terms) abs_sum += x.cwiseAbs().col(0);
    // h = sum_i fl(1/n) b_i: 1 + 1 + (n-1) roundings relative to sum_i |b_i| / n.
    const double cond = (n + 1) * norm_hi(abs_sum) / n;
    const double err = dist_hi(attnres_mix<S>(src, w0, g, S(shape.eps)), mean);
    DMREF_PROP_CLOSE("attnres_mix(w = 0) == (1/n) sum_i b_i", err, K::sum * eps * cond, describe(shape));
    worst = std::max(worst, err / (eps * norm_hi(mean)));
  });
  std::cout << "  worst |mix(w = 0) - mean| / (eps ||mean||) at " << bits<S>() << " bits: " << worst << "\n";
}

TEST_CASE("one source: readout == the source (exactly)", "[property][attnres]") {
  prop::check("one source: readout == the source (exactly)", 200, [] {
    const auto shape = *gen_shape();
    const auto c = make_case(shape);
    // a = exp(z) / exp(z) = 1 exactly, h = 0 + 1 * b.
    for (int r = 0; r <= shape.layers; ++r) {
      const Vec<S> b = r == 0 ? convert<S>(c.e) : convert<S>(c.v[r - 1]);
      DMREF_PROP_TRUE("attnres_mix({b}) == b",
                      attnres_mix<S>({b}, convert<S>(c.w[r]), convert<S>(c.g[r]), S(shape.eps)) == b,
                      describe(shape) + " pair " + std::to_string(r));
    }
  });
}

TEST_CASE("softmax weights are positive and sum to 1", "[property][attnres]") {
  static double worst = 0;
  prop::check("softmax weights are positive and sum to 1", 300, [] {
    const auto shape = *gen_shape();
    const auto c = make_case(shape);
    const auto src = c.all_sources<S>();
    const int n = static_cast<int>(src.size());
    for (int r = 0; r <= shape.layers; ++r) {
      const Vec<S> a = attnres_weights<S>(src, convert<S>(c.w[r]), convert<S>(c.g[r]), S(shape.eps));
      const std::string in = describe(shape) + " pair " + std::to_string(r);
      DMREF_PROP_TRUE("every a_i > 0", (a.array() > 0).all(), in);
      S total = 0;
      for (int i = 0; i < n; ++i) total += a(i);
      // sum_i e_i / fl(s) = 1 + (n-1) u; n divisions and n-1 additions: (2n-1) u <= n eps.
      const double err = std::abs(to_double(S(total - 1)));
      DMREF_PROP_CLOSE("sum_i a_i == 1", err, K::sum * eps * n, in);
      worst = std::max(worst, err / eps);
    }
  });
  std::cout << "  worst |sum a - 1| at " << bits<S>() << " bits: " << worst << " eps\n";
}

TEST_CASE("permuting the sources leaves attnres_mix unchanged", "[property][attnres]") {
  static double worst = 0;
  prop::check("permuting the sources leaves attnres_mix unchanged", 300, [] {
    const auto shape = *gen_shape();
    const auto c = make_case(shape);
    const auto src = c.all_sources<S>();
    std::vector<int> perm(src.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(shape.seed ^ 0x9e3779b97f4a7c15ull);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<Vec<S>> permuted;
    for (int i : perm) permuted.push_back(src[i]);
    const int r = shape.layers;  // the final pair
    const Vec<S> w = convert<S>(c.w[r]), g = convert<S>(c.g[r]);
    const Vec<S> h = attnres_mix<S>(src, w, g, S(shape.eps));
    const Vec<S> hp = attnres_mix<S>(permuted, w, g, S(shape.eps));
    // Both orders are within K::attnres eps cond of the exact mix.
    const auto o = oracle::attnres_direct(c.mix_readout<Hi>(r));
    const double err = dist_hi(hp, h.template cast<Hi>());
    DMREF_PROP_CLOSE("mix(P sources) == mix(sources)", err, 2 * K::attnres * eps * to_double(o.cond),
                     describe(shape));
    worst = std::max(worst, err / (eps * norm_hi(o.h)));
  });
  std::cout << "  worst |mix(P b) - mix(b)| at " << bits<S>() << " bits: " << worst << " eps (normwise relative)\n";
}

TEST_CASE("the readout lies in the componentwise hull of its sources", "[property][attnres]") {
  prop::check("the readout lies in the componentwise hull of its sources", 200, [] {
    const auto shape = *gen_shape();
    const auto c = make_case(shape);
    const auto t = attnres_kernel<S>(c.config<S>(), convert<S>(c.e), c.values<S>());
    for (int r = 0; r <= shape.layers; ++r) {
      // h = sum_i a_i b_i with a_i >= 0, sum a_i = 1: min_i b_ij <= h_j <= max_i b_ij,
      // up to the rounding of the readout (K::attnres eps cond).
      const auto o = oracle::attnres_direct(c.readout<Hi>(r));
      const Vec<S>& got = r < shape.layers ? t.h[r] : t.out;
      const Hi tol = Hi(K::attnres * eps) * o.cond;
      for (int j = 0; j < shape.d; ++j)
        DMREF_PROP_TRUE("min_i b_ij <= h_j <= max_i b_ij",
                        Hi(got(j)) >= o.b.row(j).minCoeff() - tol && Hi(got(j)) <= o.b.row(j).maxCoeff() + tol,
                        describe(shape) + " readout " + std::to_string(r) + " component " + std::to_string(j));
    }
  });
}
