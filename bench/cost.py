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
"""
import argparse
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


def spec(scheme, T, L, d):
    common = ["--layers", str(L), "--tokens", str(T), "--d", str(d)]
    if scheme == "ldm":
        return ["ldm", "--groups", "16", "--dk", "16"] + common
    if scheme == "mhc":
        return ["mhc", "--n", "4"] + common
    return ["attnres", "--block-size", "8"] + common


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dmref", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--schemes", default="ldm,mhc,attnres")
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="dmref_cost_")
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
        cpu = {i: [] for i in range(len(runs))}
        wall = {i: [] for i in range(len(runs))}
        rung = {}
        for r in range(a.reps):
            order = list(range(len(runs)))
            order = order[r % len(order):] + order[:r % len(order)]
            for i in order:
                dt, rc, text, _, c = run_rss(runs[i][1])
                if rc != 0:
                    raise SystemExit(f"bench/cost.py: {' '.join(runs[i][1])} failed ({rc}): {text}")
                cpu[i].append(c)
                wall[i].append(dt)
                m = re.search(r"certified at (\d+) bits", text)
                rung[i] = m.group(1) + " bits" if m else "?"
        for i, (s, _) in enumerate(runs):
            print(f"| {scheme} | {s['T']} | {s['L']} | {s['d']} | {min(cpu[i]):.2f} s | "
                  f"{statistics.median(cpu[i]):.2f} s | {min(wall[i]):.2f} s | {rung[i]} | "
                  f"{min(cpu[i]) / (s['T'] * s['L']) * 1e3:.1f} ms |")
        sys.stdout.flush()
    print(f"\nLoad average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
