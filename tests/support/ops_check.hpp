// tests/support/ops_check.hpp: what the op-level tests (test_mhc_ops,
// test_attnres_ops) share: a problem's tensors at high precision, and the
// check of the reference's gradients against central differences of an
// oracle's forward (directional derivatives of the outputs contracted with
// the upstream gradients), at 667 bits, step 2^-200 (each test derives the
// tolerance 1e-100 relative to the sum of |terms| for its maps).
#pragma once

#include "dmref/conformance/problem.hpp"
#include "dmref/oracles/central_difference.hpp"
#include "dmref/scalar.hpp"

#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace dmref::testing {

using Hi = mp200;
/// The problem's input and param tensors at Hi, by name (the upstreams left out).
using Values = std::map<std::string, Vec<Hi>>;

inline Values values_of(const conf::Problem& p) {
  Values v;
  for (const auto& [k, t] : p.tensors)
    if (k.rfind("input.grad.", 0) != 0) v[k] = conf::vec_at<Hi>(t, 0, std::int64_t(t.values.size()));
  return v;
}

/// The r x c row-major block of tensor k of v from offset off.
inline Mat<Hi> mat(const Values& v, const std::string& k, std::int64_t off, std::int64_t r, std::int64_t c) {
  Mat<Hi> m(r, c);
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < c; ++j) m(i, j) = v.at(k)(off + i * c + j);
  return m;
}

/// <grad, dir> of the reference's gradients `ref` (grad.<name> for every input
/// and param of p) against the central difference of
/// sum_k <input.grad.k, oracle(p, v).output.k> along dir, for two random dirs.
inline void check_adjoints(const conf::Problem& p, const conf::Outputs<Hi>& ref,
                           const std::function<Values(const conf::Problem&, const Values&)>& oracle) {
  std::vector<std::string> names;  // differentiated: every input and parameter (not the upstreams)
  Eigen::Index size = 0;
  for (const auto& [k, t] : p.tensors)
    if (k.rfind("input.grad.", 0) != 0) {
      names.push_back(k);
      size += Eigen::Index(t.values.size());
      REQUIRE(ref.t.count("grad." + k));
    }
  Vec<Hi> x0(size);
  Eigen::Index at = 0;
  for (const auto& k : names)
    for (double x : p.tensors.at(k).values) x0(at++) = Hi(x);
  auto f = [&](const Vec<Hi>& x) {
    Values v;
    Eigen::Index k0 = 0;
    for (const auto& k : names) {
      const Eigen::Index m = Eigen::Index(p.tensors.at(k).values.size());
      v[k] = x.segment(k0, m);
      k0 += m;
    }
    Vec<Hi> acc = Vec<Hi>::Zero(1);
    for (const auto& [k, y] : oracle(p, v))
      acc(0) += conf::vec_at<Hi>(p.tensors.at("input.grad." + k.substr(7)), 0, y.size()).dot(y);
    return acc;
  };
  for (const std::uint64_t seed : {11, 12}) {
    const Vec<Hi> dir = oracle::random_direction<Hi>(size, seed);
    const Hi fd = oracle::central_difference<Hi>(f, x0, dir, pow(Hi(2), -200))(0);
    Hi adj = 0, scale = 0;
    Eigen::Index k0 = 0;
    for (const auto& k : names) {
      const auto& g = ref.t.at("grad." + k).values;
      for (std::size_t i = 0; i < g.size(); ++i) {
        adj += g[i] * dir(k0 + Eigen::Index(i));
        scale += abs(g[i] * dir(k0 + Eigen::Index(i)));
      }
      k0 += Eigen::Index(g.size());
    }
    INFO("fd " << to_double(fd) << " adjoint " << to_double(adj));
    CHECK(to_double(abs(fd - adj)) <= 1e-100 * to_double(scale));
    CHECK(to_double(scale) > 0);
  }
}

}  // namespace dmref::testing
