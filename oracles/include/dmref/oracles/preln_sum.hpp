// dmref/oracles/preln_sum.hpp: PreLN (docs/preln.md) as explicit sums over
// the given vectors, forward and backward, independent of the framework
// (no Scheme, no driver, no Backward specialization: Vec only).
//
// Forward, kernel level (layer outputs v_0..v_{L-1} given). The framework's
// driver (framework.hpp) reads h_l = read(l) *before* write l, so with
// init x = e and write x += v_l:
//     h_l = e + sum_{j < l} v_j      (l = 0..L-1; h_0 = e),
//     out = e + sum_{j < L} v_j.
// Each h_l is summed from scratch here (L sums of up to L+1 terms, O(L^2)
// additions), not carried as a running value. The terms are added in the
// order e, v_0, v_1, ..: the order of the reference's running sum, so at the
// same scalar type the two are the same operations and agree bit for bit;
// at a higher precision they agree within the recursive-sum bound.
//
// Backward. For upstream gradients u_out (of out), u_h[l] (of h_l) and
// u_v[j] (of v_j, optional), the loss
//     J = <u_out, out> + sum_l <u_h[l], h_l> + sum_j <u_v[j], v_j>
// is linear in (e, v), so its gradient is read off the sums above:
//   - e appears in out and in every h_l with coefficient 1:
//         dJ/de   = u_out + sum_{l = 0}^{L-1} u_h[l];
//   - v_j appears in out, in h_l exactly when j < l, i.e. l = j+1..L-1 (not
//     in h_j: layer j reads its input before its output is written), and in
//     the u_v term:
//         dJ/dv_j = u_out + u_v[j] + sum_{l = j+1}^{L-1} u_h[l].
// This is the framework's reverse walk (backward.hpp) for PreLN's adjoints
// (preln_backward.hpp: final^T dx = u_out; write^T dv_l = dx; read^T
// dx += dh_l; init^T de = dx) written out in closed form: walking l =
// L-1..0, dv_l is taken before dh_l is added, which is the strict l > j.
// At kernel level the layers ignore their input (GivenOutputsVjp), so the
// total adjoint of h_l is u_h[l]. Here the sums run in increasing l (the
// reverse walk adds in decreasing l): another order, so at one scalar type
// the two agree within the recursive-sum bound, and exactly where every
// partial sum is representable (e.g. small integers in double).
#pragma once

#include "dmref/scalar_traits.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace dmref::oracle {

template <class S>
struct PrelnSums {
  std::vector<Vec<S>> h;  // h[l] = e + sum_{j < l} v_j, l = 0..L-1
  Vec<S> out;             // e + sum_{j < L} v_j
};

namespace preln_detail {
template <class S>
void check_widths(const std::vector<Vec<S>>& x, std::size_t n, Eigen::Index d, const char* what) {
  if (!x.empty() && x.size() != n)
    throw std::invalid_argument(std::string("oracle::preln: ") + what + " has " + std::to_string(x.size()) +
                                " entries, expected " + std::to_string(n));
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i].size() != d)
      throw std::invalid_argument(std::string("oracle::preln: ") + what + "[" + std::to_string(i) + "] has width " +
                                  std::to_string(x[i].size()) + ", expected " + std::to_string(d));
}
}  // namespace preln_detail

/// h_l and out from scratch: e + v_0 + .. + v_{l-1}, terms in that order.
/// With |e|, |v_j| as inputs this is the componentwise sum of |terms| that
/// bounds the rounding error of each sum (the condition of the sum).
template <class S>
PrelnSums<S> preln_sums(const Vec<S>& e, const std::vector<Vec<S>>& v) {
  preln_detail::check_widths(v, v.size(), e.size(), "v");
  const std::size_t L = v.size();
  PrelnSums<S> r;
  for (std::size_t l = 0; l <= L; ++l) {
    Vec<S> s = e;
    for (std::size_t j = 0; j < l; ++j) s += v[j];
    if (l < L)
      r.h.push_back(std::move(s));
    else
      r.out = std::move(s);
  }
  return r;
}

template <class S>
struct PrelnGrads {
  Vec<S> e;               // dJ/de
  std::vector<Vec<S>> v;  // dJ/dv_j, j = 0..L-1
};

/// The closed-form gradient above for L layers. `u_h` and `u_v` are empty
/// (zero) or have L entries; each sum adds u_out, then u_v[j], then u_h[l]
/// in increasing l.
template <class S>
PrelnGrads<S> preln_sum_vjp(int L, const Vec<S>& u_out, const std::vector<Vec<S>>& u_h,
                            const std::vector<Vec<S>>& u_v = {}) {
  if (L < 0) throw std::invalid_argument("oracle::preln: L must be >= 0, got " + std::to_string(L));
  const auto n = static_cast<std::size_t>(L);
  preln_detail::check_widths(u_h, n, u_out.size(), "u_h");
  preln_detail::check_widths(u_v, n, u_out.size(), "u_v");
  PrelnGrads<S> g;
  g.e = u_out;
  for (std::size_t l = 0; l < u_h.size(); ++l) g.e += u_h[l];
  for (std::size_t j = 0; j < n; ++j) {
    Vec<S> s = u_out;
    if (!u_v.empty()) s += u_v[j];
    for (std::size_t l = j + 1; l < u_h.size(); ++l) s += u_h[l];
    g.v.push_back(std::move(s));
  }
  return g;
}

}  // namespace dmref::oracle
