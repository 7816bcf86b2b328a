#!/usr/bin/python3
"""bench/rls_reps.py: the RLS step against the MPFR multiply-add floor, repeated
(docs/performance.md). Runs `dmref_bench --benchmark_filter=rls/loop/mpf` --runs
times in a row (so every benchmark's repetitions are interleaved with the
others'), takes the fastest of each run's 3 repetitions, and prints per
(type, bits, dk, dv) the min and median over the runs of the step time and of
`vs_floor` (ns per multiply-add over the floor's, measured interleaved inside
each benchmark), with the load average; when anchors (rls/anchor/...) are in
the filter, also dmref's step over the anchor run by run (Ball over Arb at the
same bits; MPFR point over plain MPFR C at the same bits and at one limb less).
Standard library only.

  bench/rls_reps.py [--bench build/bench/dmref_bench] [--runs 5] [--dir DIR] [--filter REGEX]
  bench/rls_reps.py --summarize DIR      (the tables of runs already in DIR)
  bench/rls_reps.py --baseline OLD_BINARY ...   (OLD and --bench alternate run by run, OLD first; then
                                                 per benchmark the ratio new / old of step times within
                                                 each pair of runs: min, median, max)
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys


def summarize(d, runs):
    rows = {}
    ctx = None
    for f in sorted(glob.glob(os.path.join(d, "run*.json"))):
        data = json.load(open(f))
        ctx = ctx or data["context"]
        best = {}
        for b in data["benchmarks"]:
            if b.get("run_type") == "aggregate":
                continue
            name = re.sub(r"/repeats:\d+$", "", b.get("run_name", b["name"]))
            if name not in best or b["cpu_time"] < best[name]["cpu_time"]:
                best[name] = b
        for name, b in best.items():
            rows.setdefault(name, []).append(b)
    print(f"Runs: {len(glob.glob(os.path.join(d, 'run*.json')))}; load average during the runs "
          f"(from the benchmark context of each run): "
          f"{', '.join(str(round(x, 2)) for x in (ctx or {}).get('load_avg', []))} (first run)\n")
    print("| step | bits | dk | dv | step min | step median | vs floor min | vs floor median | vs floor max |")
    print("|---|---|---|---|---|---|---|---|---|")
    label = lambda n: "/".join(p for p in n.split("/")[1:3])
    for name in sorted(rows, key=lambda n: (int(rows[n][0]["dk"]), int(rows[n][0]["dv"]), label(n))):
        bs = rows[name]
        step = [1e6 / b["items_per_second"] for b in bs]
        vf = [b["vs_floor"] for b in bs]
        print(f"| {label(name)} | {int(bs[0]['bits'])} | {int(bs[0]['dk'])} | {int(bs[0]['dv'])} | {min(step):.1f} us | "
              f"{statistics.median(step):.1f} us | {min(vf):.2f}x | {statistics.median(vf):.2f}x | {max(vf):.2f}x |")
    # dmref's step over the anchor written by a user of the same library, run by run (both are in every run):
    # the certified Ball step over Arb's at the same bits; the MPFR point step over plain MPFR C at the same
    # bits and, since dmref's MPFR types have 257 and 513 bits, at 256 and 512 (one limb less).
    pairs = []
    for name in rows:
        m = re.match(r"rls/anchor/(mpfr_c|arb)/bits:(\d+)/(dk:\d+/dv:\d+)$", name)
        if not m:
            continue
        how, bits, dims = m.group(1), int(m.group(2)), m.group(3)
        kind = "mpfr" if how == "mpfr_c" else "ball"
        for b in (bits, bits + 1 if kind == "mpfr" and bits % 64 == 0 else None):
            mine = f"rls/loop/{kind}{b}/{dims}"
            if b and mine in rows and len(rows[mine]) == len(rows[name]):
                pairs.append((int(rows[name][0]["dk"]), int(rows[name][0]["dv"]), how, bits, b, mine, name))
    if pairs:
        print("\ndmref's step over the anchor, ratio of step times within each run (min, median, max over the "
              "runs):\n")
        print("| dmref step / anchor | dk | dv | min | median | max |")
        print("|---|---|---|---|---|---|")
        for dk, dv, how, bits, b, mine, anc in sorted(pairs):
            r = [a["items_per_second"] / m["items_per_second"] for m, a in zip(rows[mine], rows[anc])]
            print(f"| {mine.split('/')[2]} / {how} {bits} | {dk} | {dv} | {min(r):.2f}x | "
                  f"{statistics.median(r):.2f}x | {max(r):.2f}x |")

def best_times(f):
    """Per benchmark name, the fastest of the run's repetitions: cpu time per step in us."""
    best = {}
    for b in json.load(open(f))["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        name = re.sub(r"/repeats:\d+$", "", b.get("run_name", b["name"]))
        t = 1e6 / b["items_per_second"] if "items_per_second" in b else b["cpu_time"]
        best[name] = min(best.get(name, t), t)
    return best


def compare(d, runs):
    old = [best_times(os.path.join(d, f"base{i}.json")) for i in range(1, runs + 1)]
    new = [best_times(os.path.join(d, f"run{i}.json")) for i in range(1, runs + 1)]
    print(f"\nNew (--bench) against old (--baseline), {runs} interleaved pairs of runs:\n")
    print("| benchmark | old min | old median | new min | new median | new / old min | median | max |")
    print("|---|---|---|---|---|---|---|---|")
    for name in sorted(set(old[0]) & set(new[0])):
        o = [r[name] for r in old]
        n = [r[name] for r in new]
        q = [b / a for a, b in zip(o, n)]
        print(f"| {name} | {min(o):.3g} us | {statistics.median(o):.3g} us | {min(n):.3g} us | "
              f"{statistics.median(n):.3g} us | {min(q):.3f}x | {statistics.median(q):.3f}x | {max(q):.3f}x |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/bench/dmref_bench")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default="rls_reps")
    ap.add_argument("--filter", default="rls/loop/mpf", help="--benchmark_filter (default: every RLS loop type)")
    ap.add_argument("--min-time", help="--benchmark_min_time (default: the library's)")
    ap.add_argument("--summarize")
    ap.add_argument("--baseline", help="an older dmref_bench, run before --bench in every run")
    a = ap.parse_args()
    if a.summarize:
        summarize(a.summarize, None)
        return 0
    os.makedirs(a.dir, exist_ok=True)
    print(f"Command: `bench/rls_reps.py {' '.join(sys.argv[1:])}`; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for i in range(1, a.runs + 1):
        extra = [f"--benchmark_min_time={a.min_time}"] if a.min_time else []
        for binary, out in ([(a.baseline, "base")] if a.baseline else []) + [(a.bench, "run")]:
            subprocess.run([binary, f"--benchmark_filter={a.filter}", f"--benchmark_out={a.dir}/{out}{i}.json",
                            "--benchmark_out_format=json", *extra], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    if a.baseline:
        compare(a.dir, a.runs)
    else:
        summarize(a.dir, a.runs)
    print(f"\nLoad average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
