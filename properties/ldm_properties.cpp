// Properties of Linear Depth Memory (docs/ldm.md). The reference runs at
// 257 bits (mp77); oracles at 667 bits (mp200). Generated cases cover dk up to
// 16, depth up to 64, lambda down to 0.05, omega in [0, 10] with exact zeros,
// alpha over six decades, G up to 4, and nearly collinear keys.
#include "check.hpp"
#include "harness.hpp"
#include "ldm_cases.hpp"

#include "dmref/ldm.hpp"
#include "dmref/oracles/ldm_outer_sum.hpp"
#include "dmref/oracles/ldm_rls_closed_form.hpp"
#include "dmref/oracles/ldm_rls_dual.hpp"
#include "dmref/preln.hpp"

#include <algorithm>
#include <numeric>

using namespace dmref;
using dmref::test::K;
using S = mp77;
using Hi = mp200;

namespace {


/// The generated shape space (max_layers bounds the cost of per-layer oracles).
rc::Gen<test::LdmShape> gen_shape(int max_layers = 64) {
  return rc::gen::build<test::LdmShape>(
      rc::gen::set(&test::LdmShape::dk, rc::gen::inRange(1, 17)),
      rc::gen::set(&test::LdmShape::dv, rc::gen::inRange(1, 5)),
      rc::gen::set(&test::LdmShape::groups, rc::gen::inRange(1, 5)),
      rc::gen::set(&test::LdmShape::layers, rc::gen::inRange(1, max_layers + 1)),
      rc::gen::set(&test::LdmShape::log10_alpha, prop::grid(-3, 3)),
      rc::gen::set(&test::LdmShape::lambda_min, prop::grid(0.05, 1)),
      rc::gen::set(&test::LdmShape::omega_max, prop::grid(0, 10)),
      rc::gen::set(&test::LdmShape::zero_omega, rc::gen::element(0.0, 0.1, 0.5, 1.0)),
      rc::gen::set(&test::LdmShape::collinear, rc::gen::element(0.0, 0.0, 1e-3, 1e-6)),
      rc::gen::set(&test::LdmShape::seed, rc::gen::arbitrary<std::uint64_t>()));
}

template <class T>
Trace<T, typename LdmKernel<T>::State> run(const test::LdmCase& c, MemoryWrite w = MemoryWrite::rls) {
  return ldm_kernel<T>(c.config<T>(w), convert<T>(c.e), c.values<T>(), c.addresses<T>());
}

const double eps = to_double(epsilon<S>());

}  // namespace

TEST_CASE("RLS == closed form (M and P, every layer, every group)", "[property][ldm]") {
  static double worst_eps = 0, worst_ratio = 0;
  prop::check("RLS == closed form (M and P, every layer, every group)", 60, [] {
    const auto shape = *gen_shape();
    const auto c = test::make_ldm_case(shape);
    const auto t = run<S>(c);
    std::vector<test::RlsCondition> conds(shape.groups, test::RlsCondition(c.alpha));
    for (int l = 0; l < shape.layers; ++l)
      for (int g = 0; g < shape.groups; ++g) {
        const auto p = c.problem<Hi>(g, l);
        const auto cf = oracle::rls_closed_form(p);
        const double tol = K::rls * eps * conds[g].add(cf, c.lambda(l, g));
        const auto& m = t.states[l].mem[g];
        const std::string where = test::describe(shape) + " layer " + std::to_string(l) + " group " + std::to_string(g);
        const double eM = test::rls_m_error(m.M, p, cf);  // in ||S_abs|| ||P*|| units
        const double eP = test::rel_err<Hi>(m.P, cf.Rinv);
        DMREF_PROP_CLOSE("RLS M == S R^-1", eM, tol, where);
        DMREF_PROP_CLOSE("RLS P == R^-1", eP, tol, where);
        worst_eps = std::max({worst_eps, eM / eps, eP / eps});
        worst_ratio = std::max({worst_ratio, eM / tol, eP / tol});
      }
  });
  std::cout << "  worst RLS-vs-closed-form error at " << bits<S>() << " bits: " << worst_eps
            << " eps (normwise relative); worst error/tolerance: " << worst_ratio << "\n";
}

TEST_CASE("RLS readout == dual n-by-n form", "[property][ldm]") {
  prop::check("RLS readout == dual n-by-n form", 40, [] {
    const auto shape = *gen_shape();
    const auto c = test::make_ldm_case(shape);
    const auto t = run<S>(c);
    const int l = shape.layers - 1;
    for (int g = 0; g < shape.groups; ++g) {
      const auto p = c.problem<Hi>(g, l);
      const Vec<Hi> q = convert<Hi>(Vec<double>(c.a[l].q.segment(g * shape.dk, shape.dk)));
      const Vec<Hi> dual = oracle::rls_dual_readout(p, q);
      const Vec<S> got = t.states[l].mem[g].M * q.template cast<S>();
      const auto cf = oracle::rls_closed_form(p);
      // The readout error is the M error (cond_rls) times ||M|| ||q|| / ||M q||.
      const Hi scale = dual.norm() == 0 ? Hi(1) : Hi(cf.M.norm() * q.norm() / dual.norm());
      const double tol = K::rls * eps * test::rls_cond(p) *
                         to_double(scale);
      const double err = dual.norm() == 0 ? to_double(Hi(got.template cast<Hi>().norm())) : test::rel_err<Hi>(got, dual);
      DMREF_PROP_CLOSE("M q == V (W K^T K + cI)^-1 W K^T q", err, tol, test::describe(shape) + " group " + std::to_string(g));
    }
  });
}

TEST_CASE("P is symmetric positive definite at every layer", "[property][ldm]") {
  prop::check("P is symmetric positive definite at every layer", 40, [] {
    const auto shape = *gen_shape();
    const auto c = test::make_ldm_case(shape);
    const auto t = run<S>(c);
    for (int l = 0; l < shape.layers; ++l)
      for (int g = 0; g < shape.groups; ++g) {
        const auto& P = t.states[l].mem[g].P;
        const std::string where = test::describe(shape) + " layer " + std::to_string(l);
        DMREF_PROP_TRUE("P == P^T (exactly, symmetric update)", P == P.transpose(), where);
        DMREF_PROP_TRUE("P has a Cholesky factor", Eigen::LLT<Mat<S>>(P).info() == Eigen::Success, where);
      }
  });
}

TEST_CASE("G groups == G one-group memories on the value slices", "[property][ldm]") {
  prop::check("G groups == G one-group memories on the value slices", 40, [] {
    const auto shape = *gen_shape();
    const auto c = test::make_ldm_case(shape);
    const auto t = run<S>(c);
    for (int g = 0; g < shape.groups; ++g) {
      test::LdmCase one = c;
      one.shape.groups = 1;
      one.lambda = c.lambda.col(g);
      for (int l = 0; l < shape.layers; ++l) {
        one.v[l] = c.v[l].segment(g * shape.dv, shape.dv);
        one.a[l] = {c.a[l].q.segment(g * shape.dk, shape.dk), c.a[l].k.segment(g * shape.dk, shape.dk),
                    c.a[l].omega.segment(g, 1)};
      }
      one.e = c.e.segment(g * shape.dv, shape.dv);
      const auto t1 = run<S>(one);
      // Same operations in the same order: equal to the last bit.
      for (int l = 0; l < shape.layers; ++l) {
        DMREF_PROP_TRUE("group memory == one-group memory", t1.states[l].mem[0].M == t.states[l].mem[g].M,
                        test::describe(shape) + " group " + std::to_string(g));
        DMREF_PROP_TRUE("group readout slice == one-group readout",
                        t1.h[l] == t.h[l].segment(g * shape.dv, shape.dv), test::describe(shape));
      }
    }
  });
}

TEST_CASE("readout is invariant under the order of groups", "[property][ldm]") {
  prop::check("readout is invariant under the order of groups", 40, [] {
    const auto shape = *gen_shape();
    const auto c = test::make_ldm_case(shape);
    std::vector<int> perm(shape.groups);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(shape.seed ^ 0x9e3779b97f4a7c15ull);
    std::shuffle(perm.begin(), perm.end(), rng);
    test::LdmCase pc = c;  // group perm[g] of c becomes group g of pc
    const int dv = shape.dv, dk = shape.dk;
    for (int g = 0; g < shape.groups; ++g) {
      const int h = perm[g];
      pc.lambda.col(g) = c.lambda.col(h);
      pc.e.segment(g * dv, dv) = c.e.segment(h * dv, dv);
      for (int l = 0; l < shape.layers; ++l) {
        pc.v[l].segment(g * dv, dv) = c.v[l].segment(h * dv, dv);
        pc.a[l].q.segment(g * dk, dk) = c.a[l].q.segment(h * dk, dk);
        pc.a[l].k.segment(g * dk, dk) = c.a[l].k.segment(h * dk, dk);
        pc.a[l].omega(g) = c.a[l].omega(h);
      }
    }
    const auto t = run<S>(c), tp = run<S>(pc);
    for (int l = 0; l < shape.layers; ++l)
      for (int g = 0; g < shape.groups; ++g)
        DMREF_PROP_TRUE("readout(permuted groups) == permuted readout",
                        tp.h[l].segment(g * dv, dv) == t.h[l].segment(perm[g] * dv, dv), test::describe(shape));
  });
}

TEST_CASE("omega = 0 everywhere: LDM == PreLN", "[property][ldm]") {
  prop::check("omega = 0 everywhere: LDM == PreLN", 40, [] {
    auto shape = *gen_shape();
    shape.zero_omega = 1.0;
    const auto c = test::make_ldm_case(shape);
    const auto t = run<S>(c);
    const auto v = c.values<S>();
    const auto tp = forward(PreLN<S>{}, convert<S>(c.e), shape.layers, GivenOutputs<S>{&v});
    // M stays exactly 0 (every update is scaled by omega = 0), so x + M q == x.
    for (int l = 0; l < shape.layers; ++l)
      DMREF_PROP_TRUE("h_l(LDM, omega = 0) == h_l(PreLN)", t.h[l] == tp.h[l], test::describe(shape));
    DMREF_PROP_TRUE("final(LDM) == final(PreLN)", t.out == tp.out, test::describe(shape));
  });
}

TEST_CASE("alpha -> 0 with lambda = omega = 1: M / alpha -> sum v k^T", "[property][ldm]") {
  prop::check("alpha -> 0 with lambda = omega = 1: M / alpha -> sum v k^T", 40, [] {
    auto shape = *gen_shape();
    shape.collinear = 0;
    auto c = test::make_ldm_case(shape);
    c.lambda.setOnes();
    for (auto& a : c.a) a.omega.setOnes();
    c.alpha = std::ldexp(1.0, -60);
    const auto t = run<S>(c);
    // M/alpha = S (I + alpha K K^T)^{-1}: ||M/alpha - S|| <= alpha ||S|| ||KK^T|| / (1 - alpha ||KK^T||),
    // plus rounding of the recursion (K::rls eps cond_rls).
    const int l = shape.layers - 1;
    for (int g = 0; g < shape.groups; ++g) {
      const auto p = c.problem<Hi>(g, l);
      const Mat<Hi> outer = p.V * p.K.transpose();
      const Hi kk = (p.K * p.K.transpose()).norm(), a = Hi(c.alpha);
      const Hi bound = a * outer.norm() * kk / (1 - a * kk) + Hi(K::rls * eps * test::rls_cond(p)) * outer.norm();
      const Mat<Hi> got = t.states[l].mem[g].M.template cast<Hi>() / a;
      DMREF_PROP_CLOSE("M_rls / alpha == sum_i v_i k_i^T + O(alpha)", to_double(Hi((got - outer).norm())),
                       to_double(bound), test::describe(shape));
      // The outer-product write computes exactly that sum.
      const auto to = run<S>(c, MemoryWrite::outer_product);
      DMREF_PROP_CLOSE("outer-product M == sum_i v_i k_i^T",
                       to_double(Hi((to.states[l].mem[g].M.template cast<Hi>() - outer).norm())),
                       K::sum * eps * (l + 1) * to_double(Hi(Mat<Hi>(p.V.cwiseAbs() * p.K.cwiseAbs().transpose()).norm())),
                       test::describe(shape));
    }
  });
}

TEST_CASE("the undecayed-ridge closed form differs from RLS when prod(lambda) < 1", "[property][ldm]") {
  prop::check("the undecayed-ridge closed form differs from RLS when prod(lambda) < 1", 40, [] {
    auto shape = *gen_shape();
    shape.zero_omega = 0;
    shape.omega_max = std::max(shape.omega_max, 0.1);
    shape.lambda_min = std::min(shape.lambda_min, 0.9);
    auto c = test::make_ldm_case(shape);
    c.lambda(0, 0) = 0.5;  // guarantees prod(lambda) <= 1/2 in group 0
    const auto t = run<S>(c);
    const int l = shape.layers - 1;
    const auto p = c.problem<Hi>(0, l);
    const auto dec = oracle::rls_closed_form(p, oracle::Ridge::decayed);
    const auto con = oracle::rls_closed_form(p, oracle::Ridge::constant);
    // Exact gap: M_dec - M_con = (c_con - c_dec) M_dec R_con^{-1}, c = ridge coefficient.
    const Hi c_dec = p.decay(-1, l) / p.alpha, c_con = 1 / p.alpha;
    const Mat<Hi> gap = (c_con - c_dec) * dec.M * con.Rinv;
    const Mat<Hi> M = t.states[l].mem[0].M.template cast<Hi>();
    const double tol_rls = K::rls * eps * test::rls_cond(p);
    const std::string in = test::describe(shape);
    DMREF_PROP_CLOSE("M_rls - M_const == (c_const - c_dec) M_dec R_const^-1",
                     to_double(Hi((M - con.M - gap).norm())), tol_rls * to_double(dec.M.norm()) +
                     K::solve * to_double(Hi(epsilon<Hi>() * con.cond1 * con.M.norm())), in);
    DMREF_PROP_TRUE("the gap is resolved: ||M_rls - M_const|| > 100 tol",
                    to_double(Hi((M - con.M).norm())) > 100 * tol_rls * to_double(dec.M.norm()), in);
  });
}
