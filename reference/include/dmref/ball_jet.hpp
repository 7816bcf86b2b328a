// dmref/ball_jet.hpp: `BallJet`, a forward-mode dual number over Balls (a
// value and its gradient with respect to N inputs), for enclosures of
// Jacobians over a whole ball of inputs (docs/precision.md, "Centred form").
//
// Semantics: every field is a Ball and every rule below is the exact
// derivative rule evaluated in Ball arithmetic, so for ANY point x inside the
// input balls the jet's value ball contains f(x) and its gradient balls
// contain the exact partial derivatives of f at x (induction over the
// evaluation, as for Balls: docs/precision.md). A jet with an empty gradient
// is a constant (every partial derivative exactly 0); no other branch.
//
// Only what the certification-only code (mhc.hpp, mhc_sinkhorn_centred) runs
// is defined: + - * / and exp. A generic recurrence written on a scalar type
// S (mhc_sinkhorn) runs on BallJet unchanged, so the Jacobian is that of the
// very code that computes the values, not of a second copy of it.
#pragma once

#include "dmref/ball.hpp"

#include <Eigen/Core>

#include <cstddef>
#include <stdexcept>
#include <utility>
#include <vector>

namespace dmref {

struct BallJet {
  Ball v;               // the value
  std::vector<Ball> d;  // d[j] = d v / d x_j; empty: a constant

  BallJet() = default;
  BallJet(double x) : v(x) {}  // NOLINT: implicit, like the scalar types (constants)
  BallJet(int x) : v(x) {}     // NOLINT
  explicit BallJet(Ball x) : v(std::move(x)) {}

  /// Input j of N, with value x: gradient e_j.
  static BallJet variable(Ball x, Eigen::Index j, Eigen::Index N) {
    BallJet r(std::move(x));
    r.d.assign(static_cast<std::size_t>(N), Ball(0));
    r.d[static_cast<std::size_t>(j)] = Ball(1);
    return r;
  }

  BallJet& operator+=(const BallJet& o) {
    v += o.v;
    if (!o.d.empty()) {
      match(o);
      for (std::size_t j = 0; j < d.size(); ++j) arb_add(d[j].get(), d[j].get(), o.d[j].get(), ball_precision());
    }
    return *this;
  }
  BallJet& operator-=(const BallJet& o) {
    v -= o.v;
    if (!o.d.empty()) {
      match(o);
      for (std::size_t j = 0; j < d.size(); ++j) arb_sub(d[j].get(), d[j].get(), o.d[j].get(), ball_precision());
    }
    return *this;
  }
  /// (a b)' = a' b + a b'
  BallJet& operator*=(const BallJet& o) {
    if (&o == this) return *this *= BallJet(o);
    for (Ball& x : d) x *= o.v;
    if (!o.d.empty()) {
      match(o);
      for (std::size_t j = 0; j < d.size(); ++j) arb_addmul(d[j].get(), v.get(), o.d[j].get(), ball_precision());
    }
    v *= o.v;
    return *this;
  }
  /// (a / b)' = (a' - q b') / b with q = a / b (one division: times 1/b)
  BallJet& operator/=(const BallJet& o) {
    if (&o == this) return *this /= BallJet(o);
    v /= o.v;
    if (o.d.empty() && d.empty()) return *this;
    const Ball inv = Ball(1) / o.v;
    if (!o.d.empty()) {
      match(o);
      for (std::size_t j = 0; j < d.size(); ++j) arb_submul(d[j].get(), v.get(), o.d[j].get(), ball_precision());
    }
    for (Ball& x : d) x *= inv;
    return *this;
  }
  friend BallJet operator+(BallJet a, const BallJet& b) { return std::move(a += b); }
  friend BallJet operator-(BallJet a, const BallJet& b) { return std::move(a -= b); }
  friend BallJet operator*(BallJet a, const BallJet& b) { return std::move(a *= b); }
  friend BallJet operator/(BallJet a, const BallJet& b) { return std::move(a /= b); }
  friend BallJet operator-(BallJet a) {
    a.v = -a.v;
    for (Ball& x : a.d) x = -x;
    return a;
  }
  /// exp(a)' = exp(a) a'
  friend BallJet exp(BallJet a) {
    a.v = exp(a.v);
    for (Ball& x : a.d) x *= a.v;
    return a;
  }

 private:
  /// Gives a constant (empty d) o's number of partial derivatives, all 0.
  void match(const BallJet& o) {
    if (d.empty()) d.assign(o.d.size(), Ball(0));
    if (d.size() != o.d.size()) throw std::logic_error("BallJet: gradients of different lengths");
  }
};

}  // namespace dmref
