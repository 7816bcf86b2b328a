// Unit tests of PreLN (reference/include/dmref/preln.hpp and preln_backward.hpp
// through the framework's forward and backward; docs/preln.md) against the
// direct sums of oracles/include/dmref/oracles/preln_sum.hpp:
//     h_l = e + sum_{j<l} v_j,  out = e + sum_j v_j,
//     de = u_out + sum_l u_h[l],  dv_j = u_out + u_v[j] + sum_{l>j} u_h[l].
// Expected values are computed at 667 bits (mp200) from the inputs at the type
// under test (converted exactly). Tolerance: a sum of n terms, in any order,
// has |fl(s) - s| <= gamma_{n-1} sum |terms| componentwise (Higham, ASNA,
// eq. 4.4), gamma_k = k u / (1 - k u) <= 2 k u = k eps for k u <= 1/2
// (u = eps/2; epsilon<S>() = 2^(1-p) is eps). So ||ref - exact||_2 <=
// (n-1) eps(S) ||A||_2 and ||oracle - exact||_2 <= (n-1) eps(Hi) ||A||_2, with
// A the componentwise sum of |terms| (the oracle on |inputs|); the tests allow
// K::sum n (eps(S) + eps(Hi)) ||A||, twice that.
#include "check.hpp"

#include "dmref/layers_backward.hpp"
#include "dmref/model.hpp"
#include "dmref/oracles/preln_sum.hpp"
#include "dmref/preln_backward.hpp"
#include "dmref/random.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

using namespace dmref;
using dmref::test::K;
using Hi = mp200;

namespace {

/// One token's kernel-level problem in doubles: the embedding, L layer
/// outputs, and the upstream gradients of out, of every h_l and of every v_l.
/// `integer`: every value an integer in [-1024, 1023]; otherwise uniform in
/// [-1, 1), divided by 3 at the type under test so that the sums round.
struct PrelnCase {
  int d = 4, L = 8;
  std::uint64_t seed = 1;
  bool integer = false;
  Vec<double> e, u_out;
  std::vector<Vec<double>> v, u_h, u_v;

  std::string describe() const {
    std::ostringstream o;
    o << "d=" << d << " L=" << L << " seed=" << seed << (integer ? " integer" : "");
    return o.str();
  }
  template <class S>
  Vec<S> at(const Vec<double>& x) const {
    return integer ? convert<S>(x) : Vec<S>(convert<S>(x) / S(3));
  }
  template <class S>
  std::vector<Vec<S>> at(const std::vector<Vec<double>>& x) const {
    std::vector<Vec<S>> r;
    for (const auto& y : x) r.push_back(at<S>(y));
    return r;
  }
};

PrelnCase make_case(int d, int L, std::uint64_t seed, bool integer) {
  SplitMix64 r(seed);
  auto draw = [&] {
    Vec<double> x(d);
    for (int i = 0; i < d; ++i) x(i) = integer ? std::floor(1024 * r.uniform()) : r.uniform();
    return x;
  };
  PrelnCase c{d, L, seed, integer, draw(), draw(), {}, {}, {}};
  for (int l = 0; l < L; ++l) {
    c.v.push_back(draw());
    c.u_h.push_back(draw());
    c.u_v.push_back(draw());
  }
  return c;
}

std::vector<PrelnCase> cases(bool integer) {
  return {make_case(8, 12, 1, integer), make_case(5, 40, 2, integer), make_case(16, 64, 3, integer),
          make_case(3, 1, 4, integer), make_case(4, 0, 5, integer)};
}

template <class S>
std::vector<Vec<Hi>> to_hi(const std::vector<Vec<S>>& x) {
  std::vector<Vec<Hi>> r;
  for (const auto& y : x) r.push_back(y.template cast<Hi>());
  return r;
}

std::vector<Vec<Hi>> abs_of(const std::vector<Vec<Hi>>& x) {
  std::vector<Vec<Hi>> r;
  for (const auto& y : x) r.push_back(y.cwiseAbs());
  return r;
}

template <class S>
double dist(const Vec<S>& a, const Vec<Hi>& b) {
  return to_double(Hi((a.template cast<Hi>() - b).norm()));
}

/// The allowed error of a sum of n terms with |terms| summing to A (header).
template <class S>
double sum_tol(int n, const Vec<Hi>& A) {
  return K::sum * n * (to_double(epsilon<S>()) + to_double(epsilon<Hi>())) * to_double(Hi(A.norm()));
}

template <class S>
using Up = Upstream<S, typename Backward<PreLN<S>>::Adjoint>;

/// The kernel-level trace and gradients of the reference for a case at S.
template <class S>
struct Run {
  Vec<S> e;
  std::vector<Vec<S>> v;
  Trace<S, typename PreLN<S>::State> tr;
  Gradients<S, typename Backward<PreLN<S>>::Grad> g;
};

template <class S>
Run<S> run(const PrelnCase& c) {
  Run<S> r{c.at<S>(c.e), c.at<S>(c.v), {}, {}};
  r.tr = forward(PreLN<S>{}, r.e, c.L, GivenOutputs<S>{&r.v});
  Up<S> up;
  up.out = c.at<S>(c.u_out);
  up.h = c.at<S>(c.u_h);
  up.v = c.at<S>(c.u_v);
  r.g = backward(PreLN<S>{}, r.e, r.tr, GivenOutputsVjp{}, up);
  return r;
}

}  // namespace

TEMPLATE_TEST_CASE("forward: h_l and out == the oracle's direct sums at 667 bits, within the recursive-sum bound",
                   "[preln]", double, mp50, mp77) {
  using S = TestType;
  double worst = 0;
  for (const auto& c : cases(false)) {
    const auto r = run<S>(c);
    const Vec<Hi> e = r.e.template cast<Hi>();
    const auto v = to_hi(r.v);
    const auto o = oracle::preln_sums<Hi>(e, v);
    const auto A = oracle::preln_sums<Hi>(e.cwiseAbs(), abs_of(v));
    const double eps = to_double(epsilon<S>());
    for (int l = 0; l <= c.L; ++l) {
      // h_l has l + 1 terms (e, v_0..v_{l-1}); out has L + 1.
      const Vec<S>& got = l < c.L ? r.tr.h[l] : r.tr.out;
      const Vec<Hi>& want = l < c.L ? o.h[l] : o.out;
      const Vec<Hi>& a = l < c.L ? A.h[l] : A.out;
      const double err = dist(got, want), tol = sum_tol<S>(l + 1, a);
      INFO(c.describe() << " h_" << l << ": err " << test::in_eps<S>(err) << " tol " << test::in_eps<S>(tol));
      // The tolerance is finite and far below the value (the check can fail).
      REQUIRE(std::isfinite(tol));
      REQUIRE(tol < 1e-3 * to_double(Hi(want.norm())));
      CHECK(err <= tol);
      worst = std::max(worst, err / (eps * (l + 1) * to_double(Hi(a.norm()))));
    }
    // At the reference's own type the oracle adds the same terms in the same
    // order (e, v_0, v_1, ..): the same roundings, so the same bits. The
    // streams after write l are h_{l+1} (out after the last write).
    const auto os = oracle::preln_sums<S>(r.e, r.v);
    for (int l = 0; l < c.L; ++l) {
      CHECK(r.tr.h[l] == os.h[l]);
      CHECK(r.tr.states[l].x == (l + 1 < c.L ? os.h[l + 1] : os.out));
    }
    CHECK(r.tr.out == os.out);
  }
  WARN(scalar_name<TestType>() << ": worst PreLN forward error / (eps n || sum |terms| ||) = " << worst << " (K::sum = "
                               << K::sum << ")");
}

TEMPLATE_TEST_CASE("backward: de and dv_j == the closed form at 667 bits, within the recursive-sum bound", "[preln]",
                   double, mp50, mp77) {
  using S = TestType;
  double worst = 0;
  for (const auto& c : cases(false)) {
    const auto r = run<S>(c);
    const Vec<Hi> u_out = c.at<S>(c.u_out).template cast<Hi>();
    const auto u_h = to_hi(c.at<S>(c.u_h)), u_v = to_hi(c.at<S>(c.u_v));
    const auto o = oracle::preln_sum_vjp<Hi>(c.L, u_out, u_h, u_v);
    const auto A = oracle::preln_sum_vjp<Hi>(c.L, Vec<Hi>(u_out.cwiseAbs()), abs_of(u_h), abs_of(u_v));
    const double eps = to_double(epsilon<S>());
    // de has L + 1 terms (u_out, u_h[0..L-1]); dv_j has 2 + (L-1-j) = L + 1 - j.
    const double err_e = dist(r.g.e, o.e), tol_e = sum_tol<S>(c.L + 1, A.e);
    INFO(c.describe() << " de: err " << test::in_eps<S>(err_e) << " tol " << test::in_eps<S>(tol_e));
    REQUIRE(std::isfinite(tol_e));
    REQUIRE(tol_e < 1e-3 * to_double(Hi(o.e.norm())));
    CHECK(err_e <= tol_e);
    worst = std::max(worst, err_e / (eps * (c.L + 1) * to_double(Hi(A.e.norm()))));
    REQUIRE(static_cast<int>(r.g.v.size()) == c.L);
    for (int j = 0; j < c.L; ++j) {
      const double err = dist(r.g.v[j], o.v[j]), tol = sum_tol<S>(c.L + 1 - j, A.v[j]);
      INFO(c.describe() << " dv_" << j << ": err " << test::in_eps<S>(err) << " tol " << test::in_eps<S>(tol));
      CHECK(err <= tol);
      worst = std::max(worst, err / (eps * (c.L + 1 - j) * to_double(Hi(A.v[j].norm()))));
      // Kernel level: the layers ignore their input, so d h_l is u_h[l] itself.
      CHECK(r.g.h[j] == c.at<S>(c.u_h[j]));
    }
  }
  WARN(scalar_name<TestType>() << ": worst PreLN backward error / (eps n || sum |terms| ||) = " << worst);
}

TEST_CASE("backward with only u_out: every gradient is u_out, exactly", "[preln]") {
  // No u_h, no u_v: de = dv_j = u_out (each sum has the one term u_out).
  using S = mp77;
  const auto c = make_case(6, 9, 7, false);
  const Vec<S> e = c.at<S>(c.e), u = c.at<S>(c.u_out);
  const auto v = c.at<S>(c.v);
  const auto tr = forward(PreLN<S>{}, e, c.L, GivenOutputs<S>{&v});
  Up<S> up;
  up.out = u;
  const auto g = backward(PreLN<S>{}, e, tr, GivenOutputsVjp{}, up);
  CHECK(g.e == u);
  for (int j = 0; j < c.L; ++j) CHECK(g.v[j] == u);
  const auto o = oracle::preln_sum_vjp<S>(c.L, u, {});
  CHECK(o.e == u);
  for (int j = 0; j < c.L; ++j) CHECK(o.v[j] == u);
}

TEMPLATE_TEST_CASE("small-integer inputs: forward and backward == the oracle bit for bit", "[preln]", double, mp77) {
  // Every value is an integer of magnitude <= 1024 and every sum has at most
  // L + 2 <= 66 terms, so every partial sum, in any order, is an integer of
  // magnitude < 66 * 1024 < 2^17 <= 2^53: representable in double (and in
  // every wider type), so every addition is exact. Reference (running sum,
  // reverse walk) and oracle (direct sums in increasing l) then equal the
  // exact sums, computed here at 667 bits, although they add in other orders.
  using S = TestType;
  for (const auto& c : cases(true)) {
    INFO(c.describe());
    const auto r = run<S>(c);
    const auto o = oracle::preln_sums<Hi>(r.e.template cast<Hi>(), to_hi(r.v));
    for (int l = 0; l < c.L; ++l) CHECK(r.tr.h[l].template cast<Hi>() == o.h[l]);
    CHECK(r.tr.out.template cast<Hi>() == o.out);
    const auto og = oracle::preln_sum_vjp<Hi>(c.L, c.at<S>(c.u_out).template cast<Hi>(), to_hi(c.at<S>(c.u_h)),
                                              to_hi(c.at<S>(c.u_v)));
    CHECK(r.g.e.template cast<Hi>() == og.e);
    for (int j = 0; j < c.L; ++j) CHECK(r.g.v[j].template cast<Hi>() == og.v[j]);
    // And the oracle at S itself, in its own order, is exact too.
    const auto os = oracle::preln_sum_vjp<S>(c.L, c.at<S>(c.u_out), c.at<S>(c.u_h), c.at<S>(c.u_v));
    CHECK(os.e == r.g.e);
    for (int j = 0; j < c.L; ++j) CHECK(os.v[j] == r.g.v[j]);
  }
}

TEMPLATE_TEST_CASE("model level: forward through TanhMlpStack == the hand loop h_{l+1} = h_l + F_l(h_l)", "[preln][model]",
                   double, mp77) {
  // The hand loop evaluates F_l on the same h_l and adds once per layer, in
  // the reference's order: the same operations, so the same bits.
  using S = TestType;
  const int d = 9, L = 20;
  const auto stack = TanhMlpStack<S>::random(d, 13, L, 2029);
  const auto c = make_case(d, L, 8, false);
  const Vec<S> e = c.at<S>(c.e);
  const auto t = forward(PreLN<S>{}, e, L, stack);
  Vec<S> h = e;
  for (int l = 0; l < L; ++l) {
    INFO("layer " << l);
    CHECK(t.h[l] == h);
    const Vec<S> v = stack.layers[l](h);
    CHECK(t.v[l] == v);
    h = h + v;
  }
  CHECK(t.out == h);
}

TEST_CASE("model level: the backward's dv_j and de are the closed form of its own total d h_l", "[preln][model]") {
  // At model level d h_l = F_l^T(dv_l) + u_h[l] (the layer VJP included), and
  // the closed form holds with those totals: dv_j = u_out + sum_{l>j} dh_l,
  // de = u_out + sum_l dh_l (sums of up to L + 1 terms: the header's bound).
  using S = mp77;
  const int d = 7, L = 16;
  const auto stack = TanhMlpStack<S>::random(d, 11, L, 2030);
  const auto c = make_case(d, L, 9, false);
  const Vec<S> e = c.at<S>(c.e);
  const auto t = forward(PreLN<S>{}, e, L, stack);
  Up<S> up;
  up.out = c.at<S>(c.u_out);
  up.h = c.at<S>(c.u_h);
  TanhMlpStackVjp<S> vjp(stack);
  const auto g = backward(PreLN<S>{}, e, t, vjp, up);
  for (int l = 0; l < L; ++l) {
    // d h_l from the layer VJP at (h_l, dv_l), the same operations as the walk.
    TanhMlpLayer<S> scratch{Mat<S>::Zero(11, d), Mat<S>::Zero(d, 11)};
    CHECK(g.h[l] == Vec<S>(tanh_mlp_layer_vjp<S>(stack.layers[l], t.h[l], g.v[l], scratch) + up.h[l]));
  }
  const auto dh = to_hi(g.h);
  const Vec<Hi> u_out = up.out.template cast<Hi>();
  const auto o = oracle::preln_sum_vjp<Hi>(L, u_out, dh);
  const auto A = oracle::preln_sum_vjp<Hi>(L, Vec<Hi>(u_out.cwiseAbs()), abs_of(dh));
  CHECK(dist(g.e, o.e) <= sum_tol<S>(L + 1, A.e));
  for (int j = 0; j < L; ++j) CHECK(dist(g.v[j], o.v[j]) <= sum_tol<S>(L - j, A.v[j]));
}

TEST_CASE("the oracle refuses mismatched shapes, naming the argument", "[preln][errors]") {
  using S = double;
  const Vec<S> e = Vec<S>::Zero(3);
  CHECK_THROWS_WITH(oracle::preln_sums<S>(e, {Vec<S>::Zero(3), Vec<S>::Zero(2)}), Catch::Contains("v[1] has width 2"));
  CHECK_THROWS_WITH(oracle::preln_sum_vjp<S>(2, e, {Vec<S>::Zero(3)}), Catch::Contains("u_h has 1 entries, expected 2"));
  CHECK_THROWS_WITH(oracle::preln_sum_vjp<S>(-1, e, {}), Catch::Contains("L must be >= 0"));
}
