#!/usr/bin/env python3
"""examples/cuda end to end (docs/kernels.md, "A CUDA example"; CTest
cuda_example): capture an mHC problem (DeepSeek-V4 preset, DeepSeek's storage),
certify it with `dmref run`, run the harness (host build of the kernel, or the
GPU build with --device cuda), judge the candidate with `dmref verify --dtype
f32`; then the same with each seeded bug (harness options), which must fail.
Exit 0 when every verdict is the expected one.

  examples/cuda/run_example.py --harness build/tests/mhc_harness --dmref build/tools/dmref [--device cuda] [--doc docs/kernels.md]

--stage splits it over two machines, as a user with a GPU but no dmref there
works (docs/kernels.md, "On a GPU"): `capture` (capture and certify, here),
`harness` (only the harness, on the GPU machine: needs neither dmref nor
numpy there), `judge` (verify the candidates brought back, here); each reads
and writes the files of --work.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import dmref_fixtures as df  # noqa: E402

# (name, harness options): the correct call, then bugs seeded through the kernel's own constants
RUNS = [("correct", []), ("repeat 19", ["--repeat", "19"]), ("sinkhorn eps 1e-5", ["--sinkhorn-eps", "1e-5"]),
        ("post mult 1", ["--post-mult", "1"]), ("pre eps 1e-3", ["--pre-eps", "1e-3"])]


def capture(path, T=8, n=4, C=512, L=3, seed=20):
    """Inputs and parameters as float32 values. phi * 0.01 makes the projections
    O(1) (x' has norm sqrt(nC)); b_res drops by 10 below the diagonal of H_res:
    a slow Sinkhorn, where one round fewer is visible (docs/mhc.md)."""
    rng = np.random.default_rng(seed)
    f32 = lambda *shape, s=1.0: df.round_to(rng.standard_normal(shape) * s, "F32")  # noqa: E731
    lower = np.tril(np.ones((n, n)), -1)                 # H_res[out, in], out > in; stored [in, out]
    tensors = {"input.e": f32(T, C), "input.v": f32(T, L, C),
               "param.phi_pre": f32(L, n, n * C, s=0.01), "param.phi_post": f32(L, n, n * C, s=0.01),
               "param.phi_res": f32(L, n * n, n * C, s=0.01),
               "param.a": df.round_to(np.tile([0.5, 0.5, 1.0], (L, 1)), "F32"),
               "param.b_pre": f32(L, n, s=0.1), "param.b_post": f32(L, n, s=0.1),
               "param.b_res": df.round_to(f32(L, n, n, s=0.1) - 10.0 * lower.T, "F32")}
    df.write(path, tensors)
    return {"tokens": T, "layers": L, "d": C, "n": n, "preset": "deepseek-v4", "res_layout": "in_out",
            "phi_layout": "out_in"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--harness", help="the harness executable (stages all, harness)")
    ap.add_argument("--dmref", help="the dmref CLI (stages all, capture, judge)")
    ap.add_argument("--stage", default="all", choices=["all", "capture", "harness", "judge"])
    ap.add_argument("--device", default="host", choices=["host", "cuda"])
    ap.add_argument("--work", help="directory for the files (default: a temporary one)")
    ap.add_argument("--doc", help="a page whose console block must hold every verdict line printed (docs/kernels.md)")
    args = ap.parse_args()
    need = {"all": ("harness", "dmref"), "capture": ("dmref",), "harness": ("harness",), "judge": ("dmref",)}
    for name in need[args.stage]:
        if not getattr(args, name):
            ap.error(f"--stage {args.stage} needs --{name}")
    if args.stage != "all" and not args.work:
        ap.error(f"--stage {args.stage} needs --work (the stages share its files)")
    if args.work:
        os.makedirs(args.work, exist_ok=True)
        return run(args, args.work)
    with tempfile.TemporaryDirectory(prefix="dmref_cuda_example.") as work:
        return run(args, work)


def cand_path(work, name):
    return os.path.join(work, "cand_" + name.replace(" ", "_") + ".safetensors")


def sh(*cmd):
    return subprocess.run(list(cmd), capture_output=True, text=True)


def run(args, work):
    stages = {"all": (stage_capture, stage_harness, stage_judge), "capture": (stage_capture,),
              "harness": (stage_harness,), "judge": (stage_judge,)}[args.stage]
    ok = True
    for stage in stages:
        ok &= stage(args, work)
        if not ok and stage is stage_capture:
            break
    print("cuda example:", "every verdict as expected" if ok else "UNEXPECTED VERDICT")
    return 0 if ok else 1


def stage_capture(args, work):
    """Capture the problem and certify it: captured.safetensors, golden.safetensors."""
    cap, cfg, gold = (os.path.join(work, f) for f in ("captured.safetensors", "config.json", "golden.safetensors"))
    with open(cfg, "w") as f:
        json.dump(capture(cap), f)
    p = sh(args.dmref, "run", "--scheme", "mhc", "--config", cfg, "--inputs", cap, "--out", gold,
           "--case-id", "cuda_example.mhc_pre")
    print(p.stdout.strip() or p.stderr.strip())
    return p.returncode == 0


def stage_harness(args, work):
    """The harness on the captured problem, once per call of RUNS: cand_<name>.safetensors;
    then a missing input file, which must give exit 2 and write nothing."""
    ok = True
    cap = os.path.join(work, "captured.safetensors")
    for name, opts in RUNS:
        h = sh(args.harness, "--inputs", cap, "--out", cand_path(work, name), "--device", args.device, *opts)
        if h.returncode != 0:
            print(f"{name}: harness failed ({h.returncode}): {h.stderr.strip()}")
            ok = False
    bad = sh(args.harness, "--inputs", os.path.join(work, "missing.safetensors"), "--out", os.path.join(work, "x"))
    print("missing input file ->", bad.returncode, bad.stderr.strip())
    return ok and bad.returncode == 2 and not os.path.exists(os.path.join(work, "x"))


def stage_judge(args, work):
    """`dmref verify --dtype f32` of each candidate against the golden: the correct call must
    pass, every seeded bug fail; with --doc, every verdict line must be on that page."""
    ok = True
    lines = []
    gold = os.path.join(work, "golden.safetensors")
    for name, opts in RUNS:
        cand = cand_path(work, name)
        if not os.path.exists(cand):
            print(f"{name}: no candidate {cand}")
            ok = False
            continue
        v = sh(args.dmref, "verify", "--fixtures", gold, "--candidate", cand, "--dtype", "f32", "--format", "json")
        try:
            c = json.loads(v.stdout)["cases"][0]
            verdict = (f"{'PASS' if c['pass'] else 'FAIL'}: {c['failed']} of {c['checked']} elements out, "
                       f"worst err/tol {c['worst_err_over_tol']:.3g}")
        except (ValueError, KeyError, IndexError):
            verdict = f"no verdict ({v.returncode}): {v.stderr.strip()}"
        want = 0 if name == "correct" else 1
        lines.append(f"{name:18s} {' '.join(opts) or '(DeepSeek-V4 constants)':22s} -> {verdict}")
        print(lines[-1])
        ok &= v.returncode == want
    if args.doc:
        with open(args.doc) as f:
            page = f.read().splitlines()
        stale = [ln for ln in lines if ln not in page]
        for ln in stale:
            print(f"not in {args.doc}: {ln}")
        ok &= not stale
    return ok


if __name__ == "__main__":
    sys.exit(main())
