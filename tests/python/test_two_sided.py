"""tests/two_sided.py (CTest two_sided) fails on each thing it enforces: a mutant that escapes, a
control that fails, a faithful variant rejected, a side with nothing judged, a stale table; skips
without the faithful results; refuses a subset's results. Synthetic results, so each failure is
one edit away from a passing set."""
import copy
import json
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import two_sided  # noqa: E402


def results():
    cells = [{"mutant": m, "scheme": "*", "kind": k, "dtype": d, "fixtures": 3, "failed": 0, "worst": 0.2,
              "worst_at": "x", "error": "", "ok": True}
             for m, k in (("reference", "fwd"), ("reference", "grad")) for d in two_sided.MUTANT_DTYPES]
    psv = []
    for s in ["preln", "ldm", "attnres", "hc", "mhc", "denseformer"]:
        for k in two_sided.KINDS:
            for d in two_sided.MUTANT_DTYPES:
                cells.append({"mutant": f"{s}.wrong", "scheme": s, "kind": k, "dtype": d, "fixtures": 3, "failed": 1,
                              "worst": 9.0, "worst_at": "x", "error": "", "ok": True})
            for d in two_sided.DTYPES:
                psv.append({"key": [s, "natural", d, k], "runs": 2, "passed": 2, "worst": 0.3, "worst_at": "x"})
    mut = {"fixtures_dir": "f", "files": 3, "cells": cells}
    fai = {"runs": 2 * len(psv), "variants": [{"name": "natural"}], "default_run": True, "per_scheme_variant": psv}
    return mut, fai


def run(tmp_path, mut, fai, check=True, docs=None):
    (tmp_path / "m.json").write_text(json.dumps(mut))
    if fai is not None:
        (tmp_path / "f.json").write_text(json.dumps(fai))
    doc = tmp_path / "fixtures.md"
    if docs is not None:
        doc.write_text(docs)
    try:
        return two_sided.main(["--mutants", str(tmp_path / "m.json"), "--faithful", str(tmp_path / "f.json"),
                               "--check" if check else "--docs", str(doc)])
    except SystemExit as e:  # unusable input exits from where it is read
        return e.code


@pytest.fixture
def current(tmp_path):
    """A docs file whose table is the regeneration of the passing results."""
    mut, fai = results()
    assert run(tmp_path, mut, fai, check=False, docs=f"text\n{two_sided.BEGIN}{two_sided.END}\nmore\n") == 0
    return mut, fai


def test_passing_set_passes_and_is_current(tmp_path, current):
    assert run(tmp_path, *current) == 0
    assert "killed 1/1; faithful 1/1 (2/2)" in (tmp_path / "fixtures.md").read_text()


def test_each_failure(tmp_path, current):
    def edited(f):
        mut, fai = copy.deepcopy(current)
        f(mut, fai)
        return run(tmp_path, mut, fai)

    def survives(mut, fai):
        c = next(c for c in mut["cells"] if c["scheme"] == "mhc")
        c.update(failed=0, ok=False)

    def control_fails(mut, fai):
        mut["cells"][0].update(failed=1, ok=False)

    def rejected(mut, fai):
        fai["per_scheme_variant"][5]["passed"] = 1

    def no_mutant(mut, fai):
        mut["cells"] = [c for c in mut["cells"] if not (c["scheme"] == "hc" and c["dtype"] == "bf16")]

    def no_variant(mut, fai):
        fai["per_scheme_variant"] = [v for v in fai["per_scheme_variant"] if v["key"][2] != "f64"]

    def scheme_on_one_side(mut, fai):
        fai["per_scheme_variant"] = [v for v in fai["per_scheme_variant"] if v["key"][0] != "ldm"]

    def stale(mut, fai):
        fai["per_scheme_variant"].append({"key": ["ldm", "reversed", "f32", "fwd"], "runs": 1, "passed": 1,
                                          "worst": 0.1, "worst_at": "x"})

    for f in (survives, control_fails, rejected, no_mutant, no_variant, scheme_on_one_side, stale):
        assert edited(f) == 1, f.__name__


def test_absent_faithful_results_skip_and_subset_refused(tmp_path, current):
    mut, fai = current
    (tmp_path / "f.json").unlink()
    assert run(tmp_path, mut, None) == 77
    fai = dict(fai, default_run=False)
    assert run(tmp_path, mut, fai) == 2
