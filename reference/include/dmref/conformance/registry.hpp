// dmref/conformance/registry.hpp: every scheme the conformance layer knows,
// one line each in DMREF_SCHEMES (Arb's test/main.c style). A scheme `s` is
// its stem files (docs/framework.md, "Adding a scheme"):
//   reference/include/dmref/<s>.hpp, <s>_backward.hpp   the scheme
//   reference/include/dmref/conformance/schemes/<s>.hpp  its binding
//   reference/src/conformance/schemes/<s>.cpp            schema, corpus rows, entry
//   reference/src/conformance/schemes/<s>_eval.cpp       the binding at each scalar type
//   tests/test_<s>.cpp, tests/support/<s>_cases.hpp, oracles/, properties/, tests/mutants/<s>.cpp,
//   tests/faithful/, docs/<page>.md
// and its line below. The line declares (through the macro) the symbols the
// stem files define: `<s>_info` (schema, corpus rows, doc page) and
// `evaluate_<s><S>`; a missing stem is a link error, a missing piece of a
// stem fails test_registry, never a user's run.
#pragma once

#include "dmref/conformance/corpus.hpp"
#include "dmref/conformance/evaluate.hpp"
#include "dmref/conformance/schema.hpp"
#include "dmref/diagnostics.hpp"

#include <string>
#include <vector>

#define DMREF_SCHEMES(X) \
  X(preln)               \
  X(ldm)                 \
  X(ldm_ops)             \
  X(attnres)             \
  X(attnres_ops)         \
  X(hc)                  \
  X(hc_ops)              \
  X(mhc)                 \
  X(mhc_ops)             \
  X(denseformer)

namespace dmref::conf {

template <class S>
using Evaluator = void (*)(const Problem&, const Schema&, Outputs<S>&);

/// What a scheme's src/conformance/schemes/<s>.cpp defines about it.
struct SchemeInfo {
  std::string page;     // its doc page, docs/<page>
  std::string summary;  // one line
  /// Reads the config, declares the keys and tensors (schema.hpp); `opt` the
  /// corpus's input options (draw scales), {} elsewhere.
  Schema (*schema)(const Problem& p, const json& opt);
  /// Appends the scheme's corpus cases (corpus.cpp sorts them by id).
  void (*corpus)(std::vector<CaseSpec>& cases);
  /// The configs whose schemas its doc page's "Files" section shows (every
  /// variant and level: scripts/schema_docs.py takes their union).
  std::vector<json> doc_configs;
};

struct SchemeEntry {
  std::string name;
  const SchemeInfo* info;
  Evaluator<float> f32;
  Evaluator<double> f64;
  Evaluator<Ball> ball;
  Evaluator<Perturbed> perturbed;
  template <class S>
  Evaluator<S> evaluator() const {
    if constexpr (std::is_same_v<S, float>) return f32;
    else if constexpr (std::is_same_v<S, double>) return f64;
    else if constexpr (std::is_same_v<S, Ball>) return ball;
    else return perturbed;
  }
};

#define DMREF_DECLARE_SCHEME(s)     \
  extern const SchemeInfo s##_info; \
  template <class S>                \
  void evaluate_##s(const Problem&, const Schema&, Outputs<S>&);
DMREF_SCHEMES(DMREF_DECLARE_SCHEME)
#undef DMREF_DECLARE_SCHEME

/// Every registered scheme, in DMREF_SCHEMES order.
const std::vector<SchemeEntry>& registry();
/// The scheme named p.scheme; BadInput naming field `scheme` (and the known ones) if none.
const SchemeEntry& scheme_entry(const Problem& p);
/// The same by name (`dmref schema <s>`, Python dmref.schema without a config).
const SchemeEntry& scheme_entry(const std::string& scheme);
/// The declared schema of p (its scheme's schema function).
Schema schema_of(const Problem& p, const json& opt = json::object());

/// The problem `dmref schema` and `dmref.schema` read: a scheme and a config
/// (the config's source named in messages), no tensors.
Problem schema_problem(const std::string& scheme, const json& config, bool grad, const std::string& source);
/// A scheme's schema over its documented configs (SchemeInfo::doc_configs,
/// forward and backward): every key and tensor any of them declares, a
/// tensor's dims per config where they differ, and the configs it appears in
/// where not all. The "Files" section of each scheme page is this, rendered by
/// schema_markdown (checked in CTest `schema_docs`).
json schema_doc(const SchemeEntry& e);
std::string schema_markdown(const json& doc);
/// One config's schema as aligned text (`dmref schema <s> --config FILE`).
std::string schema_text(const Schema& s);

/// A value a scheme class refused (ParameterError, diagnostics.hpp) as the
/// problem's field in its file: the config key of that name (config file),
/// else the param.* or input.* tensor (inputs file), with the entry's index.
[[noreturn]] void fail_parameter(const Problem& p, const ParameterError& e);

/// The reference's frame around a binding: the schema read, `run(p, schema,
/// outputs)`, a scheme class's refusal named as the problem's field.
/// evaluate<S> (registry.cpp) and evaluate_at<S> (evaluate_impl.hpp) use it.
template <class S, class Run>
Outputs<S> evaluate_with(const Problem& p, Run&& run) {
  Outputs<S> o;
  o.problem = &p;
  try {
    run(p, schema_of(p), o);
  } catch (const ParameterError& err) {
    fail_parameter(p, err);
  }
  o.problem = nullptr;  // p may be a temporary
  return o;
}

}  // namespace dmref::conf
