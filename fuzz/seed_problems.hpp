// fuzz/seed_problems.hpp: the problems the config-driven fuzz targets
// (fuzz_config, fuzz_run) pick from with an input's first byte: for each id
// of fuzz/seed_fixtures.txt (the one list, also read by make_corpus.py), the
// golden fixture's scheme and its input.* / param.* tensors. A missing list
// or fixture ends the target at start-up with a one-line message (the CTest
// `fuzz_seed_fixtures` catches it before a fuzz run does).
#pragma once

#include "dmref/conformance/load_problem.hpp"
#include "dmref/io/safetensors.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

namespace dmref::fuzz {

inline std::vector<std::string> seed_fixture_ids() {
  const std::string list = DMREF_SOURCE_DIR "/fuzz/seed_fixtures.txt";
  std::ifstream in(list);
  if (!in) {
    std::fprintf(stderr, "%s: cannot open\n", list.c_str());
    std::exit(1);
  }
  std::vector<std::string> ids;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') ids.push_back(line);
  if (ids.empty()) {
    std::fprintf(stderr, "%s: no fixture ids\n", list.c_str());
    std::exit(1);
  }
  return ids;
}

/// One Problem per listed fixture (conf::load_problem; config left empty: the fuzz input is the config).
inline std::vector<conf::Problem> seed_problems() {
  std::vector<conf::Problem> v;
  for (const auto& id : seed_fixture_ids()) {
    const std::string path = DMREF_SOURCE_DIR "/fixtures/golden/" + id + ".safetensors";
    try {
      conf::Problem p = conf::load_problem(path);
      p.source = "inputs.safetensors";  // as `dmref run` names them
      p.config_source = "config.json";
      p.config = conf::json();          // the fuzz input is the config
      p.grad = false;
      v.push_back(std::move(p));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fuzz/seed_fixtures.txt: %s: %s\n", id.c_str(), e.what());
      std::exit(1);
    }
  }
  return v;
}

}  // namespace dmref::fuzz
