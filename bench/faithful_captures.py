#!/usr/bin/python3
"""bench/faithful_captures.py: the random-capture study of the faithful variants (issue 19;
docs/fixtures.md, "Faithful variants").

Draws captures the way users capture them: the schemes in turn, each scheme's sub-variants
uniformly (LDM rls/outer_product/delta, AttnRes full/block, HC static/dynamic, mHC paper/
deepseek-v4) with the corpus's knobs (P updates, ablations, block sizes and counts, mHC knobs and
layouts, DenseFormer dilation and period; kernel and model level, every --grad-every-th a
backward capture); width log-uniform in [4, 1024], depth in [1, 48], tokens in [1, 64], cut to a
slice of at most --max-elements elements of the residual stream (fewer tokens, then fewer
layers: how a big model is captured); the corpus's input distributions
(reference/src/conformance/corpus.cpp) and, for half of the captures, wider ones: logit scales
x4 (AttnRes w, mHC residual logits, HC dynamic weights), tiny embeddings (x 1e-3), RLS
forgetting factors near 0.5 and near 1. Inputs are rounded to the capture's input dtype (f32,
bf16 or f16). Each capture is certified by `dmref run` (`--grad` for a backward one), and
--variants-per-dtype faithful variants (tests/faithful; in rotation over those that apply, 0:
all) are judged on it at f32, bf16, f16 and f64 by dmref_fixtures.check (the rule of `dmref
verify`). A reject is a false reject: every variant is a correct implementation.

    nice -n 19 /usr/bin/python3 bench/faithful_captures.py --captures 6000 --checkpoint study.jsonl

Capture i is drawn from its own generator (seed, i), so --checkpoint FILE (one JSON line per
capture) resumes an interrupted study with the same command (and extends it with a larger
--captures); --docs FILE writes the table of docs/fixtures.md "Random-capture study" from every
capture of the run. Prints per scheme, dtype and fwd/grad: captures with a false reject /
captures judged, the worst err/tol and where, and the CPU time. Exit status 1 when a capture was
not certified (the study is incomplete) or a faithful variant was rejected (a false reject).
"""
import argparse
import json
import math
import os
import resource
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
from dmref_fixtures.verify import tolerance_rule  # noqa: E402
from tests.faithful.variants import VARIANTS  # noqa: E402

SCHEMES = ["preln", "ldm", "attnres", "hc", "mhc", "denseformer"]
DTYPES = ["f32", "bf16", "f16", "f64"]
ROUND = {"f32": "F32", "bf16": "BF16", "f16": "F16"}
#: The slice bound and the variants per capture and dtype (docs/fixtures.md "Random-capture study":
#: measured cost per capture by shape, and what fits 1,000 captures per scheme on one core).
MAX_ELEMENTS = 2048
VARIANTS_PER_DTYPE = 4


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


#: The sub-variants of each scheme (docs/fixtures.md "Random-capture study"): drawn uniformly
#: within the scheme, so that each gets about a third (LDM) or a half of its scheme's captures.
FAMILIES = {"preln": ["preln"], "ldm": ["rls", "outer_product", "delta"], "attnres": ["full", "block"],
            "hc": ["static", "dynamic"], "mhc": ["paper", "deepseek-v4"], "denseformer": ["denseformer"]}


def log_uniform(rng, lo, hi):
    """An integer in [lo, hi], log-uniform: as many captures of width 4-8 as of 512-1024."""
    return min(hi, int(math.floor(math.exp(rng.uniform(math.log(lo), math.log(hi + 1))))))  # P(k) ~ log((k+1)/k)


def shape(rng, n, max_elements):
    """(d, L, T): width log-uniform in [4, 1024], depth in [1, 48], tokens in [1, 64], then cut to a
    slice of at most max_elements elements of the residual stream (T L d, times the n streams of HC
    and mHC), the way a user captures a big model: fewer tokens first, then fewer layers. The width
    is kept (a slice of one token and one layer of a wide HC/mHC model may exceed the bound by its
    n), unless it alone is over the bound."""
    d, L, T = log_uniform(rng, 4, 1024), log_uniform(rng, 1, 48), log_uniform(rng, 1, 64)
    d = min(d, max_elements)
    if T * L * d * n > max_elements:
        T = max(1, max_elements // (L * d * n))
    if T * L * d * n > max_elements:
        L = max(1, max_elements // (T * d * n))
    return d, L, T


def capture(rng, scheme, grad, max_elements, pin_shape=None, pin=None, pin_dtype=None):
    """(config, inputs, input dtype, wide, family): one capture of `scheme` (pin_*: fixed by the
    command line)."""
    dtype = str(rng.choice(["f32", "bf16", "f16"]))
    dtype = pin_dtype or dtype
    g = Draw(rng, dtype)
    fam = str(rng.choice(FAMILIES[scheme]))
    n = int(rng.choice([1, 2, 4] if scheme == "hc" else [2, 4, 4])) if scheme in ("hc", "mhc") else 1
    n = (pin or {}).get("n", n)
    d, L, T = shape(rng, n, max_elements)
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
        write = fam
        cfg.update(groups=G, dk=dk, write=write)
        if write == "rls":
            cfg["alpha"] = float(rng.choice([1.0, 1.0, 2.0, 0.5]))
            cfg["p_update"] = str(rng.choice(["symmetric", "symmetric", "joseph", "naive"]))
        if rng.random() < 0.15:
            cfg[str(rng.choice(["read_residual", "write_residual"]))] = False
    elif scheme == "attnres":
        cfg["variant"] = fam
        if cfg["variant"] == "block":
            if rng.random() < 0.5:
                cfg["block_size"] = int(rng.integers(1, L + 3))
            else:
                cfg["blocks"] = int(rng.integers(1, L + 1))
    elif scheme == "hc":
        cfg["n"] = n
        cfg["dynamic"] = fam == "dynamic"
        if cfg["dynamic"]:
            if rng.random() < 0.3:
                cfg["tanh"] = False
            if rng.random() < 0.3:
                cfg["norm"] = "rmsnorm"
    elif scheme == "mhc":
        cfg["n"] = n
        cfg["preset"] = fam
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
    fam = {"ldm": cfg.get("write", "rls"), "attnres": cfg.get("variant", "full"), "mhc": cfg.get("preset"),
           "hc": "dynamic" if cfg.get("dynamic") else "static"}.get(scheme, scheme)  # after --set
    return cfg, g.t, dtype, wide, fam


def arguments(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--captures", type=int, default=24, help="number of captures (schemes in turn)")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--grad-every", type=int, default=3, help="every K-th capture of a scheme is a backward capture")
    ap.add_argument("--max-elements", type=int, default=MAX_ELEMENTS,
                    help="elements of the residual stream per capture, T L d (x n for HC, mHC): the slice bound")
    ap.add_argument("--variants-per-dtype", type=int, default=VARIANTS_PER_DTYPE,
                    help="variants judged per capture and dtype, in rotation over those that apply (0: all)")
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "tools", "dmref"))
    ap.add_argument("--jobs", type=int, default=1, help="dmref run --jobs")
    ap.add_argument("--timeout", type=float, default=900, help="seconds for one certification (then: not certified)")
    ap.add_argument("--variants", default=None, help="comma-separated variant names (default: all that apply)")
    ap.add_argument("--shape", help="pin d,L,T (e.g. 64,4,8) instead of drawing them")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="pin a config key (repeatable), e.g. --set preset='\"deepseek-v4\"' --set n=4 --set level='\"kernel\"'")
    ap.add_argument("--input-dtype", choices=["f32", "bf16", "f16"], help="pin the capture's input dtype")
    ap.add_argument("--checkpoint", help="JSON lines, one per capture judged: resumed from (same command) and appended to")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--docs", help="rewrite the study table of this docs/fixtures.md (from every capture of the run)")
    ap.add_argument("--keep", help="keep the captures and fixtures in this directory")
    ap.add_argument("--indices", help="judge only these capture indices (comma-separated indices and ranges A-B, "
                    "each below --captures), drawn exactly as the whole study draws them: a re-run of some "
                    "captures, or one shard of a study run as several processes (their checkpoints concatenate)")
    return ap, ap.parse_args(argv)


#: The fields of the command that decide what capture i is and how it is judged: a checkpoint
#: resumes only the same study (--captures may grow; --cli, --jobs, --timeout do not change results).
DRAW = ("seed", "schemes", "grad_every", "max_elements", "variants_per_dtype", "variants", "shape", "set",
        "input_dtype")


def main(argv=None):
    ap, a = arguments(argv)
    bad = lambda field, why: (print(f"faithful_captures.py: {field}: {why}", file=sys.stderr), sys.exit(2))  # noqa: E731
    if not (os.path.isfile(a.cli) and os.access(a.cli, os.X_OK)):
        bad("--cli", f"{a.cli} is not an executable (build the dmref_cli target)")
    for field in ("captures", "max_elements"):
        if getattr(a, field) < 1:
            bad("--" + field.replace("_", "-"), f"{getattr(a, field)} (at least 1)")
    if a.variants_per_dtype < 0:
        bad("--variants-per-dtype", f"{a.variants_per_dtype} (0 for all, or a positive count)")
    if a.shape and (len(a.shape.split(",")) != 3 or not all(x.isdigit() and int(x) > 0 for x in a.shape.split(","))):
        bad("--shape", f"{a.shape!r} is not d,L,T (three positive integers)")
    for kv in a.set:
        if "=" not in kv:
            bad("--set", f"{kv!r} is not KEY=JSON")
        try:
            json.loads(kv.partition("=")[2])
        except ValueError:
            bad("--set", f"{kv!r}: the value is not JSON (strings need quotes: key='\"text\"')")
    unknown = set((a.variants or "").split(",")) - {"", *[v[0] for v in VARIANTS]}
    if unknown:
        bad("--variants", f"unknown variant(s) {', '.join(sorted(unknown))}")
    if a.indices is not None:
        try:
            a.indices = {i for part in a.indices.split(",")
                         for i in (range(int(part.split("-")[0]), int(part.split("-")[1]) + 1) if "-" in part
                                   else [int(part)])}
        except ValueError:
            bad("--indices", f"{a.indices!r} is not a comma-separated list of indices and ranges A-B")
        if not a.indices or min(a.indices) < 0 or max(a.indices) >= a.captures:
            bad("--indices", f"every index must be in [0, --captures = {a.captures})")
        if a.docs:
            bad("--indices", "a table of some captures is not the study's: not with --docs")
    if set(a.schemes.split(",")) - set(SCHEMES):
        bad("--schemes", f"unknown scheme(s) {', '.join(sorted(set(a.schemes.split(',')) - set(SCHEMES)))}")
    done = {}
    header = {k: getattr(a, k) for k in DRAW}
    if a.checkpoint and os.path.exists(a.checkpoint):
        with open(a.checkpoint) as f:
            lines = [json.loads(x) for x in f if x.strip()]
        if not lines or "header" not in lines[0]:
            bad("--checkpoint", f"{a.checkpoint}: no header line (not a checkpoint of this script)")
        for k in DRAW:
            if lines[0]["header"].get(k) != header[k]:
                bad("--checkpoint", f"{a.checkpoint}: field {k} is {lines[0]['header'].get(k)!r}, the command says "
                    f"{header[k]!r} (resume with the command that wrote it)")
        done = {r["index"]: r for r in lines[1:]}
    elif a.checkpoint:
        with open(a.checkpoint, "w") as f:
            f.write(json.dumps({"header": header}) + "\n")
    import torch
    torch.set_num_threads(1)
    from tests.faithful import evaluate
    work = a.keep or tempfile.mkdtemp(prefix="faithful_captures.")
    os.makedirs(work, exist_ok=True)
    try:
        rows = study(a, evaluate, work, done)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    return report(a, rows)


def picked(variants, applicable, i, di, k):
    """The variants judged on capture i at dtype index di: all that apply, or k of them in rotation
    (a window of k consecutive, moving by k per capture of the scheme and by one per dtype, so that
    every variant meets every scheme, family and dtype)."""
    names = [name for name, *_ in variants if name in applicable]
    if k == 0 or len(names) <= k:
        return names
    start = (i * k + di) % len(names)
    return [names[(start + j) % len(names)] for j in range(k)]


def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def study(a, evaluate, work, done):
    variants = [v for v in VARIANTS if a.variants is None or v[0] in a.variants.split(",")]
    pin_shape = tuple(int(x) for x in a.shape.split(",")) if a.shape else None
    pin = {k: json.loads(v) for k, _, v in (kv.partition("=") for kv in a.set)}
    schemes = a.schemes.split(",")
    rows = []
    for i in range(a.captures):
        if a.indices is not None and i not in a.indices:
            continue
        if i in done:
            rows.append(done[i])
            continue
        c0 = cpu()
        rng = np.random.default_rng([a.seed, i])  # capture i is the same whatever ran before it (resume)
        # schemes in turn; within a scheme every --grad-every-th capture a backward one
        scheme, rnd = schemes[i % len(schemes)], i // len(schemes)
        grad = a.grad_every > 0 and rnd % a.grad_every == a.grad_every - 1
        cfg, tensors, in_dtype, wide, fam = capture(rng, scheme, grad, a.max_elements, pin_shape, pin, a.input_dtype)
        level = cfg.get("level", "kernel") + ("_grad" if grad else "")
        cid = f"capture.{scheme}.{level}.{i:05d}"
        base = os.path.join(work, f"{i:05d}")
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
        n = cfg.get("n", 1) if scheme in ("hc", "mhc") else 1
        row = {"index": i, "id": cid, "scheme": scheme, "family": fam, "kind": "grad" if grad else "fwd",
               "config": cfg, "input_dtype": in_dtype, "inputs": wide,
               "elements": cfg["tokens"] * cfg["layers"] * cfg["d"] * n, "certify_s": round(cert, 2), "verdicts": []}
        if p.returncode != 0:
            row["not_certified"] = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
            print(f"{cid}: dmref run exit {p.returncode}: {row['not_certified']}", flush=True)
        else:
            case = df.load_case(base + ".golden.safetensors")
            for di, dt in enumerate(DTYPES):
                no_bound = tolerance_rule(case.file, dt).no_bound  # the recipe overflows: no bounds, the reason
                if not isinstance(case.baselines.get(dt), dict) or no_bound:  # the reference refuses this dtype
                    row["verdicts"].append({"dtype": dt, "refused": no_bound or "no baseline"})
                    continue
                applicable = {name for name, _, _, applies in variants if applies(scheme, cid, cfg, dt)}
                for name in picked(variants, applicable, rnd, di, a.variants_per_dtype):
                    knobs = next(v[1] for v in variants if v[0] == name)
                    out = evaluate.run(scheme, case.file.tensors, cfg, dt, knobs, grad=grad)
                    v = df.check(out, case, dt)
                    if v.checked == 0 and v.not_judged:  # the recipe judges none of its tensors (ill-conditioned)
                        row["verdicts"].append({"dtype": dt, "refused": "not judged: " + v.not_judged[0][1]})
                        break
                    row["verdicts"].append({"dtype": dt, "variant": name, "passed": v.passed, "worst": v.worst_ratio,
                                            "failed": v.failed, "checked": v.checked})
            for f_ in os.listdir(work):
                if f_.startswith(f"{i:05d}.") and not a.keep:
                    os.remove(os.path.join(work, f_))
        row["cpu_s"] = round(cpu() - c0, 2)
        if a.checkpoint:
            with open(a.checkpoint, "a") as f:
                f.write(json.dumps(row) + "\n")
                f.flush()
                os.fsync(f.fileno())
        rows.append(row)
        nbad = sum(1 for v in row["verdicts"] if v.get("passed") is False and v.get("checked") != 0)
        worst = max([v["worst"] for v in row["verdicts"] if "worst" in v] or [0.0])
        print(f"{cid}: {fam} d={cfg['d']} L={cfg['layers']} T={cfg['tokens']} {in_dtype} {wide}: certified in "
              f"{cert:.1f} s, {row['cpu_s']:.1f} s CPU; {len(row['verdicts'])} verdicts, worst {worst:.2g}, "
              f"{nbad} false rejects", flush=True)
    return rows


def summarize(rows):
    """Per (scheme, dtype, kind): captures judged, variant runs, false rejects, captures with one,
    worst err/tol and where; per (scheme, family): captures; and the CPU time."""
    per, fams = {}, {}
    for r in rows:
        fams[(r["scheme"], r["family"])] = fams.get((r["scheme"], r["family"]), 0) + 1
        for v in r["verdicts"]:
            if "variant" not in v or v.get("checked") == 0:  # refused, or nothing judged (a refusal)
                continue
            s = per.setdefault((r["scheme"], v["dtype"], r["kind"]), {"captures": set(), "runs": 0, "rejects": 0,
                                                                       "rejected_captures": set(), "worst": 0.0,
                                                                       "worst_at": ""})
            s["captures"].add(r["id"])
            s["runs"] += 1
            if not v["passed"]:
                s["rejects"] += 1
                s["rejected_captures"].add(r["id"])
            if v["worst"] >= s["worst"]:
                c = r["config"]
                s["worst"], s["worst_at"] = v["worst"], (f"{v['variant']} on {r['id']} ({r['family']}, d {c['d']}, "
                                                         f"L {c['layers']}, T {c['tokens']}, {r['input_dtype']} inputs, "
                                                         f"{r['inputs']})")
    return per, fams


def refusals(rows):
    """(capture, dtype) pairs the gate refuses to judge: no bounds, or nothing judgeable."""
    return len({(r["id"], v["dtype"]) for r in rows for v in r["verdicts"] if "refused" in v or v.get("checked") == 0})


def table(a, rows):
    """The study table of docs/fixtures.md: per scheme, captures and CPU; per dtype and fwd/grad,
    captures with a false reject / captures judged, worst err/tol."""
    per, fams = summarize(rows)
    schemes = a.schemes.split(",")
    cpu_s = sum(r.get("cpu_s", 0.0) for r in rows)
    runs = sum(s["runs"] for s in per.values())
    rejects = sum(s["rejects"] for s in per.values())
    out = [f"{len(rows)} captures (seed {a.seed}, `--max-elements {a.max_elements}`, "
           f"`--variants-per-dtype {a.variants_per_dtype}`), {runs} variant runs, **{rejects} false rejects**; "
           f"{cpu_s:.0f} s of CPU (the study's process and its `dmref run` children). Cell: captures with a false "
           f"reject / captures judged, worst err/tol. "
           f"{refusals(rows)} (capture, dtype) pairs refused: no bounds, or no tensor the recipe can judge "
           f"(docs/precision.md).\n\n"]
    def spread(key, big):
        x = sorted(r["config"][key] for r in rows)
        return (f"{x[0]}-{x[-1]} (median {x[len(x) // 2]}; {sum(1 for v in x if v >= big)} captures "
                f"at {big} or more)")
    el = sorted(r["elements"] for r in rows)
    out.append(f"Shapes drawn: width {spread('d', 256)}, depth {spread('layers', 24)}, tokens {spread('tokens', 32)}; "
               f"stream elements median {el[len(el) // 2]}, largest {el[-1]}; "
               f"{sum(1 for r in rows if r['config'].get('level') == 'model')} model-level captures, "
               f"{sum(1 for r in rows if r['inputs'] != 'documented')} with the wider input distributions.\n\n")
    cols = [f"{k} {d}" for k in ("fwd", "grad") for d in DTYPES]
    out.append("| scheme | captures | CPU s | " + " | ".join(cols) + " |\n")
    out.append("| --- " * (len(cols) + 3) + "|\n")
    for sch in schemes:
        mine = [r for r in rows if r["scheme"] == sch]
        if not mine:
            continue
        fam = ", ".join(f"{f} {c}" for (s_, f), c in sorted(fams.items()) if s_ == sch and f != sch)
        cells = []
        for k in ("fwd", "grad"):
            for d in DTYPES:
                s = per.get((sch, d, k))
                cells.append("-" if s is None else f"{len(s['rejected_captures'])}/{len(s['captures'])}, {s['worst']:.2g}")
        out.append(f"| `{sch}` | {len(mine)}{' (' + fam + ')' if fam else ''} | "
                   f"{sum(r.get('cpu_s', 0.0) for r in mine):.0f} | " + " | ".join(cells) + " |\n")
    rej = {}
    for r in rows:
        for v in r["verdicts"]:
            if v.get("passed") is False and v.get("checked") != 0:
                k = (r["scheme"], r["config"].get("level", "kernel"), r["kind"], v["variant"])
                e = rej.setdefault(k, {"runs": 0, "captures": set(), "dtypes": set(), "worst": 0.0, "at": ""})
                e["runs"] += 1
                e["captures"].add(r["index"])
                e["dtypes"].add(v["dtype"])
                if v["worst"] >= e["worst"]:
                    e["worst"], e["at"] = v["worst"], r["id"]
    if rej:
        out.append("\nFalse rejects by scheme, level, kind and variant: runs (captures), dtypes, worst err/tol and where:\n\n")
        for (sch, lev, kind, var), e in sorted(rej.items()):
            out.append(f"- `{sch}` {lev} {kind}, `{var}`: {e['runs']} ({len(e['captures'])}), "
                       f"{', '.join(d for d in DTYPES if d in e['dtypes'])}, {e['worst']:.3g} on {e['at']}\n")
    out.append("\nWorst err/tol per scheme and where:\n\n")
    for sch in schemes:
        mine = [(s["worst"], s["worst_at"], d, k) for (s_, d, k), s in per.items() if s_ == sch]
        if mine:
            w, at, d, k = max(mine)
            out.append(f"- `{sch}`: {w:.3g} ({k} {d}): {at}\n")
    return "".join(out)


BEGIN, END = "<!-- captures:begin (generated by bench/faithful_captures.py --docs, do not edit) -->\n", "<!-- captures:end -->"


def report(a, rows):
    per, _ = summarize(rows)
    text = table(a, rows)
    print("\n" + text)
    if a.json:
        with open(a.json + ".tmp", "w") as f:
            json.dump({"header": {k: getattr(a, k) for k in DRAW}, "captures": len(rows),
                       "cpu_s": sum(r.get("cpu_s", 0.0) for r in rows),
                       "summary": [{"key": list(k), "captures": len(s["captures"]), "runs": s["runs"],
                                    "rejects": s["rejects"], "rejected_captures": len(s["rejected_captures"]),
                                    "worst": s["worst"], "worst_at": s["worst_at"]} for k, s in sorted(per.items())]},
                      f, indent=1)
        os.replace(a.json + ".tmp", a.json)
    if a.docs:
        with open(a.docs, encoding="utf-8") as f:
            doc = f.read()
        i, j = doc.find(BEGIN), doc.find(END)
        if i < 0 or j < i:
            print(f"{a.docs}: no captures:begin/end markers", file=sys.stderr)
            return 2
        with open(a.docs + ".tmp", "w", encoding="utf-8") as f:
            f.write(doc[:i + len(BEGIN)] + text + doc[j:])
        os.replace(a.docs + ".tmp", a.docs)
    missing = [r["id"] for r in rows if "not_certified" in r]
    rejected = [r["id"] for r in rows if any(v.get("passed") is False and v.get("checked") != 0 for v in r["verdicts"])]
    if missing:  # the study is incomplete: say so in the exit status
        print(f"{len(missing)} captures not certified: {', '.join(missing)}", file=sys.stderr)
    if rejected:  # every variant is correct: a reject is the gate failing a correct kernel
        print(f"{len(rejected)} captures with a false reject: {', '.join(rejected)}", file=sys.stderr)
    return 1 if missing or rejected or not per else 0


if __name__ == "__main__":
    sys.exit(main())
