"""Defects found by attacking the integrated gate as a hostile user would
(docs/hardening.md, bad-input table): each test names the class, and runs the
C++ gate and the Python package on the same bytes where both read them."""
import hashlib
import json
import os
import shutil
import subprocess
import threading

import pytest

import dmref_fixtures as df
from badfiles import entry, raw

CASE = "ldm_rls.kernel.g2_dk4_d8.L8.f32.s1"


def cli(dmref_cli, *args):
    p = subprocess.run([dmref_cli, *args], capture_output=True, text=True, errors="replace", timeout=120)
    return p.returncode, p.stdout, p.stderr


@pytest.fixture
def one_case(fixtures_dir, tmp_path):
    """A directory golden/ holding one corpus fixture, its id, file name and sha256."""
    src = os.path.join(fixtures_dir, CASE + ".safetensors")
    (tmp_path / "golden").mkdir()
    dst = tmp_path / "golden" / os.path.basename(src)
    shutil.copy(src, dst)
    return tmp_path / "golden", dst, hashlib.sha256(dst.read_bytes()).hexdigest()


def _both_refuse(dmref_cli, golden, fx, field_words):
    rc, out, err = cli(dmref_cli, "verify", "--fixtures", str(golden), "--candidate", str(fx))
    assert rc == 2 and err.count("\n") == 1 and all(w in err for w in field_words), (rc, out, err)
    with pytest.raises(df.BadInput) as e:
        list(df.cases(golden))
    assert all(w in str(e.value) for w in field_words), str(e.value)


@pytest.mark.parametrize("text, words", [
    # A second "sha256" (the edited fixture's) after the committed one: a plain parser takes the last.
    ('{{"cases":[{{"id":"{id}","file":"{file}","sha256":"{zero}","sha256":"{sha}"}}]}}', ["duplicate key"]),
    ('{{"cases":[{{"id":"{id}","file":"{file}","sha256":"{sha}"}},{{"id":"other","file":"{file}","sha256":"{sha}"}}]}}',
     ["cases[1].file", "duplicate file"]),
    ('{{"cases":[{{"id":"other","file":"{file}","sha256":"{sha}"}},{{"id":"{id}","file":"{file}","sha256":"{sha}"}}]}}',
     ["cases[1].file", "duplicate file"]),
    ('{{"cases":[{{"id":"{id}","file":"{file}","sha256":"{sha}","sha":"x"}}]}}', ["cases[0].sha", "unknown key"]),
    ('{{"cases":[{{"id":"{id}","file":"{file}","sha256":"{sha}"}}],"casse":[]}}', ["casse", "unknown key"]),
    ('{{"cases":[{{"id":"{id}","file":"{file}","sha256":"{sha}"}}]}}\0', ["NUL"]),
])
def test_a_manifest_is_parsed_strictly(dmref_cli, one_case, text, words):
    golden, fx, sha = one_case
    (golden.parent / "manifest.json").write_text(
        text.format(id=CASE, file=fx.name, sha=sha, zero="0" * 64))
    _both_refuse(dmref_cli, golden, fx, words)


def test_a_case_id_in_two_files_is_refused(dmref_cli, one_case):
    golden, fx, _ = one_case
    shutil.copy(fx, golden / "copy.safetensors")  # no manifest: before, both "passed" (2 passed)
    _both_refuse(dmref_cli, golden, fx, ["__metadata__.case", "duplicate case id " + CASE])


def test_a_manifest_that_is_a_fifo_is_refused_not_waited_on(one_case, tmp_path):
    fifo = tmp_path / "m.json"
    os.mkfifo(fifo)
    got = []
    t = threading.Thread(target=lambda: got.append(_catch(lambda: list(df.cases(fifo)))), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "cases() blocked on a FIFO manifest"
    assert isinstance(got[0], df.BadInput) and "not a regular file" in str(got[0])


def _catch(f):
    try:
        return f()
    except Exception as e:  # noqa: BLE001 (returned to the test, which checks it)
        return e


def test_a_single_file_is_checked_against_the_manifest_next_to_it(dmref_cli, fixtures_dir, tmp_path):
    fx = tmp_path / (CASE + ".safetensors")
    shutil.copy(os.path.join(fixtures_dir, fx.name), fx)
    (tmp_path / "manifest.json").write_text(json.dumps({"cases": [{"id": CASE, "file": fx.name, "sha256": "0" * 64}]}))
    rc, out, err = cli(dmref_cli, "verify", "--fixtures", str(fx), "--candidate", str(fx))
    assert rc == 2 and f"{fx}: sha256: " in err and "does not match the sha256" in err, err
    with pytest.raises(df.BadInput) as e:
        list(df.cases(fx))  # before: Python looked only one up from golden/, and passed it
    assert e.value.field == "sha256"


def test_a_byte_order_mark_gets_the_same_verdict(dmref_cli, fixtures_dir, tmp_path):
    # nlohmann::json skips a leading BOM, Python's json refuses it: a config
    # (and a metadata value: baselines, tolerance) with one was read by C++ only.
    case = df.load_case(os.path.join(fixtures_dir, CASE + ".safetensors"))
    df.write(tmp_path / "in.safetensors", {**case.inputs, **case.params})
    (tmp_path / "cfg.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(case.config).encode())
    rc, _, err = cli(dmref_cli, "run", "--scheme", "ldm", "--config", str(tmp_path / "cfg.json"), "--inputs",
                     str(tmp_path / "in.safetensors"), "--out", str(tmp_path / "o.safetensors"))
    assert rc == 2 and "cfg.json: config: not valid JSON: a byte order mark" in err, err
    assert not (tmp_path / "o.safetensors").exists()
    with pytest.raises(df.BadInput) as e:
        df.safetensors.loads_strict(b"\xef\xbb\xbf{}", "x", "__metadata__.tolerance")
    assert "byte order mark" in str(e.value)


def test_check_takes_a_path_and_fails_a_candidate_that_is_not_a_mapping(fixtures_dir):
    path = os.path.join(fixtures_dir, CASE + ".safetensors")
    case = df.load_case(path)
    assert df.check(case.expected, path).passed  # a path is read as the CLI reads it
    v = df.check(None, case)  # before: TypeError
    assert not v.passed and "not a mapping" in v.report()
