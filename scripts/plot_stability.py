#!/usr/bin/python3
"""Figures of the stability sweeps (docs/stability.md).

Usage: /usr/bin/python3 scripts/plot_stability.py DIR [--out OUTDIR]

Reads DIR/runs.csv and DIR/layers_<scheme>.csv written by `dmref stability`
(dmref/stability.hpp) and writes PNG figures to OUTDIR (default DIR). Needs
matplotlib (Debian: python3-matplotlib; scripts/deps installs it). Layers are
plotted 1-based; a cross marks the first layer whose state holds an inf or NaN.
"""
import argparse
import csv
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FORMS = ["naive", "symmetric", "joseph", "potter", "closed-form"]
FORM_STYLE = {
    "naive": dict(color="tab:red"),
    "symmetric": dict(color="tab:blue"),
    "joseph": dict(color="tab:orange"),
    "potter": dict(color="tab:green"),
    "closed-form": dict(color="tab:purple"),
}
DTYPE_STYLE = {
    "float64": dict(color="black"),
    "float32": dict(color="tab:blue"),
    "bfloat16": dict(color="tab:red"),
    "float16": dict(color="tab:orange"),
    "bf16-store": dict(color="tab:purple"),
    "fp16-store": dict(color="tab:green"),
}
DPI = 100


def fnum(s):
    if s in ("", None):
        return math.nan
    return float(s)


def load(d):
    runs = {}
    with open(os.path.join(d, "runs.csv")) as f:
        for r in csv.DictReader(f):
            r["samples"] = []
            runs[r["id"]] = r
    for scheme in ("ldm", "preln", "attnres", "mhc"):
        p = os.path.join(d, "layers_%s.csv" % scheme)
        if not os.path.exists(p):
            continue
        with open(p) as f:
            for r in csv.DictReader(f):
                run = runs[r["id"]]
                run["samples"].append({k: (int(v) if k == "layer" else fnum(v)) for k, v in r.items() if k != "id"})
    return list(runs.values())


def pick(runs, **kw):
    return [r for r in runs if all(r.get(k) == v for k, v in kw.items())]


def one(runs, **kw):
    s = pick(runs, **kw)
    return s[0] if s else None


def series(run, metric):
    xs, ys = [], []
    for s in run["samples"]:
        y = s.get(metric, math.nan)
        if math.isfinite(y) and y > 0:
            xs.append(s["layer"] + 1)
            ys.append(y)
    return xs, ys


def curve(ax, run, metric, label, style, top=None, ls="-"):
    if run is None:
        return
    xs, ys = series(run, metric)
    ax.plot(xs, ys, ls, label=label, lw=1.3, **style)
    nf = run.get("first_nonfinite", "")
    if nf != "" and top is not None:
        ax.plot([int(nf) + 1], [top], "x", ms=7, mew=2, **style)


def finish(fig, path, legend_ax=None, **kw):
    if legend_ax is not None:
        legend_ax.legend(fontsize=7, **kw)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    try:  # a 64-colour palette keeps line plots a third of the size (Pillow ships with matplotlib)
        from PIL import Image

        Image.open(path).convert("RGB").quantize(colors=64).save(path, optimize=True)
    except ImportError:
        pass
    print("wrote", path, "(%d KB)" % (os.path.getsize(path) // 1024))


def loglog(ax, top=1e3, bottom=1e-17):
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(bottom, top)
    ax.grid(True, which="major", lw=0.3)
    ax.tick_params(labelsize=7)


# ------------------------------------------------------------------ LDM
def ldm_forms(runs, out, dtypes, name, bottom):
    lambdas = sorted({r["lambda"] for r in pick(runs, scheme="ldm", sweep="forms")}, key=float)
    if not lambdas:
        return
    fig, axes = plt.subplots(len(dtypes), len(lambdas), figsize=(2.3 * len(lambdas), 1.9 * len(dtypes) + 0.4),
                             sharex=True, sharey=True, squeeze=False)
    for i, dt in enumerate(dtypes):
        for j, lam in enumerate(lambdas):
            ax = axes[i][j]
            for form in FORMS:
                curve(ax, one(runs, scheme="ldm", sweep="forms", form=form, dtype=dt, **{"lambda": lam}),
                      "err_readout", form, FORM_STYLE[form], top=1e2)
            loglog(ax, 1e3, bottom)
            ax.axhline(1e-3 if dt in ("float64", "float32") else 1e-1, color="gray", lw=0.6, ls=":")
            if i == 0:
                ax.set_title("lambda = %s" % lam, fontsize=9)
            if j == 0:
                ax.set_ylabel("%s\nreadout rel. error" % dt, fontsize=8)
            if i == len(dtypes) - 1:
                ax.set_xlabel("layer", fontsize=8)
    finish(fig, os.path.join(out, name), axes[0][0], loc="upper left")


def ldm_overflow(runs, out):
    """First inf/NaN layer against lambda, rank-deficient keys, with the wind-up predictions."""
    sel = pick(runs, scheme="ldm", sweep="keys", keys="rank-deficient")
    if not sel:
        return
    L = int(sel[0]["layers"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, dt, fmax, fmin in ((axes[0], "float32", 3.4028234663852886e38, 2.0 ** -149),
                               (axes[1], "float16", 65504.0, 2.0 ** -24)):
        lams = sorted({float(r["lambda"]) for r in sel})
        for form in FORMS:
            xs, ys = [], []
            for lam in lams:
                r = one(sel, form=form, dtype=dt, **{"lambda": "%g" % lam})
                if r is not None and r["first_nonfinite"] != "":
                    xs.append(lam)
                    ys.append(int(r["first_nonfinite"]) + 1)
            ax.plot(xs, ys, "o-", label=form, ms=5, **FORM_STYLE[form])
        grid = [0.5 + 0.005 * i for i in range(0, 99)]
        ax.plot(grid, [math.log(fmax) / -math.log(x) for x in grid], "k:", lw=1,
                label="alpha/prod(lambda) = max (P)")
        ax.plot(grid, [2 * math.log(fmax) / -math.log(x) for x in grid], "k--", lw=0.8,
                label="sqrt: 2 x that (Potter)")
        ax.plot(grid, [math.log(1 / fmin) / -math.log(x) for x in grid], "k-.", lw=0.8,
                label="prod(lambda)/alpha = min subnormal (R)")
        ax.set_yscale("log")
        ax.set_ylim(5, 2 * L)
        ax.axhline(L, color="gray", lw=0.6)
        ax.set_xlabel("lambda", fontsize=8)
        ax.set_title("%s, rank-deficient keys: first inf/NaN layer" % dt, fontsize=9)
        ax.grid(True, lw=0.3)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("layer", fontsize=8)
    finish(fig, os.path.join(out, "ldm_overflow.png"), axes[0], loc="lower right")


def ldm_keys(runs, out):
    """Readout error for collinear and rank-deficient keys, float32 and bf16-store."""
    sel = pick(runs, scheme="ldm", sweep="keys")
    if not sel:
        return
    lam = "0.9"
    fig, axes = plt.subplots(2, 2, figsize=(9, 6), sharex=True)
    for i, keys in enumerate(("collinear", "rank-deficient")):
        for j, dt in enumerate(("float32", "bf16-store")):
            ax = axes[i][j]
            for form in FORMS:
                curve(ax, one(sel, form=form, dtype=dt, keys=keys, **{"lambda": lam}), "err_readout", form,
                      FORM_STYLE[form], top=1e2)
            loglog(ax, 1e3, 1e-9 if dt == "float32" else 1e-5)
            ax.set_title("%s keys, lambda = %s, %s" % (keys, lam, dt), fontsize=9)
            ax.set_ylabel("readout rel. error", fontsize=8)
            if i == 1:
                ax.set_xlabel("layer", fontsize=8)
    finish(fig, os.path.join(out, "ldm_keys.png"), axes[0][0], loc="upper left")


def ldm_p(runs, out):
    """Asymmetry and smallest eigenvalue of P, random keys, lambda = 0.9."""
    sel = pick(runs, scheme="ldm", sweep="forms", **{"lambda": "0.9"})
    if not sel:
        return
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for form in FORMS:
        for dt, ls in (("float32", "-"), ("bfloat16", "--")):
            r = one(sel, form=form, dtype=dt)
            curve(axes[0], r, "asym_P", "%s, %s" % (form, dt), FORM_STYLE[form], ls=ls)
            curve(axes[2], r, "norm_P", "%s, %s" % (form, dt), FORM_STYLE[form], ls=ls)
            if r is not None:
                xs = [s["layer"] + 1 for s in r["samples"] if math.isfinite(s["mineig_P"])]
                ys = [s["mineig_P"] for s in r["samples"] if math.isfinite(s["mineig_P"])]
                axes[1].plot(xs, ys, ls, lw=1.3, **FORM_STYLE[form])
    loglog(axes[0], 1e1, 1e-10)
    axes[0].set_title("asymmetry ||P - P^T|| / ||P||", fontsize=9)
    axes[1].set_xscale("log")
    axes[1].set_yscale("symlog", linthresh=1e-6)
    axes[1].grid(True, lw=0.3)
    axes[1].tick_params(labelsize=7)
    axes[1].set_title("lambda_min(P) / |lambda|_max(P) (< 0: not definite)", fontsize=9)
    loglog(axes[2], 1e40, 1e-3)
    axes[2].set_title("||P||_2", fontsize=9)
    for ax in axes:
        ax.set_xlabel("layer (random keys, lambda = 0.9; solid float32, dashed bfloat16)", fontsize=7)
    finish(fig, os.path.join(out, "ldm_P.png"), axes[0], loc="lower right", ncol=1)


# ------------------------------------------------------------------ other schemes
def preln(runs, out):
    sel = pick(runs, scheme="preln")
    if not sel:
        return
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for ax, vals in zip(axes, ("random", "correlated")):
        for dt in ("float64", "float32", "bfloat16", "float16"):
            curve(ax, one(sel, dtype=dt, values=vals), "err_readout", dt, DTYPE_STYLE[dt], top=1e2)
        loglog(ax, 1e1, 1e-18)
        ax.set_title("PreLN, %s layer outputs" % vals, fontsize=9)
        ax.set_xlabel("layer", fontsize=8)
    axes[0].set_ylabel("rel. error of x (= h)", fontsize=8)
    finish(fig, os.path.join(out, "preln.png"), axes[0], loc="upper left")


def attnres(runs, out):
    sel = pick(runs, scheme="attnres")
    if not sel:
        return
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.3), sharey=True)
    k = 0
    for variant in ("full", "block"):
        for w in sorted({r["w"] for r in sel}, key=float):
            ax = axes[k]
            k += 1
            for dt in ("float64", "float32", "bfloat16", "float16", "bf16-store"):
                curve(ax, one(sel, variant=variant, w=w, dtype=dt), "err_readout", dt, DTYPE_STYLE[dt], top=1e2)
            loglog(ax, 1e1, 1e-18)
            r0 = one(sel, variant=variant, w=w)
            ax.set_title("AttnRes %s, logit sd %s" % (r0["form"], w), fontsize=9)
            ax.set_xlabel("layer", fontsize=8)
    axes[0].set_ylabel("readout rel. error", fontsize=8)
    finish(fig, os.path.join(out, "attnres.png"), axes[0], loc="upper left")


def mhc(runs, out):
    sel = pick(runs, scheme="mhc")
    if not sel:
        return
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    for ax, scale in zip(axes[:2], ("1", "16")):
        for dt in ("float64", "float32", "bfloat16", "float16", "bf16-store", "fp16-store"):
            curve(ax, one(sel, preset="paper", logit_scale=scale, dtype=dt), "err_readout", dt, DTYPE_STYLE[dt],
                  top=1e2)
        loglog(ax, 1e3, 1e-18)
        r0 = one(sel, preset="paper", logit_scale=scale)
        ax.set_title("mHC (paper), logit scale %s (max |logit| %s)" % (scale, r0["max_logit"] if r0 else "?"),
                     fontsize=9)
        ax.set_xlabel("layer", fontsize=8)
    axes[0].set_ylabel("readout rel. error", fontsize=8)
    # first non-finite layer against the largest logit
    ax = axes[2]
    paper = pick(sel, preset="paper")
    scales = sorted({r["logit_scale"] for r in paper}, key=float)
    L = int(paper[0]["layers"])
    for dt in ("float32", "bfloat16", "float16", "bf16-store"):
        xs, ys = [], []
        for s in scales:
            r = one(paper, logit_scale=s, dtype=dt)
            if r is None:
                continue
            xs.append(float(r["max_logit"]))
            ys.append(int(r["first_nonfinite"]) + 1 if r["first_nonfinite"] != "" else 2 * L)
        ax.plot(xs, ys, "o-", label=dt, **DTYPE_STYLE[dt])
    for lim, txt in ((88.72, "exp overflow, float32/bfloat16"), (11.09, "exp overflow, float16")):
        ax.axvline(lim, color="gray", lw=0.7, ls=":")
        ax.text(lim, 3, " " + txt, fontsize=6, rotation=90, va="bottom")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(0.7, 4 * L)
    ax.axhline(L, color="gray", lw=0.6)
    ax.set_xlabel("largest |logit| of the 257-bit run", fontsize=8)
    ax.set_ylabel("first inf/NaN layer (top: none)", fontsize=8)
    ax.set_title("mHC (paper preset): exp overflow", fontsize=9)
    ax.grid(True, lw=0.3)
    ax.tick_params(labelsize=7)
    finish(fig, os.path.join(out, "mhc.png"), axes[0], loc="upper left")


def schemes(runs, out):
    """The schemes side by side, float32 and 16-bit storage."""
    picks = [
        ("PreLN (random v)", dict(scheme="preln", values="random")),
        ("AttnRes full, logit sd 3", dict(scheme="attnres", variant="full", w="3")),
        ("AttnRes block, logit sd 3", dict(scheme="attnres", variant="block", w="3")),
        ("mHC paper, logit scale 4", dict(scheme="mhc", preset="paper", logit_scale="4")),
        ("LDM symmetric, lambda 0.9", dict(scheme="ldm", sweep="forms", form="symmetric", **{"lambda": "0.9"})),
        ("LDM Potter, lambda 0.9", dict(scheme="ldm", sweep="forms", form="potter", **{"lambda": "0.9"})),
    ]
    colors = ["black", "tab:orange", "tab:brown", "tab:green", "tab:blue", "tab:purple"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.5), sharey=True)
    for ax, dts in zip(axes, (("float32",), ("bfloat16",), ("bf16-store", "bfloat16"))):
        for (label, kw), c in zip(picks, colors):
            r = None
            for dt in dts:  # first dtype the scheme was run in
                r = one(runs, dtype=dt, **kw)
                if r is not None:
                    break
            if r is not None:
                curve(ax, r, "err_readout", label + ("" if r["dtype"] == dts[0] else " (%s)" % r["dtype"]),
                      dict(color=c), top=1e1)
        loglog(ax, 1e2, 1e-9)
        ax.set_title(dts[0], fontsize=9)
        ax.set_xlabel("layer", fontsize=8)
    axes[0].set_ylabel("readout rel. error", fontsize=8)
    finish(fig, os.path.join(out, "schemes.png"), axes[2], loc="lower right")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="directory written by dmref stability")
    ap.add_argument("--out", help="where to write the PNGs (default: dir)")
    a = ap.parse_args()
    out = a.out or a.dir
    os.makedirs(out, exist_ok=True)
    runs = load(a.dir)
    if not runs:
        sys.exit("plot_stability: no runs in %s/runs.csv" % a.dir)
    ldm_forms(runs, out, ["float64", "float32"], "ldm_forms_32.png", 1e-17)
    ldm_forms(runs, out, ["bfloat16", "float16", "bf16-store", "fp16-store"], "ldm_forms_16.png", 1e-5)
    ldm_overflow(runs, out)
    ldm_keys(runs, out)
    ldm_p(runs, out)
    preln(runs, out)
    attnres(runs, out)
    mhc(runs, out)
    schemes(runs, out)


if __name__ == "__main__":
    main()
