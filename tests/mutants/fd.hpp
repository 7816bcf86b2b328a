// tests/mutants/fd.hpp: the gradient of a forward that has no backward (a
// forward mutant, or the reference as the honesty control), by central
// differences in double, in the layout of a gradient fixture's grad.* tensors.
//
// The objective is the one the gradient goldens differentiate,
//     phi(x) = sum over upstream tensors input.grad.<Y> of <u_Y, output.<Y>(x)>,
// and grad.<name>[i] = d phi / d <name>[i] for every tensor (or config number,
// config.alpha) the fixture has a grad.<name> for.
//
// Step and error bound (derived). One step per tensor (or config number):
// with s = max_i |x_i| over the tensor (1 if it is all zero), h = 2^(e - 17),
// 2^e <= s < 2^(e+1). The scale is the tensor's, not 1: an input drawn at
// scale 1e-3 (the tiny-embedding cases, e_scale = 1e-3) feeds a norm whose
// nonlinearity has that scale, where a step 2^-17 is 1% of it (measured:
// the reference's FD gradient 1.1e3 x the f32 tolerance off).
// x +- h is exact in double when |x| >= 2^(e-29) (x is exact in a dtype of at
// most 24 significant bits, |x| < 2^(e+1): x +- h needs at most 24 + 29 = 53
// bits); for smaller |x| the quotient divides by the step actually taken,
// (x + h) - (x - h), exact in long double (two doubles of magnitude in
// [h/2, 2h]). Central difference
//     D = (phi(x + h) - phi(x - h)) / (2h),
//     |D - phi'(x)| <= h^2/6 max|phi'''|  +  (|d+| + |d-|) / (2h),
// where d+- is the rounding error of phi evaluated in double,
// |d| <= K u, u = 2^-53, K = (the forward's condition) x sum|u_Y||output.Y|.
// With h ~ 2^-17 s: truncation <= 2^-34/6 s^2 max|phi'''|
// ~ 1e-11 s^2 max|phi'''|, rounding <= 2^-53 K 2^17 / s = 2^-36 K / s
// ~ 1.5e-11 K / s (phi''' and K of phi as a function of the tensor in units
// of its own scale s). The gate's tolerance on a gradient element is at least
// 4 ulps of the dtype (f32: 2^-21 |g|) plus twice the float32 backward's
// error (>= 2^-24 of the tensor's scale), so the FD error stays below 1% of
// the tolerance at f32 while max|phi'''| and K stay below ~1e3 of the
// gradient's scale; bf16 and f16 tolerances are 2^16 and 2^13 times wider.
// Whether that holds on the committed cases is measured, not assumed: the
// unmutated reference through this same path must pass every gradient
// fixture at every dtype (dmref_mutants' honesty control), and its worst
// err/tol is printed in the table.
// Entries on the edge of their domain (LDM lambda = 1: lambda + h is refused
// as BadInput) use the one-sided three-point formula on the side that is
// valid, (3 phi(x) - 4 phi(x - h) + phi(x - 2h)) / (2h), error <= h^2/3 max|phi'''|;
// an entry refused on both sides is a constant, not a parameter (DenseFormer's
// a(0,0) = 1): gradient 0, the goldens' convention for it -- unless it is an
// off-diagonal entry of a symmetric matrix the scheme refuses to make
// asymmetric (ldm_ops' input.P, an inverse covariance: the last two axes
// square, the mirrored entry equal, and the pair accepted when stepped
// together; a pair refused too is a constant). Such a pair is stepped together,
// along E = e_ij + e_ji, and grad[i,j] = D / 2: the gradient among symmetric
// matrices, (G + G^T) / 2, the goldens' convention for it (docs/ldm_ops.md).
// D is a central difference of the same objective along a direction of the
// same size as one entry's, so the bound above holds for it (halved).
#pragma once

#include "dmref/conformance/evaluate_impl.hpp"

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dmref::mutants {

using Forward64 = std::function<conf::Outputs<double>(const conf::Problem&)>;

/// grad.<name> for each of `wrt` ("input.e", "param.w", "config.alpha", ...) of
/// phi at problem `p` (a gradient problem: its input.grad.* are the upstream).
inline std::map<std::string, std::vector<double>> fd_gradient(conf::Problem q, const std::vector<std::string>& wrt,
                                                              const Forward64& f) {
  std::map<std::string, std::vector<double>> up;  // Y -> u_Y
  for (auto it = q.tensors.begin(); it != q.tensors.end();) {
    if (it->first.rfind("input.grad.", 0) == 0) {
      up["output." + it->first.substr(11)] = it->second.values;
      it = q.tensors.erase(it);
    } else {
      ++it;
    }
  }
  q.grad = false;
  auto phi = [&](const conf::Problem& x) {
    const auto o = f(x);
    long double s = 0;  // the sum in extended precision: its rounding is not part of K
    for (const auto& [name, u] : up) {
      const auto& y = o.t.at(name).values;
      if (y.size() != u.size()) throw std::logic_error("fd_gradient: " + name + " and its upstream differ in size");
      for (std::size_t i = 0; i < u.size(); ++i) s += static_cast<long double>(u[i]) * y[i];
    }
    return s;
  };
  std::map<std::string, std::vector<double>> g;
  std::optional<long double> phi0;
  for (const auto& name : wrt) {
    const bool cfg = name.rfind("config.", 0) == 0;
    const std::string key = cfg ? name.substr(7) : "";
    if (cfg) q.config[key] = q.config.at(key).get<double>();  // stored as a double, so that it can be stepped
    const std::size_t n = cfg ? 1 : q.tensors.at(name).values.size();
    auto entry = [&](std::size_t i) -> double& {
      return cfg ? *q.config[key].get_ptr<double*>() : q.tensors.at(name).values[i];
    };
    double scale = 0;  // s above
    for (std::size_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(entry(i)));
    const double h = std::ldexp(1.0, std::ilogb(scale > 0 ? scale : 1.0) - 17);
    auto& out = g[name];
    for (std::size_t i = 0; i < n; ++i) {
      double& x = entry(i);
      const double x0 = x;
      auto at = [&](double v) -> std::optional<long double> {
        x = v;
        try {
          const long double r = phi(q);
          x = x0;
          return r;
        } catch (const std::exception&) {  // outside the entry's domain (BadInput, or the scheme's own check)
          x = x0;
          return std::nullopt;
        }
      };
      const auto fp = at(x0 + h), fm = at(x0 - h);
      long double d;
      if (fp && fm) {
        d = (*fp - *fm) / (static_cast<long double>(x0 + h) - static_cast<long double>(x0 - h));
      } else {
        if (!phi0) phi0 = phi(q);  // the unperturbed problem must evaluate (a mutant that throws is never "killed")
        if (!fp && !fm) {
          // A symmetric matrix's off-diagonal entry (its mirror over the last two axes equal): the pair stepped together.
          const auto& shape = cfg ? std::vector<std::int64_t>{} : q.tensors.at(name).shape;
          const std::size_t m = shape.size() >= 2 && shape[shape.size() - 1] == shape[shape.size() - 2]
                                    ? std::size_t(shape.back()) : 0;
          const std::size_t r = m ? (i / m) % m : 0, c = m ? i % m : 0, j = i - r * m - c + c * m + r;
          if (m && r != c && q.tensors.at(name).values[j] == x0) {
            double& y = q.tensors.at(name).values[j];
            auto pair = [&](double v) -> std::optional<long double> {
              x = v;
              y = v;
              try {
                const long double res = phi(q);
                x = y = x0;
                return res;
              } catch (const std::exception&) {
                x = y = x0;
                return std::nullopt;
              }
            };
            const auto pp = pair(x0 + h), pm = pair(x0 - h);
            if (pp && pm) {
              out.push_back(static_cast<double>(
                  (*pp - *pm) / (static_cast<long double>(x0 + h) - static_cast<long double>(x0 - h)) / 2));
              continue;
            }
            // The pair is refused too: not a symmetry constraint but constants (DenseFormer's
            // param.a, square, with mirrored entries equal where the scheme fixes them): gradient 0 below.
          }
          out.push_back(0);  // a constant the scheme refuses to move (DenseFormer a(0,0) = 1): gradient 0, as in the goldens
          continue;
        }
        const double s = fp ? 1 : -1;  // the valid side
        const auto f2 = at(x0 + 2 * s * h);
        if (!f2) throw std::logic_error("fd_gradient: " + name + " has no valid step at element " + std::to_string(i));
        d = s * (4 * *(fp ? fp : fm) - 3 * *phi0 - *f2) / (2 * h);
      }
      out.push_back(static_cast<double>(d));
    }
  }
  return g;
}

}  // namespace dmref::mutants
