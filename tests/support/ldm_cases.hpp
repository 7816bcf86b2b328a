// tests/support/ldm_cases.hpp: random Linear Depth Memory problems for the
// tests and the properties. A case is fully determined by its shape and a
// seed; every number in it is a double, so it converts exactly to every
// scalar type the suite checks (MPFR, MPFI) and to the oracles' type. At the
// end, grad::LdmSpec: the backward problem of the adjoint identity (grad_cases.hpp).
#pragma once

#include "grad_cases.hpp"
#include "dmref/ldm.hpp"
#include "dmref/ldm_backward.hpp"
#include "check.hpp"
#include "dmref/oracles/depth_regression.hpp"
#include "dmref/oracles/ldm_rls_closed_form.hpp"

#include <cmath>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace dmref::test {

struct LdmShape {
  int dk = 4, dv = 2, groups = 1, layers = 8;
  double log10_alpha = 0;     // alpha = 10^this
  double lambda_min = 0.5;    // lambda ~ U[lambda_min, 1], some exactly 1
  double omega_max = 10;      // omega ~ U[0, omega_max], some exactly 0
  double zero_omega = 0.1;    // probability of an exact omega = 0
  double collinear = 0;       // > 0: keys = shared direction + collinear * noise
  std::uint64_t seed = 1;
};

inline std::string describe(const LdmShape& s) {
  std::ostringstream o;
  o << "dk=" << s.dk << " dv=" << s.dv << " G=" << s.groups << " L=" << s.layers << " alpha=1e" << s.log10_alpha
    << " lambda_min=" << s.lambda_min << " omega_max=" << s.omega_max << " zero_omega=" << s.zero_omega
    << " collinear=" << s.collinear << " seed=" << s.seed;
  return o.str();
}
inline void showValue(const LdmShape& s, std::ostream& os) { os << describe(s); }

/// A kernel-level LDM case, in doubles.
struct LdmCase {
  LdmShape shape;
  double alpha = 1;
  Mat<double> lambda;              // L x G
  std::vector<Vec<double>> v;      // L of width d = G dv
  std::vector<Address<double>> a;  // L addresses
  Vec<double> e;                   // embedding

  int d() const { return shape.groups * shape.dv; }

  template <class S>
  LdmConfig<S> config(MemoryWrite w = MemoryWrite::rls) const {
    LdmConfig<S> c;
    c.d = d();
    c.groups = shape.groups;
    c.dk = shape.dk;
    c.write = w;
    c.alpha = S(alpha);
    c.lambda = convert<S>(lambda);
    return c;
  }
  template <class S>
  std::vector<Vec<S>> values() const {
    std::vector<Vec<S>> r;
    for (const auto& x : v) r.push_back(convert<S>(x));
    return r;
  }
  template <class S>
  std::vector<Address<S>> addresses() const {
    std::vector<Address<S>> r;
    for (const auto& x : a) r.push_back({convert<S>(x.q), convert<S>(x.k), convert<S>(x.omega)});
    return r;
  }
  /// Group g's depth regression over the first l+1 layers, as the oracles see it.
  template <class S>
  oracle::DepthRegression<S> problem(int g, int l) const {
    const int dk = shape.dk, dv = shape.dv;
    oracle::DepthRegression<S> p;
    p.K.resize(dk, l + 1);
    p.V.resize(dv, l + 1);
    p.omega.resize(l + 1);
    p.lambda.resize(l + 1);
    for (int i = 0; i <= l; ++i) {
      p.K.col(i) = convert<S>(Vec<double>(a[i].k.segment(g * dk, dk)));
      p.V.col(i) = convert<S>(Vec<double>(v[i].segment(g * dv, dv)));
      p.omega(i) = S(a[i].omega(g));
      p.lambda(i) = S(lambda(i, g));
    }
    p.alpha = S(alpha);
    return p;
  }
};


inline LdmCase make_ldm_case(const LdmShape& s) {
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<double> N(0, 1);
  std::uniform_real_distribution<double> U(0, 1);
  LdmCase c;
  c.shape = s;
  c.alpha = std::pow(10.0, s.log10_alpha);
  const int d = s.groups * s.dv, n = s.groups * s.dk;
  c.lambda.resize(s.layers, s.groups);
  for (int i = 0; i < c.lambda.size(); ++i)
    c.lambda(i) = U(rng) < 0.2 ? 1.0 : round30(s.lambda_min + (1 - s.lambda_min) * U(rng));
  Vec<double> base(n);
  for (int i = 0; i < n; ++i) base(i) = N(rng);
  c.e.resize(d);
  for (int i = 0; i < d; ++i) c.e(i) = round30(N(rng));
  for (int l = 0; l < s.layers; ++l) {
    Vec<double> v(d), q(n), k(n), w(s.groups);
    for (int i = 0; i < d; ++i) v(i) = round30(N(rng));
    for (int i = 0; i < n; ++i) q(i) = round30(N(rng));
    for (int i = 0; i < n; ++i)
      k(i) = round30(s.collinear > 0 ? base(i) + s.collinear * N(rng) : N(rng));
    for (int g = 0; g < s.groups; ++g) w(g) = U(rng) < s.zero_omega ? 0.0 : round30(s.omega_max * U(rng));
    c.v.push_back(v);
    c.a.push_back({q, k, w});
  }
  return c;
}

/// cond_rls (check.hpp) of a whole problem: closed forms of every prefix.
template <class Hi>
double rls_cond(const oracle::DepthRegression<Hi>& p) {
  RlsCondition rc(to_double(p.alpha));
  double c = 0;
  for (int l = 0; l < p.n(); ++l) c = rc.add(oracle::rls_closed_form(p.head(l)), to_double(p.lambda(l)));
  return c;
}

/// Error of a computed memory M against the closed form M* = S R^-1, in the
/// scale the RLS tolerances (K::rls) bound: ||M - M*||_F / (||S_abs||_F ||R^-1||_F)
/// with S_abs = sum_i decay(i, l) omega_i |v_i| |k_i|^T >= |S|. The recursions'
/// roundings act as relative perturbations of the data terms of S, so this is
/// the condition of M = S R^-1 for them; ||M*|| alone is not a valid scale,
/// since the terms of S can cancel (a dk = dv = 1 case had ||M*|| 140x below it
/// and an error of 718 eps in ||M*|| units). (0 data: the absolute error.)
template <class Hi, class MS>
double rls_m_error(const MS& M, const oracle::DepthRegression<Hi>& p, const oracle::ClosedForm<Hi>& cf) {
  const int l = p.n() - 1;
  Mat<Hi> S_abs = Mat<Hi>::Zero(p.V.rows(), p.K.rows());
  for (int i = 0; i <= l; ++i)
    S_abs.noalias() += (p.decay(i, l) * p.omega(i)) * p.V.col(i).cwiseAbs() * p.K.col(i).cwiseAbs().transpose();
  const Hi scale = S_abs.norm() * cf.Rinv.norm();
  const Hi dM = (M.template cast<Hi>() - cf.M).norm();
  return to_double(Hi(scale == 0 ? dM : Hi(dM / scale)));
}

// ------------------------------------------------------------------ backward
// The backward problem of the adjoint identity (grad_cases.hpp's GradProblem;
// tests/test_backward.cpp, properties/grad_properties.cpp).
namespace grad {

/// LDM with a write rule and P update; kernel addresses (q, k, omega given
/// per layer) or the model's MLP addresses.
template <bool Kernel>
struct LdmSpec {
  using Addr = std::conditional_t<Kernel, GivenAddresses<S>, MlpAddresses<S>>;
  LdmConfig<S> c;
  Addr addr;
  LdmSpec(int d, int L, int G, int dk, MemoryWrite w, PUpdate pu = PUpdate::symmetric, bool rr = true, bool wr = true,
          KeySource keys = KeySource::layer_output) {
    c.keys = keys;
    c.d = d;
    c.groups = G;
    c.dk = dk;
    c.write = w;
    c.p_update = pu;
    c.read_residual = rr;
    c.write_residual = wr;
    c.alpha = S(0.8);
    c.lambda = Mat<S>(rnd(L, G, 0.2).array() + S(0.75));
    c.beta = Mat<S>(rnd(L, G, 0.4).array() + S(0.5));
    if constexpr (Kernel) {
      for (int l = 0; l < L; ++l)
        addr.a.push_back({rnd(G * dk), rnd(G * dk), Vec<S>(rnd(G, 0.8).array() + S(1))});
    } else {
      addr = {{rnd(5, d, 1 / std::sqrt(d)), rnd(G * dk, 5, 1 / std::sqrt(5))}, {Mat<S>(), rnd(G * dk + G, d, 1 / std::sqrt(d))}, G, dk};
    }
  }
  LinearDepthMemory<S, Addr> scheme() const { return {c, addr}; }
  using Scheme = LinearDepthMemory<S, Addr>;
  static constexpr bool has_state = true;
  static Vec<S> state_vec(const typename Scheme::State& s) {  // every M_g, then every P_g
    std::vector<Vec<S>> parts;
    for (const auto& g : s.mem) parts.push_back(g.M.reshaped());
    for (const auto& g : s.mem) parts.push_back(g.P.reshaped());
    return concat(parts);
  }
  static typename Backward<Scheme>::Adjoint state_adjoint(const Scheme& m, const typename Scheme::State& s, const Vec<S>& u) {
    auto a = Backward<Scheme>{m}.zero_adjoint(s);
    Eigen::Index k = 0;
    for (auto& M : a.M) {
      M = u.segment(k, M.size()).reshaped(M.rows(), M.cols());
      k += M.size();
    }
    for (auto& P : a.P) {
      P = u.segment(k, P.size()).reshaped(P.rows(), P.cols());
      k += P.size();
    }
    return a;
  }
  template <class G>
  void pairs(G& lambda, G& beta, S& alpha, Flat<S>& f) const {
    if (c.write == MemoryWrite::rls) f.add(lambda).add(alpha);
    if (c.write == MemoryWrite::delta) f.add(beta);
  }
  void add_params(Flat<S>& f) {
    pairs(c.lambda, c.beta, c.alpha, f);
    if constexpr (Kernel) {
      for (auto& a : addr.a) f.add(a.q).add(a.k).add(a.omega);
    } else {
      f.add(addr.mlp_q.W1).add(addr.mlp_q.W2).add(addr.mlp_k.W2);
    }
  }
  template <class Grad>
  void add_grads(Grad& g, Flat<S>& f) const {
    pairs(g.lambda, g.beta, g.alpha, f);
    if constexpr (Kernel) {
      for (auto& a : g.address) f.add(a.q).add(a.k).add(a.omega);
    } else {
      f.add(g.mlp_q.W1).add(g.mlp_q.W2).add(g.mlp_k.W2);
    }
  }
};

}  // namespace grad

}  // namespace dmref::test
