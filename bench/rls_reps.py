#!/usr/bin/python3
"""bench/rls_reps.py: the RLS step against the MPFR multiply-add floor, repeated
(docs/performance.md). Runs `dmref_bench --benchmark_filter=rls/loop/mpf` --runs
times in a row (so every benchmark's repetitions are interleaved with the
others'), takes the fastest of each run's 3 repetitions, and prints per
(type, bits, dk, dv) the min and median over the runs of the step time and of
`vs_floor` (ns per multiply-add over the floor's, measured interleaved inside
each benchmark), with the load average. Standard library only.

  bench/rls_reps.py [--bench build/bench/dmref_bench] [--runs 5] [--dir DIR] [--filter REGEX]
  bench/rls_reps.py --summarize DIR      (the tables of runs already in DIR)
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
    ratios = {}  # (bits, dk, dv) -> per-run ratio of dmref's Ball step to the Arb anchor, same run
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
            m = re.match(r"rls/loop/ball(\d+)/(dk:\d+/dv:\d+)$", name)
            arb = best.get(f"rls/anchor/arb/bits:{m.group(1)}/{m.group(2)}") if m else None
            if arb:
                key = (int(m.group(1)), int(b["dk"]), int(b["dv"]))
                ratios.setdefault(key, []).append(arb["items_per_second"] / b["items_per_second"])
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
    if ratios:
        print("\ndmref's certified step (Ball, rls/loop/ball) over the Arb user's best (rls/anchor/arb), "
              "ratio of step times within each run:\n")
        print("| bits | dk | dv | ball / arb min | median | max |")
        print("|---|---|---|---|---|---|")
        for (bits, dk, dv), r in sorted(ratios.items()):
            print(f"| {bits} | {dk} | {dv} | {min(r):.2f}x | {statistics.median(r):.2f}x | {max(r):.2f}x |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/bench/dmref_bench")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default="rls_reps")
    ap.add_argument("--filter", default="rls/loop/mpf", help="--benchmark_filter (default: every RLS loop type)")
    ap.add_argument("--min-time", help="--benchmark_min_time (default: the library's)")
    ap.add_argument("--summarize")
    a = ap.parse_args()
    if a.summarize:
        summarize(a.summarize, None)
        return 0
    os.makedirs(a.dir, exist_ok=True)
    print(f"Command: `bench/rls_reps.py {' '.join(sys.argv[1:])}`; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for i in range(1, a.runs + 1):
        extra = [f"--benchmark_min_time={a.min_time}"] if a.min_time else []
        subprocess.run([a.bench, f"--benchmark_filter={a.filter}", f"--benchmark_out={a.dir}/run{i}.json",
                        "--benchmark_out_format=json", *extra], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    summarize(a.dir, a.runs)
    print(f"\nLoad average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
