// Backward passes (VJPs) of every scheme against oracle 1, the adjoint
// identity <u, J w> = <J^T u, w> with J w from central differences of the
// forward at 667 bits (tests/support/grad_check.hpp: step, tolerance and its
// derivation), at kernel level (layer outputs given) and at model level
// (W2 tanh(W1 RMSNorm h), layers_backward.hpp), one token each (tokens are
// independent). The structural oracles (oracle 2) are in the properties.
#include "attnres_cases.hpp"
#include "denseformer_cases.hpp"
#include "hc_cases.hpp"
#include "ldm_cases.hpp"
#include "mhc_cases.hpp"
#include "preln_cases.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace dmref;
using namespace dmref::test;
using namespace dmref::test::grad;

namespace {

template <class Spec>
void check_both_levels(const std::string& name, const Spec& spec, int d, int L) {
  for (bool model : {false, true}) {
    const GradProblem<Spec> p(spec, d, L, model);
    CHECK(check_adjoint(name + (model ? " model" : " kernel"), p, 77 + L) < 1);
  }
}

}  // namespace

// mHC's outputs include every layer's coefficients (the states after each
// write keep them: H_pre, H_post, H_res, Ht_res, Ht_pre, Ht_post), so u has an
// upstream for each (mhc_cases.hpp, MhcSpec::has_layer_states).
TEST_CASE("mhc backward: adjoint identity, through every Sinkhorn round", "[backward][mhc]") {
  for (int t : {1, 2, 5, 20}) {
    check_both_levels("mhc paper n3 C4 L3 t_max " + std::to_string(t), MhcSpec(3, 4, 3, MhcPreset::paper, t), 4, 3);
    check_both_levels("mhc deepseek-v4 n3 C4 L3 t_max " + std::to_string(t), MhcSpec(3, 4, 3, MhcPreset::deepseek_v4, t),
                      4, 3);
  }
  check_both_levels("mhc head + init weights n2 C4 L3", MhcSpec(2, 4, 3, MhcPreset::deepseek_v4, 4, true, true), 4, 3);
}

TEST_CASE("ldm backward: adjoint identity", "[backward][ldm]") {
  using W = MemoryWrite;
  check_both_levels("ldm outer g2 dk3 d4 L5", LdmSpec<true>(4, 5, 2, 3, W::outer_product), 4, 5);
  check_both_levels("ldm delta g2 dk3 d4 L5", LdmSpec<true>(4, 5, 2, 3, W::delta), 4, 5);
  check_both_levels("ldm rls g2 dk3 d4 L5", LdmSpec<true>(4, 5, 2, 3, W::rls), 4, 5);
  check_both_levels("ldm rls naive g1 dk3 d4 L4", LdmSpec<true>(4, 4, 1, 3, W::rls, PUpdate::naive), 4, 4);
  check_both_levels("ldm rls joseph g2 dk2 d4 L4", LdmSpec<true>(4, 4, 2, 2, W::rls, PUpdate::joseph), 4, 4);
  // Memory-only read at model level is the zero network (h_0 = M_{-1} q = 0,
  // F(0) = 0, so nothing is ever written): kernel level only.
  const GradProblem<LdmSpec<true>> memread(LdmSpec<true>(4, 4, 2, 3, W::rls, PUpdate::symmetric, false), 4, 4, false);
  CHECK(check_adjoint("ldm rls memory-only read kernel", memread, 81) < 1);
  check_both_levels("ldm rls no write residual", LdmSpec<true>(4, 4, 2, 3, W::rls, PUpdate::symmetric, true, false), 4, 4);
  check_both_levels("ldm rls MLP addresses g2 dk2 d4 L4", LdmSpec<false>(4, 4, 2, 2, W::rls), 4, 4);
  check_both_levels("ldm delta MLP addresses g2 dk2 d4 L3", LdmSpec<false>(4, 3, 2, 2, W::delta), 4, 3);
  // Keys (and weights) from the layer's input residual x_{l-1} (keys_from x_prev).
  const auto prev = KeySource::layer_input;
  check_both_levels("ldm rls MLP keys from x_prev g2 dk2 d4 L4",
                    LdmSpec<false>(4, 4, 2, 2, W::rls, PUpdate::symmetric, true, true, prev), 4, 4);
  check_both_levels("ldm delta MLP keys from x_prev g1 dk3 d4 L3",
                    LdmSpec<false>(4, 3, 1, 3, W::delta, PUpdate::symmetric, true, true, prev), 4, 3);
  check_both_levels("ldm rls MLP keys from x_prev, no write residual",
                    LdmSpec<false>(4, 3, 2, 2, W::rls, PUpdate::symmetric, true, false, prev), 4, 3);
}

TEST_CASE("preln backward: adjoint identity", "[backward][preln]") {
  check_both_levels("preln d5 L4", PrelnSpec{}, 5, 4);
  check_both_levels("preln d3 L0", PrelnSpec{}, 3, 0);
}

TEST_CASE("denseformer backward: adjoint identity", "[backward][denseformer]") {
  check_both_levels("denseformer 1x1 d4 L5", DenseFormerSpec(4, 5, 1, 1), 4, 5);
  check_both_levels("denseformer 2x3 d4 L7", DenseFormerSpec(4, 7, 2, 3), 4, 7);
}

TEST_CASE("attnres backward: adjoint identity", "[backward][attnres]") {
  check_both_levels("attnres full d4 L5", AttnResSpec(4, 5, AttnResVariant::full, 0), 4, 5);
  check_both_levels("attnres block S2 d4 L5", AttnResSpec(4, 5, AttnResVariant::block, 2), 4, 5);
  check_both_levels("attnres block S3 d3 L7", AttnResSpec(3, 7, AttnResVariant::block, 3), 3, 7);
}

TEST_CASE("hc backward: adjoint identity", "[backward][hc]") {
  check_both_levels("hc static n3 d4 L4", HcSpec(3, 4, 4, false, true), 4, 4);
  check_both_levels("hc dynamic n3 d4 L4", HcSpec(3, 4, 4, true, true), 4, 4);
  check_both_levels("hc dynamic-no-tanh n2 d4 L3", HcSpec(2, 4, 3, true, false), 4, 3);
  check_both_levels("hc dynamic rmsnorm n3 d4 L4", HcSpec(3, 4, 4, true, true, HcNorm::rms), 4, 4);
  check_both_levels("hc dynamic-no-tanh rmsnorm n2 d5 L3", HcSpec(2, 5, 3, true, false, HcNorm::rms), 5, 3);
}

namespace {
/// A problem whose VJP is off by a relative 2^-250 (far below any real bug):
/// the identity must still see it, or the tolerance could not fail.
struct Skewed : GradProblem<AttnResSpec> {
  using GradProblem<AttnResSpec>::GradProblem;
  Vec<S> vjp(const Vec<S>& u) const { return GradProblem<AttnResSpec>::vjp(u) * (S(1) + pow(S(2), -250)); }
};
}  // namespace

TEST_CASE("adjoint identity: rejects a VJP off by a relative 2^-250", "[backward]") {
  const Skewed p(AttnResSpec(4, 5, AttnResVariant::full, 0), 4, 5, false);
  CHECK(check_adjoint("attnres full, J^T u * (1 + 2^-250)", p, 3) > 1);
}
