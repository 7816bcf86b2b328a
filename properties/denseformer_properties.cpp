// Properties of DenseFormer (docs/denseformer.md): the reference
// (denseformer.hpp through the framework's forward, denseformer_backward.hpp
// through backward) at 257 bits (mp77), every dilation k and period p up to 4.
// The DWA against the matrix form Y = X W^T, linearity in the whole weight
// matrix and k x p == 1 x 1 are in properties/hc_properties.cpp (DenseFormer
// section); the backward against the transpose of the matrix form in
// properties/grad_properties.cpp. Here: the reduction to PreLN, the weight
// pattern (what is refused, what each output reads), linearity in one row,
// and the weight gradient against central differences.
//
// Exactness. "Integer" cases have block outputs and upstreams that are
// integers in [-8, 8] and weights that are multiples of 1/8 in [-4, 4]. A
// DWA Y_i then sums at most L + 1 <= 17 products weight * integer, multiples
// of 1/8 of magnitude <= 32 (<= 160 for the combined rows of the linearity
// property, weights <= 4 + 4 * 4 = 20): every partial sum, in any order, is a
// multiple of 1/8 below 17 * 160 < 2^12, 15 significant bits, exact in double
// already. Where that holds the relations are checked with "==".
// Real-valued cases (uniform doubles) are used where the relation is exact
// for any values (the same operations on the same numbers).
#include "harness.hpp"

#include "dmref/denseformer_backward.hpp"
#include "dmref/model.hpp"
#include "dmref/preln.hpp"
#include "dmref/random.hpp"
#include "dmref/scalar.hpp"

#include <sstream>
#include <string>
#include <utility>
#include <vector>

using namespace dmref;
using S = mp77;

namespace {

struct Shape {
  int d = 4, layers = 8, dilation = 1, period = 1;
  std::uint64_t seed = 1;
};
std::string describe(const Shape& s) {
  std::ostringstream o;
  o << "d=" << s.d << " L=" << s.layers << " dilation=" << s.dilation << " period=" << s.period << " seed=" << s.seed;
  return o.str();
}
void showValue(const Shape& s, std::ostream& os) { os << describe(s); }

rc::Gen<Shape> gen_shape(int max_d, int max_layers) {
  return rc::gen::build<Shape>(rc::gen::set(&Shape::d, rc::gen::inRange(1, max_d + 1)),
                               rc::gen::set(&Shape::layers, rc::gen::inRange(1, max_layers + 1)),
                               rc::gen::set(&Shape::dilation, rc::gen::inRange(1, 5)),
                               rc::gen::set(&Shape::period, rc::gen::inRange(1, 5)),
                               rc::gen::set(&Shape::seed, rc::gen::arbitrary<std::uint64_t>()));
}

/// One stream of values from the shape's seed.
struct Draw {
  SplitMix64 r;
  /// An integer in [lo, hi].
  int integer(int lo, int hi) { return lo + static_cast<int>((r.uniform() + 1) / 2 * (hi - lo + 1)); }
  /// A weight: a multiple of 1/8 in [-4, 4].
  S weight() { return S(integer(-32, 32)) / S(8); }
  /// A vector of integers in [-8, 8], or (real) of uniform [-1, 1) values.
  Vec<S> vec(int d, bool real) {
    Vec<S> x(d);
    for (int i = 0; i < d; ++i) x(i) = real ? S(r.uniform()) : S(integer(-8, 8));
    return x;
  }
  std::vector<Vec<S>> vecs(int n, int d, bool real) {
    std::vector<Vec<S>> v;
    for (int l = 0; l < n; ++l) v.push_back(vec(d, real));
    return v;
  }
};

/// Whether a_{i,j} is a free weight: a DWA row (i >= 1, p | i), inside the dilation pattern.
bool free_weight(const DenseFormerConfig<S>& c, int i, int j) { return i > 0 && i % c.period == 0 && c.in_pattern(i, j); }

/// Identity weights with every free weight drawn (DenseFormer accepts exactly these matrices).
DenseFormerConfig<S> random_config(const Shape& s, Draw& g) {
  auto c = denseformer_paper_init<S>(s.d, s.layers, s.dilation, s.period);
  for (int i = 0; i <= s.layers; ++i)
    for (int j = 0; j <= s.layers; ++j)
      if (free_weight(c, i, j)) c.a(i, j) = g.weight();
  return c;
}

using Tr = Trace<S, DenseFormer<S>::State>;

Tr kernel(const DenseFormerConfig<S>& c, const Vec<S>& e, const std::vector<Vec<S>>& v) {
  return denseformer_kernel<S>(c, e, v);
}

/// Y_i of a kernel trace: the read of layer i, or the output for i = L.
const Vec<S>& Y(const Tr& t, int i) { return i < static_cast<int>(t.h.size()) ? t.h[i] : t.out; }

/// X_j: the embedding or block output j.
const Vec<S>& X(const Vec<S>& e, const std::vector<Vec<S>>& v, int j) { return j == 0 ? e : v[j - 1]; }

}  // namespace

TEST_CASE("DenseFormer at identity weights with residual blocks == PreLN", "[property][cross][denseformer]") {
  prop::check("DenseFormer(identity DWA, blocks y + v_l) == PreLN, bit for bit", 60, [] {
    const Shape s = *gen_shape(16, 40);
    Draw g{SplitMix64(s.seed)};
    const Vec<S> e = g.vec(s.d, true);
    const auto v = g.vecs(s.layers, s.d, true);
    const auto pre = forward(PreLN<S>{}, e, s.layers, GivenOutputs<S>{&v});
    // DenseFormer's layer is a whole block: X_{l+1} = Y_l + F_l(Y_l); with
    // F_l's output given as v_l this is the PreLN update on the block input.
    // The identity weights are valid (and equal) at every dilation and period.
    const DenseFormer<S> df(denseformer_paper_init<S>(s.d, s.layers, s.dilation, s.period));
    const auto t = forward(df, e, s.layers, [&](int l, const Vec<S>& y) { return Vec<S>(y + v[l]); });
    for (int l = 0; l < s.layers; ++l)
      DMREF_PROP_TRUE("h_l(DenseFormer, identity) == h_l(PreLN)", t.h[l] == pre.h[l], describe(s));
    DMREF_PROP_TRUE("final(DenseFormer) == final(PreLN)", t.out == pre.out, describe(s));
  });
}

TEST_CASE("a nonzero weight outside the k x p pattern is refused with a[i,j] named, never ignored",
          "[property][denseformer]") {
  prop::check("DenseFormer(a + w E_ij), (i, j) off the pattern or structural: ParameterError naming a[i,j]", 100, [] {
    const Shape s = *gen_shape(8, 16);
    Draw g{SplitMix64(s.seed)};
    const auto c = random_config(s, g);
    // Every entry DenseFormer fixes: above the diagonal, off the dilation
    // pattern in a DWA row, off the diagonal or on it in a row without a
    // DWA (p does not divide i), and a_{0,0} = 1 (Y_0 = X_0).
    std::vector<std::pair<int, int>> fixed;
    for (int i = 0; i <= s.layers; ++i)
      for (int j = 0; j <= s.layers; ++j)
        if (!free_weight(c, i, j)) fixed.emplace_back(i, j);
    const auto [i, j] = fixed[g.integer(0, static_cast<int>(fixed.size()) - 1)];
    int w = g.integer(-32, 31);
    w += w >= 0;  // w != 0: the fixed value (1 on the diagonal, 0 elsewhere) changes
    auto bad = c;
    bad.a(i, j) += S(w) / S(8);
    std::ostringstream in;
    in << describe(s) << " a[" << i << "," << j << "] += " << w << "/8";
    DenseFormer<S> ok(c);  // the drawn weights themselves are accepted
    std::string field = "(none)";
    try {
      DenseFormer<S> m(bad);
    } catch (const ParameterError& err) {
      field = err.scheme + ": " + err.field;
    }
    DMREF_PROP_TRUE("the refusal names a[i,j]",
                    field == "denseformer: a[" + std::to_string(i) + "," + std::to_string(j) + "]",
                    in.str() + " refused as " + field);
  });
}

TEST_CASE("Y_i reads row i of a and X_0..X_i only: other rows have no effect (kernel and model level)",
          "[property][denseformer]") {
  prop::check("Y_i(a) == Y_i(a') when a, a' share row i; h_0..h_i unchanged by rows > i at model level", 60, [] {
    const Shape s = *gen_shape(8, 16);
    Draw g{SplitMix64(s.seed)};
    const int L = s.layers;
    const auto c = random_config(s, g);
    const int i = g.integer(0, L);
    auto other = random_config(s, g);  // every row redrawn, then row i restored
    other.a.row(i) = c.a.row(i);
    const Vec<S> e = g.vec(s.d, true);
    const auto v = g.vecs(L, s.d, true);
    std::ostringstream in;
    in << describe(s) << " row i=" << i;
    DMREF_PROP_TRUE("kernel: Y_i(a) == Y_i(a' with a's row i)", Y(kernel(c, e, v), i) == Y(kernel(other, e, v), i),
                    in.str());
    // Model level (residual blocks y + G_l(y)): X_{l+1} depends on rows <= l,
    // so rows after i leave h_0..h_i and the blocks before them unchanged.
    auto later = c;
    for (int r = i + 1; r <= L; ++r) later.a.row(r) = other.a.row(r);
    const auto G = TanhMlpStack<S>::random(s.d, 6, L, s.seed + 1);
    auto block = [&](int l, const Vec<S>& y) { return Vec<S>(y + G(l, y)); };
    const auto t = forward(DenseFormer<S>(c), e, L, block), t2 = forward(DenseFormer<S>(later), e, L, block);
    for (int l = 0; l <= i && l < L; ++l) DMREF_PROP_TRUE("model: h_l unchanged by rows > i, l <= i", t.h[l] == t2.h[l], in.str());
    if (i == L) DMREF_PROP_TRUE("model: out reads row L", t.out == t2.out, in.str());
  });
}

TEST_CASE("each DWA output is linear in its row of a: Y_i(r + c s) == Y_i(r) + c Y_i(s), Y_i(e_j) == X_j (exact)",
          "[property][denseformer]") {
  prop::check("Y_i(row r + c row s) == Y_i(r) + c Y_i(s); Y_i(row e_j) == X_j, integer inputs", 100, [] {
    Shape s = *gen_shape(8, 16);
    s.period = 1 + (s.period - 1) % s.layers;  // at least one DWA row i in 1..L
    Draw g{SplitMix64(s.seed)};
    const int L = s.layers;
    const auto base = random_config(s, g);
    const int i = s.period * g.integer(1, L / s.period);  // a DWA row
    const Vec<S> e = g.vec(s.d, false);
    const auto v = g.vecs(L, s.d, false);
    const int cc = g.integer(-4, 4);
    auto with_row = [&](auto&& entry) {
      auto c = base;
      for (int j = 0; j <= L; ++j) c.a(i, j) = free_weight(base, i, j) ? S(entry(j)) : S(0);
      return c;
    };
    std::vector<S> r(L + 1), q(L + 1);
    for (int j = 0; j <= L; ++j) {
      r[j] = g.weight();
      q[j] = g.weight();
    }
    const auto Yr = Y(kernel(with_row([&](int j) { return r[j]; }), e, v), i);
    const auto Yq = Y(kernel(with_row([&](int j) { return q[j]; }), e, v), i);
    const auto Yc = Y(kernel(with_row([&](int j) { return r[j] + S(cc) * q[j]; }), e, v), i);
    std::ostringstream in;
    in << describe(s) << " row i=" << i << " c=" << cc;
    DMREF_PROP_TRUE("Y_i(r + c s) == Y_i(r) + c Y_i(s)", Yc == Vec<S>(Yr + S(cc) * Yq), in.str());
    for (int j = 0; j <= i; ++j)
      if (free_weight(base, i, j))
        DMREF_PROP_TRUE("Y_i(e_j) == X_j", Y(kernel(with_row([&](int k) { return k == j ? 1 : 0; }), e, v), i) == X(e, v, j),
                        in.str() + " j=" + std::to_string(j));
  });
}

TEST_CASE("backward of a: da_ij == central difference of the loss (exact: linear in a), 0 off the free weights",
          "[property][denseformer]") {
  // Kernel level, J(a) = sum_{l<L} <u_h[l], Y_l> + <u_out, Y_L> is affine in
  // each a_ij (the block outputs are given), so (J(a + E_ij) - J(a - E_ij)) / 2
  // is its derivative with no truncation error. On integer inputs (weights
  // <= 5 after the step) every Y_l is a multiple of 1/8 below 17 * 5 * 8 < 2^10
  // and J a sum of at most 8 * 17 products of such by integers <= 8: every
  // partial sum is a multiple of 1/8 below 2^20, exact, and so are the
  // differences and the backward's dY_i . X_j (integers below 2^11). Entries
  // DenseFormer fixes have no gradient: reported 0.
  prop::check("da_ij (backward) == (J(a + E_ij) - J(a - E_ij)) / 2 (forward), exact", 40, [] {
    const Shape s = *gen_shape(8, 16);
    Draw g{SplitMix64(s.seed)};
    const int L = s.layers;
    const auto c = random_config(s, g);
    const Vec<S> e = g.vec(s.d, false);
    const auto v = g.vecs(L, s.d, false);
    Upstream<S, Backward<DenseFormer<S>>::Adjoint> up;
    up.h = g.vecs(L, s.d, false);
    up.out = g.vec(s.d, false);
    auto J = [&](const DenseFormerConfig<S>& cfg) {
      const auto t = kernel(cfg, e, v);
      S x = up.out.dot(t.out);
      for (int l = 0; l < L; ++l) x += up.h[l].dot(t.h[l]);
      return x;
    };
    const DenseFormer<S> m(c);
    const auto da = backward(m, e, forward(m, e, L, GivenOutputs<S>{&v}), GivenOutputsVjp{}, up).param;
    const std::string in = describe(s);
    DMREF_PROP_TRUE("da is (L+1) x (L+1)", da.rows() == L + 1 && da.cols() == L + 1, in);
    for (int i = 0; i <= L; ++i)
      for (int j = 0; j <= L; ++j) {
        const std::string at = in + " a[" + std::to_string(i) + "," + std::to_string(j) + "] da=" + std::to_string(to_double(da(i, j)));
        if (!free_weight(c, i, j)) {
          DMREF_PROP_TRUE("da_ij == 0 for a fixed entry", da(i, j) == 0, at);
          continue;
        }
        auto plus = c, minus = c;
        plus.a(i, j) += 1;
        minus.a(i, j) -= 1;
        const S cd = (J(plus) - J(minus)) / S(2);
        DMREF_PROP_TRUE("da_ij == central difference", da(i, j) == cd, at + " cd=" + std::to_string(to_double(cd)));
      }
  });
}
