// dmref/conformance/load_problem.hpp: the problem a fixture was made from --
// the reading side of conf::Problem (problem.hpp), apart from the evaluation
// headers so that the fixture readers (tests, mutants, fuzz seeds) include
// only this.
#pragma once

#include "dmref/conformance/problem.hpp"
#include "dmref/io/files.hpp"
#include "dmref/io/safetensors.hpp"

#include <string>

namespace dmref::conf {

/// The problem a fixture was made from, as `dmref run` takes it: the scheme
/// (metadata "scheme"), the config (metadata "config", parsed strictly: a JSON
/// object), every input.* and param.* tensor, and the backward when it has
/// upstream gradients input.grad.* (`run --grad`); messages name the fixture
/// (config fields as "<fixture> (__metadata__.config)"). BadInput when the
/// scheme or config is missing or malformed. The one way from a fixture to a
/// problem (tests/test_fixtures.cpp, tests/mutants, fuzz/seed_problems.hpp).
inline Problem problem_of(const io::File& fixture) {
  auto meta = [&](const char* key) -> const std::string& {
    const auto it = fixture.metadata.find(key);
    if (it == fixture.metadata.end()) throw io::BadInput(fixture.source, std::string("__metadata__.") + key, "missing");
    return it->second;
  };
  Problem p;
  p.source = fixture.source;
  p.config_source = fixture.source + " (__metadata__.config)";
  p.scheme = meta("scheme");
  p.config = io::parse_json(meta("config"), fixture.source, "__metadata__.config");
  if (!p.config.is_object()) throw io::BadInput(fixture.source, "__metadata__.config", "must be a JSON object");
  for (const auto& [name, t] : fixture.tensors)
    if (name.rfind("input.", 0) == 0 || name.rfind("param.", 0) == 0) {
      p.tensors[name] = t;
      p.grad = p.grad || name.rfind("input.grad.", 0) == 0;
    }
  return p;
}

/// problem_of the fixture file at `path` (io::read: every rule of the format checked).
inline Problem load_problem(const std::string& path) { return problem_of(io::read(path)); }

}  // namespace dmref::conf
