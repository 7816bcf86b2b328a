#!/usr/bin/python3
"""bench/faithful_captures.py: the random-capture study of the faithful variants (issue 19;
docs/fixtures.md, "Faithful variants").

Draws captures the way users capture them: shapes skewed to small (widths 4..64, depths 1..12,
tokens 1..8), a few large ones (widths up to 1024, depths up to 48, tokens up to 64); every
scheme variant of the corpus (LDM outer/delta/RLS with every P update and ablation, AttnRes
full/block, HC static/dynamic, mHC both presets with knobs and layouts, DenseFormer with
dilation and period; kernel and model level, forward and backward); the corpus's input
distributions (reference/src/conformance/corpus.cpp) and wider ones: logit scales x4
(AttnRes w, mHC residual logits, HC dynamic weights), tiny embeddings (x 1e-3), RLS forgetting
factors near 0.5 and near 1. Inputs are rounded to the capture's input dtype (f32, bf16 or
f16). Each capture is written as inputs + config, certified by `dmref run` (`--grad` for a
backward capture), and every applicable faithful variant (tests/faithful) is judged on it at
f32, bf16, f16 and f64 by dmref_fixtures.check (the rule of `dmref verify`). A reject is a
false reject: every variant is a correct implementation.

    nice -n 10 /usr/bin/python3 bench/faithful_captures.py --captures 60 --json study.json

Certification at large shapes is expensive: --large-every K draws every K-th round of captures
(one per scheme) large (default 6), --no-large none; on large captures one variant per family runs (--large-variants). Prints per scheme, dtype and fwd/grad: captures, variant runs,
false rejects (runs), captures with a false reject, worst err/tol. Exit status 1 when a capture
was not certified (the study is then incomplete), never for false rejects (it measures them).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, ROOT)

import dmref_fixtures as df  # noqa: E402
from tests.faithful.variants import VARIANTS  # noqa: E402

SCHEMES = ["preln", "ldm", "attnres", "hc", "mhc", "denseformer"]
DTYPES = ["f32", "bf16", "f16", "f64"]
ROUND = {"f32": "F32", "bf16": "BF16", "f16": "F16"}
#: On large captures one variant of each family (a sequential reduction over d = 1024 in Python
#: costs seconds per run): --large-variants all for every variant.
LARGE = ("natural,pairwise,torch,lanes8,fma,stored,softmax_online,twophase,sinkhorn_log,mhc_norm_after,"
         "mhc_vjp,attnres_vjp,rls_vjp,p_triangle,dense,ln_onepass")


class Draw:
    def __init__(self, rng, dtype):
        self.rng, self.dtype, self.t = rng, dtype, {}

    def put(self, name, x):
        self.t[name] = df.round_to(np.asarray(x, dtype=np.float64), ROUND[self.dtype])

    def uniform(self, name, shape, s):
        self.put(name, self.rng.uniform(-1, 1, shape) * s)

    def range(self, name, shape, lo, hi):
        self.put(name, self.rng.uniform(lo, hi, shape))

    def unit_groups(self, name, shape, G):
        x = self.rng.uniform(-1, 1, shape)
        x = x.reshape(shape[:-1] + [G, shape[-1] // G])
        x = x / np.sqrt((x * x).sum(-1, keepdims=True))
        self.put(name, x.reshape(shape))


def shape(rng, large, scheme, grad):
    if large and grad and scheme == "mhc":  # the certified mHC backward costs seconds at d = 8
        return int(rng.choice([32, 64])), int(rng.choice([4, 8])), 2
    if large:
        d = int(rng.choice([256, 512, 1024]))
        L = int(rng.choice([12, 24, 48]))
        T = int(rng.choice([1, 2]))
        if scheme == "mhc":  # nC = 4 d: keep the certification within minutes
            d, L = min(d, 256), min(L, 12)
        if rng.random() < 0.3:  # many tokens at a moderate width
            d, L, T = 64, 8, int(rng.choice([32, 64]))
        return d, L, T
    return int(rng.choice([4, 8, 16, 32, 64])), int(rng.integers(1, 13)), int(rng.integers(1, 9))


def capture(rng, i, scheme, large, grad, pin_shape=None, pin=None, pin_dtype=None):
    """(config, inputs, input dtype, wide): one capture of `scheme` (pin_*: fixed by the command line)."""
    dtype = str(rng.choice(["f32", "bf16", "f16"]))
    dtype = pin_dtype or dtype
    g = Draw(rng, dtype)
    d, L, T = shape(rng, large, scheme, grad)
    if pin_shape:
        d, L, T = pin_shape
    wider = ["tiny_embeddings"] + (["logits_x4"] if scheme in ("attnres", "hc", "mhc") else []) + (
        ["lambda_near_half", "lambda_near_one"] if scheme == "ldm" else [])
    wide = str(rng.choice(["documented"] * len(wider) + wider))  # half documented, half wider
    model = rng.random() < 0.25
    cfg = {"tokens": T, "layers": L, "d": d}
    if scheme == "ldm":
        G = int(rng.choice([g_ for g_ in (1, 2, 4, 8, 16) if d % g_ == 0]))
        dk = int(rng.choice([2, 4, 8, 16]))
        write = str(rng.choice(["rls", "rls", "rls", "outer_product", "delta"]))
        cfg.update(groups=G, dk=dk, write=write)
        if write == "rls":
            cfg["alpha"] = float(rng.choice([1.0, 1.0, 2.0, 0.5]))
            cfg["p_update"] = str(rng.choice(["symmetric", "symmetric", "joseph", "naive"]))
        if rng.random() < 0.15:
            cfg[str(rng.choice(["read_residual", "write_residual"]))] = False
    elif scheme == "attnres":
        cfg["variant"] = str(rng.choice(["full", "block"]))
        if cfg["variant"] == "block":
            if rng.random() < 0.5:
                cfg["block_size"] = int(rng.integers(1, L + 3))
            else:
                cfg["blocks"] = int(rng.integers(1, L + 1))
    elif scheme == "hc":
        cfg["n"] = int(rng.choice([1, 2, 4]))
        cfg["dynamic"] = bool(rng.random() < 0.7)
        if cfg["dynamic"]:
            if rng.random() < 0.3:
                cfg["tanh"] = False
            if rng.random() < 0.3:
                cfg["norm"] = "rmsnorm"
    elif scheme == "mhc":
        cfg["n"] = int(rng.choice([2, 4, 4]))
        cfg["preset"] = str(rng.choice(["paper", "deepseek-v4"]))
        if rng.random() < 0.2:
            cfg.update(t_max=int(rng.integers(1, 8)), res_eps_add="0.05", res_eps_den="0.05")
        if rng.random() < 0.2:
            cfg.update(res_layout="in_out", phi_layout="out_in")
    elif scheme == "denseformer":
        cfg["dilation"], cfg["period"] = int(rng.choice([1, 1, 2, 3])), int(rng.choice([1, 1, 2, 3]))
    cfg.update(pin or {})
    model = cfg.get("level", "model" if model else "kernel") == "model"
    # the layers (corpus.cpp gen_layers)
    g.uniform("input.e", [T, d], 1e-3 if wide == "tiny_embeddings" else 1.0)
    if model:
        h = int(rng.choice([4, 8, 16, 32]))
        cfg.update(level="model", hidden=h)
        cfg.update(pin or {})
        h = cfg["hidden"]
        g.uniform("param.W1", [L, h, d], 1 / math.sqrt(d))
        g.uniform("param.W2", [L, d, h], 1 / math.sqrt(h))
    else:
        g.uniform("input.v", [T, L, d], 1.0)
    x4 = 4.0 if wide == "logits_x4" else 1.0
    if scheme == "ldm":
        G, dk = cfg["groups"], cfg["dk"]
        if model:
            hq, hk = int(rng.choice([0, 8])), int(rng.choice([0, 8]))
            cfg.update(mlp_q_hidden=hq, mlp_k_hidden=hk)
            if rng.random() < 0.3:
                cfg["keys_from"] = "x_prev"
            for name, hid, out in (("mlp_q", hq, G * dk), ("mlp_k", hk, G * dk + G)):
                if hid == 0:
                    g.uniform(f"param.{name}.W", [out, d], 1 / math.sqrt(d))
                else:
                    g.uniform(f"param.{name}.W1", [hid, d], 1 / math.sqrt(d))
                    g.uniform(f"param.{name}.W2", [out, hid], 1 / math.sqrt(hid))
        else:
            g.unit_groups("input.q", [T, L, G * dk], G)
            g.unit_groups("input.k", [T, L, G * dk], G)
            g.range("input.omega", [T, L, G], 0.0, 2.0)
        if cfg["write"] == "rls":
            lo, hi = {"lambda_near_half": (0.5, 0.55), "lambda_near_one": (0.999, 1.0)}.get(wide, (0.5, 1.0))
            g.range("param.lambda", [L, G], lo, hi)
        if cfg["write"] == "delta":
            g.range("param.beta", [L, G], 0.0, 1.0)
    elif scheme == "attnres":
        g.uniform("param.w", [L + 1, d], x4 * 2 / math.sqrt(d))
        g.range("param.g", [L + 1, d], 0.5, 1.5)
    elif scheme == "hc":
        n = cfg["n"]
        am = rng.uniform(-0.2, 0.2, (L, n)); ar = rng.uniform(-0.2, 0.2, (L, n, n)); b = rng.uniform(-0.2, 0.2, (L, n))
        for l in range(L):
            am[l, l % n] += 1
            ar[l] += np.eye(n)
            b[l] += 1
        g.put("param.am", am); g.put("param.ar", ar); g.put("param.b", b)
        if cfg["dynamic"]:
            g.range("param.ln_gain", [L, d], 0.5, 1.5)
            if cfg.get("norm", "layernorm") == "layernorm":
                g.uniform("param.ln_bias", [L, d], 0.1)
            for k_, sh in (("wm", [L, d]), ("wr", [L, d, n]), ("wb", [L, d])):
                g.uniform("param." + k_, sh, x4 / math.sqrt(d))
            g.range("param.scale", [L, 2], 0.01, 0.1)
    elif scheme == "mhc":
        n, nC = cfg["n"], cfg["n"] * d
        s = 1 / math.sqrt(nC)
        out_in = cfg.get("phi_layout") == "out_in"
        phi = lambda o: [L, o, nC] if out_in else [L, nC, o]  # noqa: E731
        g.uniform("param.phi_pre", phi(n), s)
        g.uniform("param.phi_post", phi(n), s)
        g.uniform("param.phi_res", phi(n * n), 2 * s * x4)
        g.range("param.a", [L, 3], 0.5, 1.5)
        g.uniform("param.b_pre", [L, n], 0.5)
        g.uniform("param.b_post", [L, n], 0.5)
        g.uniform("param.b_res", [L, n, n], x4)
    elif scheme == "denseformer":
        k, p = cfg["dilation"], cfg["period"]
        a = rng.uniform(-0.3, 0.3, (L + 1, L + 1))
        for r in range(L + 1):
            for c in range(L + 1):
                if c > r or (r % p and c != r) or (r % p == 0 and (r - c) % k):
                    a[r, c] = 0.0
            if r % p or r == 0:
                a[r, r] = 1.0
        g.put("param.a", a)
    if grad:
        g.uniform("input.grad.h", [T, L, d], 1.0)
        g.uniform("input.grad.out", [T, d], 1.0)
        if model:
            g.uniform("input.grad.v", [T, L, d], 1.0)
        if scheme == "hc":
            g.uniform("input.grad.H", [T, cfg["n"], d], 1.0)
        if scheme == "mhc":
            n = cfg["n"]
            g.uniform("input.grad.X", [T, n, d], 1.0)
            for k_, sh in (("H_pre", [T, L, n]), ("H_post", [T, L, n]), ("H_res", [T, L, n, n]), ("Ht_res", [T, L, n, n])):
                g.uniform("input.grad." + k_, sh, 1.0)
        if scheme == "ldm":
            g.uniform("input.grad.M", [T, cfg["groups"], d // cfg["groups"], cfg["dk"]], 1.0)
            if cfg["write"] == "rls":
                g.uniform("input.grad.P", [T, cfg["groups"], cfg["dk"], cfg["dk"]], 1.0)
    return cfg, g.t, dtype, wide


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--captures", type=int, default=24, help="number of captures (schemes in turn)")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--grad-every", type=int, default=3, help="every K-th capture of a scheme is a backward capture")
    ap.add_argument("--large-every", type=int, default=6, help="every K-th round (one capture per scheme) is large")
    ap.add_argument("--no-large", action="store_true")
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "tools", "dmref"))
    ap.add_argument("--jobs", type=int, default=1, help="dmref run --jobs")
    ap.add_argument("--timeout", type=float, default=900, help="seconds for one certification (then: not certified)")
    ap.add_argument("--variants", default=None, help="comma-separated variant names (default: all that apply)")
    ap.add_argument("--large-variants", default=LARGE, help="variants run on large captures ('all': every one)")
    ap.add_argument("--shape", help="pin d,L,T (e.g. 64,4,8) instead of drawing them")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="pin a config key (repeatable), e.g. --set preset='\"deepseek-v4\"' --set n=4 --set level='\"kernel\"'")
    ap.add_argument("--input-dtype", choices=["f32", "bf16", "f16"], help="pin the capture's input dtype")
    ap.add_argument("--json", help="write the per-capture results here")
    ap.add_argument("--keep", help="keep the captures and fixtures in this directory")
    a = ap.parse_args()
    bad = lambda field, why: (print(f"faithful_captures.py: {field}: {why}", file=sys.stderr), sys.exit(2))  # noqa: E731
    if not (os.path.isfile(a.cli) and os.access(a.cli, os.X_OK)):
        bad("--cli", f"{a.cli} is not an executable (build the dmref_cli target)")
    if a.captures < 1:
        bad("--captures", f"{a.captures} (at least 1)")
    if a.shape and (len(a.shape.split(",")) != 3 or not all(x.isdigit() and int(x) > 0 for x in a.shape.split(","))):
        bad("--shape", f"{a.shape!r} is not d,L,T (three positive integers)")
    for kv in a.set:
        try:
            json.loads(kv.partition("=")[2])
        except ValueError:
            bad("--set", f"{kv!r}: the value is not JSON (strings need quotes: key='\"text\"')")
        if "=" not in kv:
            bad("--set", f"{kv!r} is not KEY=JSON")
    unknown = set((a.variants or "").split(",")) - {"", *[v[0] for v in VARIANTS]}
    if unknown:
        bad("--variants", f"unknown variant(s) {', '.join(sorted(unknown))}")
    if set(a.schemes.split(",")) - set(SCHEMES):
        bad("--schemes", f"unknown scheme(s) {', '.join(sorted(set(a.schemes.split(',')) - set(SCHEMES)))}")
    import torch
    torch.set_num_threads(1)
    from tests.faithful import evaluate
    variants = [v for v in VARIANTS if a.variants is None or v[0] in a.variants.split(",")]
    rng = np.random.default_rng(a.seed)
    pin_shape = tuple(int(x) for x in a.shape.split(",")) if a.shape else None
    pin = {}
    for kv in a.set:
        k, _, v = kv.partition("=")
        pin[k] = json.loads(v)
    schemes = a.schemes.split(",")
    work = a.keep or tempfile.mkdtemp(prefix="faithful_captures.")
    os.makedirs(work, exist_ok=True)
    try:
        return study(a, variants, rng, schemes, work, pin_shape, pin, evaluate)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


def study(a, variants, rng, schemes, work, pin_shape, pin, evaluate):
    rows, summary = [], {}
    t0 = time.time()
    for i in range(a.captures):
        # schemes in turn; a round is one capture of each: every K-th round large, and within each
        # scheme every --grad-every-th capture a backward one (offset so that large ones alternate)
        scheme, rnd = schemes[i % len(schemes)], i // len(schemes)
        grad = a.grad_every > 0 and rnd % a.grad_every == (i % len(schemes) + rnd // max(a.large_every, 1)) % a.grad_every
        large = not a.no_large and a.large_every > 0 and rnd % a.large_every == a.large_every - 1
        cfg, tensors, in_dtype, wide = capture(rng, i, scheme, large, grad, pin_shape, pin, a.input_dtype)
        level = cfg.get("level", "kernel") + ("_grad" if grad else "")
        cid = f"capture.{scheme}.{level}.{i:04d}"
        base = os.path.join(work, f"{i:04d}")
        df.write(base + ".in.safetensors", tensors)
        with open(base + ".config.json", "w") as f:
            json.dump(cfg, f)
        tc = time.time()
        cmd = [a.cli, "run", "--scheme", scheme, "--config", base + ".config.json", "--inputs", base + ".in.safetensors",
               "--out", base + ".golden.safetensors", "--case-id", cid, "--jobs", str(a.jobs)] + (["--grad"] if grad else [])
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
        except subprocess.TimeoutExpired:
            p = subprocess.CompletedProcess(cmd, 124, "", f"dmref run: over --timeout {a.timeout:g} s")
        cert = time.time() - tc
        row = {"id": cid, "scheme": scheme, "config": cfg, "input_dtype": in_dtype, "inputs": wide,
               "certify_s": round(cert, 1), "verdicts": []}
        if p.returncode != 0:
            row["not_certified"] = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
            print(f"{cid}: dmref run exit {p.returncode}: {row['not_certified']}", flush=True)
            rows.append(row)
            continue
        case = df.load_case(base + ".golden.safetensors")
        kind = "grad" if grad else "fwd"
        for dt in DTYPES:
            if not isinstance(case.baselines.get(dt), dict):
                row["verdicts"].append({"dtype": dt, "refused": "no baseline"})
                continue
            for name, knobs, _, applies in variants:
                if not applies(scheme, cid, cfg, dt):
                    continue
                if large and a.large_variants != "all" and name not in a.large_variants.split(","):
                    continue
                out = evaluate.run(scheme, case.file.tensors, cfg, dt, knobs, grad=grad)
                v = df.check(out, case, dt)
                row["verdicts"].append({"dtype": dt, "variant": name, "passed": v.passed, "worst": v.worst_ratio,
                                        "failed": v.failed, "checked": v.checked})
                s = summary.setdefault((scheme, dt, kind), {"captures": set(), "runs": 0, "rejects": 0,
                                                            "rejected_captures": set(), "worst": 0.0, "worst_at": ""})
                s["captures"].add(cid)
                s["runs"] += 1
                if not v.passed:
                    s["rejects"] += 1
                    s["rejected_captures"].add(cid)
                if v.worst_ratio >= s["worst"]:
                    s["worst"], s["worst_at"] = v.worst_ratio, f"{name} on {cid} ({in_dtype} inputs, {wide})"
        rows.append(row)
        bad = sum(1 for v in row["verdicts"] if v.get("passed") is False)
        print(f"{cid}: d={cfg['d']} L={cfg['layers']} T={cfg['tokens']} {in_dtype} {wide}: certified in {cert:.1f} s; "
              f"{len(row['verdicts'])} verdicts, {bad} false rejects", flush=True)
    print(f"\n{a.captures} captures in {time.time() - t0:.0f} s (seed {a.seed})\n")
    print("| scheme | dtype | kind | captures | variant runs | false rejects (runs) | captures with a false reject | worst err/tol |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for (sch, dt, kind), s in sorted(summary.items(), key=lambda kv: (kv[0][0], DTYPES.index(kv[0][1]), kv[0][2])):
        print(f"| `{sch}` | {dt} | {kind} | {len(s['captures'])} | {s['runs']} | {s['rejects']} | "
              f"{len(s['rejected_captures'])} | {s['worst']:.2g} |")
    # the compact form of docs/fixtures.md: per scheme, dtype and fwd/grad, captures with a false
    # reject / captures, and the worst err/tol
    print("\n| scheme | " + " | ".join(f"{k} {d}" for k in ("fwd", "grad") for d in DTYPES) + " |")
    print("| --- " * 9 + "|")
    for sch in schemes:
        cells = []
        for k in ("fwd", "grad"):
            for d in DTYPES:
                s = summary.get((sch, d, k))
                cells.append("-" if s is None else f"{len(s['rejected_captures'])}/{len(s['captures'])}, {s['worst']:.2g}")
        print(f"| `{sch}` | " + " | ".join(cells) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"seed": a.seed, "captures": rows,
                       "summary": [{"key": list(k), "captures": len(s["captures"]), "runs": s["runs"],
                                    "rejects": s["rejects"], "rejected_captures": len(s["rejected_captures"]),
                                    "worst": s["worst"], "worst_at": s["worst_at"]} for k, s in sorted(summary.items())]},
                      f, indent=1)
    missing = [r["id"] for r in rows if "not_certified" in r]
    if missing:  # the study is incomplete: say so in the exit status (CTest faithful_captures)
        print(f"{len(missing)} captures not certified: {', '.join(missing)}", file=sys.stderr)
    return 1 if missing or not summary else 0


if __name__ == "__main__":
    sys.exit(main())
