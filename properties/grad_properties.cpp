// Properties of the backward passes (docs/framework.md "Backward" and each
// scheme page's "Backward" section): oracle 1, the adjoint identity over
// random shapes and parameters, and the structural oracles 2, each computing
// the same vector-Jacobian product another way, independent of the backward
// code:
//   DenseFormer: the transpose of the matrix form Y = X W^T: dX = dY W, dW = dY^T X;
//   HC (static): the transpose of the linear map of the matrix form, built
//                column by column from oracle::hc_matrix_solve;
//   HC (dynamic, RMSNorm): the LayerNorm variant's VJP on zero-mean streams;
//   AttnRes:     the softmax Jacobian diag(a) - a a^T on the direct form
//                (oracle::attnres_direct) for the pseudo-query gradient;
//   LDM RLS:     the gradient of the memory through the recursion equals the
//                gradient of the decayed-ridge closed form M* = S R^{-1}
//                (oracle::rls_closed_form, same function), by central differences;
//   mHC:         the unrolled Sinkhorn VJP against central differences of the
//                oracle's own Sinkhorn (oracle::sinkhorn) at t_max = 1..30.
// Every check runs at 667 bits (mp200); tolerances are derived where used.
#include "attnres_cases.hpp"
#include "denseformer_cases.hpp"
#include "hc_cases.hpp"
#include "ldm_cases.hpp"
#include "mhc_cases.hpp"
#include "preln_cases.hpp"
#include "harness.hpp"

#include "dmref/oracles/attnres_direct.hpp"
#include "dmref/oracles/denseformer_matrix.hpp"
#include "dmref/oracles/hc_matrix.hpp"
#include "dmref/oracles/ldm_rls_closed_form.hpp"
#include "dmref/oracles/mhc_sinkhorn.hpp"
#include "dmref/scalar.hpp"

using namespace dmref;
using namespace dmref::test;
using namespace dmref::test::grad;

namespace {

/// 2^-k at S.
S two_to(int k) { return pow(S(2), k); }

/// Relative gap ||a - b||_inf / (||b||_inf + tiny) for the structural checks.
S rel_gap(const Vec<S>& a, const Vec<S>& b) {
  using std::abs;
  return (a - b).lpNorm<Eigen::Infinity>() / (b.lpNorm<Eigen::Infinity>() + two_to(-600));
}

}  // namespace

TEST_CASE("adjoint identity over random shapes: every scheme, kernel and model level", "[backward]") {
  prop::check("<u, J w> (central differences) == <J^T u, w> (backward)", 12, [](std::uint64_t seed) {
    next_seed = seed;
    const int d = *rc::gen::inRange(2, 6), L = *rc::gen::inRange(1, 5);
    const bool model = *rc::gen::arbitrary<bool>();
    const int which = *rc::gen::inRange(0, 6);
    double r = 0;
    switch (which) {
      case 0: r = check_adjoint("preln", GradProblem<PrelnSpec>(PrelnSpec{}, d, L, model), seed); break;
      case 1:
        r = check_adjoint("denseformer", GradProblem<DenseFormerSpec>(DenseFormerSpec(d, L, *rc::gen::inRange(1, 3),
                                                                                      *rc::gen::inRange(1, 3)),
                                                                      d, L, model),
                          seed);
        break;
      case 2: {
        const bool block = *rc::gen::arbitrary<bool>();
        r = check_adjoint("attnres", GradProblem<AttnResSpec>(AttnResSpec(d, L, block ? AttnResVariant::block : AttnResVariant::full,
                                                                          *rc::gen::inRange(1, 4)),
                                                              d, L, model),
                          seed);
        break;
      }
      case 3:
        r = check_adjoint("hc", GradProblem<HcSpec>(HcSpec(*rc::gen::inRange(1, 4), d, L, *rc::gen::arbitrary<bool>(),
                                                           *rc::gen::arbitrary<bool>()),
                                                    d, L, model),
                          seed);
        break;
      case 4: {
        const int G = d % 2 == 0 ? *rc::gen::inRange(1, 3) : 1;
        const auto w = *rc::gen::element(MemoryWrite::outer_product, MemoryWrite::delta, MemoryWrite::rls);
        const auto pu = *rc::gen::element(PUpdate::symmetric, PUpdate::naive, PUpdate::joseph);
        r = check_adjoint("ldm", GradProblem<LdmSpec<true>>(LdmSpec<true>(d, L, G, *rc::gen::inRange(1, 4), w, pu), d, L, model),
                          seed);
        break;
      }
      default:
        r = check_adjoint("mhc", GradProblem<MhcSpec>(MhcSpec(*rc::gen::inRange(1, 4), d, L,
                                                              *rc::gen::element(MhcPreset::paper, MhcPreset::deepseek_v4),
                                                              *rc::gen::inRange(1, 21)),
                                                      d, L, model),
                          seed);
    }
    RC_ASSERT(r < 1);
  });
}

TEST_CASE("denseformer backward == transpose of the matrix form", "[backward][denseformer]") {
  // Y = X W^T is linear in X and in W: its VJP is dX = dY W, dW = dY^T X
  // (oracle::denseformer_weights builds W). Both are sums of at most L+1
  // products at 667 bits: the relative gap is below (L+1) 2^-660; allowed 2^-600.
  prop::check("DenseFormer VJP == (dY W, dY^T X)", 20, [](std::uint64_t seed) {
    next_seed = seed;
    const int d = *rc::gen::inRange(1, 6), L = *rc::gen::inRange(1, 9), k = *rc::gen::inRange(1, 4), per = *rc::gen::inRange(1, 4);
    const DenseFormerSpec spec(d, L, k, per);
    const GradProblem<DenseFormerSpec> p(spec, d, L, false);
    const auto m = spec.scheme();
    const auto tr = forward(m, p.e, L, GivenOutputs<S>{&p.v});
    Upstream<S, Backward<DenseFormer<S>>::Adjoint> up;
    Mat<S> dY(d, L + 1), X(d, L + 1);
    for (int l = 0; l <= L; ++l) dY.col(l) = rnd(d);
    for (int l = 0; l < L; ++l) up.h.push_back(dY.col(l));
    up.out = dY.col(L);
    const auto g = backward(m, p.e, tr, GivenOutputsVjp{}, up);
    X.col(0) = p.e;
    for (int l = 0; l < L; ++l) X.col(l + 1) = p.v[l];
    const Mat<S> W = oracle::denseformer_weights<S>(spec.c.a, k, per);
    const Mat<S> dX = dY * W, dW = dY.transpose() * X;
    Vec<S> got(d * (L + 1)), want(d * (L + 1));
    got.head(d) = g.e;
    want = dX.reshaped();
    for (int l = 0; l < L; ++l) got.segment(d * (l + 1), d) = g.v[l];
    RC_ASSERT(rel_gap(got, want) < two_to(-600));
    for (int i = 1; i <= L; ++i)
      for (int j = 0; j <= i; ++j)
        if (spec.free(i, j)) RC_ASSERT(abs(g.param(i, j) - dW(i, j)) <= two_to(-600) * (S(1) + abs(dW(i, j))));
  });
}

TEST_CASE("hc static backward == transpose of the matrix form", "[backward][hc]") {
  // Static HC with given layer outputs is linear in (e, v) (outputs: every
  // h_l, out and the final streams H): J is the matrix
  // whose column c is the matrix-form oracle applied to unit vector c, so
  // J^T u is exact up to the rounding of both sides (sums of O(n L) terms at
  // 667 bits): allowed relative gap 2^-600.
  prop::check("HC static VJP == A^T u, A from oracle::hc_matrix_solve", 10, [](std::uint64_t seed) {
    next_seed = seed;
    const int n = *rc::gen::inRange(1, 4), d = *rc::gen::inRange(1, 4), L = *rc::gen::inRange(1, 5);
    const HcSpec spec(n, d, L, false, true);
    auto outputs = [&](const Vec<S>& x) {  // x = (e, v_0..v_{L-1}) -> (h_0..h_{L-1}, out), by the oracle
      oracle::HcProblem<S> q;
      q.n = n;
      q.e = x.head(d);
      for (int l = 0; l < L; ++l) {
        q.v.push_back(x.segment(d * (l + 1), d));
        q.layer.push_back({spec.c.layers[l].am, spec.c.layers[l].ar, spec.c.layers[l].b, {}, {}, {}, {}, {}, S(0), S(0)});
      }
      const auto sol = oracle::hc_matrix_solve<S>(q);
      Vec<S> y(d * (L + 1) + n * d);  // h_0..h_{L-1}, out, then the final streams H (column-major)
      for (int l = 0; l < L; ++l) y.segment(d * l, d) = sol.h[l];
      y.segment(d * L, d) = sol.out;
      y.tail(n * d) = sol.H[L - 1].reshaped();
      return y;
    };
    const int N = d * (L + 1), M = N + n * d;
    Mat<S> A(M, N);
    for (int c = 0; c < N; ++c) A.col(c) = outputs(Vec<S>(Vec<S>::Unit(N, c)));
    const GradProblem<HcSpec> p(spec, d, L, false);
    const Vec<S> u = rnd(M);
    RC_ASSERT(rel_gap(p.vjp(u), Vec<S>(A.transpose() * u).eval()) < two_to(-600));
  });
}

TEST_CASE("hc rmsnorm backward == hc layernorm backward on zero-mean streams", "[backward][hc]") {
  // With e and every v_l of zero mean, every stream row stays zero-mean, so
  // LayerNorm (bias 0) and RMSNorm (same gain, eps) are the same function of
  // it and the forward passes agree. The gradients: the LayerNorm VJP is the
  // RMSNorm VJP minus its mean (layers_backward.hpp), so the two adjoints of
  // H differ by a constant per row; such a difference gives nothing in the
  // coefficient adjoints (dots with zero-mean rows H_j and v), hence nothing
  // in any parameter gradient, and only a constant vector in d e and d v_l.
  // So: parameter gradients equal, d e, d v_l equal after removing their
  // mean. Both at 667 bits; the computed row means are not exactly 0 (about
  // d 2^-667 max|H|), which with O(1) conditioning over L <= 4 layers stays
  // far below the allowed relative gap 2^-600.
  prop::check("HC-RMSNorm VJP == HC-LayerNorm VJP on zero-mean streams", 10, [](std::uint64_t seed) {
    next_seed = seed;
    const int n = *rc::gen::inRange(1, 4), d = *rc::gen::inRange(2, 7), L = *rc::gen::inRange(1, 5);
    const bool use_tanh = *rc::gen::arbitrary<bool>();
    HcSpec ln(n, d, L, true, use_tanh, HcNorm::layer);
    HcSpec rms = ln;
    rms.c.norm = HcNorm::rms;
    for (auto& q : ln.c.layers) q.ln_bias.setZero();
    auto centred = [d](const Vec<S>& x) { return Vec<S>(x.array() - S(x.sum() / S(d))); };
    GradProblem<HcSpec> pl(ln, d, L, false);
    pl.e = centred(pl.e);
    for (auto& v : pl.v) v = centred(v);
    GradProblem<HcSpec> pr(rms, d, L, false);
    pr.e = pl.e;
    pr.v = pl.v;
    RC_ASSERT(rel_gap(pr.outputs(), pl.outputs()) < two_to(-600));
    const Vec<S> u = rnd(int(pl.outputs().size()));
    auto grads = [&](const GradProblem<HcSpec>& p) {  // d e, d v (centred), then every parameter but ln_bias
      const auto m = p.scheme();
      const auto tr = forward(m, p.e, L, GivenOutputs<S>{&p.v});
      Upstream<S, Backward<HyperConnections<S>>::Adjoint> up;
      for (int l = 0; l < L; ++l) up.h.push_back(u.segment(l * d, d));
      up.out = u.segment(L * d, d);
      up.last = HcSpec::state_adjoint(m, tr.last, Vec<S>(u.tail(n * d)));
      auto g = backward(m, p.e, tr, GivenOutputsVjp{}, up);
      std::vector<Vec<S>> parts{centred(g.e)};
      for (const auto& v : g.v) parts.push_back(centred(v));
      for (auto& q : g.param) {
        parts.insert(parts.end(), {q.am, q.ar.reshaped(), q.b, q.ln_gain, q.wm, q.wr.reshaped(), q.wb});
        parts.push_back(Vec<S>::Constant(1, q.s_a));
        parts.push_back(Vec<S>::Constant(1, q.s_b));
      }
      return concat(parts);
    };
    RC_ASSERT(rel_gap(grads(pr), grads(pl)) < two_to(-600));
  });
}

TEST_CASE("attnres backward == softmax Jacobian diag(a) - a a^T on the direct form", "[backward][attnres]") {
  // One readout over n sources. With a, b_i from oracle::attnres_direct and
  // keys k_i = g * b_i / r_i, the pseudo-query and gain gradients are
  //   dz = (diag(a) - a a^T) B^T dh,  dw = sum_i dz_i k_i,  dg = sum_i dz_i w * b_i / r_i.
  // Both sides are O(n d) sums at 667 bits: allowed relative gap 2^-600.
  prop::check("AttnRes dw, dg == through diag(a) - a a^T", 20, [](std::uint64_t seed) {
    next_seed = seed;
    const int n = *rc::gen::inRange(1, 9), d = *rc::gen::inRange(1, 9);
    oracle::DepthReadout<S> r;
    std::vector<Vec<S>> src;
    for (int i = 0; i < n; ++i) {
      src.push_back(rnd(d));
      r.terms.push_back(Mat<S>(src.back()));
    }
    r.w = rnd(d, 2 / std::sqrt(d));
    r.g = Vec<S>(rnd(d, 0.5).array() + S(1));
    r.eps = S(1) / S(1000000);
    const auto direct = oracle::attnres_direct<S>(r);
    const Vec<S> dh = rnd(d);
    const Mat<S> J = Mat<S>(direct.a.asDiagonal()) - direct.a * direct.a.transpose();
    const Vec<S> dz = J * (direct.b.transpose() * dh);
    Vec<S> dw = Vec<S>::Zero(d), dg = Vec<S>::Zero(d);
    for (int i = 0; i < n; ++i) {
      const S ri = sqrt(direct.b.col(i).squaredNorm() / S(d) + r.eps);
      dw += dz(i) * r.g.cwiseProduct(direct.b.col(i)) / ri;
      dg += dz(i) * r.w.cwiseProduct(direct.b.col(i)) / ri;
    }
    std::vector<Vec<S>> dsrc(n, Vec<S>::Zero(d));
    Vec<S> gw = Vec<S>::Zero(d), gg = Vec<S>::Zero(d);
    attnres_mix_vjp<S>(src, r.w, r.g, r.eps, dh, dsrc, gw, gg);
    RC_ASSERT((gw - dw).lpNorm<Eigen::Infinity>() <= two_to(-600) * (S(1) + dw.lpNorm<Eigen::Infinity>()));
    RC_ASSERT((gg - dg).lpNorm<Eigen::Infinity>() <= two_to(-600) * (S(1) + dg.lpNorm<Eigen::Infinity>()));
  });
}

TEST_CASE("rls backward through the recursion == gradient of the decayed-ridge closed form", "[backward][ldm]") {
  // The final memory M_L of one group is the closed form M* = S R^{-1}
  // (oracle::rls_closed_form) as a function of keys, values, weights,
  // forgetting factors and alpha: the recursion's VJP for an upstream dM must
  // be that function's. <dM, J w> comes from central differences of the
  // closed form (step 2^-200 at 667 bits; error analysis and tolerance as in
  // grad_check.hpp), <J^T dM, w> from the backward with only d(streams) = dM.
  prop::check("RLS VJP == closed-form VJP", 12, [](std::uint64_t seed) {
    next_seed = seed;
    const int dk = *rc::gen::inRange(1, 5), d = *rc::gen::inRange(1, 4), L = *rc::gen::inRange(1, 9);
    const auto pu = *rc::gen::element(PUpdate::symmetric, PUpdate::naive, PUpdate::joseph);
    LdmSpec<true> spec(d, L, 1, dk, MemoryWrite::rls, pu);
    const GradProblem<LdmSpec<true>> p(spec, d, L, false);
    // Inputs x = (v_0..v_{L-1}, k_0..k_{L-1}, omega, lambda, alpha).
    auto pack = [&](const std::vector<Vec<S>>& v, const std::vector<Vec<S>>& k, const Vec<S>& om, const Vec<S>& lam,
                    const S& al) {
      Vec<S> x(L * d + L * dk + 2 * L + 1);
      for (int l = 0; l < L; ++l) {
        x.segment(l * d, d) = v[l];
        x.segment(L * d + l * dk, dk) = k[l];
      }
      x.segment(L * (d + dk), L) = om;
      x.segment(L * (d + dk) + L, L) = lam;
      x(x.size() - 1) = al;
      return x;
    };
    std::vector<Vec<S>> ks;
    Vec<S> om(L);
    for (int l = 0; l < L; ++l) {
      ks.push_back(spec.addr.a[l].k);
      om(l) = spec.addr.a[l].omega(0);
    }
    const Vec<S> x0 = pack(p.v, ks, om, Vec<S>(spec.c.lambda.col(0)), spec.c.alpha);
    auto closed = [&](const Vec<S>& x) {
      oracle::DepthRegression<S> q;
      q.K.resize(dk, L);
      q.V.resize(d, L);
      for (int l = 0; l < L; ++l) {
        q.K.col(l) = x.segment(L * d + l * dk, dk);
        q.V.col(l) = x.segment(l * d, d);
      }
      q.omega = x.segment(L * (d + dk), L);
      q.lambda = x.segment(L * (d + dk) + L, L);
      q.alpha = x(x.size() - 1);
      return Vec<S>(oracle::rls_closed_form<S>(q).M.reshaped());
    };
    const Mat<S> dM = rnd(d, dk, 1);
    const Vec<S> w = rnd(int(x0.size()));
    const S h = two_to(-200);
    const S jw = Vec<S>(dM.reshaped()).dot(oracle::central_difference<S>(closed, x0, w, h));
    // The recursion's VJP with upstream only on the final memory.
    const auto m = spec.scheme();
    const auto tr = forward(m, p.e, L, GivenOutputs<S>{&p.v});
    using B = Backward<LdmKernel<S>>;
    Upstream<S, B::Adjoint> up;
    up.last = B{m}.zero_adjoint(tr.last);
    up.last->M[0] = dM;
    const auto g = backward(m, p.e, tr, GivenOutputsVjp{}, up);
    std::vector<Vec<S>> gk;
    Vec<S> gom(L);
    for (int l = 0; l < L; ++l) {
      gk.push_back(g.param.address[l].k);
      gom(l) = g.param.address[l].omega(0);
    }
    const S jtu = pack(g.v, gk, gom, Vec<S>(g.param.lambda.col(0)), g.param.alpha).dot(w);
    const S tol = two_to(-300) * Vec<S>(dM.reshaped()).lpNorm<1>() * pow(S(1) + w.lpNorm<1>(), 3) *
                  (S(1) + closed(x0).lpNorm<Eigen::Infinity>());
    RC_ASSERT(jw != 0);
    RC_ASSERT(abs(jw - jtu) <= tol);
  });
}

TEST_CASE("mhc Sinkhorn backward == central differences of the oracle's Sinkhorn, t_max = 1..30", "[backward][mhc]") {
  // The derivative of the t-round recurrence, not of its limit: at every
  // t_max, <U, J W> by central differences of oracle::sinkhorn (its own loops;
  // step 2^-200 at 667 bits, tolerance as in grad_check.hpp) must equal
  // <Sinkhorn^T(U), W> from mhc_sinkhorn_vjp.
  prop::check("unrolled Sinkhorn VJP == its finite differences", 6, [](std::uint64_t seed) {
    next_seed = seed;
    const int n = *rc::gen::inRange(1, 6);
    const bool dsv4 = *rc::gen::arbitrary<bool>();
    const S eps = dsv4 ? S(1) / S(1000000) : S(0);
    const Mat<S> Z = rnd(n, n, 2), U = rnd(n, n, 1), W = rnd(n, n, 1);
    for (int t = 1; t <= 30; ++t) {
      oracle::SinkhornOptions<S> o;
      o.rounds = t;
      o.eps_add = o.eps_den = eps;
      auto f = [&](const Vec<S>& z) { return Vec<S>(oracle::sinkhorn<S>(Mat<S>(z.reshaped(n, n)), o).H.reshaped()); };
      const Vec<S> z0 = Z.reshaped(), w = W.reshaped(), u = U.reshaped();
      const S jw = u.dot(oracle::central_difference<S>(f, z0, w, two_to(-200)));
      const S jtu = Vec<S>(mhc_sinkhorn_vjp<S>(Z, t, eps, eps, U).reshaped()).dot(w);
      const S tol = two_to(-300) * u.lpNorm<1>() * pow(S(1) + w.lpNorm<1>(), 3) * (S(1) + f(z0).lpNorm<Eigen::Infinity>());
      RC_ASSERT(abs(jw - jtu) <= tol);
    }
  });
}
