// dmref_mutants: the mutation score of the committed corpus (docs/fixtures.md,
// "Mutation score"), enforced by CTest `mutants`.
//
// For each dtype D (f32, bf16, f16) and each committed fixture: the fixture's
// problem with every input rounded to D (as the fixture's baseline for D was
// computed), evaluated at float by the reference and by every mutant of the
// fixture's scheme, outputs rounded to D, judged by conf::verify_case -- the
// code behind `dmref verify --dtype D`. The run fails unless
//   * the unmutated reference passes every fixture at every dtype (otherwise
//     "killed" would mean nothing), and
//   * every mutant fails at least one fixture of its scheme at every dtype.
// Usage: dmref_mutants <fixtures dir> [--docs FILE (rewrite the table) | --check-docs FILE]
#include "mutants.hpp"

#include "candidates.hpp"

#include "dmref/conformance/corpus.hpp"
#include "dmref/conformance/verify.hpp"
#include "dmref/dtype.hpp"
#include "dmref/io/safetensors.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

using namespace dmref;
using namespace dmref::conf;

namespace {

const char* kDtypes[] = {"f32", "bf16", "f16"};

Problem problem_of(const io::File& fx) {
  Problem p;
  p.source = fx.source;
  p.scheme = fx.metadata.at("scheme");
  p.config = json::parse(fx.metadata.at("config"));
  for (const auto& [name, t] : fx.tensors)
    if (name.rfind("input.", 0) == 0 || name.rfind("param.", 0) == 0) p.tensors[name] = t;
  return p;
}

struct Score {
  int fixtures = 0, failed = 0;
  double worst = 0;          // max err/tol over the scheme's fixtures
  std::string worst_case;    // where
  std::string error;         // the mutant threw (counts as killed only if it is a rejection: never here)
};

std::string ratio(double r) {
  char b[32];
  if (!(r < 1e30)) return "inf";
  std::snprintf(b, sizeof b, "%.2g", r);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <fixtures dir> [--docs FILE | --check-docs FILE]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::string docs, mode;
  if (argc == 4) mode = argv[2], docs = argv[3];
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::map<std::string, std::vector<std::pair<io::File, Problem>>> by_scheme;
  for (const auto& f : files) {
    io::File fx = io::read(f);
    Problem p = problem_of(fx);
    by_scheme[p.scheme].emplace_back(std::move(fx), std::move(p));
  }
  auto mutants = mutants::catalogue();
  mutants.insert(mutants.begin(), {"*", "reference", "the unmutated reference (must pass everything)",
                                   [](const Problem& p) { return evaluate<float>(p); }});
  int bad = 0;
  std::map<std::string, std::map<std::string, Score>> score;  // name -> dtype -> score
  for (const char* dt : kDtypes) {
    const FloatFormat& fmt = format_of(dt);
    VerifyOptions opt;
    opt.dtype = dt;
    for (const auto& [scheme, cases] : by_scheme)
      for (const auto& [fx, p] : cases) {
        const Problem q = test::rounded(p, fmt);
        for (const auto& m : mutants) {
          if (m.scheme != "*" && m.scheme != scheme) continue;
          Score& s = score[m.name][dt];
          ++s.fixtures;
          CaseVerdict v;
          try {
            v = verify_case(fx, test::candidate_from(m.eval(q), fmt), opt, true, 0);
          } catch (const std::exception& e) {
            s.error = fx.metadata.at("case") + ": " + e.what();
            continue;
          }
          if (!v.pass) ++s.failed;
          if (v.worst_ratio >= s.worst) s.worst = v.worst_ratio, s.worst_case = v.id;
        }
      }
  }
  std::ostringstream table;
  table << "| mutant | convention it gets wrong | f32 | bf16 | f16 |\n| --- | --- | --- | --- | --- |\n";
  for (const auto& m : mutants) {
    std::string what;  // a '|' would end the markdown cell
    for (char ch : m.what) what += ch == '|' ? std::string("\\|") : std::string(1, ch);
    table << "| `" << m.name << "` | " << what << " |";
    for (const char* dt : kDtypes) {
      const Score& s = score[m.name][dt];
      const bool reference = m.scheme == "*";
      const bool ok = s.error.empty() && s.fixtures > 0 && (reference ? s.failed == 0 : s.failed > 0);
      if (!ok) {
        ++bad;
        std::fprintf(stderr, "FAIL %s at %s: %s\n", m.name.c_str(), dt,
                     !s.error.empty() ? ("threw on " + s.error).c_str()
                     : s.fixtures == 0 ? "no fixture of its scheme"
                     : reference       ? ("the reference fails " + std::to_string(s.failed) + " fixtures").c_str()
                                       : ("survives: passes all " + std::to_string(s.fixtures) + " fixtures, worst err/tol " +
                                          ratio(s.worst) + " on " + s.worst_case).c_str());
      }
      if (reference) table << " pass " << s.fixtures << "/" << s.fixtures << ", " << ratio(s.worst) << " |";
      else table << " " << (s.failed > 0 ? "killed" : "**survives**") << " " << s.failed << "/" << s.fixtures << ", "
                 << ratio(s.worst) << " |";
    }
    table << "\n";
  }
  std::printf("%s", table.str().c_str());
  const int n_mut = int(mutants.size()) - 1;
  std::printf("%d mutants x 3 dtypes; %s\n", n_mut, bad ? "NOT all killed (see FAIL lines)" : "every one killed at every dtype, reference passes");
  if (!docs.empty()) {
    const std::string begin = "<!-- mutants:begin (generated by dmref_mutants, do not edit) -->\n", end = "<!-- mutants:end -->";
    std::ifstream in(docs);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    const auto a = text.find(begin), b = text.find(end);
    if (!in || a == std::string::npos || b == std::string::npos || b < a) {
      std::fprintf(stderr, "%s: no mutants:begin/end markers\n", docs.c_str());
      return 2;
    }
    const std::string updated = text.substr(0, a + begin.size()) + table.str() + text.substr(b);
    if (mode == "--docs") {
      std::ofstream(docs) << updated;
    } else if (updated != text) {
      std::fprintf(stderr, "%s: the mutation table is stale; regenerate with: %s %s --docs %s\n", docs.c_str(), argv[0],
                   dir.c_str(), docs.c_str());
      ++bad;
    }
  }
  return bad ? 1 : 0;
}
