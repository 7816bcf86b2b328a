"""CTest `faithful`: every faithful variant (variants.py) against the committed corpus at f32,
bf16, f16 and f64, forward and gradient, judged by dmref_fixtures.check (the rule of
`dmref verify`). Fails on any reject, on a stale table in docs/fixtures.md (--check-docs), and on a
variant bit-identical to `natural` on every one of its runs (a dead knob). Writes per (scheme, dtype, fwd/grad), per variant
and per (scheme, variant): runs, passed, worst err/tol, as JSON (--json; tests/two_sided.py merges
it with the mutants' into the two-sided table).

Runs in --jobs worker processes (default: every core), one (case, dtype) per task; the tables
are the same for any number of workers (results are tabulated in the serial order).

Covering subset (to keep the CTest within a few minutes): every corpus case is written in
three input dtypes (f32, bf16, f16 inputs, the same problem rounded); every (variant, case
family, judged dtype) runs on ONE of them, chosen deterministically by rotation (the index of
the variant plus the index of the judged dtype, modulo the number of input dtypes present).
So every variant meets every case family (shape, preset, knob) at every dtype, and every
committed file is exercised. `--full` runs the whole product (3x the cost)."""
import argparse
import json
import multiprocessing
import os
import sys
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, ROOT)

try:
    import torch
except ImportError:  # CTest reports the skip (SKIP_RETURN_CODE 77), never a pass
    torch = None

import dmref_fixtures as df  # noqa: E402
from tests.faithful import table  # noqa: E402
from tests.faithful.variants import VARIANTS  # noqa: E402

DTYPES = ["f32", "bf16", "f16", "f64"]


def per_v_names(per_v):
    return {k[0] for k in per_v}


def family(cid):
    """The case id without its input dtype and seed: ldm_rls.kernel.g2_dk4_d8.L8"""
    parts = cid.split(".")
    return ".".join(parts[:-2])


_CASES, _JOBS = [], []  # set by main before the workers fork


def _run_group(group):
    """The runs `group` (indices into _JOBS, all of one case and dtype): for each, (index,
    (passed, worst err/tol, the report of a reject or "", whether it differs from `natural`))."""
    from tests.faithful import evaluate
    out_of = {}
    natural = None
    for j in group:
        name, knobs, ci, dt = _JOBS[j]
        c = _CASES[ci]
        grad = "_grad." in c.id
        out = evaluate.run(c.scheme, c.file.tensors, c.config, dt, knobs, grad=grad)
        differ = False
        if name != "natural":
            if natural is None:
                natural = evaluate.run(c.scheme, c.file.tensors, c.config, dt, {}, grad=grad)
            differ = any(not np.array_equal(out[t], natural[t]) for t in out)
        v = df.check(out, c, dt)
        out_of[j] = (bool(v.passed), float(v.worst_ratio), "" if v.passed else v.report(3).replace("\n", " | "), differ)
    return list(out_of.items())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixtures", default=os.path.join(ROOT, "fixtures", "golden"))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--full", action="store_true", help="every variant on every file (not the covering subset)")
    ap.add_argument("--case", default="*", help="glob of case ids")
    ap.add_argument("--variant", default=None, help="comma-separated variant names")
    ap.add_argument("--docs", help="rewrite the tables of this docs/fixtures.md")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("DMREF_JOBS", os.cpu_count() or 1)),
                    help="worker processes (default: DMREF_JOBS, else the number of cores)")
    ap.add_argument("--check-docs", help="fail unless the tables of this docs/fixtures.md are current")
    a = ap.parse_args(argv)
    if (a.docs or a.check_docs) and (a.case != "*" or a.variant or a.full):
        ap.error("--docs / --check-docs describe the default run: no --case, --variant or --full")
    if torch is None:
        if a.json and os.path.exists(a.json):  # no stale results for tests/two_sided.py to merge
            os.remove(a.json)
        print("faithful: SKIPPED: python3-torch is not installed (scripts/deps)")
        return 77
    unknown = set((a.variant or "").split(",")) - {"", *[v[0] for v in VARIANTS]}
    if unknown:
        ap.error(f"--variant: unknown variant(s) {', '.join(sorted(unknown))}")
    torch.set_num_threads(1)
    from tests.faithful import evaluate
    try:
        cases = list(df.cases(a.fixtures, a.case))
    except df.BadInput as e:  # one line naming the file and field, exit 2
        print(e, file=sys.stderr)
        return 2
    if not cases:
        print(f"{a.fixtures}: no fixture matches --case {a.case}", file=sys.stderr)
        return 2
    fams = {}
    for c in cases:
        fams.setdefault(family(c.id), []).append(c)
    variants = [v for v in VARIANTS if a.variant is None or v[0] in a.variant.split(",")]
    t0 = time.time()
    # The runs, in the order their results are tabulated (a tie of worst err/tol goes to the later run).
    index = {id(c): i for i, c in enumerate(cases)}
    jobs = []
    for vi, (name, knobs, what, applies) in enumerate(variants):
        for fam, group in sorted(fams.items()):
            for di, dt in enumerate(DTYPES):
                pick = group if a.full else [group[(vi + di) % len(group)]]
                for c in pick:
                    if not applies(c.scheme, c.id, c.config, dt):
                        continue
                    if not isinstance(c.baselines.get(dt), dict):  # the fixture refuses this dtype
                        continue
                    jobs.append((name, knobs, index[id(c)], dt))
    # A worker takes every run of one (case, dtype), so `natural` (what a variant is compared with
    # for the dead-knob check) is evaluated once per (case, dtype), as a serial loop caches it.
    by_key = {}
    for j, (name, knobs, ci, dt) in enumerate(jobs):
        by_key.setdefault((ci, dt), []).append(j)
    global _CASES, _JOBS
    _CASES, _JOBS = cases, jobs
    groups = list(by_key.values())
    workers = max(1, min(a.jobs, len(groups)))
    if workers == 1:
        results = [_run_group(g) for g in groups]
    else:  # fork: the workers inherit the loaded corpus; torch stays on one thread in each
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            results = pool.map(_run_group, groups, chunksize=1)
    outcome = {j: r for group in results for j, r in group}
    per_sd, per_v, per_sv, rejects, runs = {}, {}, {}, [], 0
    differs = {}  # a variant bit-identical to `natural` on every run would be a dead knob
    for j, (name, knobs, ci, dt) in enumerate(jobs):
        c = cases[ci]
        kind = "grad" if "_grad." in c.id else "fwd"
        passed, ratio, report, differ = outcome[j]
        if name != "natural":
            differs[name] = differs.get(name, 0) + differ
        runs += 1
        for key, tab in (((c.scheme, dt, kind), per_sd), ((name, dt, kind), per_v),
                         ((c.scheme, name, dt, kind), per_sv)):
            s = tab.setdefault(key, {"runs": 0, "passed": 0, "worst": 0.0, "worst_at": "", "variants": set()})
            s["runs"] += 1
            s["passed"] += passed
            s["variants"].add(name)
            if ratio >= s["worst"]:  # over every element judged, passing or not
                s["worst"], s["worst_at"] = ratio, f"{name} on {c.id}"
        if not passed:
            rejects.append(f"{name} {dt}: " + report)
    took = time.time() - t0
    for line in rejects:
        print("REJECT", line)
    # over the whole corpus only: on a subset (--case) a variant may meet no reduction it reorders
    dead = [n for n, *_ in variants if n != "natural" and n in per_v_names(per_v) and differs.get(n, 0) == 0
            ] if a.case == "*" else []
    for n in dead:
        print(f"DEAD {n}: bit-identical to natural on every run (a knob no scheme reads?)")
    print(f"faithful: {runs} runs of {len(variants)} variants on {len(cases)} fixtures in {took:.1f} s; "
          f"{len(rejects)} rejected")
    enc = lambda t: [{"key": list(k), "runs": s["runs"], "passed": s["passed"], "worst": s["worst"],
                          "worst_at": s["worst_at"], "variants": sorted(s["variants"])} for k, s in sorted(t.items())]
    res = {"runs": runs, "rejected": len(rejects), "full": a.full, "differs_from_natural": differs,
           "default_run": a.case == "*" and a.variant is None and not a.full, "fixtures": len(cases),
           "per_scheme_variant": enc(per_sv),
           "variants": [{"name": n, "knobs": k, "what": w} for n, k, w, _ in variants],
           "per_scheme": enc(per_sd), "per_variant": enc(per_v)}
    if a.json:
        with open(a.json + ".tmp", "w") as f:
            json.dump(res, f, indent=1, sort_keys=True)
        os.replace(a.json + ".tmp", a.json)
    stale = False
    if a.docs:
        table.update(res, a.docs, check=False)
    elif a.check_docs and not table.update(res, a.check_docs, check=True):
        stale = True
        print(f"{a.check_docs}: the faithful tables are stale; regenerate with: "
              f"/usr/bin/python3 tests/faithful/run.py --docs {a.check_docs}", file=sys.stderr)
    return 1 if rejects or stale or dead else 0


if __name__ == "__main__":
    sys.exit(main())
