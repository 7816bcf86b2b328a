// dmref._core: the certified reference and the C++ gate in-process, for the
// Python package (python/dmref, docs/python.md). A thin layer over
// dmref::conformance: bytes in, bytes out (the safetensors bytes of the CLI's
// files), so that dmref.run gives exactly the file `dmref run` writes and the
// Python side reuses dmref_fixtures' reader and writer.
#include "dmref/conformance/gate.hpp"
#include "dmref/conformance/generate.hpp"
#include "dmref/conformance/registry.hpp"
#include "dmref/conformance/verify.hpp"
#include "dmref/io/files.hpp"
#include "dmref/io/safetensors.hpp"
#include "dmref/version.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace nb = nanobind;
using namespace dmref;

namespace {

std::vector<std::uint8_t> to_vector(const nb::bytes& b) {
  const auto* p = static_cast<const std::uint8_t*>(b.data());
  return {p, p + b.size()};
}

nb::bytes to_bytes(const std::vector<std::uint8_t>& v) {
  return nb::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}

/// dmref.run: the fixture `dmref run` writes, as bytes. A config or inputs
/// given as a path is read as the CLI reads it (same bounds, same messages,
/// the path in the recorded command); in memory, `config_text` / `inputs` are
/// named by `config_name` / `inputs_name`.
nb::bytes run(const std::string& scheme, std::optional<std::string> config_text, const std::string& config_name,
              std::optional<nb::bytes> inputs, const std::string& inputs_name, bool grad, const std::string& case_id,
              unsigned jobs) {
  if (!case_id.empty() && !conf::valid_case_id(case_id))
    throw io::BadInput("case_id", "case id", "use 1 to 200 of A-Z a-z 0-9 . _ -");
  if (jobs < 1 || jobs > 256) throw std::invalid_argument("jobs: must be 1 to 256, got " + std::to_string(jobs));
  std::string text;
  if (config_text) {
    text = *config_text;
  } else {
    const auto raw = io::read_bounded(config_name, "config", std::uint64_t{16} << 20);
    text.assign(raw.begin(), raw.end());
  }
  std::map<std::string, io::Tensor> tensors =
      inputs ? io::parse(to_vector(*inputs), inputs_name).tensors : io::read(inputs_name).tensors;
  std::vector<std::uint8_t> out;
  {
    nb::gil_scoped_release release;  // minutes at the higher Ziv steps: other Python threads run meanwhile
    const conf::Problem p = conf::user_problem(scheme, text, config_name, std::move(tensors), inputs_name, grad);
    out = io::serialize(conf::run_problem(p, conf::run_command(p, case_id), case_id, jobs));
  }
  return to_bytes(out);
}

/// dmref.verify: conf::verify_case (the gate of `dmref verify`) on one
/// fixture and a candidate file (bytes); the fields of `dmref verify
/// --format json` for the case. The fixture as bytes (`fixture_name` names
/// it), or, when `fixture` is None, the file at `fixture_name` read as
/// `dmref verify --fixtures FILE` reads it: checked against the manifest
/// next to it first (conf::load_corpus; a mismatch is BadInput).
nb::dict verify(std::optional<nb::bytes> fixture, const std::string& fixture_name, nb::bytes candidate,
                const std::string& dtype, std::optional<double> factor, std::optional<double> floor_ulps,
                std::vector<std::string> outputs, std::size_t keep) {
  conf::VerifyOptions opt;
  opt.dtype = dtype;
  conf::recipe(dtype);  // validates the dtype, as --dtype
  if (factor) opt.factor = *factor, opt.factor_set = true;
  if (floor_ulps) opt.floor_ulps = *floor_ulps, opt.floor_set = true;
  opt.outputs = std::move(outputs);
  io::File fx;
  if (fixture) {
    fx = io::parse(to_vector(*fixture), fixture_name);
  } else {
    conf::GateOptions g;
    g.fixtures = fixture_name;
    conf::Corpus c = conf::load_corpus(g);
    if (!c.single) throw io::BadInput(fixture_name, "fixture", "a directory: dmref.verify judges one fixture file");
    fx = std::move(c.fixtures.at(0));
  }
  const io::File cand = io::parse(to_vector(candidate), "<candidate>");
  const conf::CaseVerdict v = conf::verify_case(fx, cand, opt, /*single=*/true, keep);
  nb::dict d;
  d["id"] = v.id;
  d["pass"] = v.pass;
  d["checked"] = v.checked;
  d["failed"] = v.failed;
  d["worst_err_over_tol"] = v.worst_ratio;
  d["problem"] = v.problem;
  d["left_out"] = v.left_out;
  nb::list nj, fl;
  for (const auto& [name, why] : v.not_judged) nj.append(nb::make_tuple(name, why));
  for (const auto& f : v.failures) {
    nb::dict e;
    e["tensor"] = f.tensor;
    e["index"] = f.index;
    e["observed"] = f.observed;
    e["expected"] = f.expected;
    e["err"] = f.err;
    e["tol"] = f.tol;
    fl.append(e);
  }
  nb::list tv;
  for (const auto& t : v.tensors) {
    nb::dict e;
    e["tensor"] = t.name;
    e["checked"] = t.checked;
    e["failed"] = t.failed;
    e["worst_err_over_tol"] = t.worst_ratio;
    e["worst"] = t.worst;
    e["axes"] = t.axes;
    tv.append(e);
  }
  d["not_judged"] = nj;
  d["failures"] = fl;
  d["tensors"] = tv;
  return d;
}

/// dmref.schema: `dmref schema <scheme> [--config]` as JSON text: the declared
/// keys and tensors of one config (given), or over the scheme's documented
/// configs (config_text None).
std::string schema(const std::string& scheme, const std::optional<std::string>& config_text, bool grad) {
  if (!config_text) {
    return conf::schema_doc(conf::scheme_entry(scheme)).dump();
  }
  const conf::json c = io::parse_json(*config_text, "config", "config");
  return conf::schema_of(conf::schema_problem(scheme, c, grad, "config")).to_json().dump();
}

std::vector<std::string> schemes() {
  std::vector<std::string> v;
  for (const auto& e : conf::registry()) v.push_back(e.name);
  return v;
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "dmref's certified reference (dmref run) and gate (dmref verify), in-process";
  // A bad file or config: dmref_fixtures.BadInput(path, field, problem), the
  // exception the Python reader raises for the same input.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const io::BadInput& e) {
      nb::object cls = nb::module_::import_("dmref_fixtures").attr("BadInput");
      nb::object err = cls(e.path(), e.field(), e.problem());
      PyErr_SetObject(cls.ptr(), err.ptr());
    }
  });
  m.def("run", &run, nb::arg("scheme"), nb::arg("config_text").none(), nb::arg("config_name"), nb::arg("inputs").none(),
        nb::arg("inputs_name"), nb::arg("grad"), nb::arg("case_id"), nb::arg("jobs"));
  m.def("verify", &verify, nb::arg("fixture").none(), nb::arg("fixture_name"), nb::arg("candidate"), nb::arg("dtype"),
        nb::arg("factor").none(), nb::arg("floor_ulps").none(), nb::arg("outputs"), nb::arg("keep"));
  m.def("schema", &schema, nb::arg("scheme"), nb::arg("config_text").none(), nb::arg("grad"));
  m.def("schemes", &schemes);
  m.def("default_jobs", [] { return std::max(1u, std::min(256u, std::thread::hardware_concurrency())); });
  m.attr("version") = dmref::version();
}
