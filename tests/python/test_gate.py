"""Issue 11, Python side: dmref_fixtures.check / assert_conforms / cases agree
with `dmref verify` on what makes the gate trustworthy (docs/hardening.md):
fixtures from `dmref run`, --dtype f64, --outputs (only=), bare names, complex
and string candidates, case ids that cannot forge a report line, the manifest
check, and the reader's verdicts on the same bytes."""
import json
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

import dmref_fixtures as df
from badfiles import entry, raw

CASE = "ldm_rls.kernel.g2_dk4_d8.L8.f32.s1"


def cli(dmref_cli, *args):
    p = subprocess.run([dmref_cli, *args], capture_output=True, text=True, errors="replace")
    return p.returncode, p.stdout, p.stderr


@pytest.fixture(scope="module")
def run_fixture(dmref_cli, fixtures_dir, tmp_path_factory):
    """A fixture written by `dmref run` from a corpus case's inputs and config."""
    d = tmp_path_factory.mktemp("run")
    case = df.load_case(os.path.join(fixtures_dir, CASE + ".safetensors"))
    df.write(d / "in.safetensors", {**case.inputs, **case.params})
    (d / "cfg.json").write_text(json.dumps(case.config))
    rc, out, err = cli(dmref_cli, "run", "--scheme", "ldm", "--config", str(d / "cfg.json"), "--inputs",
                       str(d / "in.safetensors"), "--out", str(d / "fx.safetensors"), "--case-id", "py.run")
    assert rc == 0, err
    return d / "fx.safetensors", case


def test_a_run_fixture_is_judged_by_check_as_by_verify(dmref_cli, run_fixture, tmp_path):
    fx, corpus_case = run_fixture
    case = df.load_case(fx)
    assert case.id == "py.run"
    assert case.baselines == corpus_case.baselines  # computed as generate computes them
    f32 = {n: df.round_to(v, "F32") for n, v in case.expected.items()}
    df.write(tmp_path / "c.safetensors", f32)
    for dtype, want in (("f32", True), ("f64", False)):
        v = df.check(f32, case, dtype)
        rc, out, _ = cli(dmref_cli, "verify", "--fixtures", str(fx), "--candidate", str(tmp_path / "c.safetensors"),
                         "--dtype", dtype, "--format", "json")
        assert v.passed == want and (rc == 0) == want, (dtype, v.report(), out)
        assert json.loads(out)["cases"][0]["checked"] == v.checked
    assert df.check(case.expected, case, "f64").passed  # the golden hi: |err| = |lo| < 4 ulp_f64


def test_only_judges_a_subset_as_verify_outputs(dmref_cli, run_fixture):
    fx, _ = run_fixture
    case = df.load_case(fx)
    v = df.check(case.expected, case, "f32", only=["out", "output.M"])
    assert v.left_out == ["output.P", "output.h"] and "not judged" in v.report()
    rc, out, _ = cli(dmref_cli, "verify", "--fixtures", str(fx), "--candidate", str(fx), "--outputs", "out,output.M",
                     "--format", "json")
    assert rc == 0 and json.loads(out)["cases"][0]["left_out"] == v.left_out
    assert json.loads(out)["cases"][0]["checked"] == v.checked
    with pytest.raises(df.BadInput) as e:
        df.check(case.expected, case, "f32", only=["nosuch"])
    assert e.value.field == "--outputs"
    # An empty name is refused, never dropped (as `--outputs out,,M`: exit 2);
    # so is a bare string, which would be read letter by letter.
    for bad in (["out", "", "output.M"], [""], "out"):
        with pytest.raises(df.BadInput) as e:
            df.check(case.expected, case, "f32", only=bad)
        assert e.value.field == "--outputs"
    for text in ("out,,output.M", "out,", ",out", "", ","):
        rc, _, err = cli(dmref_cli, "verify", "--fixtures", str(fx), "--candidate", str(fx), "--outputs", text,
                         "--no-manifest")
        assert rc == 2 and err.count("\n") == 1 and "--outputs" in err and "empty name" in err, (text, rc, err)


def test_an_output_left_out_is_reported_not_judged_as_by_verify(dmref_cli, fixtures_dir, tmp_path):
    """A `dmref run` fixture whose output.P is beyond double's range (P_L[3,3] =
    alpha / prod(lambda) = 1e10 / 1e-299: the key's last coordinate of group 1 is
    zero, so that entry only scales; cli_test has the same case): check() judges
    the rest, never P, and writes the NOT JUDGED line verify prints."""
    case = df.load_case(os.path.join(fixtures_dir, CASE + ".safetensors"))
    k = case.inputs["input.k"].copy()
    k[..., -1] = 0.0
    lam = np.ones_like(case.params["param.lambda"])
    lam[-1, :] = 1e-299
    df.write(tmp_path / "in.safetensors", {**case.inputs, "input.k": k, "param.lambda": lam})
    (tmp_path / "cfg.json").write_text(json.dumps(dict(case.config, alpha=1e10)))
    fx = tmp_path / "fx.safetensors"
    rc, _, err = cli(dmref_cli, "run", "--scheme", "ldm", "--config", str(tmp_path / "cfg.json"), "--inputs",
                     str(tmp_path / "in.safetensors"), "--out", str(fx))
    assert rc == 0 and "output.P left out" in err, err
    big = df.load_case(fx)
    assert "output.P" not in big.expected and list(df.unrepresentable(big.file)) == ["output.P"]
    cand = dict(big.expected, **{"output.P": np.full((2, 2, 4, 4), np.nan)})  # supplied: neither passed nor failed
    v = df.check(cand, big, "f64")
    df.write(tmp_path / "c.safetensors", cand)
    rc, out, _ = cli(dmref_cli, "verify", "--fixtures", str(fx), "--candidate", str(tmp_path / "c.safetensors"),
                     "--dtype", "f64")
    assert v.passed and rc == 0, (v.report(), out)
    assert [n for n, _ in v.not_judged] == ["output.P"]
    note = v.report().splitlines()[-1]
    assert note.startswith("NOT JUDGED ") and note in out.splitlines(), (v.report(), out)
    with pytest.raises(df.BadInput) as e:
        df.check(cand, big, "f64", only=["P"])
    assert e.value.field == "--outputs"
    # A fixture that claims to leave out a tensor it has is malformed (both readers).
    bad = df.read(fx)
    bad.metadata["unrepresentable"] = json.dumps({"output.out": "x"})
    df.write(tmp_path / "bad.safetensors", bad.tensors, bad.metadata)
    with pytest.raises(df.BadInput) as e:
        df.check(cand, df.read(tmp_path / "bad.safetensors"), "f64")
    assert e.value.field == "__metadata__.unrepresentable.output.out"
    rc, _, err = cli(dmref_cli, "verify", "--fixtures", str(tmp_path / "bad.safetensors"), "--candidate",
                     str(tmp_path / "c.safetensors"), "--dtype", "f64")
    assert rc == 2 and "__metadata__.unrepresentable.output.out" in err, err


def test_bare_complex_and_string_candidates(run_fixture):
    fx, _ = run_fixture
    case = df.load_case(fx)
    bare = {n[len("output."):]: v for n, v in case.expected.items()}
    assert df.check(bare, case).passed
    cplx = dict(bare, out=bare["out"] + 1j)  # the imaginary part must not be dropped silently
    v = df.check(cplx, case)
    assert not v.passed and "not an array of real numbers" in v.report()
    v = df.check(dict(bare, out=np.full(bare["out"].shape, "1.0")), case)
    assert not v.passed and "not an array of real numbers" in v.report()
    v = df.check(dict(bare, out=object()), case)
    assert not v.passed


def test_a_case_id_cannot_forge_a_report_line(tmp_path):
    meta = {"case": "x\nPASS forged", "tolerance": json.dumps({"factor": 8.0, "floor_ulps": 1.0})}
    df.write(tmp_path / "f.safetensors", {"output.x": np.ones(2), "output.x.lo": np.zeros(2),
                                          "bound.f32.output.x": (np.zeros(2), "F32")}, meta)
    v = df.check({"x": np.full(2, 9.0)}, df.load_case(tmp_path / "f.safetensors"))
    assert not v.passed
    assert not any(line.startswith("PASS") for line in v.report().splitlines()), v.report()


def _corpus(fixtures_dir, tmp_path):
    man = json.load(open(os.path.join(fixtures_dir, "..", "manifest.json")))
    keep = [c for c in man["cases"] if c["id"].startswith("preln.kernel.")]
    (tmp_path / "golden").mkdir()
    for c in keep:
        shutil.copy(os.path.join(fixtures_dir, c["file"]), tmp_path / "golden" / c["file"])
    (tmp_path / "manifest.json").write_text(json.dumps(dict(man, cases=keep)))
    return tmp_path / "golden", keep


def test_cases_checks_the_manifest_as_verify(dmref_cli, fixtures_dir, tmp_path):
    golden, keep = _corpus(fixtures_dir, tmp_path)
    assert [c.id for c in df.cases(golden)] == sorted(c["id"] for c in keep)
    victim = golden / keep[0]["file"]
    victim.write_bytes(victim.read_bytes().replace(b'\\"factor\\":8.0', b'\\"factor\\":1e6'))
    with pytest.raises(df.BadInput) as e:
        list(df.cases(golden))
    assert e.value.field == "sha256"
    rc, out, err = cli(dmref_cli, "verify", "--fixtures", str(golden), "--candidate", str(victim))
    assert rc == 2 and out == "" and str(e.value) in err  # refused before anything is judged: the same line
    assert len(list(df.cases(golden, check_hashes=False))) == len(keep)  # skipping is explicit
    with pytest.raises(df.BadInput) as e:
        list(df.cases(victim))  # one file of the corpus: checked too, as verify --fixtures FILE
    assert e.value.field == "sha256"
    victim.unlink()
    with pytest.raises(df.BadInput) as e:
        list(df.cases(golden))
    assert "missing" in str(e.value)


def test_readers_give_the_same_verdict_on_the_same_bytes(dmref_cli, fixtures_dir, tmp_path):
    fx = os.path.join(fixtures_dir, CASE + ".safetensors")
    accepted = {
        "-0 as an extent": raw('{"a":{"dtype":"F32","shape":[-0],"data_offsets":[0,0]}}'),
        "-0 as an offset": raw('{"a":{"dtype":"F32","shape":[2],"data_offsets":[-0,8]}}', struct.pack("<2f", 1, 2)),
        "empty tensor of shape [0, 2^59]": raw({"a": entry("F32", [0, 2 ** 59], 0, 0)}),
    }
    for name, data in accepted.items():
        p = tmp_path / "f.safetensors"
        p.write_bytes(data)
        rc, _, err = cli(dmref_cli, "verify", "--fixtures", fx, "--candidate", str(p))
        assert rc == 1, (name, err)  # read, then judged: the candidate lacks the outputs
        df.read(p)  # accepted too
    p.write_bytes(raw({"a": entry("F32", [0, 2 ** 63 - 1], 0, 0)}))  # numpy cannot shape it: both refuse
    rc, _, err = cli(dmref_cli, "verify", "--fixtures", fx, "--candidate", str(p))
    assert rc == 2 and '"a".shape' in err, err
    with pytest.raises(df.BadInput) as e:
        df.read(p)
    assert e.value.field == '"a".shape'
    fifo = tmp_path / "fifo.safetensors"
    os.mkfifo(fifo)
    rc, _, err = cli(dmref_cli, "verify", "--fixtures", fx, "--candidate", str(fifo))
    assert rc == 2 and "not a regular file" in err
    with pytest.raises(df.BadInput) as e:
        df.read(fifo)
    assert "not a regular file" in str(e.value)


def test_capture_run_kernel_verify(dmref_cli, tmp_path):
    """The documented flow (README, docs/fixtures.md, docs/python.md) on a
    shape the corpus does not have: capture -> dmref run -> the example
    kernel of test_example.py -> dmref verify and dmref_fixtures.check."""
    from test_example import buggy_preln_kernel, my_preln_kernel

    rng = np.random.default_rng(7)
    T, L, d = 3, 5, 16
    captured = {"input.e": df.round_to(rng.standard_normal((T, d)), "F32"),
                "input.v": df.round_to(rng.standard_normal((T, L, d)), "F32")}
    df.write(tmp_path / "captured.safetensors", captured)
    (tmp_path / "my_config.json").write_text(json.dumps({"tokens": T, "layers": L, "d": d}))
    rc, out, err = cli(dmref_cli, "run", "--scheme", "preln", "--config", str(tmp_path / "my_config.json"),
                       "--inputs", str(tmp_path / "captured.safetensors"), "--out", str(tmp_path / "golden.safetensors"),
                       "--case-id", "my.preln")
    assert rc == 0, err
    case = df.load_case(tmp_path / "golden.safetensors")
    for kernel, want in ((my_preln_kernel, True), (buggy_preln_kernel, False)):
        outputs = kernel(captured["input.e"], captured["input.v"], "f32")
        df.write(tmp_path / "cand.safetensors", outputs)
        rc, out, _ = cli(dmref_cli, "verify", "--fixtures", str(tmp_path / "golden.safetensors"), "--candidate",
                         str(tmp_path / "cand.safetensors"), "--dtype", "f32")
        assert (rc == 0) == want and df.check(outputs, case, "f32").passed == want, out
