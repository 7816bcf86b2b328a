// dmref/conformance/gate.hpp: `dmref verify` as a library call -- the gate's
// policy (which files are fixtures, which manifest, what a match is, which
// cases are selected) and the three renderings of its report (text, json,
// junit). The CLI only parses arguments, calls verify_fixtures, prints one
// rendering and maps errors to exit codes (docs/fixtures.md, "Commands";
// docs/cpp.md).
//
// Following `--factor` from the command line to a verdict:
//   tools/dmref.cpp   parses "--factor 4" into GateOptions::verify.factor (factor_set)
//   gate.cpp          verify_fixtures: the manifest check (manifest.hpp, sha256.hpp), every
//                     fixture read (io), then verify_case per selected fixture
//   verify.cpp        verify_case: the rule's numbers (the fixture's metadata "tolerance",
//                     or the factor given), element by element
//   tolerance.hpp     tolerance(factor, B, floor_ulps, dtype, y) and the recipe (format_of)
//   gate.cpp          render_text / render_json / render_junit of the Report
// Nothing on this path includes the generator (corpus.hpp, generate.hpp).
//
// The manifest policy, the same in the Python gate (dmref_fixtures.cases and
// check on a path; tests/python/test_manifest_policy.py runs one table of bad
// corpora through both): a corpus is checked against its manifest before
// anything is judged, and every mismatch is bad input (io::BadInput naming the
// fixture and the field: exit 2), never a verdict:
//   - a fixture not listed under its file name          -> <fixture>: file
//   - listed with another case id                        -> <fixture>: __metadata__.case
//   - its bytes' sha256 not the listed one               -> <fixture>: sha256
//   - a listed case (selected by --case) without its file -> <dir>/<file>: file
//   - two fixtures with one case id (manifest or not)     -> <fixture>: __metadata__.case
//   - a --manifest that cannot be read or parsed          -> <manifest>: <field>
// Entries that are not fixtures (is_fixture_name) are not read.
#pragma once

#include "dmref/conformance/manifest.hpp"
#include "dmref/conformance/verify.hpp"
#include "dmref/io/safetensors.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace dmref::conf {

struct GateOptions {
  std::string fixtures;         // --fixtures: a directory of fixtures or one fixture file
  std::string candidate;        // --candidate: the candidate's outputs (safetensors)
  std::string manifest;         // --manifest; empty: find_manifest
  bool no_manifest = false;     // --no-manifest: no manifest check
  std::size_t keep_failures = 20;  // --errors: failing elements kept per case (and printed in text)
  VerifyOptions verify;         // --dtype, --factor, --case, --outputs
};

/// The verdicts of one `verify` run.
struct Report {
  std::string dtype;     // the recipe judged (VerifyOptions::dtype)
  std::string manifest;  // the manifest the fixtures were checked against ("" for none)
  std::size_t keep_failures = 20;
  std::vector<CaseVerdict> cases;  // in file-name order
  std::size_t failed() const;
};

/// The manifest `verify` checks `fixtures` against when none is named:
/// manifest.json in the fixtures' directory (the file's directory for one
/// file), else one up when that directory is named golden (the corpus
/// layout: fixtures/manifest.json + fixtures/golden/); "" if there is none.
std::string find_manifest(const std::string& fixtures, bool single);

/// The fixtures of a directory (every is_fixture_name entry, sorted) or the
/// one file.
std::vector<std::string> fixture_paths(const std::string& fixtures, bool single);

/// The selected fixtures, read once and checked against the manifest (the
/// policy above; BadInput on the first problem, in the order the Python gate
/// raises it: reading and duplicate ids file by file, then the manifest
/// matches of the selected ones, then the listed cases without a file).
/// A selected fixture: its case id, or the id the manifest lists for its
/// file, matches `case_glob`. No fixture selected is BadInput (a run over
/// nothing is not a pass).
struct Corpus {
  std::vector<io::File> fixtures;
  std::string manifest;  // "" for none
  bool single = false;   // --fixtures named one file
};
Corpus load_corpus(const GateOptions& o);

/// `dmref verify`: load_corpus, the candidate read, then verify_case on
/// every selected fixture.
Report verify_fixtures(const GateOptions& o);

/// Names are data: bytes outside printable ASCII (and the backslash) as \xNN,
/// so no case id or tensor name can start a report line of its own.
std::string safe(const std::string& s);
/// safe(s) with the five XML specials as entities (junit, the SVGs and report.md of --report).
std::string xml_escape(const std::string& s);

/// The renderings of `dmref verify --format text|json|junit` (each ends in a newline).
std::string render_text(const Report& r);
std::string render_json(const Report& r);
std::string render_junit(const Report& r);

/// `dmref generate --check MANIFEST`, in two halves around the regeneration.
/// check_committed, before any work: the manifest read (BadInput) and every
/// committed file it lists (golden/ next to the manifest) hashed, so that an
/// edited or deleted committed fixture is a mismatch even when --out is that
/// directory. check_regenerated, after: every regenerated case must be listed
/// with the same hash; returns the MISMATCH lines and the summary line
/// ("manifest check: N cases regenerated, M committed files hashed, K
/// mismatches"); `mismatches` counts both halves (exit 1 if any).
struct RegenerationCheck {
  std::string manifest;
  std::vector<ManifestCase> listed;
  std::string committed;  // MISMATCH lines of the committed files
  std::size_t hashed = 0;
  int mismatches = 0;
};
RegenerationCheck check_committed(const std::string& manifest);
std::string check_regenerated(RegenerationCheck& c, const std::vector<ManifestCase>& generated);

}  // namespace dmref::conf
