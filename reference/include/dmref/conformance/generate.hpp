// dmref/conformance/generate.hpp: certified golden outputs, per-dtype
// baselines, fixture files and the manifest (docs/fixtures.md).
#pragma once

#include "dmref/certify.hpp"
#include "dmref/conformance/corpus.hpp"
#include "dmref/conformance/evaluate.hpp"
#include "dmref/conformance/manifest.hpp"
#include "dmref/io/safetensors.hpp"

#include <map>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dmref::conf {

/// Golden outputs of a problem, certified as double-doubles: each element's
/// ball enclosure rounds to one (hi, lo) pair (Ziv, token by token: 128, 512,
/// 2048, 8192 bits until it does). Tensors "output.<name>" (hi) and "output.<name>.lo".
/// `bits`: the highest precision any token needed.
/// An output with an element proven beyond double's range (its enclosure
/// entirely beyond +-DBL_MAX: RN(x) = +-inf, no double-double holds it) is
/// left out of `tensors`; `unrepresentable` says why, by tensor name
/// ("element [t,...] is beyond double's range: ..."), the first such element
/// in token and element order. The fixture's metadata carries it
/// ("unrepresentable", only when not empty); verify reports it, never judges it.
struct Golden {
  std::map<std::string, io::Tensor> tensors;
  std::map<std::string, std::string> unrepresentable;
  int bits = 0;
};
/// Tokens are certified in parallel on `threads` threads; the result does not
/// depend on the count.
Golden certified_outputs(const Problem& p, unsigned threads = 1);

/// Validation, a step of its own before any evaluation: the adapters parse
/// and check the whole problem on Balls at the first rung, kZivBits[0] = 128
/// bits (Arb's exponents are unbounded: the range of a double or a float is
/// no limit) and
/// name and shape the outputs without computing them; a config key or input
/// tensor the problem does not use, an output past Problem::limits, is
/// BadInput. Returns the outputs' names and shapes (no values).
Outputs<Ball> validate(const Problem& p);

/// Max abs and normwise relative error, per output, of the reference run in
/// each dtype (inputs rounded to it, float32 arithmetic -- double for f64 --,
/// outputs rounded to it). A dtype whose run refuses the rounded problem or
/// overflows gets null (no baseline).
json baselines(const Problem& p, const Golden& g, unsigned threads = 1);

/// The complete fixture of one case: inputs, parameters, golden outputs,
/// metadata (case id, scheme, preset, config, precision, generator, command,
/// baselines, tolerance rule).
io::File build_fixture(const CaseSpec& c, const std::string& command, unsigned threads = 1);

/// `dmref run`'s problem, as the CLI and the Python package (dmref.run) build
/// it: the scheme, the config (the JSON text of an object; `config_name` names
/// it in messages), the input tensors (`inputs_name` names them), forward or
/// backward (`grad`). BadInput for a config that is not one JSON object.
Problem user_problem(const std::string& scheme, std::string_view config_text, const std::string& config_name,
                     std::map<std::string, io::Tensor> tensors, const std::string& inputs_name, bool grad);

/// The command a run's fixture records (metadata "command"): the `dmref run`
/// line that makes it again from p.config_source and p.source.
std::string run_command(const Problem& p, const std::string& case_id);

/// A case id `dmref run` accepts: 1 to 200 of A-Z a-z 0-9 . _ - (it names
/// candidate tensors, "<id>/output.x", and report lines).
bool valid_case_id(const std::string& id);

/// `dmref run`: the complete fixture of a user's problem, as build_fixture
/// makes it (tokens certified in parallel on `threads` threads; inputs, certified outputs, per-dtype baselines, tolerance rule),
/// so that verify and dmref_fixtures.check accept it. The case id is
/// `case_id`, or derived_case_id(p) if empty.
/// The two stages of a run, for its progress: certifying the tokens, then
/// the tolerance model's samples (every recipe's kToleranceSamples
/// evaluations of the whole problem on Perturbed, tolerance.hpp).
enum class RunStage { tokens, samples };
/// `progress(stage, done, total)`, if given, is called (from the worker
/// threads, serialised) each time a token is certified (total: the tokens; a
/// backward problem's token counts when it is first evaluated: its tokens
/// climb the ladder together, and a rung given up after its first batch
/// counts only that batch), then each time a batch of samples is done
/// (total: recipes x samples).
io::File run_problem(const Problem& p, const std::string& command, const std::string& case_id = "",
                     unsigned threads = 1,
                     const std::function<void(RunStage stage, std::size_t done, std::size_t total)>& progress = {});

/// "user.<scheme>.<16 hex digits of the sha256 of config and inputs>".
std::string derived_case_id(const Problem& p);

/// How many consecutive tokens of a backward problem of T tokens are certified
/// as one evaluation (generate.cpp, certify_backward; docs/fixtures.md), for
/// `per_token` elements of one token's rows and `summed` of the sums over
/// tokens (validate's layout) under the bound `limit` on one evaluation
/// (Limits::max_elements): a function of the problem alone, 1 below 32
/// tokens, at most 16.
std::int64_t backward_group(std::int64_t T, std::int64_t per_token, std::int64_t summed, std::int64_t limit);

/// Names and per-token shapes ([1, ...]) of a problem's outputs, in name order.
using Layout = std::vector<std::pair<std::string, std::vector<std::int64_t>>>;

/// One token's certified outputs: the (hi, lo) column in layout order.
struct TokenGolden {
  Certified c;
  Layout layout;
  /// Tensors as they are, not one token's rows (a backward problem's sums
  /// over tokens: its parameter gradients, certified as sums).
  bool whole = false;
};

/// The same in two halves, for sharding tokens over processes (tools/run_mpi.cpp):
/// certify_tokens certifies the listed tokens of p (validating p first), one
/// task each on `threads` threads; run_file assembles the file from every
/// token's result, in token order (the layout is taken from token 0's).
/// run_file(p, certify_tokens(p, {0..T-1}), command, id) is run_problem(p, command, id)
/// byte for byte.
std::vector<TokenGolden> certify_tokens(const Problem& p, const std::vector<std::int64_t>& tokens, unsigned threads);
io::File run_file(const Problem& p, const std::vector<TokenGolden>& tokens, const std::string& command,
                  const std::string& case_id = "", unsigned threads = 1);

/// A problem's golden from its tokens' results, in token order (the layout
/// is token 0's), and, for a backward problem, `sums` (whole: its parameter
/// gradients, the certified sums over tokens): the certified tensors, and the
/// ones left out as unrepresentable (Golden). Throws std::runtime_error if
/// every output is.
Golden assemble(const std::vector<TokenGolden>& tokens, const TokenGolden* sums = nullptr);

/// `dmref run`'s note lines (stderr) for the tensors a fixture leaves out:
/// "dmref: note: <file>: output.P left out: element [...] is beyond ...".
std::vector<std::string> left_out_notes(const io::File& f, const std::string& path);

/// Generates the cases matching `glob` (all cases if include_uncommitted,
/// else the committed ones; `ci_only` restricts to the fast subset) into
/// out_dir, every token of every case one task on `threads` threads; files
/// are byte-identical whatever the count. Returns each fixture's manifest
/// case (manifest_json writes them).
std::vector<ManifestCase> generate(const std::string& glob, const std::string& out_dir, bool include_uncommitted,
                                    bool ci_only, unsigned threads, bool progress);

}  // namespace dmref::conf
