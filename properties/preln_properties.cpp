// Properties of PreLN (docs/preln.md): the reference (preln.hpp through the
// framework's forward, preln_backward.hpp through backward) at 257 bits
// (mp77) on random shapes, d up to 16 and depth up to 40 (0 included).
// PreLN is linear in (e, v), so most relations are exact on integer-valued
// inputs: values are integers in [-16, 16], scalars a, b in [-4, 4], so a
// combined input a x + b y is an integer of magnitude <= 128 and every sum
// (forward: at most L + 1 = 41 terms; backward: at most L + 1 upstreams of
// magnitude 16) has every partial sum, in any order, an integer of magnitude
// <= 41 * 128 < 2^13: exact in double already, so "==" is the honest check. The backward against the closed form also runs on real-valued
// upstreams with the recursive-sum bound (derived in tests/test_preln.cpp:
// K::sum n (eps(S) + eps(Hi)) || sum |terms| ||).
#include "check.hpp"
#include "harness.hpp"

#include "dmref/oracles/preln_sum.hpp"
#include "dmref/preln_backward.hpp"
#include "dmref/random.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

using namespace dmref;
using dmref::test::K;
using S = mp77;
using Hi = mp200;

namespace {

struct Shape {
  int d = 4, layers = 8;
  std::uint64_t seed = 1;
};
std::string describe(const Shape& s) {
  std::ostringstream o;
  o << "d=" << s.d << " L=" << s.layers << " seed=" << s.seed;
  return o.str();
}
void showValue(const Shape& s, std::ostream& os) { os << describe(s); }

rc::Gen<Shape> gen_shape() {
  return rc::gen::build<Shape>(rc::gen::set(&Shape::d, rc::gen::inRange(1, 17)),
                               rc::gen::set(&Shape::layers, rc::gen::inRange(0, 41)),
                               rc::gen::set(&Shape::seed, rc::gen::arbitrary<std::uint64_t>()));
}

/// Draws vectors of width d from one seeded stream: integers in [-16, 16],
/// or (real) uniform [-1, 1) divided by 3 at S, so that sums round.
struct Draw {
  int d;
  SplitMix64 r;
  Vec<S> integer() {
    Vec<S> x(d);
    for (int i = 0; i < d; ++i) x(i) = S(std::floor(16.5 * (r.uniform() + 1)) - 16);
    return x;
  }
  Vec<S> real() {
    Vec<S> x(d);
    for (int i = 0; i < d; ++i) x(i) = S(r.uniform()) / S(3);
    return x;
  }
  std::vector<Vec<S>> integers(int n) {
    std::vector<Vec<S>> v;
    for (int l = 0; l < n; ++l) v.push_back(integer());
    return v;
  }
  int scalar() { return static_cast<int>(std::floor(4.5 * (r.uniform() + 1))) - 4; }
};

using Tr = Trace<S, PreLN<S>::State>;
using Up = Upstream<S, Backward<PreLN<S>>::Adjoint>;

Tr run(const Vec<S>& e, const std::vector<Vec<S>>& v) {
  return forward(PreLN<S>{}, e, static_cast<int>(v.size()), GivenOutputs<S>{&v});
}

double dist(const Vec<S>& a, const Vec<Hi>& b) { return to_double(Hi((a.cast<Hi>() - b).norm())); }

std::vector<Vec<Hi>> to_hi(const std::vector<Vec<S>>& x, bool abs = false) {
  std::vector<Vec<Hi>> r;
  for (const auto& y : x) r.push_back(abs ? Vec<Hi>(y.cast<Hi>().cwiseAbs()) : Vec<Hi>(y.cast<Hi>()));
  return r;
}

double sum_tol(int n, const Vec<Hi>& A) {
  return K::sum * n * (to_double(epsilon<S>()) + to_double(epsilon<Hi>())) * to_double(Hi(A.norm()));
}

}  // namespace

TEST_CASE("PreLN is linear in (e, v): F(a x + b y) == a F(x) + b F(y), exact on integer inputs", "[property][preln]") {
  prop::check("PreLN(a (e, v) + b (e', v')) == a PreLN(e, v) + b PreLN(e', v') (every h_l and out)", 100, [] {
    const Shape s = *gen_shape();
    Draw g{s.d, SplitMix64(s.seed)};
    const int L = s.layers, a = g.scalar(), b = g.scalar();
    const Vec<S> e = g.integer(), e2 = g.integer();
    const auto v = g.integers(L), v2 = g.integers(L);
    std::vector<Vec<S>> vc;
    for (int l = 0; l < L; ++l) vc.push_back(S(a) * v[l] + S(b) * v2[l]);
    const auto t = run(e, v), t2 = run(e2, v2), tc = run(Vec<S>(S(a) * e + S(b) * e2), vc);
    std::ostringstream in;
    in << describe(s) << " a=" << a << " b=" << b;
    for (int l = 0; l < L; ++l)
      DMREF_PROP_TRUE("h_l(a x + b y) == a h_l(x) + b h_l(y)", tc.h[l] == Vec<S>(S(a) * t.h[l] + S(b) * t2.h[l]), in.str());
    DMREF_PROP_TRUE("out(a x + b y) == a out(x) + b out(y)", tc.out == Vec<S>(S(a) * t.out + S(b) * t2.out), in.str());
  });
}

TEST_CASE("out is invariant under permutations of v, h_l under permutations of v_0..v_{l-1}, exact on integer inputs",
          "[property][preln]") {
  prop::check("PreLN(e, P v) == PreLN(e, v) for out; for h_l when P only moves v_0..v_{l-1}", 100, [] {
    const Shape s = *gen_shape();
    Draw g{s.d, SplitMix64(s.seed)};
    const int L = s.layers;
    const Vec<S> e = g.integer();
    const auto v = g.integers(L);
    // A random permutation of the first m outputs (m in 0..L), the rest kept.
    std::mt19937_64 rng(s.seed ^ 0x2545f4914f6cdd1dull);
    const int m = L == 0 ? 0 : static_cast<int>(rng() % (L + 1));
    std::vector<int> pi(L);
    std::iota(pi.begin(), pi.end(), 0);
    std::shuffle(pi.begin(), pi.begin() + m, rng);
    std::vector<Vec<S>> pv;
    for (int l = 0; l < L; ++l) pv.push_back(v[pi[l]]);
    const auto t = run(e, v), tp = run(e, pv);
    std::ostringstream in;
    in << describe(s) << " permuted prefix m=" << m;
    DMREF_PROP_TRUE("out(e, P v) == out(e, v)", tp.out == t.out, in.str());
    // h_l sums v_0..v_{l-1}: a permutation inside the first m leaves h_l for l >= m.
    for (int l = m; l < L; ++l) DMREF_PROP_TRUE("h_l(e, P v) == h_l(e, v) for l >= m", tp.h[l] == t.h[l], in.str());
  });
}

TEST_CASE("backward == closed form de = u_out + sum_l u_h[l], dv_j = u_out + u_v[j] + sum_{l>j} u_h[l]",
          "[property][preln]") {
  prop::check("PreLN VJP == oracle::preln_sum_vjp (real upstreams: recursive-sum bound; integer: exact)", 100, [] {
    const Shape s = *gen_shape();
    Draw g{s.d, SplitMix64(s.seed)};
    const int L = s.layers;
    const bool integer = *rc::gen::arbitrary<bool>();
    auto draw = [&] { return integer ? g.integer() : g.real(); };
    const Vec<S> e = draw();
    std::vector<Vec<S>> v;
    Up up;
    up.out = draw();
    for (int l = 0; l < L; ++l) {
      v.push_back(draw());
      up.h.push_back(draw());
      up.v.push_back(draw());
    }
    const auto gr = backward(PreLN<S>{}, e, run(e, v), GivenOutputsVjp{}, up);
    const Vec<Hi> u_out = up.out.cast<Hi>();
    const auto o = oracle::preln_sum_vjp<Hi>(L, u_out, to_hi(up.h), to_hi(up.v));
    const auto A = oracle::preln_sum_vjp<Hi>(L, Vec<Hi>(u_out.cwiseAbs()), to_hi(up.h, true), to_hi(up.v, true));
    const std::string in = describe(s) + (integer ? " integer" : " real");
    // de: L + 1 terms; dv_j: u_out, u_v[j] and u_h[j+1..L-1], L + 1 - j terms.
    if (integer) {
      DMREF_PROP_TRUE("de == u_out + sum_l u_h[l] (exact)", gr.e.cast<Hi>() == o.e, in);
      for (int j = 0; j < L; ++j)
        DMREF_PROP_TRUE("dv_j == u_out + u_v[j] + sum_{l>j} u_h[l] (exact)", gr.v[j].cast<Hi>() == o.v[j], in);
    } else {
      DMREF_PROP_CLOSE("de == u_out + sum_l u_h[l]", dist(gr.e, o.e), sum_tol(L + 1, A.e), in);
      for (int j = 0; j < L; ++j)
        DMREF_PROP_CLOSE("dv_j == u_out + u_v[j] + sum_{l>j} u_h[l]", dist(gr.v[j], o.v[j]), sum_tol(L + 1 - j, A.v[j]),
                         in + " j=" + std::to_string(j));
    }
    for (int l = 0; l < L; ++l) DMREF_PROP_TRUE("kernel level: dh_l == u_h[l]", gr.h[l] == up.h[l], in);
  });
}

TEST_CASE("duality: <J^T u, (e, v)> == <u, J (e, v)> (PreLN is linear), exact on integer inputs", "[property][preln]") {
  prop::check("<de, e> + sum_j <dv_j, v_j> == <u_out, out> + sum_l <u_h[l], h_l> + sum_j <u_v[j], v_j>", 100, [] {
    const Shape s = *gen_shape();
    Draw g{s.d, SplitMix64(s.seed)};
    const int L = s.layers;
    const Vec<S> e = g.integer();
    const auto v = g.integers(L);
    Up up;
    up.out = g.integer();
    up.h = g.integers(L);
    up.v = g.integers(L);
    const auto t = run(e, v);
    const auto gr = backward(PreLN<S>{}, e, t, GivenOutputsVjp{}, up);
    // Gradients and sums are integers of magnitude <= 16 * 41 = 656, the other
    // factors <= 16: each side is a sum of at most 2 * 41 * 16 products of
    // magnitude <= 656 * 16, an integer below 2^24 at every partial sum: exact.
    S lhs = gr.e.dot(e), rhs = up.out.dot(t.out);
    for (int l = 0; l < L; ++l) {
      lhs += gr.v[l].dot(v[l]);
      rhs += up.h[l].dot(t.h[l]) + up.v[l].dot(v[l]);
    }
    std::ostringstream in;
    in << describe(s) << " lhs=" << lhs << " rhs=" << rhs;
    DMREF_PROP_TRUE("<J^T u, x> == <u, J x>", lhs == rhs, in.str());
  });
}
