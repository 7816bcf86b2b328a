#!/usr/bin/python3
"""bench/cost.py: how the cost of `dmref run` grows with tokens, depth and width,
per scheme (docs/performance.md, "How the cost grows"). For each scheme it
varies one of T (tokens), L (layers), d (width) from a base shape, holding the
others, writes the inputs with bench/make_inputs.py, and runs every shape once
per repetition, interleaved (shape order rotated each repetition), on one
thread (`--jobs 1`: CPU cost, not parallelism). Prints per shape the CPU time
(user + system of the process, which does not count waiting for a core) min
and median, the wall min, the rung it certified at, and the CPU per token and
layer. Standard library only; the process helpers are bench/e2e.py's.

  bench/cost.py --dmref build/tools/dmref [--reps 3] [--schemes ldm,mhc,attnres] [--work DIR]

--ops: mHC at op level (mhc_ops, docs/performance.md "Backward on every core"): per op and M (tokens;
n, C fixed), the forward and the backward (`--grad`) with `--jobs J`, and with --old other binaries' forward and
backward and with --jobs1 the backward on one thread (the same bytes are required of all), interleaved; CPU (user + system of the child, wait4)
and wall, min and median, the rung; then the float64 anchor, the same problem in float64 torch on one
thread (tests/faithful/mhc_ops.py with torch's own reductions, autograd for the backward; run with
--python, CPU of the evaluation alone; its largest difference from the golden shown), and the certified /
float64 CPU ratio. The anchor runs after each repetition's dmref runs and reads their outputs.

  bench/cost.py --dmref build/tools/dmref --ops pre:8,16 post:8 post_pre:8 [--n 4] [--C 4096] [--jobs 2] \
                [--old OLD_DMREF ...] [--jobs1] [--forward-only] [--no-anchor] [--python /opt/dmref-venv/bin/python] [--reps 5] [--work DIR]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from e2e import run_rss  # noqa: E402

# Base shape per scheme (small enough to repeat), and the values each axis takes.
BASE = {"ldm": dict(T=1, L=8, d=256), "mhc": dict(T=1, L=8, d=256), "attnres": dict(T=1, L=8, d=256)}
AXES = {"T": [1, 2, 4], "L": [8, 16, 32], "d": [256, 512, 1024]}


def interleaved(cmds, reps, after_rep=None):
    """Runs every command once per repetition, the order rotated each time; CPU and wall seconds per
    command (lists, by index) and each command's last output. `after_rep()` runs after each repetition."""
    cpu, wall, text = {i: [] for i in range(len(cmds))}, {i: [] for i in range(len(cmds))}, {}
    for r in range(reps):
        order = list(range(len(cmds)))
        order = order[r % len(order):] + order[:r % len(order)]
        for i in order:
            dt, rc, text[i], _, c = run_rss(cmds[i])
            if rc != 0:
                raise SystemExit(f"bench/cost.py: {' '.join(cmds[i])} failed ({rc}): {text[i]}")
            cpu[i].append(c)
            wall[i].append(dt)
        if after_rep:
            after_rep()
    return cpu, wall, text


def rung_of(text):
    m = re.search(r"certified at (\d+) bits", text)
    return m.group(1) if m else "?"


def spec(scheme, T, L, d):
    common = ["--layers", str(L), "--tokens", str(T), "--d", str(d)]
    if scheme == "ldm":
        return ["ldm", "--groups", "16", "--dk", "16"] + common
    if scheme == "mhc":
        return ["mhc", "--n", "4"] + common
    return ["attnres", "--block-size", "8"] + common


def anchor(d, grad, golden):
    """CPU and wall seconds of the float64 evaluation of d's problem (torch on one thread, the library's
    own reductions: order "torch"), and its largest abs difference from the golden file, as JSON on stdout."""
    import time
    import numpy as np
    import torch
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    sys.path.insert(0, os.path.join(HERE, ".."))
    import dmref_fixtures as df
    from tests.faithful import evaluate
    torch.set_num_threads(1)
    cfg = json.load(open(os.path.join(d, "config.json")))
    tensors = df.read(os.path.join(d, "grad.st" if grad else "fwd.st")).tensors
    c0, w0 = time.process_time(), time.perf_counter()
    out = evaluate.run("mhc_ops", tensors, cfg, "f64", {"order": "torch"}, grad=grad)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    g = df.read(golden).tensors
    err = max(float(np.max(np.abs(out[k] - g[k]))) for k in out)
    print(json.dumps({"cpu": cpu, "wall": wall, "outputs": len(out), "err": err}))


def ops(a, work):
    """The --ops table (docs/performance.md)."""
    print("Command: `bench/cost.py " + " ".join(sys.argv[1:]) + "`  ")
    print(f"Load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores; "
          f"mhc_ops n = {a.n}, C = {a.C}, `--jobs {a.jobs}`, {a.reps} interleaved repetitions\n")
    runs, anchors = [], []  # (label, command, output) / (label, directory, grad)
    for spec_ in a.ops:
        op, sizes = spec_.split(":")
        for M in (int(x) for x in sizes.split(",")):
            d = os.path.join(work, f"{op}_M{M}_n{a.n}_C{a.C}")
            os.makedirs(d, exist_ok=True)
            cfg = os.path.join(d, "config.json")
            json.dump({"op": op, "n": a.n, "d": a.C, "tokens": M}, open(cfg, "w"))
            for grad in (False,) if a.forward_only else (False, True):
                inp = os.path.join(d, "grad.st" if grad else "fwd.st")
                if not os.path.exists(inp):
                    subprocess.run([a.dmref, "inputs", "--scheme", "mhc_ops", "--config", cfg, "--out", inp, "--seed", "1",
                                    "--dtype", "bf16"] + (["--grad"] if grad else []), check=True, stdout=subprocess.DEVNULL)
                variants = [("new", a.dmref, a.jobs)] + [(os.path.basename(o), o, a.jobs) for o in a.old] + \
                    ([("new, --jobs 1", a.dmref, 1)] if a.jobs1 and grad else [])
                for who, exe, jobs in variants:
                    out = os.path.join(d, f"out_{'grad' if grad else 'fwd'}_{who.replace(', --jobs ', '_j')}.st")
                    runs.append(((op, M, "grad" if grad else "fwd", who),
                                 [exe, "run", "--scheme", "mhc_ops", "--config", cfg, "--inputs", inp, "--out", out,
                                  "--jobs", str(jobs)] + (["--grad"] if grad else []), out))
                anchors.append(((op, M, "grad" if grad else "fwd"), d, grad, os.path.join(d, f"out_{'grad' if grad else 'fwd'}_new.st")))
    f64_cpu, f64_err = {}, {}

    def anchors_once():  # the float64 anchor after each repetition (it reads the runs' outputs)
        if a.no_anchor:
            return
        for j, (label, d, grad, golden) in enumerate(anchors):
            p = subprocess.run([a.python, os.path.abspath(__file__), "--anchor", d, "--golden", golden] +
                               (["--grad"] if grad else []), capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"bench/cost.py: float64 anchor of {d} failed: {p.stderr}")
            x = json.loads(p.stdout.strip().splitlines()[-1])
            f64_cpu.setdefault(j, []).append(x["cpu"])
            f64_err[j] = x["err"]

    cpu, wall, text = interleaved([r[1] for r in runs], a.reps, anchors_once)
    rung = {i: rung_of(t) for i, t in text.items()}
    same = {}
    for i, (label, _, out) in enumerate(runs):
        if label[3] != "new":
            new = [k for k, (l2, _, _) in enumerate(runs) if l2[:3] == label[:3] and l2[3] == "new"][0]
            same[label] = open(out, "rb").read() == open(runs[new][2], "rb").read()
    med = statistics.median
    print("| op | M | problem | binary | CPU min | CPU median | wall min | wall median | certified at | "
          "CPU min per token | float64 CPU min (torch, 1 thread) | float64 max abs error | certified / float64 (CPU min) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, (label, _, _) in enumerate(runs):
        op, M, kind, who = label
        j = [k for k, an in enumerate(anchors) if an[0] == label[:3]][0]
        note = "" if who == "new" else (" (bytes = new's)" if same.get(label) else " (bytes DIFFER from new's)")
        if a.no_anchor:
            anchor_cols = "- | - | -"
        else:
            f64 = min(f64_cpu[j])
            anchor_cols = f"{f64 * 1e3:.1f} ms | {f64_err[j]:.1e} | {min(cpu[i]) / f64:.0f}x"
        print(f"| {op} | {M} | {kind} | {who}{note} | {min(cpu[i]):.2f} s | {med(cpu[i]):.2f} s | {min(wall[i]):.2f} s | "
              f"{med(wall[i]):.2f} s | {rung[i]} bits | {min(cpu[i]) / M:.3f} s | {anchor_cols} |")
    if not a.forward_only:
        print("\n| op | M | binary | backward / forward, CPU min | backward / forward, wall min |")
        print("|---|---|---|---|---|")
    for i, (label, _, _) in enumerate(runs):
        if label[2] != "fwd" or a.forward_only:
            continue
        g = [k for k, (l2, _, _) in enumerate(runs) if l2 == (label[0], label[1], "grad", label[3])][0]  # same binary
        print(f"| {label[0]} | {label[1]} | {label[3]} | {min(cpu[g]) / min(cpu[i]):.2f} | {min(wall[g]) / min(wall[i]):.2f} |")
    print(f"\nLoad average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dmref")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--schemes", default="ldm,mhc,attnres")
    ap.add_argument("--work", default=None)
    ap.add_argument("--ops", nargs="+", help="mhc_ops: OP:M1,M2,... (op pre, post or post_pre at those token counts)")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--C", type=int, default=4096)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--old", nargs="*", default=[], help="--ops: other dmref binaries whose forward and backward run too, each labelled by its file name (their bytes must be the new one's)")
    ap.add_argument("--jobs1", action="store_true", help="--ops: the backward with --jobs 1 too (same bytes required)")
    ap.add_argument("--forward-only", action="store_true", help="--ops: the forward problems only (no --grad runs)")
    ap.add_argument("--no-anchor", action="store_true",
                    help="--ops: no float64 anchor (tests/faithful's float64 torch needs over 22 GB at M = 4096, C = 7168)")
    ap.add_argument("--python", default="/opt/dmref-venv/bin/python", help="--ops: a Python with torch and numpy")
    ap.add_argument("--anchor", help=argparse.SUPPRESS)  # internal: the float64 evaluation of one problem
    ap.add_argument("--grad", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--golden", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.anchor:
        return anchor(a.anchor, a.grad, a.golden)
    if not a.dmref:
        ap.error("--dmref is required")
    work = a.work or tempfile.mkdtemp(prefix="dmref_cost_")
    if a.ops:
        return ops(a, work)
    print("Command: `bench/cost.py " + " ".join(sys.argv[1:]) + "`  ")
    print(f"Load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores; "
          f"kernel level, `--jobs 1`, {a.reps} interleaved repetitions\n")
    print("| scheme | T | L | d | CPU min | CPU median | wall min | certified at | CPU min per token and layer |")
    print("|---|---|---|---|---|---|---|---|---|")
    for scheme in a.schemes.split(","):
        b = BASE[scheme]
        shapes = []
        for axis, values in AXES.items():
            for v in values:
                s = dict(b, **{axis: v})
                if s not in shapes:
                    shapes.append(s)
        runs = []
        for s in shapes:
            d = os.path.join(work, f"{scheme}_T{s['T']}_L{s['L']}_d{s['d']}")
            if not os.path.exists(os.path.join(d, "inputs.safetensors")):
                subprocess.run([sys.executable, os.path.join(HERE, "make_inputs.py"), *spec(scheme, **s), "--out", d],
                               check=True, stdout=subprocess.DEVNULL)
            runs.append((s, [a.dmref, "run", "--scheme", scheme, "--config", os.path.join(d, "config.json"),
                             "--inputs", os.path.join(d, "inputs.safetensors"), "--out", os.path.join(d, "out.st"),
                             "--jobs", "1"]))
        cpu, wall, text = interleaved([r[1] for r in runs], a.reps)
        rung = {i: rung_of(t) + " bits" for i, t in text.items()}
        for i, (s, _) in enumerate(runs):
            print(f"| {scheme} | {s['T']} | {s['L']} | {s['d']} | {min(cpu[i]):.2f} s | "
                  f"{statistics.median(cpu[i]):.2f} s | {min(wall[i]):.2f} s | {rung[i]} | "
                  f"{min(cpu[i]) / (s['T'] * s['L']) * 1e3:.1f} ms |")
        sys.stdout.flush()
    print(f"\nLoad average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
