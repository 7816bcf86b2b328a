#!/usr/bin/python3
"""The smallest error a PASS rules out, per case family and recipe (docs/fixtures.md,
"What a PASS rules out"): for every committed fixture judged in its own input dtype's
recipe and in f64, the tolerance of each golden element relative to its value,
tol_i / |y_i| over elements with y_i != 0 (tol_i: dmref_fixtures.verify.tolerance, the rule);
the table gives the median and the 90th percentile over a family's forward outputs
(output.*) and gradients (grad.*). A kernel error below that fraction of the value can
pass; one above it fails.

    scripts/tolerance_table.py [FIXTURE_DIR] [--write docs/fixtures.md | --check docs/fixtures.md]
    scripts/tolerance_table.py [FIXTURE_DIR] --norms

--norms prints instead, per recipe, the largest normwise error scale ||B||_2 / ||y||_2 over every
golden tensor with a bound (the quantity the generator's not-judged rule compares with 1/factor,
docs/precision.md) and where.
"""
import argparse
import json
import os
import re
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import numpy as np  # noqa: E402
from dmref_fixtures.safetensors import read  # noqa: E402
from dmref_fixtures.verify import golden_names, tolerance  # noqa: E402

BEGIN, END = "<!-- tolerance-table:begin -->", "<!-- tolerance-table:end -->"


def family(case_id):
    parts = case_id.split(".")
    return ".".join(parts[:3] + ([parts[3]] if parts[3] in ("paper", "deepseek-v4") else []))


def table(fixture_dir):
    rel = defaultdict(lambda: defaultdict(list))  # (family, recipe) -> kind -> values
    for f in sorted(os.listdir(fixture_dir)):
        if not f.endswith(".safetensors"):
            continue
        fx = read(os.path.join(fixture_dir, f))
        cid, dt = fx.metadata["case"], fx.metadata.get("input_dtype", "f32")
        tol = json.loads(fx.metadata["tolerance"])
        for recipe in (dt, "f64"):
            for name in golden_names(fx):
                b = fx.tensors.get(f"bound.{recipe}.{name}")
                if b is None:
                    continue
                hi = fx.tensors[name]
                t = tolerance(tol["factor"], b, tol["floor_ulps"], recipe, hi)
                nz = hi != 0
                kind = "grad" if name.startswith("grad.") else "out"
                rel[(family(cid), recipe)][kind].extend((t[nz] / np.abs(hi[nz])).ravel().tolist())
    lines = [BEGIN, "", "| case family | recipe | outputs: median / p90 of tol/\\|y\\| | gradients: median / p90 |",
             "| --- | --- | --- | --- |"]
    order = {"f32": 0, "bf16": 1, "f16": 2, "f64": 3}
    for (fam, recipe) in sorted(rel, key=lambda k: (k[0], order[k[1]])):
        cells = []
        for kind in ("out", "grad"):
            v = rel[(fam, recipe)][kind]
            cells.append(f"{np.median(v):.1e} / {np.percentile(v, 90):.1e}" if v else "-")
        lines.append(f"| {fam} | {recipe} | {cells[0]} | {cells[1]} |")
    lines += ["", END]
    return "\n".join(lines)


def norms(fixture_dir):
    worst = {}
    for f in sorted(os.listdir(fixture_dir)):
        if not f.endswith(".safetensors"):
            continue
        fx = read(os.path.join(fixture_dir, f))
        for name in golden_names(fx):
            y = np.asarray(fx.tensors[name], dtype=np.float64) + np.asarray(fx.tensors[name + ".lo"], dtype=np.float64)
            ny = np.sqrt((y * y).sum())
            for recipe in ("f32", "bf16", "f16", "f64"):
                b = fx.tensors.get(f"bound.{recipe}.{name}")
                if b is None or ny == 0:
                    continue
                r = float(np.sqrt((np.asarray(b, dtype=np.float64) ** 2).sum()) / ny)
                if r > worst.get(recipe, (0.0,))[0]:
                    worst[recipe] = (r, fx.metadata["case"], name)
    return "\n".join(f"{rec}: largest ||B|| / ||y|| = {r:.3g} ({cid}, {name})" for rec, (r, cid, name) in worst.items())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixtures", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                "..", "fixtures", "golden"))
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write", metavar="DOC")
    g.add_argument("--check", metavar="DOC")
    g.add_argument("--norms", action="store_true")
    a = ap.parse_args()
    if a.norms:
        print(norms(a.fixtures))
        return 0
    t = table(a.fixtures)
    doc = a.write or a.check
    if not doc:
        print(t)
        return 0
    text = open(doc, encoding="utf-8").read()
    m = re.search(re.escape(BEGIN) + ".*?" + re.escape(END), text, re.S)
    if not m:
        print(f"{doc}: no {BEGIN} ... {END} block", file=sys.stderr)
        return 2
    if a.check:
        if m.group(0) != t:
            print(f"{doc}: the tolerance table is stale: regenerate with scripts/tolerance_table.py --write {doc}",
                  file=sys.stderr)
            return 1
        print(f"{doc}: tolerance table matches the fixtures")
        return 0
    open(doc, "w", encoding="utf-8").write(text[:m.start()] + t + text[m.end():])
    return 0


if __name__ == "__main__":
    sys.exit(main())
