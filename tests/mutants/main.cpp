// dmref_mutants: the mutation score of the committed corpus (docs/fixtures.md,
// "Mutation score"), enforced by CTest `mutants`.
//
// For each dtype D (f32, bf16, f16) and each committed fixture: the fixture's
// problem with every input rounded to D (as the fixture's baseline for D was
// computed), judged by conf::verify_case -- the code behind
// `dmref verify --dtype D` -- in two columns:
//   forward: output.* of every fixture (a gradient fixture's upstream tensors
//     dropped), from the reference and every forward mutant of the fixture's
//     scheme evaluated at float, outputs rounded to D;
//   gradient: grad.* of every gradient fixture at its own dtype D (the
//     corpus has each gradient case once per dtype), from the central
//     differences (fd.hpp) of the reference's and each forward mutant's
//     forward at double, and from each backward mutant's own (wrong)
//     backward at double, rounded to D.
// The run fails unless
//   * the unmutated reference passes every fixture at every dtype in both
//     columns, through the FD path and (row reference_backward) through the
//     backward mutants' path: the honesty controls, otherwise "killed" would
//     mean nothing, and
//   * every mutant fails at least one fixture of its scheme at every dtype in
//     each column that applies to it (forward: forward mutants; gradient:
//     every mutant whose scheme has gradient fixtures).
// Usage: dmref_mutants <fixtures dir> [--docs FILE (rewrite the table) | --check-docs FILE] [--json FILE]
// --json: every cell of the table as JSON (tests/two_sided.py merges it with the faithful
// catalogue's results into the two-sided table of docs/fixtures.md).
#include "mutants.hpp"

#include "fd.hpp"
#include "gate.hpp"

#include "dmref/conformance/load_problem.hpp"
#include "dmref/conformance/verify.hpp"
#include "dmref/dtype.hpp"
#include "dmref/io/safetensors.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <mutex>
#include <thread>

using namespace dmref;
using namespace dmref::conf;

namespace {

const char* kDtypes[] = {"f32", "bf16", "f16"};

struct Score {
  int fixtures = 0, failed = 0;
  double worst = 0;          // max err/tol over the scheme's fixtures
  std::string worst_case;    // where
  std::string error;         // the mutant threw (never counts as killed)
  void add(const CaseVerdict& v) {
    ++fixtures;
    if (!v.pass) ++failed;
    if (v.worst_ratio >= worst) worst = v.worst_ratio, worst_case = v.id;
  }
};

std::string ratio(double r) {
  char b[32];
  if (!(r < 1e30)) return "inf";
  std::snprintf(b, sizeof b, "%.2g", r);
  return b;
}

struct Fixture {
  io::File fx;
  Problem p;
  std::vector<std::string> outputs, grads;  // golden output.* and grad.* names
};

}  // namespace

int main(int argc, char** argv) {
  const char* usage = "usage: %s <fixtures dir> [--docs FILE | --check-docs FILE] [--json FILE]\n";
  if (argc < 2 || argc % 2) {
    std::fprintf(stderr, usage, argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::string docs, mode, json_out;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string opt = argv[i];
    if (opt == "--json") json_out = argv[i + 1];
    else if ((opt == "--docs" || opt == "--check-docs") && docs.empty()) mode = opt, docs = argv[i + 1];
    else return std::fprintf(stderr, usage, argv[0]), 2;
  }
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::map<std::string, std::vector<Fixture>> by_scheme;
  std::map<std::string, bool> has_grad;  // scheme -> has gradient fixtures
  for (const auto& f : files) {
    Fixture x{io::read(f), {}, {}, {}};
    x.p = problem_of(x.fx);
    x.p.grad = false;  // each job picks forward or backward (q.grad below)
    for (const auto& n : golden_names(x.fx)) (n.rfind("grad.", 0) == 0 ? x.grads : x.outputs).push_back(n);
    if (!x.grads.empty()) has_grad[x.p.scheme] = true;
    by_scheme[x.p.scheme].push_back(std::move(x));
  }
  auto mutants = mutants::catalogue();
  // The controls, first in the table: the reference through the forward
  // mutants' paths (float forward; FD of the double forward), and the
  // reference's own backward at double through the backward mutants' path
  // (so that a backward mutant is killed by its wrong term, not by the path).
  mutants.insert(mutants.begin(), {"*", "reference_backward", "the reference's own backward at double (must pass everything)",
                                   {}, {}, [](const Problem& p) { return evaluate<double>(p); }});
  mutants.insert(mutants.begin(), {"*", "reference", "the unmutated reference (must pass everything)",
                                   [](const Problem& p) { return evaluate<float>(p); },
                                   [](const Problem& p) { return evaluate<double>(p); }, {}});
  // Every (dtype, fixture, mutant) judgement is independent: two threads (CI has 2 cores).
  struct Job {
    const char* dt;
    const Fixture* fx;
    const mutants::Mutant* m;
    bool grad;
    Score* s;
  };
  std::map<std::string, std::map<std::string, Score>> score, gscore;  // name -> dtype -> score
  std::vector<Job> jobs;
  for (const char* dt : kDtypes)
    for (const auto& [scheme, cases] : by_scheme)
      for (const auto& x : cases)
        for (const auto& m : mutants) {
          if (m.scheme != "*" && m.scheme != scheme) continue;
          if (m.eval) jobs.push_back({dt, &x, &m, false, &score[m.name][dt]});
          // Gradient column: each gradient fixture at its own dtype (the corpus has one per dtype).
          if (!x.grads.empty() && x.fx.metadata.at("input_dtype") == dt)
            jobs.push_back({dt, &x, &m, true, &gscore[m.name][dt]});
        }
  std::mutex mu;
  std::size_t next = 0;
  auto work = [&] {
    for (;;) {
      Job j;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (next == jobs.size()) return;
        j = jobs[next++];
      }
      const FloatFormat& fmt = format_of(j.dt);
      VerifyOptions opt;
      opt.dtype = j.dt;
      opt.outputs = j.grad ? j.fx->grads : j.fx->outputs;
      Problem q = test::rounded(j.fx->p, fmt);
      CaseVerdict v;
      std::string error;
      try {
        io::File cand;
        if (!j.grad) {
          for (auto it = q.tensors.begin(); it != q.tensors.end();)  // the upstream: not a forward input
            it = it->first.rfind("input.grad.", 0) == 0 ? q.tensors.erase(it) : std::next(it);
          cand = test::candidate_from(j.m->eval(q), fmt);
        } else if (j.m->backward64) {
          q.grad = true;
          cand = test::candidate_from(j.m->backward64(q), fmt);
        } else {
          // Central differences cost two forward evaluations per gradient
          // element, so a forward mutant's grad.* tensors are differenced one
          // at a time, smallest first, and judged as they come: once the
          // tensors so far fail, the whole gradient fails (verify fails a case
          // on any element), and the rest is not computed. Killed or not is
          // therefore exact; the err/tol of a killed fixture is the worst over
          // the tensors judged up to the first failing one. The reference (the
          // honesty control) and every mutant that passes are judged on all.
          std::vector<std::string> order = j.fx->grads;
          std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
            return j.fx->fx.tensors.at(a).values.size() < j.fx->fx.tensors.at(b).values.size();
          });
          opt.outputs.clear();
          for (const auto& g : order) {
            const auto values = mutants::fd_gradient(q, {g.substr(5)}, j.m->forward64).at(g.substr(5));
            io::Tensor t{"F64", j.fx->fx.tensors.at(g).shape, {}};
            for (double x : values) t.values.push_back(round_to(fmt, x));
            cand.tensors[g] = std::move(t);
            opt.outputs.push_back(g);
            if (j.m->scheme != "*" && !verify_case(j.fx->fx, cand, opt, true, 0).pass) break;
          }
        }
        v = verify_case(j.fx->fx, cand, opt, true, 0);
      } catch (const std::exception& e) {
        error = j.fx->fx.metadata.at("case") + ": " + e.what();
      }
      std::lock_guard<std::mutex> lock(mu);
      if (!error.empty()) j.s->error = error;
      else j.s->add(v);
    }
  };
  std::thread t2(work);
  work();
  t2.join();
  int bad = 0;
  std::ostringstream table;
  table << "| mutant | convention it gets wrong | fwd f32 | fwd bf16 | fwd f16 | grad f32 | grad bf16 | grad f16 |\n"
           "| --- | --- | --- | --- | --- | --- | --- | --- |\n";
  int n_fwd = 0, n_grad = 0;
  json cells = json::array();  // --json: one entry per (mutant, column, dtype) of the table
  for (const auto& m : mutants) {
    std::string what;  // a '|' would end the markdown cell
    for (char ch : m.what) what += ch == '|' ? std::string("\\|") : std::string(1, ch);
    table << "| `" << m.name << "` | " << what << " |";
    const bool reference = m.scheme == "*";
    const bool grad_applies = reference || has_grad.count(m.scheme);
    n_fwd += !reference && bool(m.eval);
    n_grad += !reference && grad_applies;
    for (int col = 0; col < 2; ++col)
      for (const char* dt : kDtypes) {
        const bool applies = col == 0 ? bool(m.eval) : grad_applies;
        if (!applies) {
          table << " n/a |";
          continue;
        }
        const Score& s = (col == 0 ? score : gscore)[m.name][dt];
        const bool ok = s.error.empty() && s.fixtures > 0 && (reference ? s.failed == 0 : s.failed > 0);
        cells.push_back({{"mutant", m.name}, {"scheme", m.scheme}, {"kind", col == 0 ? "fwd" : "grad"}, {"dtype", dt},
                         {"fixtures", s.fixtures}, {"failed", s.failed}, {"worst", s.worst < 1e300 ? s.worst : 1e300},
                         {"worst_at", s.worst_case}, {"error", s.error}, {"ok", ok}});
        if (!ok) {
          ++bad;
          std::fprintf(stderr, "FAIL %s %s at %s: %s\n", m.name.c_str(), col == 0 ? "forward" : "gradient", dt,
                       !s.error.empty() ? ("threw on " + s.error).c_str()
                       : s.fixtures == 0 ? "no fixture of its scheme"
                       : reference       ? ("the reference fails " + std::to_string(s.failed) + " fixtures, worst err/tol " +
                                            ratio(s.worst) + " on " + s.worst_case).c_str()
                                         : ("survives: passes all " + std::to_string(s.fixtures) + " fixtures, worst err/tol " +
                                            ratio(s.worst) + " on " + s.worst_case).c_str());
        }
        if (reference) table << " pass " << s.fixtures - s.failed << "/" << s.fixtures << ", " << ratio(s.worst) << " |";
        else table << " " << (s.failed > 0 ? "killed" : "**survives**") << " " << s.failed << "/" << s.fixtures << ", "
                   << ratio(s.worst) << " |";
      }
    table << "\n";
  }
  std::printf("%s", table.str().c_str());
  std::printf("%d forward mutants x 3 dtypes on the forward goldens, %d mutants x 3 dtypes on the gradient goldens; %s\n",
              n_fwd, n_grad, bad ? "NOT all killed (see FAIL lines)" : "every one killed at every dtype, reference passes");
  if (!json_out.empty()) {
    json j = {{"fixtures_dir", dir}, {"files", files.size()}, {"cells", cells}};
    std::ofstream(json_out + ".tmp") << j.dump(1) << "\n";
    std::filesystem::rename(json_out + ".tmp", json_out);
  }
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
