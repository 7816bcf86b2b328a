// dmref/conformance/corpus.hpp: the golden-fixture corpus. Each case is a
// stable hierarchical id, a scheme, a preset, an input dtype, a config and a
// seed; its inputs and parameters are generated from the seed with the
// portable SplitMix64 stream and rounded to the input dtype, so the files are
// byte-identical on every machine. docs/fixtures.md lists the cases.
#pragma once

#include "dmref/conformance/problem.hpp"
#include "dmref/conformance/tolerance.hpp"  // format_of
#include "dmref/dtype.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dmref::conf {

struct CaseSpec {
  std::string id;      // <scheme>[_<variant>].<level>.<shape>.<dtype>.s<seed>
  std::string scheme;  // evaluate() dispatch name
  std::string preset;  // "default" or a named preset ("paper", "deepseek-v4", ...)
  std::string dtype;   // input dtype: "f32", "bf16", "f16"
  json config;
  std::uint64_t seed = 1;
  bool committed = true;  // in fixtures/golden/ (false: regenerated on demand only)
  bool ci = true;         // in the fast subset CI regenerates
  // Input-generation options that are not part of the problem (not read by
  // evaluate): scales that make a case separate a mutant (docs/fixtures.md,
  // "How inputs are generated"). Recorded in the fixture as input_options.
  json inputs = json::object();
  bool grad = false;      // backward case: upstream gradients input.grad.* drawn after the inputs, grad.* goldens
};

/// The corpus's input dtypes: every scheme has cases at each.
inline const char* const kCorpusDtypes[] = {"f32", "bf16", "f16"};

/// A forward case (each scheme's corpus rows, src/conformance/schemes/<s>.cpp).
CaseSpec forward_case(std::string id, std::string scheme, std::string preset, std::string dtype, json config,
                      bool committed = true, bool ci = true, json inputs = json::object());
/// A backward case: `id` without the dtype and seed suffix; its level is
/// "kernel_grad" or "model_grad" in the id (so a forward glob such as
/// preln.kernel.* does not pick it up); the forward case's inputs plus
/// upstream gradients drawn after them.
CaseSpec grad_case(const std::string& id, std::string scheme, std::string preset, const std::string& dt, json config,
                   json inputs = json::object());

/// Every case dmref knows (every registered scheme's rows), in id order.
std::vector<CaseSpec> corpus();

/// Inputs and parameters of a case, generated from its seed: the tensors its
/// scheme's schema declares, drawn in declaration order.
Problem make_problem(const CaseSpec& c);

}  // namespace dmref::conf
