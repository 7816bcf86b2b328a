// Properties of the RLS formulations the stability study compares
// (docs/stability.md): each equals the closed form in exact arithmetic, so each,
// run at 257 bits (mp77), must match the 667-bit closed form (mp200,
// oracles/.../ldm_rls_closed_form.hpp) within k eps cond:
//   naive / symmetric / Joseph P updates   ldm.hpp's rls_step (PUpdate)
//   Potter square root, P = F F^T           rls_forms.hpp
//   inverse QR-RLS, P = S S^T (S lower)     rls_forms.hpp
//   QR-RLS, P^-1 = C^T C (C upper)          rls_forms.hpp
//   U-D (Bierman), P = U D U^T              rls_forms.hpp
//   information form + Cholesky             rls_forms.hpp
// Cases: dk up to 16, depth up to 64, lambda down to 0.3, omega in [0, 10] with
// exact zeros, alpha over four decades, nearly collinear keys.
#include "check.hpp"
#include "harness.hpp"
#include "ldm_cases.hpp"

#include "dmref/ldm.hpp"
#include "dmref/oracles/ldm_rls_closed_form.hpp"
#include "dmref/rls_forms.hpp"

#include <algorithm>
#include <functional>

using namespace dmref;
using dmref::test::K;
using S = mp77;
using Hi = mp200;

namespace {

const double eps = to_double(epsilon<S>());


rc::Gen<test::LdmShape> gen_shape(double lambda_lo) {
  return rc::gen::build<test::LdmShape>(
      rc::gen::set(&test::LdmShape::dk, rc::gen::inRange(1, 17)),
      rc::gen::set(&test::LdmShape::dv, rc::gen::inRange(1, 4)),
      rc::gen::set(&test::LdmShape::groups, rc::gen::just(1)),
      rc::gen::set(&test::LdmShape::layers, rc::gen::inRange(1, 65)),
      rc::gen::set(&test::LdmShape::log10_alpha, prop::grid(-2, 2)),
      rc::gen::set(&test::LdmShape::lambda_min, prop::grid(lambda_lo, 1)),
      rc::gen::set(&test::LdmShape::omega_max, prop::grid(0, 10)),
      rc::gen::set(&test::LdmShape::zero_omega, rc::gen::element(0.0, 0.1, 0.5)),
      rc::gen::set(&test::LdmShape::collinear, rc::gen::element(0.0, 0.0, 1e-3)),
      rc::gen::set(&test::LdmShape::seed, rc::gen::arbitrary<std::uint64_t>()));
}

/// M and P of one formulation after each layer (group 0).
struct Trajectory {
  std::vector<Mat<S>> M, P;
};

Trajectory by_pupdate(const test::LdmCase& c, PUpdate how) {
  auto cfg = c.config<S>();
  cfg.p_update = how;
  const auto t = ldm_kernel<S>(cfg, convert<S>(c.e), c.values<S>(), c.addresses<S>());
  Trajectory r;
  for (const auto& st : t.states) {
    r.M.push_back(st.mem[0].M);
    r.P.push_back(st.mem[0].P);
  }
  return r;
}

Trajectory by_potter(const test::LdmCase& c) {
  const auto p = c.problem<S>(0, c.shape.layers - 1);
  Mat<S> M = Mat<S>::Zero(p.V.rows(), p.K.rows());
  Mat<S> F = rls_potter_init<S>(static_cast<int>(p.K.rows()), p.alpha);
  Trajectory r;
  for (int l = 0; l < p.n(); ++l) {
    rls_potter_step<S>(M, F, p.K.col(l), p.V.col(l), p.omega(l), p.lambda(l));
    r.M.push_back(M);
    r.P.push_back(F * F.transpose());
  }
  return r;
}

Trajectory by_inverse_qr(const test::LdmCase& c) {
  const auto p = c.problem<S>(0, c.shape.layers - 1);
  Mat<S> M = Mat<S>::Zero(p.V.rows(), p.K.rows());
  Mat<S> F = rls_inverse_qr_init<S>(static_cast<int>(p.K.rows()), p.alpha);
  Trajectory r;
  for (int l = 0; l < p.n(); ++l) {
    rls_inverse_qr_step<S>(M, F, p.K.col(l), p.V.col(l), p.omega(l), p.lambda(l));
    r.M.push_back(M);
    r.P.push_back(F * F.transpose());
  }
  return r;
}

Trajectory by_qr(const test::LdmCase& c) {
  const auto p = c.problem<S>(0, c.shape.layers - 1);
  Mat<S> C, Z;
  rls_qr_init<S>(static_cast<int>(p.K.rows()), static_cast<int>(p.V.rows()), p.alpha, C, Z);
  Trajectory r;
  for (int l = 0; l < p.n(); ++l) {
    rls_qr_step<S>(C, Z, p.K.col(l), p.V.col(l), p.omega(l), p.lambda(l));
    Mat<S> P;
    r.M.push_back(rls_qr_memory<S>(C, Z, &P));
    r.P.push_back(P);
  }
  return r;
}

Trajectory by_ud(const test::LdmCase& c) {
  const auto p = c.problem<S>(0, c.shape.layers - 1);
  Mat<S> M = Mat<S>::Zero(p.V.rows(), p.K.rows()), U;
  Vec<S> D;
  rls_ud_init<S>(static_cast<int>(p.K.rows()), p.alpha, U, D);
  Trajectory r;
  for (int l = 0; l < p.n(); ++l) {
    rls_ud_step<S>(M, U, D, p.K.col(l), p.V.col(l), p.omega(l), p.lambda(l));
    r.M.push_back(M);
    r.P.push_back(rls_ud_P<S>(U, D));
  }
  return r;
}

Trajectory by_information(const test::LdmCase& c) {
  const auto p = c.problem<S>(0, c.shape.layers - 1);
  const auto dk = p.K.rows();
  Mat<S> R = Mat<S>::Identity(dk, dk) / p.alpha, B = Mat<S>::Zero(p.V.rows(), dk);
  Trajectory r;
  for (int l = 0; l < p.n(); ++l) {
    rls_information_step<S>(R, B, p.K.col(l), p.V.col(l), p.omega(l), p.lambda(l));
    Mat<S> P;
    r.M.push_back(rls_closed_form_solve<S>(R, B, &P));
    r.P.push_back(P);
  }
  return r;
}

/// Checks a trajectory against the closed form at every layer:
/// ||P - P*||_F <= k eps cond(l) ||P*||_F and ||M - M*||_F <= k eps cond(l)
/// ||S_abs||_F ||P*||_F (test::rls_m_error), cond(l) from `cond_at(RlsCondition value, l)`.
double check_trajectory(const std::string& relation, const test::LdmCase& c, const Trajectory& t, double k,
                        const std::function<double(double, int)>& cond_at) {
  test::RlsCondition rc(c.alpha);
  double worst = 0;
  for (int l = 0; l < c.shape.layers; ++l) {
    const auto p = c.problem<Hi>(0, l);
    const auto cf = oracle::rls_closed_form(p);
    const double cond = cond_at(rc.add(cf, c.lambda(l, 0)), l);
    const double tol = k * eps * cond;
    const double eM = test::rls_m_error(t.M[l], p, cf);  // in ||S_abs|| ||P*|| units
    const double eP = test::rel_err<Hi>(t.P[l], cf.Rinv);
    const std::string where = test::describe(c.shape) + " layer " + std::to_string(l);
    DMREF_PROP_CLOSE(relation + ": M", eM, tol, where);
    DMREF_PROP_CLOSE(relation + ": P", eP, tol, where);
    worst = std::max({worst, eM / (eps * cond), eP / (eps * cond)});
  }
  return worst;
}

double plain(double cond, int) { return cond; }

void report(const std::string& what, double worst, double k) {
  std::cout << "  " << what << ": worst error / (eps cond) = " << worst << " (k = " << k << ") at " << bits<S>()
            << " bits\n";
}

}  // namespace

TEST_CASE("symmetric P update == closed form (M and P, every layer)", "[property][stability]") {
  static double worst = 0;
  prop::check("symmetric P update == closed form (M and P, every layer)", 60, [] {
    const auto c = test::make_ldm_case(*gen_shape(0.3));
    worst = std::max(worst, check_trajectory("symmetric == closed form", c, by_pupdate(c, PUpdate::symmetric), K::rls, plain));
  });
  report("symmetric", worst, K::rls);
}

TEST_CASE("Joseph P update == closed form (M and P, every layer)", "[property][stability]") {
  static double worst = 0;
  prop::check("Joseph P update == closed form (M and P, every layer)", 60, [] {
    const auto c = test::make_ldm_case(*gen_shape(0.3));
    // Joseph forms A P A^T with A = I - w g k^T, itself computed by
    // cancellation (the same amplification gamma / lambda as the symmetric
    // form's P - w g pi^T), and A enters twice: k = 2 K::rls. (An earlier
    // k = 2 K::rls dk compensated for measuring M's error against ||M*||,
    // which the terms of S can make arbitrarily small; see check_trajectory.)
    const double k = 2 * K::rls;
    worst = std::max(worst, check_trajectory("Joseph == closed form", c, by_pupdate(c, PUpdate::joseph), k, plain));
  });
  report("Joseph", worst, 2 * K::rls);
}

TEST_CASE("naive P update == closed form while prod(1/lambda) eps stays small", "[property][stability]") {
  // ldm-math.md: the naive update multiplies the skew-symmetric part of every
  // rounding error by 1/lambda each layer, undamped, so its condition number is
  // cond_rls times prod_{i<=l} 1/lambda_i (<= 2^64 here: lambda >= 0.5, 64 layers).
  static double worst = 0;
  prop::check("naive P update == closed form while prod(1/lambda) eps stays small", 60, [] {
    const auto c = test::make_ldm_case(*gen_shape(0.5));
    std::vector<double> growth(c.shape.layers);
    double g = 1;
    for (int l = 0; l < c.shape.layers; ++l) growth[l] = (g /= c.lambda(l, 0));
    worst = std::max(worst, check_trajectory("naive == closed form", c, by_pupdate(c, PUpdate::naive), K::rls,
                                             [&](double cond, int l) { return cond * growth[l]; }));
  });
  report("naive (cond x prod 1/lambda)", worst, K::rls);
}

TEST_CASE("Potter square root: F F^T == R^-1 and M == S R^-1 (every layer)", "[property][stability]") {
  static double worst = 0;
  prop::check("Potter square root: F F^T == R^-1 and M == S R^-1 (every layer)", 60, [] {
    const auto c = test::make_ldm_case(*gen_shape(0.3));
    // K::rls's analysis carries over with the factor in place of P. Potter's
    // downdate F (I - w b psi psi^T) has the same cancellation as P's, only
    // milder: 1 - w b psi^T psi = sqrt(lambda / gamma), so a rounding of
    // w b psi^T psi is amplified by sqrt(gamma / lambda) <= gamma / lambda (the
    // symmetric form's factor). A step rounds twice as often (psi = F^T k and
    // F psi where the symmetric form has one P k; b = 1/(gamma + sqrt(lambda
    // gamma)) costs 4 roundings; F / sqrt(lambda) 2), and P = F F^T doubles
    // F's relative error: k = 4 K::rls.
    const double k = 4 * K::rls;
    worst = std::max(worst, check_trajectory("Potter == closed form", c, by_potter(c), k, plain));
  });
  report("Potter", worst, 4 * K::rls);
}

TEST_CASE("inverse QR-RLS: S S^T == R^-1 and M == S R^-1 (every layer)", "[property][stability]") {
  static double worst = 0;
  prop::check("inverse QR-RLS: S S^T == R^-1 and M == S R^-1 (every layer)", 60, [] {
    const auto c = test::make_ldm_case(*gen_shape(0.3));
    // As Potter's: a factor of P in place of P. A step rounds about twice as
    // often as the symmetric form's (u = S^T k, then one Givens rotation of
    // column 0 against each column, whose c, s, rho cost 5 roundings and whose
    // application 3 per entry, where the symmetric form has one P k and one
    // rank-1 downdate), and P = S S^T doubles S's relative error: k = 4 K::rls.
    // Orthogonal rotations do not amplify rounding errors (no cancellation
    // such as P - w g pi^T), so this bound is loose, not tight.
    const double k = 4 * K::rls;
    worst = std::max(worst, check_trajectory("inverse QR-RLS == closed form", c, by_inverse_qr(c), k, plain));
  });
  report("inverse QR-RLS", worst, 4 * K::rls);
}

TEST_CASE("QR-RLS (Givens): C^-1 C^-T == R^-1 and Z^T C^-T == S R^-1 (every layer)", "[property][stability]") {
  // The factor C of R is accumulated by rotations (the roundings of the
  // inverse QR form: 4 K::rls with cond as for a factor), and then, like the
  // information form, solved: back substitution with C has backward error
  // (dk + 1) eps |C|, so cond grows by (dk + 1) as there.
  static double worst = 0;
  prop::check("QR-RLS (Givens): C^-1 C^-T == R^-1 and Z^T C^-T == S R^-1 (every layer)", 60, [] {
    const auto c = test::make_ldm_case(*gen_shape(0.3));
    const int dk = c.shape.dk;
    worst = std::max(worst, check_trajectory("QR-RLS == closed form", c, by_qr(c), 4 * K::rls,
                                             [dk](double cond, int) { return cond * (dk + 1); }));
  });
  report("QR-RLS (cond x (dk + 1))", worst, 4 * K::rls);
}

TEST_CASE("U-D (Bierman): U D U^T == R^-1 and M == S R^-1 (every layer)", "[property][stability]") {
  // Bierman's update is the symmetric form's downdate carried out on the
  // factors: f = U^T a and vv = D f (the symmetric form's P k, in two
  // products), then per column one alpha, one d, and per entry of U two
  // roundings; P = U D U^T is two more products. Twice the symmetric form's
  // roundings, and P formed from factors: k = 4 K::rls, as for Potter.
  static double worst = 0;
  prop::check("U-D (Bierman): U D U^T == R^-1 and M == S R^-1 (every layer)", 60, [] {
    const auto c = test::make_ldm_case(*gen_shape(0.3));
    worst = std::max(worst, check_trajectory("U-D == closed form", c, by_ud(c), 4 * K::rls, plain));
  });
  report("U-D (Bierman)", worst, 4 * K::rls);
}

TEST_CASE("information form + Cholesky == closed form (M and P, every layer)", "[property][stability]") {
  // The recomputed closed form adds a Cholesky solve to the accumulation of R:
  // its backward error (dk + 1) eps |C||C^T| makes cond grow by a factor dk + 1.
  static double worst = 0;
  prop::check("information form + Cholesky == closed form (M and P, every layer)", 60, [] {
    const auto c = test::make_ldm_case(*gen_shape(0.3));
    const int dk = c.shape.dk;
    worst = std::max(worst, check_trajectory("information form == closed form", c, by_information(c), K::rls,
                                             [dk](double cond, int) { return cond * (dk + 1); }));
  });
  report("information form (cond x (dk + 1))", worst, K::rls);
}

TEST_CASE("rank-deficient keys: P == alpha / prod(lambda) on unexcited directions (every formulation)",
          "[property][stability]") {
  // ldm-math.md: in key directions that are never excited P grows exactly like
  // alpha / prod(lambda) (wind-up). With keys exactly zero in the last
  // dk - dk/2 coordinates every formulation keeps P block diagonal to the bit
  // (products with exact zeros), and the unexcited block is a chain of at most
  // 4 roundings per layer (Potter and inverse QR: sqrt(lambda) and the
  // division, doubled by F F^T; QR: C sqrt(lambda), the rotation with a zero
  // observation entry being exact as sqrt(fl(a a)) = a in binary; U-D:
  // d prev / alpha with alpha = prev, and D / lambda) plus 3 at the end (the
  // Cholesky pivot and solve; QR's back substitution): cond = 4 (l + 1) + 3.
  static double worst = 0;
  prop::check("rank-deficient keys: P == alpha / prod(lambda) on unexcited directions (every formulation)", 60, [] {
    auto shape = *gen_shape(0.3);
    shape.dk = std::max(shape.dk, 2);
    auto c = test::make_ldm_case(shape);
    const int m = shape.dk / 2;
    for (auto& a : c.a) a.k.tail(shape.dk - m).setZero();
    const std::vector<std::pair<std::string, Trajectory>> forms{
        {"naive", by_pupdate(c, PUpdate::naive)},   {"symmetric", by_pupdate(c, PUpdate::symmetric)},
        {"joseph", by_pupdate(c, PUpdate::joseph)}, {"potter", by_potter(c)},
        {"inverse-qr", by_inverse_qr(c)},           {"qr", by_qr(c)},
        {"ud", by_ud(c)},                           {"information", by_information(c)}};
    Hi windup = Hi(c.alpha);
    for (int l = 0; l < shape.layers; ++l) {
      windup /= Hi(c.lambda(l, 0));
      const double tol = K::rls_windup * eps * (4.0 * (l + 1) + 3);
      for (const auto& [name, t] : forms) {
        const std::string where = name + ", " + test::describe(shape) + " layer " + std::to_string(l);
        const Mat<S>& P = t.P[l];
        DMREF_PROP_TRUE("P is block diagonal (excited | unexcited)",
                        P.topRightCorner(m, shape.dk - m).isZero(0) && P.bottomLeftCorner(shape.dk - m, m).isZero(0),
                        where);
        const Mat<Hi> U = P.bottomRightCorner(shape.dk - m, shape.dk - m).template cast<Hi>();
        const Mat<Hi> want = windup * Mat<Hi>::Identity(shape.dk - m, shape.dk - m);
        const double err = to_double(Hi((U - want).norm() / want.norm()));
        DMREF_PROP_CLOSE("unexcited block == alpha / prod(lambda) I", err, tol, where);
        worst = std::max(worst, err / (eps * (4.0 * (l + 1) + 3)));
      }
    }
  });
  report("wind-up (cond = 4 (l + 1) + 3)", worst, K::rls_windup);
}
