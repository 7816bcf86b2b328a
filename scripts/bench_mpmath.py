#!/usr/bin/python3
"""scripts/bench_mpmath.py: the RLS-LDM step of dmref's benchmark, in mpmath.

The same step as ldm.hpp's rls_step on MPFR numbers (detail::RlsMpfrOps: symmetric P
update on the upper triangle, mpfr_fma dot products, weight-safe form)
on the same inputs as bench/bench_kernels.cpp: the step sequence is drawn from
SplitMix64(2026) exactly as rls_inputs() there does (dmref/random.hpp gives the
generator), M starts at 0 and P at I. Every operation is one mpf operation at
mp.prec bits, rounded to nearest (an fma: the exact product, one rounded sum),
in the order the C++ loop performs them, so the result must be bit-identical to MPFR's; `--check BINARY` verifies that
against `BINARY --dmref-rls-check=...` (the dmref_bench executable).

Prints one JSON object: per (bits, dk, dv), seconds per step and the check.
Run with Debian's interpreter (/usr/bin/python3, python3-mpmath). mpmath picks
its backend at import: gmpy2 when python3-gmpy2 is installed, pure Python with
MPMATH_NOGMPY=1 in the environment (scripts/bench runs both, one process each);
the JSON says which ("mpmath_backend").
"""
import argparse
import json
import math
import subprocess
import sys
import time
from fractions import Fraction

import mpmath
from mpmath import mp, mpf

MASK = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.s = seed & MASK

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def uniform(self):
        # (next() >> 11) * 2^-52 - 1, every step exact or one IEEE rounding, as in C++
        return float(self.next() >> 11) * 2.0**-52 - 1.0


def rls_inputs(dk, dv, steps, seed=2026):
    """The step sequence in double, in the C++ order (rls_inputs in bench_kernels.cpp)."""
    r = SplitMix64(seed)
    seq = []
    for _ in range(steps):
        k = []
        ss = 0.0
        for _ in range(dk):
            x = r.uniform()
            k.append(x)
            ss += x * x
        nrm = math.sqrt(ss)
        k = [x / nrm for x in k]
        v = [r.uniform() for _ in range(dv)]
        w = 1 + r.uniform()
        lam = 0.95 + 0.05 * r.uniform()
        seq.append((k, v, w, lam))
    return seq


def fma(x, y, z):
    """x y + z with one rounding (mpfr_fma): the product exact, the sum rounded at mp.prec."""
    return mpmath.fadd(mpmath.fmul(x, y, exact=True), z)


def dot(x, y, init=0):
    """init + x(0) y(0) + x(1) y(1) + ..., left to right, one fma per term (from init = 0)."""
    r = mpf(init)
    for j in range(len(x)):
        r = fma(x[j], y[j], r)
    return r


def rls_step(M, P, k, v, w, lam):
    """One symmetric RLS step in place (ldm.hpp's rls_step on RlsMpfrOps): M is dv rows of dk, P is dk rows of dk."""
    n, m = len(k), len(v)
    pi = [dot(P[i], k) for i in range(n)]
    gamma = fma(w, dot(k, pi), lam)
    g = [pi[i] / gamma for i in range(n)]
    wg = [w * g[i] for i in range(n)]
    wu = [(-w) * dot(M[i], k, -v[i]) for i in range(m)]  # -w (M k - v); the negations are exact
    for i in range(m):
        Mi, wui = M[i], wu[i]
        for j in range(n):
            Mi[j] = fma(wui, g[j], Mi[j])
    # Upper triangle: P_ij = ((w g)_i pi_j - P_ij) / (-lambda), one fms and one division, mirrored.
    for j in range(n):
        for i in range(j + 1):
            P[i][j] = P[j][i] = fma(wg[i], pi[j], -P[i][j]) / (-lam)


def run(dk, dv, seq):
    M = [[mpf(0)] * dk for _ in range(dv)]
    P = [[mpf(1) if i == j else mpf(0) for j in range(dk)] for i in range(dk)]
    for k, v, w, lam in seq:
        rls_step(M, P, k, v, w, lam)
    return M, P


def floor_madd(bits, min_time):
    """mpmath's own floor: seconds per multiply-add in a dot-product loop over
    1024 full-precision pairs (u/3, u/7), as the C++ floor benchmark does."""
    mp.prec = bits
    r = SplitMix64(7)
    a, b = [], []
    for _ in range(1024):
        a.append(mpf(r.uniform()) / 3)
        b.append(mpf(r.uniform()) / 7)
    def once():
        acc = mpf(0)
        for x, y in zip(a, b):
            acc = acc + x * y
    return fastest_of_3(once, min_time) / len(a)


def fastest_of_3(f, min_time):
    """Seconds per call of f: three rounds of calls, each at least min_time / 3
    (CPU time), the fastest round's mean, as scripts/bench takes the fastest of
    the C++ benchmark's 3 repetitions."""
    best = None
    for _ in range(3):
        runs = 0
        t0 = time.process_time()
        while True:
            f()
            runs += 1
            elapsed = time.process_time() - t0
            if elapsed >= min_time / 3:
                break
        best = elapsed / runs if best is None else min(best, elapsed / runs)
    return best


def exact(x):
    sign, man, exp, _ = x._mpf_  # value (-1)^sign man 2^exp (zero: man = 0)
    return (-1) ** sign * Fraction(int(man)) * (Fraction(2) ** int(exp))


def check(binary, bits, dk, dv, steps, M, P):
    """Compares with dmref_bench --dmref-rls-check: number of entries that differ (0 = bit-identical)."""
    out = subprocess.run([binary, f"--dmref-rls-check={bits},{dk},{dv},{steps}"], check=True, capture_output=True,
                         text=True).stdout.split("\n")
    if out[0] != f"bits {bits}":
        raise SystemExit(f"bench_mpmath: {binary} ran at {out[0]!r}, expected {bits} bits")
    diff = 0
    count = 0
    for line in out[1:]:
        if not line:
            continue
        name, i, j, man, exp = line.split()
        c = Fraction(int(man, 16)) * (Fraction(2) ** int(exp))
        py = (M if name == "M" else P)[int(i)][int(j)]
        count += 1
        diff += c != exact(py)
    if count != dv * dk + dk * dk:
        raise SystemExit(f"bench_mpmath: {binary} printed {count} entries, expected {dv * dk + dk * dk}")
    return diff


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bits", default="128,257,513", help="precisions (the C++ types' bit counts)")
    ap.add_argument("--dims", default="16,64", help="values of dk and of dv (every pair is run)")
    ap.add_argument("--steps", type=int, default=16, help="steps per run from M = 0, P = I (C++: 16)")
    ap.add_argument("--min-time", type=float, default=1.5,
                    help="CPU seconds per measurement (three rounds; the fastest round counts)")
    ap.add_argument("--check", metavar="BINARY", help="dmref_bench, to check bit-identity with MPFR")
    a = ap.parse_args()
    results = []
    floors = {}
    for bits in [int(b) for b in a.bits.split(",")]:
        floors[bits] = floor_madd(bits, max(a.min_time, 0.01))
        print(f"mpmath {bits:4d} bits: multiply-add {floors[bits] * 1e9:.0f} ns", file=sys.stderr)
        mp.prec = bits
        for dk in [int(d) for d in a.dims.split(",")]:
            for dv in [int(d) for d in a.dims.split(",")]:
                seq = [([mpf(x) for x in k], [mpf(x) for x in v], mpf(w), mpf(lam))
                       for k, v, w, lam in rls_inputs(dk, dv, a.steps)]
                M, P = run(dk, dv, seq)
                per_run = fastest_of_3(lambda: run(dk, dv, seq), a.min_time)
                r = {"bits": bits, "dk": dk, "dv": dv, "steps": a.steps, "seconds_per_step": per_run / a.steps}
                if a.check:
                    r["entries_differing_from_mpfr"] = check(a.check, bits, dk, dv, a.steps, M, P)
                results.append(r)
                print(f"mpmath {bits:4d} bits dk={dk:3d} dv={dv:3d}: {r['seconds_per_step'] * 1e6:12.1f} us/step"
                      + (f", differs from MPFR in {r['entries_differing_from_mpfr']} entries" if a.check else ""),
                      file=sys.stderr)
    json.dump({"mpmath_version": mpmath.__version__, "mpmath_backend": mpmath.libmp.BACKEND,
               "python": sys.version.split()[0], "floor_seconds_per_madd": floors, "results": results}, sys.stdout, indent=1)
    print()
    return 1 if any(r.get("entries_differing_from_mpfr") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
