// dmref/denseformer.hpp: DenseFormer's depth-weighted average on the framework
// (docs/denseformer.md; arXiv 2402.02622, Pagliardini et al., "DenseFormer:
// Enhancing Information Flow in Transformers via Depth Weighted Averaging";
// epfml/DenseFormer).
//
// Blocks B_1..B_L, representations X_0 = e, X_i = B_i(Y_{i-1}), and after
// every block a depth-weighted average (DWA) of everything so far:
//   Y_0 = X_0,   Y_i = sum_{j <= i} a_{i,j} X_j   (i = 1..L),   output Y_L.
// B_i is a *whole* block, residual included (x + F(LN(x)) for each sublayer),
// so in the framework one layer is one block: the layer function F_l is
// B_{l+1}, and the streams are the list X_0..X_l.
//   init:      X = [e]
//   read(l):   Y_l (the paper's index: layer l is block l+1 and reads Y_l;
//              Y_0 = X_0 = e)
//   write(l):  append X_{l+1} = v_l
//   final:     Y_L, L = the number of blocks written
// Weights: an (L+1) x (L+1) lower-triangular matrix `a` in the paper's
// indexing, a(i, j) = a_{i,j}; row 0 is (1, 0, ..) because Y_0 = X_0 (there is
// no DWA before the first block). Paper init: a = I (a_{i,i} = 1, others 0),
// which makes Y_i = X_i: the plain chain X_i = B_i(X_{i-1}).
// Dilation k and period p (the paper's "k x p-DenseFormer", Sec. 3.2; 1 x 1
// by default): DWA_i averages only the X_j with j = i (mod k), and exists only
// when p divides i (otherwise Y_i = X_i). Weights outside that pattern must be
// zero, so the same matrix describes the model at any k and p.
//
// Sums are explicit loops over j in increasing order; no branch depends on
// data values, so all of it runs on intervals.
#pragma once

#include "dmref/diagnostics.hpp"
#include "dmref/framework.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace dmref {

template <class S>
struct DenseFormerConfig {
  int d = 0;         // model width
  Mat<S> a;          // (L+1) x (L+1) DWA weights, lower triangular, row 0 = e_0
  int dilation = 1;  // k: DWA_i averages X_j with j = i (mod k)
  int period = 1;    // p: DWA_i exists only when p | i (else Y_i = X_i)

  int blocks() const { return static_cast<int>(a.rows()) - 1; }
  /// Whether a_{i,j} may be nonzero (j <= i inside the dilation/period pattern).
  bool in_pattern(int i, int j) const {
    if (j > i) return false;
    if (i % period != 0) return j == i;
    return (i - j) % dilation == 0;
  }
};

/// The paper's initialization for L blocks: a = I (valid for every k and p).
template <class S>
DenseFormerConfig<S> denseformer_paper_init(int d, int L, int dilation = 1, int period = 1) {
  if (L < 0) throw std::invalid_argument("denseformer: init: L must be >= 0, got " + std::to_string(L));
  DenseFormerConfig<S> c;
  c.d = d;
  c.a = Mat<S>::Identity(L + 1, L + 1);
  c.dilation = dilation;
  c.period = period;
  return c;
}

template <class S>
class DenseFormer {
 public:
  using Scalar = S;
  struct State {
    std::vector<Vec<S>> X;  // X_0 = e, X_1, .., X_i: the block outputs so far
    template <class F>
    void stored(F&&) {}  // framework.hpp: X_0 = e is an input and every X_{l+1} = v_l a layer output, each
                         // stored where it was made (computes_outputs); DenseFormer computes no stream of its own
  };

  explicit DenseFormer(DenseFormerConfig<S> cfg) : cfg_(std::move(cfg)) { validate(); }

  const DenseFormerConfig<S>& config() const { return cfg_; }

  State init(const Vec<S>& e) const {
    if (e.size() != cfg_.d)
      fail("embedding", "width " + std::to_string(e.size()) + " != d = " + std::to_string(cfg_.d));
    return State{{e}};
  }

  /// Y_i from X_0..X_i (X must hold exactly i+1 entries).
  Vec<S> dwa(const std::vector<Vec<S>>& X, int i) const {
    if (i < 0 || i > cfg_.blocks())
      fail("a", "no weights for DWA " + std::to_string(i) + " (have blocks 0.." + std::to_string(cfg_.blocks()) + ")");
    if (static_cast<int>(X.size()) != i + 1)
      fail("state", "DWA " + std::to_string(i) + " needs X_0..X_" + std::to_string(i) + ", the state holds " +
                        std::to_string(X.size()) + " representations");
    if (i == 0 || i % cfg_.period != 0) return X[i];
    const int k = cfg_.dilation;
    int j = i % k;
    Vec<S> y = cfg_.a(i, j) * X[j];
    for (j += k; j <= i; j += k) y += cfg_.a(i, j) * X[j];
    return y;
  }

  /// Layer l (block l+1) reads Y_l.
  Vec<S> read(const State& s, int l) const { return dwa(s.X, l); }

  /// Appends X_{l+1} = v_l.
  void write(State& s, int l, const Vec<S>& v) const {
    if (static_cast<int>(s.X.size()) != l + 1)
      fail("state", "write of layer " + std::to_string(l) + " needs X_0..X_" + std::to_string(l) +
                        ", the state holds " + std::to_string(s.X.size()) + " representations");
    if (l + 1 > cfg_.blocks())
      fail("a", "no weights for block " + std::to_string(l + 1) + " (have " + std::to_string(cfg_.blocks()) + ")");
    if (v.size() != cfg_.d)
      fail("v", "block output has width " + std::to_string(v.size()) + " != d = " + std::to_string(cfg_.d));
    s.X.push_back(v);
  }

  /// Y_L after the last block written.
  Vec<S> final(const State& s) const { return dwa(s.X, static_cast<int>(s.X.size()) - 1); }

 private:
  [[noreturn]] static void fail(const std::string& field, const std::string& what) {
    throw ParameterError("denseformer", field, what);
  }

  void validate() const {
    if (cfg_.d <= 0) fail("d", "must be > 0, got " + std::to_string(cfg_.d));
    if (cfg_.dilation <= 0) fail("dilation", "must be > 0, got " + std::to_string(cfg_.dilation));
    if (cfg_.period <= 0) fail("period", "must be > 0, got " + std::to_string(cfg_.period));
    const auto& a = cfg_.a;
    if (a.rows() < 1 || a.rows() != a.cols())
      fail("a", "must be square (L+1) x (L+1) with L >= 0, got " + std::to_string(a.rows()) + "x" +
                    std::to_string(a.cols()));
    if (to_double(a(0, 0)) != 1) fail("a[0,0]", "must be 1 (Y_0 = X_0), got " + show(to_double(a(0, 0))));
    for (int i = 0; i < a.rows(); ++i)
      for (int j = 0; j < a.cols(); ++j) {
        const double x = to_double(a(i, j));
        const std::string at = "a[" + std::to_string(i) + "," + std::to_string(j) + "]";
        if (!std::isfinite(x)) fail(at, "is not finite");
        if (x != 0 && !cfg_.in_pattern(i, j))
          fail(at, show(x) + " must be 0: " +
                       (j > i ? std::string("the matrix is lower triangular")
                              : "outside the dilation " + std::to_string(cfg_.dilation) + " / period " +
                                    std::to_string(cfg_.period) + " pattern"));
        if (i % cfg_.period != 0 && i == j && x != 1)
          fail(at, show(x) + " must be 1: block " + std::to_string(i) + " has no DWA (period " +
                       std::to_string(cfg_.period) + "), Y_i = X_i");
      }
  }

  DenseFormerConfig<S> cfg_;
};

/// Kernel-level entry point: block outputs X_1..X_L given as v[0..L-1].
template <class S>
Trace<S, typename DenseFormer<S>::State> denseformer_kernel(const DenseFormerConfig<S>& cfg, const Vec<S>& e,
                                                            const std::vector<Vec<S>>& v) {
  DenseFormer<S> m(cfg);
  return forward(m, e, static_cast<int>(v.size()), GivenOutputs<S>{&v});
}

}  // namespace dmref
