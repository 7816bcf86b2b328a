"""The Python gate (dmref_fixtures.check / assert_conforms) and the C++ gate
(`dmref verify`) judge one shared candidate set, case by case, and must agree:
same pass/fail, same element counts, same worst err/tol. The set is built from
a few fixtures: the golden outputs rounded to each dtype (pass), exact (pass),
perturbations just under / over the tolerance and by 10x, NaN, Inf, a wrong
shape, a missing tensor. Each candidate's expected verdict is also asserted, so
the two cannot agree on a wrong answer. The C++ and Python readers must also
refuse the same invalid files for the same field (tests/python/badfiles.py)."""
import json
import math
import os
import subprocess

import numpy as np
import pytest

import dmref_fixtures as df
from badfiles import CASES as BAD_FILES

CASE_IDS = [
    "preln.kernel.d8.L6.f32.s1",
    "ldm_rls.kernel.g2_dk4_d8.L8.bf16.s1",
    "mhc.kernel.n4_d8.L6.paper.f16.s1",
    "attnres_block.model.d8_S2_h8.L8.f32.s1",
    "hc_dynamic.kernel.n4_d8.L6.bf16.s1",
    "denseformer.kernel.d8.L6.f16.s1",
    "ldm_rls.kernel_grad.g2_dk4_d8.L6.bf16.s1",  # a backward case: its grad.* goldens are judged too
]
DTYPES = ["f32", "bf16", "f16"]
STORE = {"f32": "F32", "bf16": "BF16", "f16": "F16"}


def verify(cli, fixture, candidate, dtype, *extra):
    p = subprocess.run([cli, "verify", "--fixtures", fixture, "--candidate", candidate, "--dtype", dtype,
                        "--format", "json", *extra], capture_output=True, text=True)
    assert p.returncode in (0, 1), f"dmref verify exit {p.returncode}: {p.stderr}"
    out = json.loads(p.stdout)
    assert (p.returncode == 0) == (out["failed"] == 0)
    return p.returncode, out


def tolerances(case, dtype):
    factor, floor = df.tolerance_rule(case.file, dtype)[:2]
    return {n: df.tolerance(factor, case.file.tensors[f"bound.{dtype}.{n}"], floor, dtype, hi)
            for n, hi in golden(case).items()}


def golden(case):
    """Every golden tensor: outputs and (backward cases) gradients."""
    return {**case.expected, **case.gradients}


def candidates(case, dtype):
    """(name, tensors {name: (array, storage dtype)}, expected pass)."""
    exp = golden(case)
    lo = {n: case.file.tensors[n + ".lo"] for n in exp}
    tol = tolerances(case, dtype)
    first = sorted(exp)[0]
    k = exp[first].size // 2  # the element that is perturbed

    def with_element(scale=None, value=None):
        t = {n: (v.copy(), "F64") for n, v in exp.items()}
        a = t[first][0].reshape(-1)
        if value is not None:
            a[k] = value
        else:  # observed = y + scale * tol, y = hi + lo
            a[k] = exp[first].flat[k] + (lo[first].flat[k] + scale * tol[first].flat[k])
        return t

    yield "golden rounded to dtype", {n: (v, STORE[dtype]) for n, v in exp.items()}, True
    yield "golden exact (F64)", {n: (v, "F64") for n, v in exp.items()}, True
    yield "golden + unrelated extra tensor", dict({n: (v, "F64") for n, v in exp.items()},
                                                  **{"other": (np.zeros(3), "F32")}), True
    yield "one element at 0.999 tol", with_element(scale=0.999), True
    yield "one element at -0.999 tol", with_element(scale=-0.999), True
    yield "one element at 1.001 tol", with_element(scale=1.001), False
    yield "one element at 10 tol", with_element(scale=10.0), False
    yield "one element NaN", with_element(value=np.nan), False
    yield "one element +inf", with_element(value=np.inf), False
    yield "wrong shape", dict({n: (v, "F64") for n, v in exp.items()},
                              **{first: (np.append(exp[first].reshape(-1), 0.0), "F64")}), False
    yield "missing tensor", {n: (v, "F64") for n, v in exp.items() if n != first}, False


def assert_same(py, cpp, label):
    assert py.passed == cpp["pass"], f"{label}: python {py.passed}, dmref {cpp['pass']} ({cpp['problem']})"
    assert py.checked == cpp["checked"] and py.failed == cpp["failed"], \
        f"{label}: python {py.checked}/{py.failed}, dmref {cpp['checked']}/{cpp['failed']}"
    a, b = py.worst_ratio, cpp["worst_err_over_tol"]
    if b is None or math.isinf(a):  # JSON has no inf: nlohmann writes null
        assert math.isinf(a) and b is None, f"{label}: worst ratio python {a}, dmref {b}"
    else:
        assert a == pytest.approx(b, rel=1e-12, abs=1e-300), f"{label}: worst ratio python {a}, dmref {b}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_python_and_dmref_verify_agree_per_fixture(dmref_cli, fixtures_dir, tmp_path, case_id, dtype):
    fx = os.path.join(fixtures_dir, case_id + ".safetensors")
    case = df.load_case(fx)
    for name, tensors, expect in candidates(case, dtype):
        path = tmp_path / "cand.safetensors"
        df.write(path, tensors)
        rc, out = verify(dmref_cli, fx, str(path), dtype)
        (cpp,) = out["cases"]
        cand = df.read(path)  # judge what was written (the dtype rounding included)
        py = df.check(cand, case, dtype)
        label = f"{case_id} {dtype} {name}"
        assert_same(py, cpp, label)
        assert py.passed == expect, f"{label}: expected {'pass' if expect else 'fail'}\n{py.report()}"
        if expect:
            df.assert_conforms(cand, case, dtype)
        else:
            with pytest.raises(df.ConformanceError):
                df.assert_conforms(cand, case, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_python_and_dmref_verify_agree_on_the_whole_directory(dmref_cli, fixtures_dir, tmp_path, dtype):
    # One candidate file for the whole corpus, tensors named <case id>/output.<name>:
    # the chosen cases get a candidate (some perturbed), every other case has none
    # and must fail for that reason in both gates.
    all_cases = list(df.cases(fixtures_dir))
    cand = {}
    for i, cid in enumerate(CASE_IDS):
        case = next(c for c in all_cases if c.id == cid)
        variants = list(candidates(case, dtype))
        _, tensors, _ = variants[i % len(variants)]
        cand.update({f"{cid}/{n}": t for n, t in tensors.items()})
    path = tmp_path / "corpus-candidate.safetensors"
    df.write(path, cand)
    rc, out = verify(dmref_cli, fixtures_dir, str(path), dtype)
    got = df.read(path)
    cpp = {c["id"]: c for c in out["cases"]}
    assert sorted(cpp) == sorted(c.id for c in all_cases)
    for c in all_cases:
        assert_same(df.check(got, c, dtype), cpp[c.id], f"{c.id} {dtype} (directory)")
    assert out["passed"] == sum(df.check(got, c, dtype).passed for c in all_cases)


@pytest.mark.parametrize("name,data,field", BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_python_and_cpp_readers_refuse_the_same_field(dmref_cli, fixtures_dir, tmp_path, name, data, field):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(data)
    fx = os.path.join(fixtures_dir, CASE_IDS[0] + ".safetensors")
    # errors="replace": the parser's message may quote the offending (non-UTF-8) byte
    p = subprocess.run([dmref_cli, "verify", "--fixtures", fx, "--candidate", str(bad)], capture_output=True,
                       text=True, errors="replace")
    assert p.returncode == 2 and p.stderr.count("\n") == 1, (p.returncode, p.stderr)
    assert p.stderr.startswith(f"dmref: {bad}: {field}: "), p.stderr
    with pytest.raises(df.BadInput) as e:
        df.read(bad)
    assert e.value.field == field


@pytest.mark.parametrize("dtype", DTYPES)
def test_agree_elementwise_on_a_synthetic_edge_fixture(dmref_cli, tmp_path, dtype):
    # Golden values where the ulp rule has its corners: 0, subnormals of every
    # dtype, powers of two (the spacing changes there), both signs, values past
    # the dtype's range; a non-zero lo; one output with bounds 0 (pure ulp
    # floor) and one with bounds. Every element is put at 0.999 or 1.001 of
    # its own tolerance: the failing count must be exactly the 1.001 ones.
    y = np.array([0.0, 2.0 ** -140, 2.0 ** -133, 1e-45, 2.0 ** -126, 2.0 ** -24, 6e-8, 2.0 ** -14, 1e-5,
                  0.5, 1.0, 1.0 + 2.0 ** -52, 2.0 - 2.0 ** -40, 2.0, 3.0, 1024.0, 65504.0, 65536.0, 1e6, 3e38, 1e300])
    y = np.concatenate([y, -y[1:]])
    lo = np.where(np.arange(y.size) % 3 == 0, np.spacing(np.abs(y)) * 0.25, 0.0)
    meta = {"case": "synthetic.edge", "tolerance": json.dumps({"factor": 8.0, "floor_ulps": 1.0})}
    fx = tmp_path / "synthetic.safetensors"
    bounds = {}
    for d in DTYPES:  # F32 bounds, a different one per element for output.b
        bounds[f"bound.{d}.output.a"] = (np.zeros(y.size), "F32")
        bounds[f"bound.{d}.output.b"] = ((1e-3 * (1 + np.arange(y.size) % 5)).reshape(-1, 1), "F32")
    df.write(fx, {"output.a": y, "output.a.lo": lo, "output.b": y.reshape(-1, 1), "output.b.lo": lo.reshape(-1, 1),
                  **bounds}, meta)
    case = df.load_case(fx)
    tol = tolerances(case, dtype)
    scale = np.where(np.arange(y.size) % 2 == 0, 0.999, 1.001)
    cand = {n: (case.expected[n] + (case.file.tensors[n + ".lo"] + scale.reshape(case.expected[n].shape) * tol[n]),
                "F64") for n in case.expected}
    path = tmp_path / "cand.safetensors"
    df.write(path, cand)
    rc, out = verify(dmref_cli, str(fx), str(path), dtype, "--errors", "1000")
    py = df.check(df.read(path), case, dtype, keep=1000)
    assert_same(py, out["cases"][0], f"synthetic {dtype}")
    assert py.failed == 2 * int(np.count_nonzero(scale > 1)), py.report()
    cpp_failed = {(f["tensor"], tuple(f["index"])) for f in out["cases"][0]["failures"]}
    assert cpp_failed == {(f.tensor, f.index) for f in py.failures}


def _bad_fixtures():
    """Fixtures with a malformed tolerance rule or outputs: (name, tensors, metadata, field)."""
    y = np.array([1.0, -2.0, 0.5])
    bound = {f"bound.{d}.output.x": (np.full(3, 1e-3), "F32") for d in DTYPES}
    t = {"output.x": y, "output.x.lo": np.zeros(3), **bound}
    tol = json.dumps({"factor": 8.0, "floor_ulps": 1.0})

    def meta(tolerance=tol, case="bad.case"):
        m = {"tolerance": tolerance}
        if case is not None:
            m["case"] = case
        return m

    def with_bound(values):
        return {**t, **{f"bound.{d}.output.x": (np.asarray(values, dtype=float), "F64") for d in DTYPES}}

    yield "no case id", t, meta(case=None), "__metadata__.case"
    yield "tolerance not JSON", t, meta(tolerance="{"), "__metadata__.tolerance"
    yield "tolerance with a duplicate key", t, meta(tolerance='{"factor": 2, "factor": 1e6}'), "__metadata__.tolerance"
    yield "tolerance nested 100000 deep", t, meta(tolerance='{"a":' * 100000 + "1" + "}" * 100000), \
        "__metadata__.tolerance"
    yield "tolerance not an object", t, meta(tolerance="[2, 4]"), "__metadata__.tolerance"
    yield "factor missing", t, meta(tolerance='{"floor_ulps": 1}'), "__metadata__.tolerance.factor"
    yield "floor_ulps missing", t, meta(tolerance='{"factor": 8}'), "__metadata__.tolerance.floor_ulps"
    yield "factor a string", t, meta(tolerance='{"factor": "2", "floor_ulps": 1}'), "__metadata__.tolerance.factor"
    yield "factor negative", t, meta(tolerance='{"factor": -1, "floor_ulps": 1}'), "__metadata__.tolerance.factor"
    yield "floor_ulps true", t, meta(tolerance='{"factor": 8, "floor_ulps": true}'), "__metadata__.tolerance.floor_ulps"
    yield "no_bound not an object", t, meta(tolerance='{"factor": 8, "floor_ulps": 1, "no_bound": []}'), \
        "__metadata__.tolerance.no_bound"
    yield "not_judged not an object", t, meta(tolerance='{"factor": 8, "floor_ulps": 1, "not_judged": []}'), \
        "__metadata__.tolerance.not_judged"
    yield "not_judged of the dtype not an object", t, \
        meta(tolerance='{"factor": 8, "floor_ulps": 1, "not_judged": {"f32": "ill"}}'), "__metadata__.tolerance.not_judged.f32"
    yield "not_judged naming no golden tensor", t, \
        meta(tolerance='{"factor": 8, "floor_ulps": 1, "not_judged": {"f32": {"output.zz": "ill"}}}'), \
        "__metadata__.tolerance.not_judged.f32.output.zz"
    yield "not_judged reason not a string", t, \
        meta(tolerance='{"factor": 8, "floor_ulps": 1, "not_judged": {"f32": {"output.x": 1}}}'), \
        "__metadata__.tolerance.not_judged.f32.output.x"
    yield "no bound tensor for the dtype", {"output.x": y, "output.x.lo": np.zeros(3)}, meta(), "bound.f32.output.x"
    yield "no bound for the dtype, with the reason", {"output.x": y, "output.x.lo": np.zeros(3)}, \
        meta(tolerance='{"factor": 8, "floor_ulps": 1, "no_bound": {"f32": "overflows"}}'), "bound.f32.output.x"
    yield "bound of another shape", with_bound([1e-3, 1e-3]), meta(), "bound.f32.output.x"
    yield "bound negative", with_bound([1e-3, -1e-3, 1e-3]), meta(), "bound.f32.output.x[1]"
    yield "bound inf", with_bound([1e-3, 1e-3, np.inf]), meta(), "bound.f32.output.x[2]"
    # A fixture is sane before it judges anything (issue 11).
    yield "bound 1e308 (x factor 8 = inf)", with_bound([1e308, 1e-3, 1e-3]), meta(), "bound.f32.output.x[0]"
    yield "golden NaN", {**t, "output.x": np.array([np.nan, 1.0, 1.0])}, meta(), "output.x"
    yield "golden lo inf", {**t, "output.x.lo": np.array([0.0, np.inf, 0.0])}, meta(), "output.x.lo"
    yield "no golden tensor", {"input.e": y}, meta(), "fixture"
    yield "lo missing", {"output.x": y, **bound}, meta(), "output.x.lo"
    yield "lo of another shape", {**t, "output.x.lo": np.zeros(2)}, meta(), "output.x.lo"


@pytest.mark.parametrize("name,tensors,meta,field", list(_bad_fixtures()), ids=[b[0] for b in _bad_fixtures()])
def test_python_and_dmref_verify_refuse_the_same_bad_fixture(dmref_cli, tmp_path, name, tensors, meta, field):
    fx = tmp_path / "badfx.safetensors"
    df.write(fx, tensors, meta)
    cand = tmp_path / "cand.safetensors"
    df.write(cand, {"output.x": np.array([1.0, -2.0, 0.5])})
    p = subprocess.run([dmref_cli, "verify", "--fixtures", str(fx), "--candidate", str(cand)], capture_output=True,
                       text=True, errors="replace")
    assert p.returncode == 2 and p.stderr.count("\n") == 1, (p.returncode, p.stderr)
    assert p.stderr.startswith(f"dmref: {fx}: {field}: "), p.stderr
    with pytest.raises(df.BadInput) as e:
        df.check(df.read(cand), df.read(fx), "f32")
    assert e.value.field == field, str(e.value)


H = "0" * 64
BAD_MANIFESTS = [
    ("not JSON", "{", "manifest"),
    ("not an object", "[]", "manifest"),
    ("a number past double", '{"cases": [], "x": 1e999}', "manifest"),
    ("no cases", "{}", "cases"),
    ("cases not an array", '{"cases": {}}', "cases"),
    ("a case not an object", '{"cases": ["x"]}', "cases[0]"),
    ("id missing", '{"cases": [{"file": "a", "sha256": "%s"}]}' % H, "cases[0].id"),
    ("id not a string", '{"cases": [{"id": 1, "file": "a", "sha256": "%s"}]}' % H, "cases[0].id"),
    ("id empty", '{"cases": [{"id": "", "file": "a", "sha256": "%s"}]}' % H, "cases[0].id"),
    ("duplicate id", '{"cases": [{"id": "a", "file": "a", "sha256": "%s"}, {"id": "a", "file": "b", "sha256": "%s"}]}'
     % (H, H), "cases[1].id"),
    ("file with a directory", '{"cases": [{"id": "a", "file": "../a", "sha256": "%s"}]}' % H, "cases[0].file"),
    ("sha256 upper case", '{"cases": [{"id": "a", "file": "a", "sha256": "%s"}]}' % ("A" * 64), "cases[0].sha256"),
    ("sha256 short", '{"cases": [{"id": "a", "file": "a", "sha256": "00"}]}', "cases[0].sha256"),
    ("command not a string", '{"cases": [{"id": "a", "file": "a", "sha256": "%s", "command": 1}]}' % H,
     "cases[0].command"),
    ("precision_bits negative", '{"cases": [{"id": "a", "file": "a", "sha256": "%s", "precision_bits": -1}]}' % H,
     "cases[0].precision_bits"),
]


@pytest.mark.parametrize("name,text,field", BAD_MANIFESTS, ids=[b[0] for b in BAD_MANIFESTS])
def test_python_and_cpp_manifest_readers_refuse_the_same_field(dmref_cli, tmp_path, name, text, field):
    m = tmp_path / "manifest.json"
    m.write_text(text)
    p = subprocess.run([dmref_cli, "generate", "--case", "preln.kernel.d8.L6.f32.s1", "--out", str(tmp_path / "gen"),
                        "--check", str(m)], capture_output=True, text=True, errors="replace")
    assert p.returncode == 2 and p.stderr.count("\n") == 1, (p.returncode, p.stderr)
    assert p.stderr.startswith(f"dmref: {m}: {field}: "), p.stderr
    assert not (tmp_path / "gen").exists()  # refused before any work
    with pytest.raises(df.BadInput) as e:
        df.read_manifest(m)
    assert e.value.field == field, str(e.value)


# ---- Issue 24: one rule, one verdict. Each table below is run through both
# gates (`dmref verify` and dmref_fixtures); the rules are stated once, in
# docs/fixtures.md ("Commands") and docs/hardening.md.

def _nothing_judged_fixtures():
    """Fixtures (no manifest) on which nothing can be judged: (name, tensors, unrepresentable, --outputs)."""
    empty = np.zeros((0, 3))
    y = np.array([1.0, 2.0])
    yield "only golden an empty non-output tensor", {"grad.input.e": empty, "grad.input.e.lo": empty}, None, []
    yield "every output unrepresentable but an empty one", {"output.h": empty, "output.h.lo": empty}, \
        {"output.out": "element [0,0] is beyond double's range", "output.P": "element [0] is beyond double's range"}, []
    yield "--outputs selecting only an empty tensor", {"output.h": empty, "output.h.lo": empty, "output.out": y,
                                                       "output.out.lo": np.zeros(2)}, None, ["h"]


@pytest.mark.parametrize("name,tensors,beyond,only", list(_nothing_judged_fixtures()),
                         ids=[c[0] for c in _nothing_judged_fixtures()])
def test_a_verdict_on_nothing_is_never_a_pass(dmref_cli, tmp_path, name, tensors, beyond, only):
    names = [n for n in tensors if not n.endswith(".lo")]
    # The rule's numbers in both forms, metadata baselines and per-element bound.<dtype>.* tensors
    # (issue 19's rule): the fixture is sane for either gate, and nothing in it can be judged.
    meta = {"case": "nothing.case", "tolerance": json.dumps({"factor": 2.0, "floor_ulps": 4.0}),
            "baselines": json.dumps({d: {n: {"max_abs": 1e-3, "rel": 0.0} for n in names} for d in DTYPES})}
    if beyond:
        meta["unrepresentable"] = json.dumps(beyond)
    fx = tmp_path / "nothing.safetensors"
    bounds = {f"bound.{d}.{n}": (np.full(tensors[n].shape, 1e-3), "F32") for d in DTYPES for n in names}
    df.write(fx, {**tensors, **bounds}, meta)
    cand = tmp_path / "cand.safetensors"
    df.write(cand, {n: tensors[n] for n in names})
    rc, out = verify(dmref_cli, str(fx), str(cand), "f32", *(["--outputs", ",".join(only)] if only else []))
    (cpp,) = out["cases"]
    py = df.check(df.read(cand), df.read(fx), "f32", only=only or None)
    assert rc == 1 and not cpp["pass"] and cpp["checked"] == 0, out  # before: PASS, 0 elements, exit 0
    assert cpp["problem"] == df.verify.NOTHING_JUDGED
    assert not py.passed and py.checked == 0 and py.problems == [df.verify.NOTHING_JUDGED], py.report()
    assert not any(line.startswith("PASS") for line in py.report().splitlines())


@pytest.mark.parametrize("ill", [["output.y"], ["output.x", "output.y"]], ids=["one tensor", "every tensor"])
def test_both_gates_report_a_tensor_the_recipe_cannot_judge(dmref_cli, tmp_path, ill):
    """tolerance.not_judged.<dtype>.<name> (the generator's refusal of an ill-conditioned tensor,
    docs/precision.md): that tensor is NOT JUDGED with the reason in both gates, whatever the candidate
    holds; the others are judged; every tensor not judged is a verdict on nothing, never a PASS."""
    y = np.array([1.0, 2.0])
    tensors = {n: y for n in ("output.x", "output.y")}
    tensors.update({n + ".lo": np.zeros(2) for n in ("output.x", "output.y")})
    bounds = {f"bound.{d}.{n}": (np.full(2, 1e-3), "F32") for d in ("f32", "bf16", "f16", "f64")
              for n in ("output.x", "output.y") if not (d == "f32" and n in ill)}
    why = "the error scale of a correct kernel is of the size of the values in this recipe"
    meta = {"case": "ill.case", "tolerance": json.dumps({"factor": 8.0, "floor_ulps": 1.0,
                                                           "not_judged": {"f32": {n: why for n in ill}}})}
    fx = tmp_path / "ill.safetensors"
    df.write(fx, {**tensors, **bounds}, meta)
    cand = tmp_path / "cand.safetensors"
    df.write(cand, {"output.x": y, "output.y": np.array([np.nan, 1e9])})  # y garbage: judged nowhere
    rc, out = verify(dmref_cli, str(fx), str(cand), "f32")
    (cpp,) = out["cases"]
    py = df.check(df.read(cand), df.read(fx), "f32")
    assert sorted(n["tensor"] for n in cpp["not_judged"]) == ill
    assert sorted(n for n, _ in py.not_judged) == ill
    assert all(why in n["why"] for n in cpp["not_judged"]) and all(why in w for _, w in py.not_judged)
    if len(ill) == 1:
        assert rc == 0 and cpp["pass"] and cpp["checked"] == 2 and py.passed and py.checked == 2, (out, py.report())
    else:
        assert rc == 1 and not cpp["pass"] and cpp["problem"] == df.verify.NOTHING_JUDGED, out
        assert not py.passed and py.problems == [df.verify.NOTHING_JUDGED], py.report()
    rc, out = verify(dmref_cli, str(fx), str(cand), "f64")  # the other recipes judge y, and fail it
    assert rc == 1 and not out["cases"][0]["pass"] and not df.check(df.read(cand), df.read(fx), "f64").passed


def _corpus_dir(fixtures_dir, tmp_path, n=2):
    """golden/ with the first n preln.kernel fixtures and manifest.json one up (the corpus layout)."""
    man = json.load(open(os.path.join(fixtures_dir, "..", "manifest.json")))
    keep = [c for c in man["cases"] if c["id"].startswith("preln.kernel.")][:n]
    golden = tmp_path / "golden"
    golden.mkdir()
    for c in keep:
        (golden / c["file"]).write_bytes(open(os.path.join(fixtures_dir, c["file"]), "rb").read())
    (tmp_path / "manifest.json").write_text(json.dumps(dict(man, cases=keep)))
    return golden, keep


def _with_case_id(path, new_id):
    """The fixture with another case id in its metadata (its bytes change, so does its sha256)."""
    f = df.read(path)
    df.write(path, {k: (v, f.dtypes[k]) for k, v in f.tensors.items()}, dict(f.metadata, case=new_id))


def _layouts():
    """Directory layouts and what both gates must say: (name, edit(golden, keep), --case, expected).
    expected: ("judged", ids) -- these cases judged (and pass), nothing else; ("refused", words) -- exit 2
    / BadInput from cases() with these words (the manifest policy: tests/python/test_manifest_policy.py);
    ("bad", field) -- exit 2 / BadInput naming the field."""
    def hidden(golden, keep):
        (golden / ".safetensors").write_bytes(b"not a fixture")  # a name with no stem: not a fixture, in both
    def hidden_stem(golden, keep):  # a stem starting with a dot is a fixture (and not in the manifest)
        (golden / ".x.safetensors").write_bytes((golden / keep[0]["file"]).read_bytes())
    def directory(golden, keep):
        (golden / "a.safetensors").mkdir()
    def edited_id(golden, keep):
        _with_case_id(golden / keep[0]["file"], "other.id")
    yield "a file named .safetensors is ignored", hidden, "*", ("judged", None)
    yield "a hidden .x.safetensors is a fixture", hidden_stem, "*", ("refused", "duplicate case id")
    yield "a directory named like a fixture", directory, "*", ("bad", "file")
    yield "an edited case id is reported, not skipped (--case on the listed id)", edited_id, "preln.kernel.*", \
        ("refused", "is case")


@pytest.mark.parametrize("name,edit,glob,expected", list(_layouts()), ids=[c[0] for c in _layouts()])
def test_both_gates_find_and_select_fixtures_by_one_rule(dmref_cli, fixtures_dir, tmp_path, name, edit, glob, expected):
    golden, keep = _corpus_dir(fixtures_dir, tmp_path)
    edit(golden, keep)
    cand = tmp_path / "cand.safetensors"
    tensors = {}
    for c in keep:
        f = df.read(os.path.join(fixtures_dir, c["file"]))
        tensors.update({f"{c['id']}/{k}": v for k, v in f.tensors.items() if k.startswith("output.") and
                        not k.endswith(".lo")})
    df.write(cand, tensors)
    p = subprocess.run([dmref_cli, "verify", "--fixtures", str(golden), "--candidate", str(cand), "--case", glob],
                       capture_output=True, text=True)
    kind, what = expected
    if kind == "judged":
        assert p.returncode == 0, p.stdout + p.stderr
        assert [c.id for c in df.cases(golden, glob)] == sorted(c["id"] for c in keep)
    elif kind == "bad":
        assert p.returncode == 2 and f"a.safetensors: {what}: not a regular file" in p.stderr, p.stderr
        with pytest.raises(df.BadInput) as e:
            list(df.cases(golden, glob))
        assert e.value.field == what and "not a regular file" in str(e.value)  # before: IsADirectoryError
    else:
        assert p.returncode == 2 and p.stdout == "" and what in p.stderr, p.stdout + p.stderr
        with pytest.raises(df.BadInput) as e:  # before: the edited case silently left out of cases()
            list(df.cases(golden, glob))
        assert what in str(e.value), str(e.value)


def test_check_on_a_fixture_path_checks_its_manifest_as_verify(dmref_cli, fixtures_dir, tmp_path):
    """check(outputs, path) reads the fixture as `verify --fixtures FILE` does: against the manifest
    next to it (here one up from golden/), an edited fixture is refused (BadInput; exit 2) with verify's words."""
    golden, keep = _corpus_dir(fixtures_dir, tmp_path)
    victim = golden / keep[0]["file"]
    outputs = {k: v for k, v in df.read(victim).tensors.items() if k.startswith("output.") and not k.endswith(".lo")}
    assert df.check(outputs, str(victim)).passed
    f = df.read(victim)  # edited: one metadata entry more (a valid fixture, not the one the manifest lists)
    df.write(victim, {k: (t, f.dtypes[k]) for k, t in f.tensors.items()}, dict(f.metadata, edited="yes"))
    p = subprocess.run([dmref_cli, "verify", "--fixtures", str(victim), "--candidate", str(victim)],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "does not match the sha256" in p.stderr, p.stderr
    with pytest.raises(df.BadInput) as e:  # before: judged, and passed
        df.check(outputs, str(victim))
    assert e.value.field == "sha256" and "does not match the sha256 in the manifest" in e.value.problem, str(e.value)
    assert str(e.value) in p.stderr  # the same line
    assert df.check(outputs, df.read(victim)).passed  # a File has no path: no manifest (as --no-manifest)


BAD_MANIFESTS_24 = [  # the C++ reader holds precision_bits in an int64; before, Python took any integer
    ("precision_bits 2^63", '{"cases": [{"id": "a", "file": "a", "sha256": "%s", "precision_bits": %d}]}' % (H, 2 ** 63),
     "cases[0].precision_bits"),
    ("precision_bits 2^64 - 1", '{"cases": [{"id": "a", "file": "a", "sha256": "%s", "precision_bits": %d}]}'
     % (H, 2 ** 64 - 1), "cases[0].precision_bits"),
]


@pytest.mark.parametrize("name,text,field", BAD_MANIFESTS_24, ids=[b[0] for b in BAD_MANIFESTS_24])
def test_both_manifest_readers_bound_precision_bits(dmref_cli, tmp_path, name, text, field):
    test_python_and_cpp_manifest_readers_refuse_the_same_field(dmref_cli, tmp_path, name, text, field)


def test_a_glob_that_selects_no_case_is_bad_input_in_both(dmref_cli, fixtures_dir, tmp_path):
    """A run over no case is not a pass: `verify --case` matching nothing is exit 2, and so is Python
    `cases()` (before: an empty iterator, so a test parametrized over it passed on nothing)."""
    golden, keep = _corpus_dir(fixtures_dir, tmp_path)
    fx = golden / keep[0]["file"]
    for where in (golden, fx):
        p = subprocess.run([dmref_cli, "verify", "--fixtures", str(where), "--candidate", str(fx), "--case", "nomatch*"],
                           capture_output=True, text=True)
        assert p.returncode == 2 and "no fixture case matches --case 'nomatch*'" in p.stderr, p.stderr
        with pytest.raises(df.BadInput) as e:
            list(df.cases(where, "nomatch*"))
        assert e.value.field == "fixtures" and "no fixture case matches --case 'nomatch*'" in str(e.value)
    with pytest.raises(df.BadInput) as e:  # and from the manifest
        list(df.cases(tmp_path / "manifest.json", "nomatch*"))
    assert e.value.field == "fixtures"
