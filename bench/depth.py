#!/usr/bin/python3
"""bench/depth.py: how deep each scheme certifies at model level (docs/precision.md,
"Depth"). For each scheme, `dmref run` on one token at L = 16, 32, ..., --max-layers
(inputs from bench/make_inputs.py: the corpus distributions, bf16-exact), until
one depth does not certify; prints the precision each depth needed (Ziv: 128,
512, 2048, 8192 bits), its wall time over --reps runs (min and median; every run
must give the same result and the same bytes), and the first line of the error
where it stops. Standard library only.

  bench/depth.py --dmref build/tools/dmref [--d 64] [--max-layers 256] [--schemes ...] [--reps 5]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMES = {
    "preln": ["preln"],
    "ldm_rls": ["ldm", "--groups", "4", "--dk", "16"],
    "attnres_full": ["attnres", "--variant", "full"],
    "attnres_block": ["attnres", "--variant", "block", "--block-size", "8"],
    "hc_static": ["hc", "--n", "4"],
    "mhc": ["mhc", "--n", "4"],
    "denseformer": ["denseformer"],
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dmref", required=True)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--max-layers", type=int, default=256)
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run")
    ap.add_argument("--reps", type=int, default=5, help="runs per depth (wall min and median)")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="dmref_depth_")
    print("Command: `bench/depth.py " + " ".join(sys.argv[1:]) + "`  ")
    print(f"Load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; model level, one token, "
          f"d = {a.d}, hidden {a.hidden}\n")
    print("| scheme | L | result | wall min | wall median | runs |")
    print("|---|---|---|---|---|---|")
    for name in a.schemes.split(","):
        L = 16
        while L <= a.max_layers:
            d = os.path.join(work, f"{name}_L{L}")
            subprocess.run([sys.executable, os.path.join(HERE, "make_inputs.py"), *SCHEMES[name], "--level", "model",
                            "--d", str(a.d), "--hidden", str(a.hidden), "--layers", str(L), "--tokens", "1",
                            "--out", d], check=True, stdout=subprocess.DEVNULL)
            cmd = [a.dmref, "run", "--scheme", SCHEMES[name][0], "--config", os.path.join(d, "config.json"),
                   "--inputs", os.path.join(d, "inputs.safetensors"), "--out", os.path.join(d, "out.safetensors"),
                   "--jobs", "1"]
            walls, results, outs = [], set(), set()
            for _ in range(a.reps):
                t0 = time.perf_counter()
                try:
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
                    walls.append(time.perf_counter() - t0)
                    if r.returncode == 0:
                        bits = re.search(r"certified at (\d+) bits", r.stdout)
                        results.add(f"certified at {bits.group(1)} bits")
                        outs.add(open(os.path.join(d, "out.safetensors"), "rb").read())
                    else:
                        msg = r.stderr.strip().splitlines()[0] if r.stderr.strip() else f"exit {r.returncode}"
                        results.add(f"**not certified** (exit {r.returncode}): `{msg[:220]}`")
                except subprocess.TimeoutExpired:
                    walls.append(time.perf_counter() - t0)
                    r = None
                    results.add(f"**stopped after {a.timeout:.0f} s**")
                if r is None or r.returncode != 0:
                    break  # a depth that fails is not repeated
            if len(results) != 1 or len(outs) > 1:
                results = {"**runs disagree**: " + "; ".join(sorted(results)) +
                           (f"; {len(outs)} different outputs" if len(outs) > 1 else "")}
            res = results.pop()
            print(f"| {name} | {L} | {res} | {min(walls):.1f} s | {statistics.median(walls):.1f} s | {len(walls)} |")
            sys.stdout.flush()
            if r is None or r.returncode != 0:
                break
            L *= 2
    print(f"\nLoad average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    sys.exit(main())
