// External truth: the NIST StRD linear-regression datasets, fitted by
// (a) the closed-form weighted-ridge oracle and (b) the RLS-LDM reference with
// lambda = omega = 1 and a large alpha, both at 334 bits (mp100); compared
// with NIST's certified coefficients by the log relative error (LRE).
// Keys are the rows of the design matrix, values the responses (dv = 1).
#include "check.hpp"
#include "nist.hpp"

#include "dmref/ldm.hpp"
#include "dmref/oracles/ldm_rls_closed_form.hpp"
#include "dmref/oracles/ldm_rls_ols.hpp"

#include <catch2/catch.hpp>

#include <cstdio>

using namespace dmref;
using S = mp100;

namespace {

// LRE = -log10(|est - cert| / |cert|) (|est - cert| when cert = 0).
double lre(const S& est, const S& cert) {
  using std::abs;
  using std::log10;
  const S err = cert == 0 ? S(abs(est)) : S(abs(est - cert) / abs(cert));
  return err == 0 ? 99.0 : to_double(S(-log10(err)));
}

// The ridge pulls the estimate toward 0 by (relative) at most ||R^{-1}|| / alpha:
// with alpha = 1e40 and ||R^{-1}|| <= 1e12 for every StRD problem here, the
// bias is below 1e-28. Rounding at 334 bits: eps cond_rls = 1e-100 * alpha
// ||R|| n <= 1e-100 * 1e40 * 1e22 * 1e2, far below. Both are checked below.
const S kAlpha = S("1e40");

}  // namespace

TEST_CASE("NIST StRD: RLS and the closed form reach the certified coefficients", "[nist][ldm][rls]") {
  const char* names[] = {"Norris", "Pontius", "NoInt1", "NoInt2", "Filip", "Longley",
                         "Wampler1", "Wampler2", "Wampler3", "Wampler4", "Wampler5"};
  std::string table = "| dataset | params | min LRE closed form | min LRE RLS | min LRE OLS (QR) | ||R^-1|| alpha^-1 |\n|---|---|---|---|---|---|\n";
  for (const char* name : names) {
    const auto ds = test::read_nist(std::string(DMREF_SOURCE_DIR) + "/fixtures/external/nist-strd/" + name + ".dat");
    Mat<S> X;
    Vec<S> y;
    ds.design(X, y);
    const int n = static_cast<int>(X.rows()), p = ds.parameters;

    oracle::DepthRegression<S> prob{X.transpose(), y.transpose(), Vec<S>::Ones(n), Vec<S>::Ones(n), kAlpha};
    const auto cf = oracle::rls_closed_form(prob);
    const Mat<S> ols = oracle::ols<S>(X.transpose(), y.transpose());

    LdmConfig<S> cfg;
    cfg.d = 1;
    cfg.groups = 1;
    cfg.dk = p;
    cfg.alpha = kAlpha;
    cfg.lambda = Mat<S>::Ones(n, 1);
    std::vector<Vec<S>> v;
    std::vector<Address<S>> a;
    for (int i = 0; i < n; ++i) {
      v.push_back(y.segment(i, 1));
      a.push_back({Vec<S>::Zero(p), X.row(i).transpose(), Vec<S>::Ones(1)});
    }
    const auto t = ldm_kernel<S>(cfg, Vec<S>::Zero(1), v, a);
    const Mat<S>& M = t.states.back().mem[0].M;

    double lre_cf = 99, lre_rls = 99, lre_ols = 99;
    for (int j = 0; j < p; ++j) {
      const S cert = ds.parse<S>(ds.certified[j]);
      lre_cf = std::min(lre_cf, lre(cf.M(0, j), cert));
      lre_rls = std::min(lre_rls, lre(M(0, j), cert));
      lre_ols = std::min(lre_ols, lre(ols(0, j), cert));
    }
    const double bias = to_double(S(cf.Rinv.cwiseAbs().colwise().sum().maxCoeff() / kAlpha));
    char row[200];
    std::snprintf(row, sizeof row, "| %s | %d | %.1f | %.1f | %.1f | %.1e |\n", name, p, lre_cf, lre_rls, lre_ols, bias);
    table += row;
    INFO(name << ": LRE closed form " << lre_cf << ", RLS " << lre_rls << ", OLS " << lre_ols);
    CHECK(bias < 1e-20);   // the ridge bias is negligible at this alpha
    CHECK(lre_cf >= 13);
    CHECK(lre_rls >= 13);
    CHECK(lre_ols >= 13);
  }
  WARN("NIST StRD log relative errors (min over coefficients; 99 = exact; certified values carry 15 digits):\n"
       << table);
}

TEST_CASE("NIST StRD: the reader rejects a malformed file with its name", "[nist]") {
  CHECK_THROWS_WITH(test::read_nist("/nonexistent/x.dat"), Catch::Contains("x.dat"));
}
