// dmref/attnres.hpp: Attention Residuals on the framework (docs/attnres.md;
// arXiv 2603.15031, MoonshotAI/Attention-Residuals).
//
// The residual stream is replaced by a softmax over depth. One readout mixes a
// list of sources v_0..v_{n-1} (width d) with a learned pseudo-query w and an
// RMSNorm gain g applied to the keys only:
//   k_i = RMSNorm_g(v_i) = g * v_i / sqrt(mean(v_i^2) + eps)
//   z_i = w^T k_i                          (no temperature, no 1/sqrt(d))
//   a_i = exp(z_i) / sum_j exp(z_j)
//   h   = sum_i a_i v_i                    (values are the raw sources)
// `attnres_mix` is that readout as a free function of the source list: it is
// what a GPU kernel consumes, and what the scheme calls for every read.
//
// Full AttnRes: sources are [e, v_0, .., v_{l-1}] for (0-based) layer l, i.e.
//   the embedding and every raw layer output so far.
// Block AttnRes: sources are the finished block sums
//   [b_0 = e, b_1, .., b_{n-1}] and, from the second layer of a block on, the
//   partial sum b_n^{i-1} of the block's outputs so far. Two layouts: blocks
//   of a fixed size S, the last one partial when S does not divide L; or N
//   blocks of floor(L/N) layers, the remainder added to the last one
//   (block_size = 0, num_blocks = N). S = 1 (or N = L) is Full AttnRes,
//   bit for bit (the partial sum of one output is that output, copied).
// final(): one more readout, with the (L+1)-th pair (w_L, g_L), over every
//   source (Full), or every finished block and the last partial (Block).
//
// Softmax without max-subtraction. Subtracting max_i z_i needs a comparison,
// which on intervals throws, so the exponentials are taken of the logits as
// they are. This is safe because RMSNorm bounds the logits independently of
// the data: ||v / sqrt(mean(v^2) + eps)||_2 < sqrt(d) for eps > 0, hence
//   |z_i| < B = sqrt(d) ||w||_2 ||g||_inf.
// With n sources no exp overflows, the sum stays finite and every exp is a
// normal number as long as B <= min(ln(max), -ln(min_normal)) - ln(n), which
// for double is 708.39 - ln(n) (for L+1 <= 1000 sources: B <= 701.4). The
// constructor rejects parameters past this limit for the scalar type in use.
// MPFR's exponent range (2^30 binary orders by default) puts the same limit at
// about 7.4e8, so the multiprecision reference is unaffected in practice.
//
// No recursion here branches on data values, so all of it runs on intervals.
#pragma once

#include "dmref/diagnostics.hpp"
#include "dmref/framework.hpp"
#include "dmref/layers.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace dmref {

/// Full: every raw layer output is a source. Block: block sums are sources.
enum class AttnResVariant { full, block };

template <class S>
struct AttnResConfig {
  int d = 0;                            // model width
  int layers = 0;                       // L: read/write layers (final is readout L)
  AttnResVariant variant = AttnResVariant::full;
  int block_size = 0;                   // S >= 1 layers per block (block variant; exclusive with num_blocks)
  int num_blocks = 0;                   // N in 1..L blocks, the remainder in the last (block variant)
  S eps = S(1) / S(1000000);            // RMSNorm epsilon of the keys (paper: 1e-6), > 0
  std::vector<Vec<S>> w;                // L+1 pseudo-queries (w[L]: final); empty: all 0 (paper init)
  std::vector<Vec<S>> g;                // L+1 RMSNorm gains (g[L]: final); empty: all 1 (paper init)
};

/// Logits z_i = w^T RMSNorm_g(v_i) of one readout.
template <class S>
Vec<S> attnres_logits(const std::vector<Vec<S>>& sources, const Vec<S>& w, const Vec<S>& g, const S& eps) {
  Vec<S> z(static_cast<Eigen::Index>(sources.size()));
  for (std::size_t i = 0; i < sources.size(); ++i) z(static_cast<Eigen::Index>(i)) = w.dot(rms_norm<S>(sources[i], eps, g));
  return z;
}

/// Softmax weights a_i = exp(z_i) / sum_j exp(z_j), without max-subtraction
/// (branch-free; see the range note at the top of this file).
template <class S>
Vec<S> attnres_weights(const std::vector<Vec<S>>& sources, const Vec<S>& w, const Vec<S>& g, const S& eps) {
  using std::exp;
  const Vec<S> p = attnres_logits<S>(sources, w, g, eps).unaryExpr([](const S& t) { return S(exp(t)); });
  S total = S(0);
  for (Eigen::Index i = 0; i < p.size(); ++i) total += p(i);  // left to right
  return p.unaryExpr([&](const S& t) { return normalized(t, total); });
}

/// One readout h = sum_i a_i v_i over a source list (kernel level: the sources
/// are given, as a GPU kernel consumes them). Needs at least one source, all
/// of width w.size() == g.size().
template <class S>
Vec<S> attnres_mix(const std::vector<Vec<S>>& sources, const Vec<S>& w, const Vec<S>& g, const S& eps) {
  if (sources.empty()) throw std::invalid_argument("attnres: sources: a readout needs at least one source");
  const auto d = w.size();
  if (g.size() != d)
    throw std::invalid_argument("attnres: g: width " + std::to_string(g.size()) + " != width of w " + std::to_string(d));
  for (std::size_t i = 0; i < sources.size(); ++i)
    if (sources[i].size() != d)
      throw std::invalid_argument("attnres: sources: source " + std::to_string(i) + " has width " +
                                  std::to_string(sources[i].size()) + ", w has " + std::to_string(d));
  const Vec<S> a = attnres_weights<S>(sources, w, g, eps);
  Vec<S> h = Vec<S>::Zero(d);
  for (std::size_t i = 0; i < sources.size(); ++i) h += a(static_cast<Eigen::Index>(i)) * sources[i];
  return h;
}

/// The statistics an online-softmax (two-phase) kernel keeps for a readout
/// over some sources (docs/attnres_ops.md): the normalised numerator o, which
/// is the readout h = sum_i a_i b_i itself, and the log of the denominator
/// lse = log sum_i exp(z_i). Both are functions of the sources alone (a
/// running max m and l = sum exp(z_i - m) are not: only m + log l is), so
/// these are what the op-level fixtures state.
template <class S>
struct AttnResStats {
  Vec<S> o;
  S lse;
};

/// Phase 1: the statistics of attnres_mix(sources, w, g, eps). o is that
/// readout (the same operations); lse is the log of the same left-to-right
/// sum of exp(z_i) its weights divide by (no max: the range note above).
template <class S>
AttnResStats<S> attnres_stats(const std::vector<Vec<S>>& sources, const Vec<S>& w, const Vec<S>& g, const S& eps) {
  using std::exp;
  using std::log;
  AttnResStats<S> st{attnres_mix<S>(sources, w, g, eps), S(0)};  // validates the shapes
  const Vec<S> z = attnres_logits<S>(sources, w, g, eps);
  S total = S(0);
  for (Eigen::Index i = 0; i < z.size(); ++i) total += S(exp(z(i)));  // left to right
  st.lse = S(log(total));
  return st;
}

/// The weights of a merge: an old group of sources whose exponentials sum to
/// exp(lse), and one new source of logit z; each normalized by their sum
/// (layers.hpp: a softmax entry), which is kept for the merged lse.
template <class S>
struct AttnResMergeWeights {
  S a_old, a_new, total;
};
template <class S>
AttnResMergeWeights<S> attnres_merge_weights(const S& lse, const S& z) {
  using std::exp;
  const S p_old = S(exp(lse)), p_new = S(exp(z));
  const S total = p_old + p_new;
  return {normalized(p_old, total), normalized(p_new, total), total};
}

/// Phase 2: the statistics (o, lse) of a readout over some sources merged
/// with one more source b (the open block's partial sum): with
/// z = w . RMSNorm_g(b), the weights a_old = e^lse / (e^lse + e^z),
/// a_new = e^z / (e^lse + e^z), the merged numerator a_old o + a_new b (the
/// readout over all the sources) and lse' = log(e^lse + e^z). Equal, as real
/// numbers, to attnres_stats over the sources and b (tests/test_attnres_ops.cpp).
template <class S>
AttnResStats<S> attnres_merge(const AttnResStats<S>& st, const Vec<S>& b, const Vec<S>& w, const Vec<S>& g,
                              const S& eps) {
  using std::log;
  const auto d = w.size();
  if (g.size() != d || b.size() != d || st.o.size() != d)
    throw std::invalid_argument("attnres: merge: o, b, w and g must have one width, got " + std::to_string(st.o.size()) +
                                ", " + std::to_string(b.size()) + ", " + std::to_string(d) + ", " + std::to_string(g.size()));
  const S z = w.dot(rms_norm<S>(b, eps, g));
  const auto m = attnres_merge_weights<S>(st.lse, z);
  return {Vec<S>(m.a_old * st.o + m.a_new * b), S(log(m.total))};
}

/// The number of layers of block `b` (0-based; b_0 = e is not counted).
template <class S>
int attnres_block_length(const AttnResConfig<S>& c, int b) {
  if (c.num_blocks == 0) return c.block_size;
  const int base = c.layers / c.num_blocks;
  return b < c.num_blocks - 1 ? base : c.layers - (c.num_blocks - 1) * base;
}

template <class S>
class AttentionResiduals {
 public:
  using Scalar = S;
  struct State {
    // Full: [e, v_0, .., v_{l-1}]. Block: finished blocks [b_0 = e, b_1, ..].
    std::vector<Vec<S>> sources;
    Vec<S> partial;        // block: sum of the open block's outputs (empty when none)
    int in_block = 0;      // block: number of outputs in `partial`
    int written = 0;       // layers written so far
    bool summed = false;   // block: the last write formed a new sum b^{i-1} + v
    template <class F>
    void stored(F&& f) {  // framework.hpp: what the last write computed, stored once
      // The sources e, v_l (Full) and a block's first output b^1 = v are
      // inputs or layer outputs, stored where they were made (framework.hpp,
      // computes_outputs); only a new partial sum is a value this scheme
      // computes, stored once: the open block's partial, or the finished
      // block it just became.
      if (summed) f(in_block > 0 ? partial : sources.back());
    }
  };

  explicit AttentionResiduals(AttnResConfig<S> cfg) : cfg_(std::move(cfg)) {
    if (cfg_.w.empty()) cfg_.w.assign(cfg_.layers + 1, Vec<S>::Zero(cfg_.d));
    if (cfg_.g.empty()) cfg_.g.assign(cfg_.layers + 1, Vec<S>::Ones(cfg_.d));
    validate();
  }

  const AttnResConfig<S>& config() const { return cfg_; }

  State init(const Vec<S>& e) const {
    if (e.size() != cfg_.d)
      fail("embedding", "width " + std::to_string(e.size()) + " != d = " + std::to_string(cfg_.d));
    State s;
    s.sources.push_back(e);
    return s;
  }

  /// The source list the next readout mixes (read of layer s.written, or final).
  std::vector<Vec<S>> sources(const State& s) const {
    std::vector<Vec<S>> r = s.sources;
    if (s.in_block > 0) r.push_back(s.partial);
    return r;
  }

  /// Softmax weights of the next readout with pair l (diagnostics, tests).
  Vec<S> weights(const State& s, int l) const {
    check_index(l, cfg_.layers, "weights");
    return attnres_weights<S>(sources(s), cfg_.w[l], cfg_.g[l], cfg_.eps);
  }

  Vec<S> read(const State& s, int l) const {
    check_index(l, cfg_.layers - 1, "read");
    if (l != s.written)
      fail("read", "layer " + std::to_string(l) + " read after " + std::to_string(s.written) + " layers were written");
    return attnres_mix<S>(sources(s), cfg_.w[l], cfg_.g[l], cfg_.eps);
  }

  void write(State& s, int l, const Vec<S>& v) const {
    check_index(l, cfg_.layers - 1, "write");
    if (l != s.written)
      fail("write", "layer " + std::to_string(l) + " written after " + std::to_string(s.written) + " layers");
    if (v.size() != cfg_.d) fail("v", "layer " + std::to_string(l) + " output has width " + std::to_string(v.size()));
    ++s.written;
    s.summed = cfg_.variant == AttnResVariant::block && s.in_block > 0;
    if (cfg_.variant == AttnResVariant::full) {
      s.sources.push_back(v);
      return;
    }
    if (s.in_block == 0) {
      s.partial = v;  // b_n^1 = v: a copy, so that S = 1 is Full AttnRes exactly
    } else {
      s.partial += v;  // b_n^i = b_n^{i-1} + v, outputs added in layer order
    }
    // block n (sources holds e and the n-1 finished ones) is finished: b_n joins the sources
    if (++s.in_block == attnres_block_length(cfg_, static_cast<int>(s.sources.size()) - 1)) {
      s.sources.push_back(std::move(s.partial));
      s.partial = Vec<S>();
      s.in_block = 0;
    }
  }

  /// Readout L with (w_L, g_L) over every source (and the last partial sum).
  Vec<S> final(const State& s) const {
    if (s.written != cfg_.layers)
      fail("final", "after " + std::to_string(s.written) + " layers, configured for L = " + std::to_string(cfg_.layers));
    return attnres_mix<S>(sources(s), cfg_.w[cfg_.layers], cfg_.g[cfg_.layers], cfg_.eps);
  }

  /// The largest logit bound sqrt(d) ||w_l||_2 ||g_l||_inf the type S accepts
  /// for `n` sources: min(ln(max), -ln(min_normal)) - ln(n).
  static double logit_limit(int n) {
    using std::log;
    const double hi = to_double(S(log(std::numeric_limits<S>::max())));
    const double lo = -to_double(S(log(std::numeric_limits<S>::min())));
    return std::min(hi, lo) - std::log(static_cast<double>(n));
  }

 private:
  [[noreturn]] static void fail(const std::string& field, const std::string& what) {
    throw ParameterError("attnres", field, what);
  }

  void check_index(int l, int max, const std::string& op) const {
    if (l < 0 || l > max)
      fail(op, "layer " + std::to_string(l) + " is outside 0.." + std::to_string(max) + " (L = " +
                   std::to_string(cfg_.layers) + ")");
  }

  void validate() const {
    if (cfg_.d <= 0) fail("d", "must be > 0, got " + std::to_string(cfg_.d));
    if (cfg_.layers < 0) fail("layers", "must be >= 0, got " + std::to_string(cfg_.layers));
    if (cfg_.variant == AttnResVariant::block) {
      if ((cfg_.block_size > 0) == (cfg_.num_blocks > 0) || cfg_.block_size < 0 || cfg_.num_blocks < 0)
        fail("block_size", "Block AttnRes needs exactly one of block_size >= 1 (fixed size) and blocks >= 1 (N blocks), got " +
                               std::to_string(cfg_.block_size) + " and " + std::to_string(cfg_.num_blocks));
      if (cfg_.num_blocks > cfg_.layers)
        fail("blocks", std::to_string(cfg_.num_blocks) + " blocks for L = " + std::to_string(cfg_.layers) +
                               " layers: at most one block per layer");
    }
    const double eps = to_double(cfg_.eps);
    if (!(std::isfinite(eps) && eps > 0)) fail("eps", "must be finite and > 0, got " + show(eps));
    const auto pairs = static_cast<std::size_t>(cfg_.layers) + 1;
    if (cfg_.w.size() != pairs)
      fail("w", "needs L+1 = " + std::to_string(pairs) + " pseudo-queries, got " + std::to_string(cfg_.w.size()));
    if (cfg_.g.size() != pairs)
      fail("g", "needs L+1 = " + std::to_string(pairs) + " gains, got " + std::to_string(cfg_.g.size()));
    const double limit = logit_limit(cfg_.layers + 1);
    for (std::size_t l = 0; l < pairs; ++l) {
      const std::string at = "readout " + std::to_string(l);
      if (cfg_.w[l].size() != cfg_.d) fail("w", at + " has width " + std::to_string(cfg_.w[l].size()));
      if (cfg_.g[l].size() != cfg_.d) fail("g", at + " has width " + std::to_string(cfg_.g[l].size()));
      double w2 = 0, ginf = 0;
      for (Eigen::Index j = 0; j < cfg_.d; ++j) {
        const double wj = to_double(cfg_.w[l](j)), gj = to_double(cfg_.g[l](j));
        if (!std::isfinite(wj)) fail("w[" + std::to_string(l) + "," + std::to_string(j) + "]", "is not finite");
        if (!std::isfinite(gj)) fail("g[" + std::to_string(l) + "," + std::to_string(j) + "]", "is not finite");
        w2 += wj * wj;
        ginf = std::max(ginf, std::abs(gj));
      }
      const double bound = std::sqrt(static_cast<double>(cfg_.d) * w2) * ginf;
      if (!(bound <= limit))
        fail("w", at + ": logit bound sqrt(d) ||w||_2 ||g||_inf = " + show(bound) +
                      " exceeds the exp range of " + scalar_name<S>() + " (" + show(limit) + ")");
    }
  }

  AttnResConfig<S> cfg_;
};

/// Kernel-level entry point: the layer outputs v[l] are given (as a GPU kernel
/// sees them); returns the whole trace (readouts h[l], every state, final).
template <class S>
Trace<S, typename AttentionResiduals<S>::State> attnres_kernel(const AttnResConfig<S>& cfg, const Vec<S>& e,
                                                               const std::vector<Vec<S>>& v) {
  AttentionResiduals<S> m(cfg);
  return forward(m, e, static_cast<int>(v.size()), GivenOutputs<S>{&v});
}

}  // namespace dmref
