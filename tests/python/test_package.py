"""The dmref package (docs/python.md, "In-process"): dmref.run gives the bytes
`dmref run` writes, dmref.verify agrees with check, torch in -> torch out,
bad input is one BadInput line, the corpus is found after installation or the
message names DMREF_FIXTURES, and the pytest plugin reports per tensor.

Needs the compiled module (dmref._core: built by CMake into build/python, or
`pip install .`); CTest sets DMREF_REQUIRE_PKG=1 where it is built, so these
cannot skip there."""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import dmref_fixtures as df

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

try:
    import dmref
    from dmref import _core  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the build
    if os.environ.get("DMREF_REQUIRE_PKG"):
        raise
    pytest.skip(f"the dmref module is not built ({e})", allow_module_level=True)


def preln_problem(seed=7, T=3, L=5, d=16, fmt="F32", grad=False):
    rng = np.random.default_rng(seed)
    t = {"input.e": df.round_to(rng.standard_normal((T, d)), fmt),
         "input.v": df.round_to(rng.standard_normal((T, L, d)), fmt)}
    if grad:
        t["input.grad.h"] = df.round_to(rng.standard_normal((T, L, d)), fmt)
        t["input.grad.out"] = df.round_to(rng.standard_normal((T, d)), fmt)
    return {"tokens": T, "layers": L, "d": d}, t


# (scheme, config, tensors, grad) from committed corpus cases: every scheme, forward and backward.
CORPUS_PROBLEMS = ["preln.kernel.d8.L6.bf16.s1", "attnres_full.kernel_grad.d8.L6.f32.s1",
                   "mhc.kernel.n4_d8.L6.deepseek-v4.f32.s1", "ldm_rls.kernel.g2_dk4_d8.L8.f16.s1"]


def corpus_problem(cid):
    case = next(df.cases(pattern=cid))
    tensors = {k: (v, case.file.dtypes[k]) for k, v in case.file.tensors.items()
               if k.startswith(("input.", "param."))}
    return case.scheme, case.config, tensors, bool(case.gradients)


@pytest.mark.parametrize("cid", CORPUS_PROBLEMS)
def test_run_is_the_cli_byte_for_byte(cid, dmref_cli, tmp_path):
    scheme, config, tensors, grad = corpus_problem(cid)
    (tmp_path / "config.json").write_text(json.dumps(config))
    df.write(tmp_path / "in.safetensors", tensors)
    cmd = [dmref_cli, "run", "--scheme", scheme, "--config", "config.json", "--inputs", "in.safetensors",
           "--out", "cli.safetensors", "--case-id", "my.case"] + (["--grad"] if grad else [])
    subprocess.run(cmd, cwd=tmp_path, check=True, capture_output=True)
    cli = (tmp_path / "cli.safetensors").read_bytes()
    cwd = os.getcwd()
    try:  # the same relative paths: the same recorded command, so the whole file is the same
        os.chdir(tmp_path)
        res = dmref.run(scheme, "config.json", "in.safetensors", grad=grad, case_id="my.case", jobs=1)
    finally:
        os.chdir(cwd)
    assert res.data == cli
    res.write(tmp_path / "py.safetensors")
    assert (tmp_path / "py.safetensors").read_bytes() == cli
    # In memory: every tensor and every metadata field but the command (and the line quoting it) is the CLI's, bit for bit.
    mem = dmref.run(scheme, config, tensors, grad=grad, case_id="my.case")
    f = df.parse(cli, "cli")
    assert mem.file.dtypes == f.dtypes
    for k, v in f.tensors.items():
        assert mem.file.tensors[k].tobytes() == v.tobytes(), k
    same = lambda m: {k: v for k, v in m.items() if k not in ("command", "generated")}  # noqa: E731 (both name the paths)
    assert same(mem.file.metadata) == same(f.metadata)
    assert mem.file.metadata["command"].startswith(f"dmref run{' --grad' if grad else ''} --scheme {scheme} --config <config>")
    # ...and the certified goldens are the corpus case's own (the same problem, certified again).
    case = next(df.cases(pattern=cid))
    for k in list(case.expected) + list(case.gradients):
        np.testing.assert_array_equal(mem[k], case[k])
        np.testing.assert_array_equal(mem[k + ".lo"], case[k + ".lo"])


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    config, t = preln_problem(fmt="BF16", grad=True)
    tt = {k: torch.tensor(v, dtype=torch.bfloat16) for k, v in t.items()}
    res = dmref.run("preln", config, tt, grad=True)
    assert res.file.dtypes["input.e"] == "BF16"  # stored in the tensors' own dtype
    ref = dmref.run("preln", config, {k: (v, "BF16") for k, v in t.items()}, grad=True)
    assert res.data == ref.data
    for group in (res.expected, res.gradients, res.inputs):
        assert group and all(isinstance(x, torch.Tensor) and x.dtype == torch.float64 for x in group.values())
    assert isinstance(res["output.out.lo"], torch.Tensor)
    # The gate on torch outputs: PreLN in bf16 storage, f32 arithmetic (h_{l+1} = h_l + v_l).
    x, hs = tt["input.e"], []
    for layer in range(config["layers"]):
        hs.append(x)
        x = (x.float() + tt["input.v"][:, layer].float()).to(torch.bfloat16)
    out = {"output.h": torch.stack(hs, 1), "output.out": x}
    assert dmref.check(out, res, "bf16", only=["h", "out"]).passed
    assert dmref.verify(out, res, "bf16", only=["h", "out"]).passed  # the C++ gate takes torch bf16 outputs too
    out["output.out"] = out["output.out"].clone()
    out["output.out"][0, 0] += 1
    a, b = dmref.verify(out, res, "bf16", only=["out"]), dmref.check(out, res, "bf16", only=["out"])
    assert not a.passed and (a.failed, a.checked, a.left_out) == (b.failed, b.checked, b.left_out) == (1, 48, b.left_out)


def candidates(case):
    """A candidate set with a known verdict each: exact (pass), one element pushed far (fail), NaN (fail), missing (fail)."""
    exact = {k: v + case[k + ".lo"] for k, v in list(case.expected.items()) + list(case.gradients.items())}
    far = {k: v.copy() for k, v in exact.items()}
    name = sorted(far)[0]
    far[name].flat[0] += 1.0
    nan = {k: v.copy() for k, v in exact.items()}
    nan[name].flat[-1] = np.nan
    missing = dict(exact)
    del missing[name]
    return [("exact", exact, True), ("far", far, False), ("nan", nan, False), ("missing", missing, False)]


@pytest.mark.parametrize("cid", CORPUS_PROBLEMS)
@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16", "f64"])
def test_verify_agrees_with_check(cid, dtype):
    case = next(df.cases(pattern=cid))
    for label, cand, expect in candidates(case):
        a, b = dmref.verify(cand, case, dtype), dmref.check(cand, case, dtype)
        assert a.passed is b.passed is expect, (label, a.report(), b.report())
        assert (a.checked, a.failed) == (b.checked, b.failed), label
        assert a.worst_ratio == pytest.approx(b.worst_ratio, rel=1e-12), label
        assert [(f.tensor, f.index) for f in a.failures] == [(f.tensor, f.index) for f in b.failures], label
        assert [(t.tensor, t.checked, t.failed, t.worst_index, t.axes) for t in a.tensors] == \
               [(t.tensor, t.checked, t.failed, t.worst_index, t.axes) for t in b.tensors], label


def test_bad_input_is_one_line():
    config, t = preln_problem()
    with pytest.raises(df.BadInput) as e:
        dmref.run("preln", {**config, "layerz": 5}, t)
    assert (e.value.path, e.value.field) == ("<config>", "config.layerz") and "\n" not in str(e.value)
    with pytest.raises(df.BadInput) as e:
        dmref.run("preln", config, {"input.e": t["input.e"]})
    assert (e.value.path, e.value.field, e.value.problem) == ("<inputs>", "input.v", "missing tensor")
    with pytest.raises(df.BadInput) as e:
        dmref.run("preln", "/nonexistent/config.json", t)
    assert e.value.path == "/nonexistent/config.json" and e.value.field == "config"
    with pytest.raises(df.BadInput) as e:
        dmref.run("preln", config, t, case_id="bad id")
    assert e.value.field == "case id"
    with pytest.raises(TypeError, match="inputs\\['input.e'\\]: dtype complex128"):
        dmref.run("preln", config, {**t, "input.e": t["input.e"] + 0j})


def test_corpus_found_after_install_or_named(tmp_path):
    """An installed dmref_fixtures (no source tree around it) finds the corpus _location.py
    names; without one, the message names DMREF_FIXTURES."""
    site = tmp_path / "site"
    shutil.copytree(os.path.join(ROOT, "python", "dmref_fixtures"), site / "dmref_fixtures",
                    ignore=shutil.ignore_patterns("__pycache__", "_location.py"))
    env = {k: v for k, v in os.environ.items() if k != "DMREF_FIXTURES"}
    env["PYTHONPATH"] = str(site)
    code = "import dmref_fixtures as df; print(len(list(df.cases())))"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode != 0 and "DMREF_FIXTURES: not set, and no corpus here" in r.stderr, r.stderr
    (site / "dmref_fixtures" / "_location.py").write_text(
        f"FIXTURES = {os.path.relpath(os.path.join(ROOT, 'fixtures', 'golden'), site / 'dmref_fixtures')!r}\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and int(r.stdout) == len(df.read_manifest(os.path.join(ROOT, "fixtures", "manifest.json")))


PLUGIN_TEST = '''
import numpy as np, pytest

@pytest.mark.dmref("preln.kernel.*.f32.*")
def test_exact(dmref_case, dmref_conforms):
    dmref_conforms({k: v + dmref_case[k + ".lo"] for k, v in dmref_case.expected.items()}, dmref_case, "f32")

@pytest.mark.dmref("preln.kernel.d8.L6.f32.s1")
def test_wrong(dmref_case, dmref_conforms):
    out = {k: v.copy() for k, v in dmref_case.expected.items()}
    out["output.out"][1, 2] += 0.5        # the worst
    out["output.out"][0, 0] += 0.25
    out["output.h"][0, 3, 1] = np.nan
    dmref_conforms(out, dmref_case, "f32")

def test_plain_assert(dmref_fixtures_dir):
    import dmref_fixtures as df
    case = df.load_case(dmref_fixtures_dir + "/preln.kernel.d8.L6.f32.s1.safetensors")
    df.assert_conforms({"output.h": case.expected["output.h"], "output.out": case.expected["output.out"] + 1}, case, "f32")
'''


def test_pytest_plugin(tmp_path):
    (tmp_path / "test_gate.py").write_text(PLUGIN_TEST)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "python")] + sys.path))
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "dmref.pytest_plugin", "-q", "-p", "no:cacheprovider",
                        "--dmref-fixtures", os.path.join(ROOT, "fixtures", "golden"), str(tmp_path / "test_gate.py")],
                       env=env, capture_output=True, text=True, cwd=tmp_path)
    out = r.stdout
    n_f32 = sum(1 for c in df.cases(pattern="preln.kernel.*.f32.*"))
    assert r.returncode == 1 and f"{n_f32} passed" in out and "2 failed" in out, out
    assert "test_exact[preln.kernel.d8.L6.f32.s1]" in out or n_f32 >= 1
    lines = out.splitlines()
    head = next(i for i, s in enumerate(lines) if "dmref gate: case preln.kernel.d8.L6.f32.s1 (f32) FAILED: 3 of" in s)
    block = "\n".join(lines[head:head + 6])
    assert "output.out [2, 8]: 2 of 16 elements fail; worst:" in block, block
    i, j = block.index("[token 1, i 2] observed"), block.index("[token 0, i 0] observed")  # named by the axes
    assert i < j  # sorted by err/tol, the worst first
    assert "output.h [2, 6, 8]: 1 of 96 elements fail" in block and "[token 0, layer 3, i 1] observed nan" in block
    assert "def conforms" not in out and "v = df.check" not in out  # the plugin's frame is hidden
    assert "FAIL preln.kernel.d8.L6.f32.s1 (f32): 16 of 112" in out and "v = check(outputs" not in out  # and assert_conforms's
    # Without a corpus: the message names the variable.
    env.pop("DMREF_FIXTURES", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "dmref.pytest_plugin", "-q", "-p", "no:cacheprovider",
                        "--dmref-fixtures", str(tmp_path / "nowhere"), str(tmp_path / "test_gate.py")],
                       env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode != 0 and "nowhere" in r.stdout, r.stdout


def test_schema_is_the_cli(dmref_cli, tmp_path):
    """dmref.schema is `dmref schema --format json`, for one config (with --grad) and over the documented configs."""
    cfg = {"tokens": 2, "layers": 3, "d": 8, "n": 4, "preset": "deepseek-v4", "phi_layout": "out_in"}
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    cli = subprocess.run([dmref_cli, "schema", "mhc", "--config", str(path), "--grad", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    assert dmref.schema("mhc", cfg, grad=True) == json.loads(cli)
    shapes = {t["name"]: t["shape"] for t in dmref.schema("mhc", cfg)["tensors"]}
    assert shapes["param.phi_res"] == [3, 16, 32]  # [L, out, nC] with phi_layout out_in
    doc = subprocess.run([dmref_cli, "schema", "mhc", "--format", "json"], capture_output=True, text=True, check=True).stdout
    assert dmref.schema("mhc") == json.loads(doc)
    listed = subprocess.run([dmref_cli, "schema", "list"], capture_output=True, text=True, check=True).stdout
    assert dmref.schemes() == [line.split()[0] for line in listed.splitlines()]  # DMREF_SCHEMES order
    assert {"preln", "ldm", "attnres", "hc", "mhc", "denseformer"} <= set(dmref.schemes())
    with pytest.raises(dmref.BadInput) as e:
        dmref.schema("mhc", dict(cfg, preset="v5"))
    assert e.value.field == "config.preset"


def test_exports():
    """The names docs/python.md's API table lists are exported."""
    case = df.load_case(os.path.join(ROOT, "fixtures", "golden", "preln.kernel.d8.L6.f32.s1.safetensors"))
    assert df.golden_names(case.file) == ["output.h", "output.out"]
    df.check_fixture(case.file)
    for name in ("run", "verify", "schema", "schemes", "check", "assert_conforms", "cases", "load_case", "Result", "BadInput"):
        assert hasattr(dmref, name), name


def test_command_synopses_list_every_option(dmref_cli):
    """docs/fixtures.md's "Commands" synopsis of run, verify and generate names every option of --help."""
    text = open(os.path.join(ROOT, "docs", "fixtures.md"), encoding="utf-8").read()
    section = text[text.index("## Commands"):text.index("`verify` candidate tensors")]
    for cmd in ("generate", "run", "verify", "schema", "inputs"):
        helptext = subprocess.run([dmref_cli, cmd, "--help"], capture_output=True, text=True).stdout
        options = sorted(set(re.findall(r"^\s+(--[a-z][a-z-]*)", helptext, re.M)) - {"--help"})
        synopsis = section[section.index(f"dmref {cmd} "):]
        synopsis = synopsis[:synopsis.index("\n    dmref ", 1) if "\n    dmref " in synopsis[1:] else len(synopsis)]
        assert options and all(o in synopsis for o in options), (cmd, [o for o in options if o not in synopsis])


def test_cpp_synopsis_matches_headers():
    """Every function declared in docs/cpp.md's synopsis is declared so in reference/include (whitespace aside)."""
    md = open(os.path.join(ROOT, "docs", "cpp.md"), encoding="utf-8").read()
    block = md[md.index("```cpp") + 6:]
    block = block[:block.index("```")]
    flat = lambda t: re.sub(r"\s+", " ", re.sub(r"//[^\n]*", "", t)).replace("( ", "(").strip()  # noqa: E731
    headers = ""
    for d, _, names in os.walk(os.path.join(ROOT, "reference", "include")):
        headers += "".join(open(os.path.join(d, n), encoding="utf-8").read() for n in names if n.endswith(".hpp"))
    headers = flat(headers)
    decls = [flat(x) + ";" for x in flat(block).split(";") if "(" in x and not x.strip().startswith(("struct", "class", "}"))]
    decls = [re.sub(r"^(namespace [a-z:]+ \{ )", "", d).lstrip("} ") for d in decls]
    assert len(decls) >= 12
    missing = [d for d in decls if d not in headers]
    assert not missing, missing
