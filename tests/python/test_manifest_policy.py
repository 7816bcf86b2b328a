"""One manifest policy, three gates: the same bad corpora go through `dmref verify` (C++, gate.cpp
conf::load_corpus), `dmref_fixtures.cases` / `check(outputs, path)` (the pure-Python mirror,
cases.py) and, where the compiled module is built, `dmref.verify(outputs, path)` (the C++ policy
in-process), and each must refuse them the same way before anything is judged: exit 2 with one
line "<path>: <field>: ..." from the CLI, BadInput with that path and field from Python.

The rule of the house (docs/fixtures.md, "Commands"): a corpus is checked against its manifest
before it judges anything. Each row below is one way a corpus can differ from its manifest; the
controls (an intact corpus; entries that are not fixtures; --no-manifest / check_hashes=False)
must be judged, so the refusals cannot come from a broken corpus builder."""
import json
import os
import subprocess

import pytest

import dmref_fixtures as df

try:
    import dmref
    from dmref import _core  # noqa: F401
    HAVE_CORE = True
except ImportError:  # pragma: no cover - depends on the build
    if os.environ.get("DMREF_REQUIRE_PKG"):
        raise
    HAVE_CORE = False


def _corpus(fixtures_dir, tmp_path, n=3):
    """golden/ with the first n preln.kernel fixtures, manifest.json one up listing the first n - 1
    (the n-th is the spare a row may add), and a candidate answering every case exactly."""
    man = json.load(open(os.path.join(fixtures_dir, "..", "manifest.json")))
    pick = [c for c in man["cases"] if c["id"].startswith("preln.kernel.")][:n]
    assert len(pick) == n, "the committed corpus has fewer preln.kernel cases than this test uses"
    golden = tmp_path / "golden"
    golden.mkdir()
    for c in pick[:-1]:
        (golden / c["file"]).write_bytes(open(os.path.join(fixtures_dir, c["file"]), "rb").read())
    (tmp_path / "manifest.json").write_text(json.dumps(dict(man, cases=pick[:-1])))
    cand = {}
    for c in pick:
        f = df.read(os.path.join(fixtures_dir, c["file"]))
        cand.update({f"{c['id']}/{k}": v for k, v in f.tensors.items() if k.startswith("output.") and
                     not k.endswith(".lo")})
    df.write(tmp_path / "cand.safetensors", cand)
    return golden, pick


def _rewrite(path, **meta):
    """The fixture with metadata entries changed (still a valid fixture; its bytes, so its sha256, change)."""
    f = df.read(path)
    df.write(path, {k: (v, f.dtypes[k]) for k, v in f.tensors.items()}, dict(f.metadata, **meta))


def _rows():
    """(name, edit(golden, pick, fixtures_dir) -> (refused path relative to tmp, field, words) or None
    for judged, extra CLI arguments, the Python `where` relative to tmp)."""
    def intact(golden, pick, fixtures_dir):
        return None
    def not_fixtures(golden, pick, fixtures_dir):  # entries that are not fixtures are not read, by either gate
        (golden / "README.txt").write_text("not a fixture")
        (golden / ".safetensors").write_bytes(b"no stem: not a fixture")
        return None
    def edited(golden, pick, fixtures_dir):
        _rewrite(golden / pick[0]["file"], edited="yes")
        return f"golden/{pick[0]['file']}", "sha256", "does not match the sha256 in the manifest"
    def not_listed(golden, pick, fixtures_dir):  # an extra fixture the manifest does not list
        spare = pick[-1]["file"]
        (golden / spare).write_bytes(open(os.path.join(fixtures_dir, spare), "rb").read())
        return f"golden/{spare}", "file", "is not in the manifest"
    def without_file(golden, pick, fixtures_dir):  # a listed case whose file is gone
        os.remove(golden / pick[1]["file"])
        return f"golden/{pick[1]['file']}", "file", "of the manifest"
    def id_edited(golden, pick, fixtures_dir):
        _rewrite(golden / pick[0]["file"], case="other.id")
        return f"golden/{pick[0]['file']}", "__metadata__.case", "is case " + pick[0]["id"] + " in the manifest"
    def duplicate_id(golden, pick, fixtures_dir):  # a copy under another name: one case judged twice (manifest or not)
        (golden / "copy.safetensors").write_bytes((golden / pick[0]["file"]).read_bytes())
        return f"golden/{pick[0]['file']}", "__metadata__.case", "duplicate case id " + pick[0]["id"]
    def no_manifest_file(golden, pick, fixtures_dir):  # --manifest naming a file that is not there
        return "nope.json", "manifest", "cannot open"
    def no_manifest_found(golden, pick, fixtures_dir):  # a directory of one's own `dmref run` fixtures has none
        os.remove(golden / ".." / "manifest.json")
        return None
    yield "intact corpus: judged", intact, [], "golden"
    yield "entries that are not fixtures: ignored", not_fixtures, [], "golden"
    yield "fixture edited", edited, [], "golden"
    yield "fixture not in the manifest (an extra file)", not_listed, [], "golden"
    yield "manifest entry without its file", without_file, [], "golden"
    yield "case id edited", id_edited, [], "golden"
    yield "two fixtures with one case id", duplicate_id, [], "golden"
    yield "--manifest that is missing", no_manifest_file, ["--manifest", "nope.json"], "nope.json"
    yield "no manifest found: judged as they are", no_manifest_found, [], "golden"


@pytest.mark.parametrize("name,edit,args,where", list(_rows()), ids=[r[0] for r in _rows()])
def test_one_manifest_policy_in_both_gates(dmref_cli, fixtures_dir, tmp_path, monkeypatch, name, edit, args, where):
    golden, pick = _corpus(fixtures_dir, tmp_path)
    refusal = edit(golden, pick, fixtures_dir)
    monkeypatch.chdir(tmp_path)  # paths as the user typed them, relative, in both
    p = subprocess.run([dmref_cli, "verify", "--fixtures", "golden", "--candidate", "cand.safetensors", *args],
                       capture_output=True, text=True)
    if refusal is None:
        listed = os.path.exists("manifest.json")  # the summary names the manifest it checked against, or none
        assert p.returncode == 0 and p.stdout.count("PASS ") == 2, p.stdout + p.stderr
        assert ("checked against manifest.json" in p.stdout) == listed, p.stdout
        assert [c.id for c in df.cases(where)] == sorted(c["id"] for c in pick[:-1])
        return
    path, field, words = refusal
    # The CLI: exit 2, one line naming the file and field, nothing judged (no PASS or FAIL line).
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout, p.stderr)
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(f"dmref: {path}: {field}: ") and words in p.stderr, p.stderr
    # Python: BadInput with the same path, field and words.
    with pytest.raises(df.BadInput) as e:
        list(df.cases(where))
    if where == "nope.json":  # cases(manifest) takes the manifest's own list: the same refusal of the file
        assert (e.value.path, e.value.field) == (path, field) and words in e.value.problem, str(e.value)
        return
    assert (e.value.path, e.value.field) == (path, field) and words in e.value.problem, str(e.value)
    # One fixture file (`verify --fixtures FILE`, check(outputs, path), dmref.verify(outputs, path)):
    # the rows about that file refuse it the same way; a missing listed file concerns only a directory.
    if field == "file" and "of the manifest" in words or "duplicate" in words:
        return
    cand = {k.split("/", 1)[1]: v for k, v in df.read("cand.safetensors").tensors.items()}
    p = subprocess.run([dmref_cli, "verify", "--fixtures", path, "--candidate", path], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith(f"dmref: {path}: {field}: ") and words in p.stderr, p.stderr
    gates = [df.check] + ([dmref.verify] if HAVE_CORE else [])
    for gate in gates:
        with pytest.raises(df.BadInput) as e:
            gate(cand, path)
        assert (e.value.path, e.value.field) == (path, field) and words in e.value.problem, (gate, str(e.value))


def test_the_check_is_skipped_only_when_asked(dmref_cli, fixtures_dir, tmp_path):
    """--no-manifest and check_hashes=False judge an edited corpus; without them it is refused (above)."""
    golden, pick = _corpus(fixtures_dir, tmp_path)
    _rewrite(golden / pick[0]["file"], edited="yes")
    p = subprocess.run([dmref_cli, "verify", "--fixtures", str(golden), "--candidate", str(tmp_path / "cand.safetensors"),
                        "--no-manifest"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.count("PASS ") == 2, p.stdout + p.stderr
    assert [c.id for c in df.cases(golden, check_hashes=False)] == sorted(c["id"] for c in pick[:-1])
    assert df.check(df.read(tmp_path / "cand.safetensors"), df.read(golden / pick[0]["file"])).passed  # a File: no path


def test_the_gate_does_not_include_the_generator():
    """`--factor` from the command line to a verdict is CLI -> gate -> verify (+ io, tolerance) (gate.hpp's
    header comment): no file on that path includes, directly or through another dmref header, the
    generator's corpus.hpp or generate.hpp."""
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    inc = os.path.join(root, "reference", "include")

    def closure(path, seen):
        for line in open(path, encoding="utf-8"):
            if line.startswith('#include "dmref/'):
                h = line.split('"')[1]
                if h not in seen:
                    seen.add(h)
                    closure(os.path.join(inc, h), seen)
        return seen

    for src in ("reference/src/conformance/gate.cpp", "reference/src/conformance/verify.cpp",
                "reference/src/conformance/tolerance.cpp", "reference/src/conformance/sha256.cpp"):
        got = closure(os.path.join(root, src), set())
        assert "dmref/conformance/gate.hpp" in got or "gate" not in src  # the walk reads the includes at all
        bad = sorted(got & {"dmref/conformance/corpus.hpp", "dmref/conformance/generate.hpp"})
        assert not bad, f"{src} includes {bad}"
