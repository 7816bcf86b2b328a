// dmref/conformance/manifest.hpp: fixtures/manifest.json, the list of
// committed cases with the command, precision and content hash of each
// (docs/fixtures.md): its one type (ManifestCase), its one reader
// (parse_manifest, read_manifest) and its one writer (manifest_json). Every
// field is checked; a bad manifest is BadInput, one line
// "<path>: <field>: <problem>" (the command line exits 2), never a crash.
// How `verify` checks fixtures against it: gate.hpp.
#pragma once

#include "dmref/io/files.hpp"
#include "dmref/io/safetensors.hpp"
#include "dmref/version.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace dmref::conf {

/// One case of the manifest (what `generate` returns for each fixture it writes).
struct ManifestCase {
  std::string id, file, command, sha256;
  std::int64_t precision_bits = 0;
};

/// The glob of `--case` (verify and generate; Python glob_match): '*' any
/// run, '?' one character, nothing else special.
inline bool glob_match(const std::string& p, const std::string& s) {
  std::size_t i = 0, j = 0, star = std::string::npos, mark = 0;
  while (j < s.size()) {
    if (i < p.size() && (p[i] == '?' || p[i] == s[j])) {
      ++i, ++j;
    } else if (i < p.size() && p[i] == '*') {
      star = i++, mark = j;
    } else if (star != std::string::npos) {
      i = star + 1, j = ++mark;
    } else {
      return false;
    }
  }
  while (i < p.size() && p[i] == '*') ++i;
  return i == p.size();
}

/// Parses the text of a manifest (strictly: io::parse_json); `path` only
/// names it in messages. Requires an object with only "cases", "generated",
/// "generator"; "cases": an array of objects, each with string "id", "file"
/// (a plain file name: no '/', not "." or ".."), "sha256" (64 lower-case hex
/// digits), optional string "command" and integer "precision_bits" >= 0, and
/// no other key; ids are unique and so are files.
inline std::vector<ManifestCase> parse_manifest(std::string_view text, const std::string& path) {
  using json = nlohmann::json;
  auto bad = [&](const std::string& field, const std::string& problem) { return io::BadInput(path, field, problem); };
  // Strictly, as every JSON dmref reads (io::parse_json): a duplicate key
  // (a second "sha256" that a plain parser would silently take), a NUL byte
  // or deep nesting is refused.
  const json m = io::parse_json(text, path, "manifest");
  if (!m.is_object()) throw bad("manifest", std::string("not a JSON object (it is ") + m.type_name() + ")");
  const auto cs = m.find("cases");
  if (cs == m.end() || !cs->is_array()) throw bad("cases", "missing or not an array");
  // Every key is known: a misspelled or foreign one is an error, never ignored.
  for (const auto& [k, v] : m.items()) {
    (void)v;
    if (k != "cases" && k != "generated" && k != "generator")
      throw bad(k, "unknown key (a manifest has cases, generated, generator)");
  }
  std::vector<ManifestCase> out;
  std::set<std::string> ids, files;
  for (std::size_t i = 0; i < cs->size(); ++i) {
    const json& c = (*cs)[i];
    const std::string f = "cases[" + std::to_string(i) + "]";
    if (!c.is_object()) throw bad(f, std::string("not a JSON object (it is ") + c.type_name() + ")");
    auto str = [&](const char* key, bool required) -> std::string {
      const auto it = c.find(key);
      if (it == c.end()) {
        if (required) throw bad(f + "." + key, "missing");
        return {};
      }
      if (!it->is_string()) throw bad(f + "." + key, std::string("not a string (it is ") + it->type_name() + ")");
      return it->get<std::string>();
    };
    for (const auto& [k, v] : c.items()) {
      (void)v;
      if (k != "id" && k != "file" && k != "sha256" && k != "command" && k != "precision_bits")
        throw bad(f + "." + k, "unknown key (a case has id, file, sha256, command, precision_bits)");
    }
    ManifestCase e;
    e.id = str("id", true);
    e.file = str("file", true);
    e.sha256 = str("sha256", true);
    e.command = str("command", false);
    if (e.id.empty()) throw bad(f + ".id", "empty");
    if (!ids.insert(e.id).second)
      throw bad(f + ".id", "duplicate case id " + json(e.id).dump(-1, ' ', false, json::error_handler_t::replace));
    if (e.file.empty() || e.file == "." || e.file == ".." || e.file.find('/') != std::string::npos ||
        e.file.find('\0') != std::string::npos)
      throw bad(f + ".file", "not a plain file name");
    // One file, one case: two cases naming one file would leave one unchecked.
    if (!files.insert(e.file).second)
      throw bad(f + ".file", "duplicate file " + json(e.file).dump(-1, ' ', false, json::error_handler_t::replace));
    if (e.sha256.size() != 64 || e.sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
      throw bad(f + ".sha256", "not 64 lower-case hex digits");
    if (const auto it = c.find("precision_bits"); it != c.end()) {
      // An int64 (never wrapped: 2^63 as unsigned would read as negative).
      if (!it->is_number_integer() || (it->is_number_unsigned() && it->get<std::uint64_t>() > std::uint64_t(INT64_MAX)) ||
          (!it->is_number_unsigned() && it->get<std::int64_t>() < 0))
        throw bad(f + ".precision_bits", "not a non-negative integer (at most 2^63 - 1)");
      e.precision_bits = it->get<std::int64_t>();
    }
    out.push_back(std::move(e));
  }
  return out;
}

/// A directory entry that is a fixture (`verify --fixtures DIR`, Python
/// is_fixture_name): "<stem>.safetensors" with a non-empty stem, file or not
/// (a directory of that name is then refused by the reader: not a regular
/// file). Stated by name, not by std::filesystem's extension(), which calls
/// ".safetensors" a stem with no extension.
inline bool is_fixture_name(const std::string& name) {
  const std::string ext = ".safetensors";
  return name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0;
}

/// Reads and parses a manifest file (a regular file of at most 64 MiB).
inline std::vector<ManifestCase> read_manifest(const std::string& path) {
  const auto bytes = io::read_bounded(path, "manifest", std::uint64_t{64} << 20);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return parse_manifest(text, path);
}

/// The text of a manifest listing `cases` (`generate --write-manifest`):
/// what parse_manifest reads back.
inline std::string manifest_json(const std::vector<ManifestCase>& cases) {
  nlohmann::json m;
  m["generated"] = "generated by dmref, do not edit; regenerate with: scripts/fixtures";
  m["generator"] = std::string("dmref ") + version();
  m["cases"] = nlohmann::json::array();
  for (const auto& e : cases)
    m["cases"].push_back({{"id", e.id}, {"file", e.file}, {"command", e.command}, {"precision_bits", e.precision_bits},
                          {"sha256", e.sha256}});
  return m.dump(1) + "\n";
}

}  // namespace dmref::conf
