#!/usr/bin/python3
"""Figures of the stability sweeps (docs/stability.md).

Usage: /usr/bin/python3 scripts/plot_stability.py DIR [--out OUTDIR]

Reads DIR/runs.csv and DIR/layers_<scheme>.csv (or .csv.xz) written by `dmref stability`
(dmref/stability.hpp; layers counted from 1) and writes PNG figures to OUTDIR
(default DIR). Needs matplotlib and numpy (Debian: python3-matplotlib,
python3-numpy; scripts/deps installs them).

Every configuration is drawn several times (column `seed`): a line is the
median over the draws at each sampled layer and the shaded band the 10th to
90th percentile (a draw whose state went inf/NaN counts as +inf from then on,
and a cross marks the median first inf/NaN layer). Log axes cannot show an
error of exactly 0: a series that is 0 (float64 on exact inputs) is drawn on
the bottom edge and said so in the legend. Dotted grey lines are the
thresholds whose first crossing the report tabulates.
"""
import argparse
import csv
import lzma
import math
import os
import sys

import numpy as np
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FORMS = ["naive", "symmetric", "joseph", "potter", "inverse-qr", "qr", "ud", "closed-form"]
FORM_STYLE = {
    "naive": dict(color="tab:red"),
    "symmetric": dict(color="tab:blue"),
    "joseph": dict(color="tab:orange"),
    "potter": dict(color="tab:green"),
    "inverse-qr": dict(color="tab:brown"),
    "qr": dict(color="tab:pink"),
    "ud": dict(color="tab:cyan"),
    "closed-form": dict(color="tab:purple"),
}
DTYPE_STYLE = {
    "float64": dict(color="black"),
    "float32": dict(color="tab:blue"),
    "bfloat16": dict(color="tab:red"),
    "float16": dict(color="tab:orange"),
    "bf16:f32": dict(color="tab:purple"),
    "f16:f32": dict(color="tab:green"),
    "bf16:f32/x": dict(color="tab:olive"),
    "bf16:f32/M": dict(color="tab:cyan"),
    "bf16:f32/P": dict(color="tab:brown"),
    "bf16:f32/S": dict(color="tab:pink"),
}
DPI = 100
PANEL_W, PANEL_H = 5.2, 3.6  # inches: 520 x 360 px per panel at DPI
BIG = 1e300  # +inf stands in as this in percentiles
NOT_GROUPED = ("id", "seed", "max_logit", "samples", "first_nonfinite", "first_over_1e-3", "first_over_1e-2",
               "first_over_1e-1", "err_final", "err_max", "ref_check", "note")


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
    for scheme in ("ldm", "preln", "attnres", "mhc", "sinkhorn", "gradients"):
        p = os.path.join(d, "layers_%s.csv" % scheme)
        if os.path.exists(p):
            f = open(p)
        elif os.path.exists(p + ".xz"):  # as committed under docs/img/stability (xz -9e)
            f = lzma.open(p + ".xz", "rt")
        else:
            continue
        with f:
            for r in csv.DictReader(f):
                runs[r["id"]]["samples"].append(
                    {k: (int(v) if k == "layer" else fnum(v)) for k, v in r.items() if k != "id"})
    return list(runs.values())


def pick(runs, **kw):
    return [r for r in runs if all(r.get(k) == v for k, v in kw.items())]


def group_key(r):
    return tuple(sorted((k, v) for k, v in r.items() if k not in NOT_GROUPED and not k.startswith("alarm_")))


def stats(group, metric, dead=BIG):
    """Layers and the 10th, 50th, 90th percentiles of `metric` over the draws of one configuration
    (a draw counts as `dead` from its first inf/NaN layer on)."""
    layers = sorted({s["layer"] for r in group for s in r["samples"]})
    if not layers:
        return None
    per = []
    for r in group:
        by = {s["layer"]: s.get(metric, math.nan) for s in r["samples"]}
        nf = int(r["first_nonfinite"]) if r["first_nonfinite"] != "" else None
        row = []
        for l in layers:
            if l in by:
                y = by[l]
                row.append(dead if (math.isinf(y) or (math.isnan(y) and nf is not None and l >= nf)) else y)
            elif nf is not None and l >= nf:
                row.append(dead)
            else:
                row.append(math.nan)
        per.append(row)
    a = np.array(per, dtype=float)
    ok = ~np.all(np.isnan(a), axis=0)
    if not ok.any():
        return None
    a = a[:, ok]
    q = np.nanpercentile(a, [10, 50, 90], axis=0)
    return np.array(layers)[ok], q


def curve(ax, runs, metric, label, style, top, bottom, ls="-", band=True, **kw):
    """Median line (and 10-90% band) of the draws in `runs` matching kw; returns whether it drew anything."""
    group = pick(runs, **kw)
    if not group:
        return False
    st = stats(group, metric)
    if st is None:
        return False
    xs, q = st
    zero = bool(np.all(q[1] == 0))
    lo, med, hi = (np.clip(np.where(v <= 0, bottom, v), bottom, top) for v in q)
    if zero and not label.startswith("_"):
        label += " (exactly 0: on the bottom edge)"
    ax.plot(xs, med, ls, lw=1.4, label=label, **style)
    if band and len(group) > 1:
        ax.fill_between(xs, lo, hi, alpha=0.18, lw=0, **style)
    nfs = [int(r["first_nonfinite"]) for r in group if r["first_nonfinite"] != ""]
    if len(nfs) * 2 > len(group):
        ax.plot([float(np.median(nfs))], [top / 3], "x", ms=7, mew=2, **style)
    return True


def loglog(ax, top, bottom):
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(bottom, top)
    ax.grid(True, which="major", lw=0.3)
    ax.tick_params(labelsize=8)


def threshold(ax, y, text):
    ax.axhline(y, color="gray", lw=0.8, ls=":")
    ax.annotate(text, xy=(1, y), xycoords=("axes fraction", "data"), xytext=(-3, 2), textcoords="offset points",
                ha="right", va="bottom", fontsize=7, color="dimgray")


def thr_of(dt):
    return (1e-3, "1e-3") if dt in ("float64", "float32") else (1e-1, "10%")


def finish(fig, path, handles_from=None, ncol=4):
    if handles_from is not None:
        seen = {}
        for ax in handles_from:
            for h, l in zip(*ax.get_legend_handles_labels()):
                seen.setdefault(l, h)
        fig.legend(list(seen.values()), list(seen.keys()), loc="lower center", ncol=ncol, fontsize=8, frameon=False)
        rows = (len(seen) + ncol - 1) // ncol
        fig.tight_layout(rect=(0, min(0.4, 0.035 * rows + 0.2 / fig.get_size_inches()[1]), 1,
                               1 - 0.3 / fig.get_size_inches()[1]))  # room for the suptitle
    else:
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / fig.get_size_inches()[1]))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    try:  # a 64-colour palette keeps line plots a third of the size (Pillow ships with matplotlib)
        from PIL import Image

        Image.open(path).convert("RGB").quantize(colors=64).save(path, optimize=True)
    except ImportError:
        pass
    print("wrote", path, "(%d KB)" % (os.path.getsize(path) // 1024))


def caption(runs):
    seeds = sorted({r["seed"] for r in runs if r.get("seed", "") != ""})
    return "median of %d draws, band 10th-90th percentile" % len(seeds) if len(seeds) > 1 else "one draw"


# ------------------------------------------------------------------ LDM
def ldm_forms(runs, out, dtypes, name, bottom):
    sel = pick(runs, scheme="ldm", sweep="forms")
    lambdas = sorted({r["lambda"] for r in sel}, key=float)
    if not lambdas:
        return
    fig, axes = plt.subplots(len(dtypes), len(lambdas), figsize=(PANEL_W * len(lambdas), PANEL_H * len(dtypes) + 0.9),
                             sharex=True, sharey=True, squeeze=False)
    for i, dt in enumerate(dtypes):
        for j, lam in enumerate(lambdas):
            ax = axes[i][j]
            for form in FORMS:
                curve(ax, sel, "err_readout", form, FORM_STYLE[form], 1e3, bottom, form=form, dtype=dt,
                      **{"lambda": lam})
            loglog(ax, 1e3, bottom)
            threshold(ax, *thr_of(dt))
            ax.set_title("%s, lambda = %s" % (dt, lam), fontsize=10)
            if j == 0:
                ax.set_ylabel("readout rel. error ||Mq - (Mq)*|| / ||(Mq)*||", fontsize=8)
            if i == len(dtypes) - 1:
                ax.set_xlabel("layer", fontsize=9)
    fig.suptitle("LDM (RLS), random keys, G = 2, dk = dv = 32: %s; x = median first inf/NaN layer" % caption(sel),
                 fontsize=11)
    finish(fig, os.path.join(out, name), axes.flat, ncol=8)


def ldm_storage(runs, out):
    """The practitioner's question: which state may be bfloat16 (float32 arithmetic)."""
    sel = pick(runs, scheme="ldm", sweep="forms")
    lambdas = [l for l in ("0.9", "0.99", "1") if pick(sel, **{"lambda": l})]
    if not lambdas:
        return
    dts = ["float32", "bf16:f32/x", "bf16:f32/M", "bf16:f32/P", "bf16:f32"]
    forms = ["symmetric", "potter", "inverse-qr", "ud"]
    fig, axes = plt.subplots(len(lambdas), len(forms), figsize=(PANEL_W * len(forms), PANEL_H * len(lambdas) + 0.8),
                             sharex=True, sharey=True, squeeze=False)
    for i, lam in enumerate(lambdas):
        for j, form in enumerate(forms):
            ax = axes[i][j]
            for dt in dts:
                curve(ax, sel, "err_readout", dt, DTYPE_STYLE[dt], 1e3, 1e-8, form=form, dtype=dt, **{"lambda": lam})
            loglog(ax, 1e3, 1e-8)
            threshold(ax, 1e-1, "10%")
            threshold(ax, 1e-2, "1%")
            ax.set_title("%s, lambda = %s" % (form, lam), fontsize=10)
            if j == 0:
                ax.set_ylabel("readout rel. error", fontsize=9)
            if i == len(lambdas) - 1:
                ax.set_xlabel("layer", fontsize=9)
    fig.suptitle("LDM: float32 arithmetic, one state stored in bfloat16 (x: residual stream; M: memory; "
                 "P: P or its factor); %s" % caption(sel), fontsize=11)
    finish(fig, os.path.join(out, "ldm_storage.png"), axes.flat, ncol=5)


def ldm_overflow(runs, out):
    """First inf/NaN layer against lambda, rank-deficient keys, with the wind-up predictions."""
    sel = pick(runs, scheme="ldm", sweep="keys", keys="rank-deficient")
    if not sel:
        return
    L = int(sel[0]["layers"])
    fig, axes = plt.subplots(1, 2, figsize=(2 * PANEL_W + 1, PANEL_H + 1.2), sharey=True)
    for ax, dt, fmax, fmin in ((axes[0], "float32", 3.4028234663852886e38, 2.0 ** -149),
                               (axes[1], "float16", 65504.0, 2.0 ** -24)):
        lams = sorted({float(r["lambda"]) for r in sel})
        for form in FORMS:
            xs, ys = [], []
            for lam in lams:
                g = pick(sel, form=form, dtype=dt, **{"lambda": "%g" % lam})
                nfs = [int(r["first_nonfinite"]) for r in g if r["first_nonfinite"] != ""]
                if g and len(nfs) * 2 > len(g):
                    xs.append(lam)
                    ys.append(float(np.median(nfs)))
            ax.plot(xs, ys, "o-", label=form, ms=5, **FORM_STYLE[form])
        grid = [0.5 + 0.005 * i for i in range(0, 99)]
        ax.plot(grid, [math.log(fmax) / -math.log(x) for x in grid], "k:", lw=1,
                label="predicted: alpha / prod(lambda) = max (P)")
        ax.plot(grid, [2 * math.log(fmax) / -math.log(x) for x in grid], "k--", lw=0.8,
                label="predicted: twice that (a square-root factor)")
        ax.plot(grid, [math.log(1 / fmin) / -math.log(x) for x in grid], "k-.", lw=0.8,
                label="predicted: prod(lambda) / alpha = min subnormal (R, C)")
        ax.set_yscale("log")
        ax.set_ylim(5, 2 * L)
        ax.axhline(L, color="gray", lw=0.6)
        ax.annotate("L = %d (points above: none)" % L, xy=(0.02, L), xycoords=("axes fraction", "data"),
                    fontsize=7, va="bottom", color="dimgray")
        ax.set_xlabel("lambda", fontsize=9)
        ax.set_title("%s, rank-deficient keys: median first inf/NaN layer" % dt, fontsize=10)
        ax.grid(True, lw=0.3)
        ax.tick_params(labelsize=8)
    axes[0].set_ylabel("layer", fontsize=9)
    finish(fig, os.path.join(out, "ldm_overflow.png"), axes, ncol=4)


def ldm_keys(runs, out):
    """Readout error for collinear and rank-deficient keys, float32 and bf16:f32."""
    sel = pick(runs, scheme="ldm", sweep="keys")
    if not sel:
        return
    lam = "0.9"
    fig, axes = plt.subplots(2, 2, figsize=(2 * PANEL_W, 2 * PANEL_H + 1.0), sharex=True)
    for i, keys in enumerate(("collinear", "rank-deficient")):
        for j, dt in enumerate(("float32", "bf16:f32")):
            ax = axes[i][j]
            bottom = 1e-9 if dt == "float32" else 1e-5
            for form in FORMS:
                curve(ax, sel, "err_readout", form, FORM_STYLE[form], 1e3, bottom, form=form, dtype=dt, keys=keys,
                      **{"lambda": lam})
            loglog(ax, 1e3, bottom)
            threshold(ax, *thr_of(dt))
            ax.set_title("%s keys, lambda = %s, %s" % (keys, lam, dt), fontsize=10)
            ax.set_ylabel("readout rel. error", fontsize=9)
            if i == 1:
                ax.set_xlabel("layer", fontsize=9)
    fig.suptitle("LDM, G = 2, dk = 32: %s" % caption(sel), fontsize=11)
    finish(fig, os.path.join(out, "ldm_keys.png"), axes.flat, ncol=8)


def ldm_p(runs, out):
    """Asymmetry, smallest eigenvalue and condition number of P, random keys, lambda = 0.9."""
    sel = pick(runs, scheme="ldm", sweep="forms", **{"lambda": "0.9"})
    if not sel:
        return
    fig, axes = plt.subplots(1, 3, figsize=(3 * PANEL_W, PANEL_H + 1.3))
    for form in ("naive", "symmetric", "joseph", "potter", "inverse-qr", "closed-form"):
        for dt, ls in (("float32", "-"), ("bf16:f32", "--")):
            lab = "%s, %s" % (form, dt)
            curve(axes[0], sel, "asym_P", "_" + lab, FORM_STYLE[form], 1e1, 1e-10, ls=ls, band=False, form=form,
                  dtype=dt)
            g = pick(sel, form=form, dtype=dt)
            st = stats(g, "mineig_P", dead=math.nan)
            if st is not None:
                axes[1].plot(st[0], st[1][1], ls, lw=1.3, **FORM_STYLE[form])
            curve(axes[2], sel, "cond_P", lab, FORM_STYLE[form], 1e8, 1, ls=ls, band=False, form=form, dtype=dt)
    curve(axes[2], sel, "cond_P_ref", "exact P (257 bits)", dict(color="black"), 1e8, 1, ls=":", band=False,
          form="symmetric", dtype="float32")
    loglog(axes[0], 1e1, 1e-10)
    axes[0].set_title("asymmetry ||P - P^T|| / ||P|| (symmetric, Potter, inverse QR: exactly 0, not drawn)",
                      fontsize=9)
    axes[1].set_xscale("log")
    axes[1].set_yscale("symlog", linthresh=1e-6)
    axes[1].set_ylim(-1.1, 1.1)
    axes[1].axhline(0, color="gray", lw=0.8, ls=":")
    axes[1].grid(True, lw=0.3)
    axes[1].tick_params(labelsize=8)
    axes[1].set_title("lambda_min(P) / |lambda|_max(P) (below the dotted 0: not definite)", fontsize=9)
    loglog(axes[2], 1e8, 1)
    axes[2].set_title("cond(P) (top edge: P not positive definite)", fontsize=9)
    for ax in axes:
        ax.set_xlabel("layer", fontsize=9)
    fig.suptitle("LDM P, random keys, lambda = 0.9, G = 2, dk = 32; solid float32, dashed bf16:f32; median of "
                 "the draws", fontsize=11)
    finish(fig, os.path.join(out, "ldm_P.png"), [axes[2]], ncol=5)


def ldm_cond(runs, out):
    """cond(P) of the exact P over depth (dk = 32, every lambda) and against dk log10(1/lambda), with the fit."""
    forms = pick(runs, scheme="ldm", sweep="forms", form="symmetric", dtype="float64")
    cd = pick(runs, scheme="ldm", sweep="cond")
    if not forms and not cd:
        return
    fig, axes = plt.subplots(1, 2, figsize=(2 * PANEL_W + 1, PANEL_H + 1.0))
    cmap = plt.get_cmap("viridis")
    lams = sorted({r["lambda"] for r in forms}, key=float)
    for i, lam in enumerate(lams):
        curve(axes[0], forms, "cond_P_ref", "lambda = %s" % lam, dict(color=cmap(i / max(1, len(lams) - 1))), 1e16, 1,
              **{"lambda": lam})
    loglog(axes[0], 1e16, 1)
    axes[0].set_title("cond(P) of the exact P over depth, G = 2, dk = 32 (%s)" % caption(forms), fontsize=9)
    axes[0].set_xlabel("layer", fontsize=9)
    axes[0].set_ylabel("cond(P)", fontsize=9)
    axes[0].legend(fontsize=8, loc="upper left")
    xs, ys, cs = [], [], []
    dks = sorted({int(r["dk"]) for r in cd})
    for r in cd:
        last = [s for s in r["samples"] if s["layer"] == int(r["layers"])]
        if last and math.isfinite(last[0]["cond_P_ref"]) and last[0]["cond_P_ref"] > 0:
            xs.append(int(r["dk"]) * math.log10(1 / float(r["lambda"])))
            ys.append(math.log10(last[0]["cond_P_ref"]))
            cs.append(dks.index(int(r["dk"])))
    ax = axes[1]
    if xs:
        sc = ax.scatter(xs, ys, c=cs, cmap="plasma", s=14)
        b, a = np.polyfit(xs, ys, 1)
        g = np.linspace(0, max(xs), 50)
        ax.plot(g, a + b * g, "k-", lw=1, label="fit: log10 cond = %.2f + %.2f dk log10(1/lambda)" % (a, b))
        ax.plot(g, g, "k:", lw=1, label="old rule cond = lambda^-dk")
        handles = [plt.Line2D([], [], marker="o", ls="", color=sc.cmap(sc.norm(i))) for i in range(len(dks))]
        ax.legend(handles + ax.get_legend_handles_labels()[0],
                  ["dk = %d" % d for d in dks] + ax.get_legend_handles_labels()[1], fontsize=7, loc="upper left")
    ax.set_xlabel("dk log10(1 / lambda)", fontsize=9)
    ax.set_ylabel("log10 cond(P) after the last layer", fontsize=9)
    L = cd[0]["layers"] if cd else "?"
    ax.set_title("cond(P) after layer %s, one group, lambda 0.5 to 0.99 (every draw)" % L, fontsize=9)
    ax.grid(True, lw=0.3)
    finish(fig, os.path.join(out, "ldm_cond.png"))


def ldm_scale(runs, out):
    sel = pick(runs, scheme="ldm", sweep="scale")
    if not sel:
        return
    shapes = sorted({(int(r["G"]), int(r["dk"])) for r in sel}, key=lambda s: s[1])
    fig, axes = plt.subplots(2, len(shapes), figsize=(PANEL_W * len(shapes), 2 * PANEL_H + 1.0), sharex=True,
                             squeeze=False)
    for j, (G, dk) in enumerate(shapes):
        for i, dt in enumerate(("float32", "bf16:f32/P")):
            ax = axes[i][j]
            bottom = 1e-9 if dt == "float32" else 1e-5
            for form in FORMS:
                curve(ax, sel, "err_readout", form, FORM_STYLE[form], 1e3, bottom, form=form, dtype=dt, G=str(G),
                      dk=str(dk), **{"lambda": "0.9"})
            loglog(ax, 1e3, bottom)
            threshold(ax, *thr_of(dt))
            ax.set_title("G = %d, dk = dv = %d, lambda = 0.9, %s" % (G, dk, dt), fontsize=10)
            if j == 0:
                ax.set_ylabel("readout rel. error", fontsize=9)
            if i == 1:
                ax.set_xlabel("layer", fontsize=9)
    fig.suptitle("LDM at scale: %s" % caption(sel), fontsize=11)
    finish(fig, os.path.join(out, "ldm_scale.png"), axes.flat, ncol=8)


def ldm_detectors(runs, out):
    """Readout error with the median firing layer of each detector marked (P-based forms)."""
    cases = [("float32", "0.5"), ("float32", "0.7"), ("bf16:f32", "0.9"), ("bf16:f32/P", "0.9")]
    sel = pick(runs, scheme="ldm", sweep="forms")
    if not sel:
        return
    alarms = [k[len("alarm_"):] for k in sel[0] if k.startswith("alarm_")]
    marks = dict(zip(alarms, ["o", "s", "^", "D", "v"]))
    fig, axes = plt.subplots(1, len(cases), figsize=(PANEL_W * len(cases), PANEL_H + 1.2), sharey=True)
    for ax, (dt, lam) in zip(axes, cases):
        for form in ("naive", "symmetric", "joseph", "closed-form", "potter"):
            g = pick(sel, form=form, dtype=dt, **{"lambda": lam})
            if not curve(ax, sel, "err_readout", form, FORM_STYLE[form], 1e3, 1e-9, form=form, dtype=dt,
                         **{"lambda": lam}):
                continue
            st = stats(g, "err_readout")
            for a in alarms:
                fired = [int(r["alarm_" + a]) for r in g if r["alarm_" + a] != ""]
                if len(fired) * 2 > len(g):
                    x = float(np.median(fired))
                    y = float(np.interp(x, st[0], np.clip(st[1][1], 1e-9, 1e3)))
                    ax.plot([x], [y], marks[a], ms=7, mfc="none", mew=1.5, **FORM_STYLE[form])
        for a in alarms:
            ax.plot([], [], marks[a], color="black", mfc="none", label="detector %s fires (median layer)" % a)
        loglog(ax, 1e3, 1e-9)
        threshold(ax, *thr_of(dt))
        ax.set_title("%s, lambda = %s" % (dt, lam), fontsize=10)
        ax.set_xlabel("layer", fontsize=9)
    axes[0].set_ylabel("readout rel. error", fontsize=9)
    fig.suptitle("Detectors on the LDM state, random keys, dk = 32 (markers on the median error curve)", fontsize=11)
    finish(fig, os.path.join(out, "ldm_detectors.png"), axes, ncol=5)


def ldm_remedies(runs, out):
    """The remedies (dmref stability --only remedies) against exact RLS, with the inverse QR form beside them."""
    sel = pick(runs, scheme="ldm", sweep="remedies")
    if not sel:
        return
    cases = [("random", "float32", "0.5"), ("random", "float32", "0.7"), ("random", "bf16:f32", "0.9"),
             ("rank-deficient", "float32", "0.9")]
    variants = [("symmetric", "tab:blue"), ("symmetric+reset", "tab:red"), ("symmetric+trace-cap", "tab:orange"),
                ("symmetric+leakage", "tab:olive"), ("symmetric+directional", "tab:purple"), ("inverse-qr", "tab:brown")]
    fig, axes = plt.subplots(1, len(cases), figsize=(PANEL_W * len(cases), PANEL_H + 1.0), sharey=True)
    for ax, (keys, dt, lam) in zip(axes, cases):
        for form, c in variants:
            curve(ax, sel, "err_readout", form, dict(color=c), 1e3, 1e-8, form=form, dtype=dt, keys=keys,
                  **{"lambda": lam})
        loglog(ax, 1e3, 1e-8)
        threshold(ax, *thr_of(dt))
        ax.set_title("%s keys, %s, lambda = %s" % (keys, dt, lam), fontsize=10)
        ax.set_xlabel("layer", fontsize=9)
    axes[0].set_ylabel("readout rel. error against exact RLS", fontsize=9)
    fig.suptitle("LDM remedies, G = 2, dk = 32: %s; x = median first inf/NaN layer" % caption(sel), fontsize=11)
    finish(fig, os.path.join(out, "ldm_remedies.png"), axes, ncol=6)


# ------------------------------------------------------------------ other schemes
def preln(runs, out):
    sel = pick(runs, scheme="preln")
    if not sel:
        return
    fig, axes = plt.subplots(1, 2, figsize=(2 * PANEL_W, PANEL_H + 0.8), sharey=True)
    for ax, vals in zip(axes, ("random", "correlated")):
        for dt in ("float64", "float32", "bfloat16", "float16"):
            curve(ax, sel, "err_readout", dt, DTYPE_STYLE[dt], 1e1, 1e-18, dtype=dt, values=vals)
        loglog(ax, 1e1, 1e-18)
        threshold(ax, 1e-1, "10%")
        ax.set_title("PreLN, %s layer outputs" % vals, fontsize=10)
        ax.set_xlabel("layer", fontsize=9)
    axes[0].set_ylabel("rel. error of x (= h)", fontsize=9)
    fig.suptitle("PreLN, d = 256: %s" % caption(sel), fontsize=11)
    finish(fig, os.path.join(out, "preln.png"), axes)


def attnres(runs, out):
    sel = pick(runs, scheme="attnres")
    if not sel:
        return
    ws = sorted({r["w"] for r in sel}, key=float)
    fig, axes = plt.subplots(1, 2 * len(ws), figsize=(PANEL_W * 2 * len(ws), PANEL_H + 0.8), sharey=True)
    k = 0
    for variant in ("full", "block"):
        for w in ws:
            ax = axes[k]
            k += 1
            for dt in ("float64", "float32", "bfloat16", "float16", "bf16:f32", "bf16:f32/S"):
                curve(ax, sel, "err_readout", dt, DTYPE_STYLE[dt], 1e1, 1e-18, variant=variant, w=w, dtype=dt)
            loglog(ax, 1e1, 1e-18)
            threshold(ax, 1e-1, "10%")
            r0 = pick(sel, variant=variant, w=w)[0]
            ax.set_title("AttnRes %s, logit sd %s" % (r0["form"], w), fontsize=10)
            ax.set_xlabel("layer", fontsize=9)
    axes[0].set_ylabel("readout rel. error", fontsize=9)
    fig.suptitle("Attention Residuals, d = 64: %s (full AttnRes stores only its 16-bit inputs: bf16:f32 = float32)"
                 % caption(sel), fontsize=11)
    finish(fig, os.path.join(out, "attnres.png"), axes, ncol=5)


def mhc(runs, out):
    sel = pick(runs, scheme="mhc")
    if not sel:
        return
    fig, axes = plt.subplots(1, 3, figsize=(3 * PANEL_W, PANEL_H + 0.9))
    for ax, scale in zip(axes[:2], ("1", "16")):
        for dt in ("float64", "float32", "bfloat16", "float16", "bf16:f32", "f16:f32", "bf16:f32/M", "bf16:f32/S"):
            curve(ax, sel, "err_readout", dt, DTYPE_STYLE[dt], 1e3, 1e-18, preset="paper", logit_scale=scale, dtype=dt)
        loglog(ax, 1e3, 1e-18)
        threshold(ax, 1e-1, "10%")
        mls = [float(r["max_logit"]) for r in pick(sel, preset="paper", logit_scale=scale)]
        ax.set_title("mHC (paper), logit scale %s (max |logit| %.3g-%.3g)" % (scale, min(mls), max(mls)), fontsize=9)
        ax.set_xlabel("layer", fontsize=9)
    axes[0].set_ylabel("readout rel. error", fontsize=9)
    ax = axes[2]
    paper = pick(sel, preset="paper")
    scales = sorted({r["logit_scale"] for r in paper}, key=float)
    L = int(paper[0]["layers"])
    # overlapping points (float32, bfloat16 and bf16:f32 die together) stay visible: nested marker sizes
    for dt, mk, ms in (("float32", "o", 10), ("bfloat16", "s", 7), ("float16", "^", 6), ("bf16:f32", "x", 6)):
        xs, ys = [], []
        for s in scales:
            for r in pick(paper, logit_scale=s, dtype=dt):
                xs.append(float(r["max_logit"]))
                ys.append(int(r["first_nonfinite"]) if r["first_nonfinite"] != "" else 2 * L)
        ax.plot(xs, ys, mk, label=dt, ms=ms, mfc="none", mew=1.5, **DTYPE_STYLE[dt])
    for lim, txt in ((88.72, "exp overflow, float32/bfloat16 (88.7)"), (11.09, "exp overflow, float16 (11.1)")):
        ax.axvline(lim, color="gray", lw=0.7, ls=":")
        ax.text(lim, 3, " " + txt, fontsize=7, rotation=90, va="bottom")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(0.7, 4 * L)
    ax.axhline(L, color="gray", lw=0.6)
    ax.set_xlabel("largest |logit| of the 257-bit run (every draw)", fontsize=9)
    ax.set_ylabel("first inf/NaN layer (at 2L: none)", fontsize=9)
    ax.set_title("mHC (paper preset): exp overflow", fontsize=9)
    ax.grid(True, lw=0.3)
    ax.tick_params(labelsize=8)
    fig.suptitle("mHC, n = 4, C = 64, 20 Sinkhorn rounds: %s" % caption(sel), fontsize=11)
    ax.legend(fontsize=8, loc="center left")
    finish(fig, os.path.join(out, "mhc.png"), axes[:2], ncol=7)


def sinkhorn(runs, out):
    """mHC's Sinkhorn alone (dmref stability --only sinkhorn): residual against rounds, composite gain over depth."""
    rounds = pick(runs, scheme="sinkhorn", sweep="rounds")
    comp = pick(runs, scheme="sinkhorn", sweep="composite")
    if not rounds:
        return
    dts = ["float64", "float32", "bfloat16", "float16", "bf16:f32"]
    cases = [("paper", "1"), ("paper", "4"), ("log-domain", "1"), ("eps=1e-6", "1")]
    fig, axes = plt.subplots(2, len(cases), figsize=(PANEL_W * len(cases), 2 * PANEL_H + 1.0), squeeze=False)
    for j, (v, sc) in enumerate(cases):
        ax = axes[0][j]
        for dt in dts:
            curve(ax, rounds, "residual", dt, DTYPE_STYLE[dt], 1e2, 1e-17, form=v, dtype=dt, logit_scale=sc)
        loglog(ax, 1e2, 1e-17)
        ax.axvline(20, color="gray", lw=0.6, ls="--")
        ax.annotate("20 rounds (mHC)", xy=(20, 1e-16), fontsize=7, color="dimgray")
        threshold(ax, 2.0 ** -8, "2^-8")
        ax.set_title("%s, logit scale %s: distance from doubly stochastic" % (v, sc), fontsize=9)
        ax.set_xlabel("Sinkhorn rounds", fontsize=9)
        ax.set_ylabel("max |row or column sum - 1|", fontsize=9)
        ax = axes[1][j]
        for dt in dts:
            curve(ax, comp, "gain", dt, DTYPE_STYLE[dt], 1e3, 0.1, form=v, dtype=dt, logit_scale=sc)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(0.1, 1e3)
        ax.grid(True, which="major", lw=0.3)
        ax.tick_params(labelsize=8)
        threshold(ax, 1.0, "exact: 1")
        ax.set_title("%s, logit scale %s: gain of H_l ... H_1" % (v, sc), fontsize=9)
        ax.set_xlabel("layer (20 rounds each)", fontsize=9)
        ax.set_ylabel("largest absolute row sum", fontsize=9)
    fig.suptitle("mHC Sinkhorn, n = 4, 16 logit matrices per draw: %s" % caption(rounds), fontsize=11)
    finish(fig, os.path.join(out, "sinkhorn.png"), axes.flat, ncol=5)


GRAD_STYLE = {
    "ldm/symmetric": dict(color="tab:blue"),
    "ldm/joseph": dict(color="tab:cyan", ls="--"),
    "mhc/deepseek-v4": dict(color="tab:green"),
    "hc/dynamic": dict(color="tab:olive"),
    "attnres/full": dict(color="tab:orange"),
    "attnres/block": dict(color="tab:brown", ls="--"),
    "denseformer": dict(color="tab:purple"),
    "preln": dict(color="black"),
}


def gradients(runs, out):
    """Gradient error over depth (dmref stability --only gradients): every scheme's backward against float64."""
    sel = pick(runs, scheme="gradients")
    if not sel:
        return
    dts = ["float32", "bf16:f32", "f16:f32", "float64 (model)"]
    rows = [("grad_input", "input gradients"), ("grad_param", "parameter gradients")]
    fig, axes = plt.subplots(2, len(dts), figsize=(PANEL_W * len(dts), 2 * PANEL_H + 1.0), squeeze=False)
    for i, (metric, what) in enumerate(rows):
        for j, dt in enumerate(dts):
            ax = axes[i][j]
            top, bottom = {"float32": (1e-3, 1e-9), "float64 (model)": (1e-11, 1e-17)}.get(dt, (1e0, 1e-6))
            for form, st in GRAD_STYLE.items():
                st = dict(st)
                ls = st.pop("ls", "-")
                curve(ax, sel, metric, form, st, top, bottom, ls=ls, form=form, dtype=dt)
            loglog(ax, top, bottom)
            ax.set_xscale("log", base=2)
            if dt in ("float32", "float64 (model)"):
                threshold(ax, {"float32": 2.0 ** -24, "float64 (model)": 2.0 ** -53}[dt],
                          "unit roundoff %s" % {"float32": "2^-24", "float64 (model)": "2^-53"}[dt])
            else:
                threshold(ax, {"bf16:f32": 2.0 ** -8, "f16:f32": 2.0 ** -11}[dt],
                          "storage unit roundoff %s" % {"bf16:f32": "2^-8", "f16:f32": "2^-11"}[dt])
            ax.set_title("%s: %s" % (dt, what), fontsize=10)
            ax.set_xlabel("depth L (layers)", fontsize=9)
            ax.set_ylabel("rel. error against float64", fontsize=9)
    fig.suptitle("Backward error over depth, d = 16, one token (%s); preln has no parameters" % caption(sel),
                 fontsize=11)
    finish(fig, os.path.join(out, "gradients.png"), axes.flat, ncol=8)


def schemes(runs, out):
    """The schemes side by side, float32, bfloat16 and 16-bit storage."""
    picks = [
        ("PreLN (random v)", dict(scheme="preln", values="random")),
        ("AttnRes full, logit sd 3", dict(scheme="attnres", variant="full", w="3")),
        ("AttnRes block, logit sd 3", dict(scheme="attnres", variant="block", w="3")),
        ("mHC paper, logit scale 4", dict(scheme="mhc", preset="paper", logit_scale="4")),
        ("LDM symmetric, lambda 0.9", dict(scheme="ldm", sweep="forms", form="symmetric", **{"lambda": "0.9"})),
        ("LDM Potter, lambda 0.9", dict(scheme="ldm", sweep="forms", form="potter", **{"lambda": "0.9"})),
        ("LDM inverse QR, lambda 0.9", dict(scheme="ldm", sweep="forms", form="inverse-qr", **{"lambda": "0.9"})),
    ]
    colors = ["black", "tab:orange", "tab:brown", "tab:green", "tab:blue", "tab:purple", "tab:red"]
    if sum(1 for _, kw in picks if pick(runs, **kw)) < 2:
        return  # one scheme alone (a --only run): nothing to set side by side
    fig, axes = plt.subplots(1, 3, figsize=(3 * PANEL_W, PANEL_H + 1.0), sharey=True)
    for ax, dts in zip(axes, (("float32",), ("bfloat16",), ("bf16:f32", "bfloat16"))):
        for (label, kw), c in zip(picks, colors):
            for dt in dts:  # first dtype the scheme was run in
                if pick(runs, dtype=dt, **kw):
                    curve(ax, runs, "err_readout", label + ("" if dt == dts[0] else " (%s: same computation)" % dt),
                          dict(color=c), 1e2, 1e-9, dtype=dt, **kw)
                    break
        loglog(ax, 1e2, 1e-9)
        threshold(ax, 1e-1, "10%")
        ax.set_title(dts[0], fontsize=10)
        ax.set_xlabel("layer", fontsize=9)
    axes[0].set_ylabel("readout rel. error", fontsize=9)
    fig.suptitle("The schemes side by side (%s)" % caption(runs), fontsize=11)
    finish(fig, os.path.join(out, "schemes.png"), axes, ncol=4)


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
    ldm_forms(runs, out, ["bfloat16", "float16", "bf16:f32", "f16:f32"], "ldm_forms_16.png", 1e-5)
    ldm_storage(runs, out)
    ldm_overflow(runs, out)
    ldm_keys(runs, out)
    ldm_p(runs, out)
    ldm_cond(runs, out)
    ldm_scale(runs, out)
    ldm_detectors(runs, out)
    ldm_remedies(runs, out)
    preln(runs, out)
    attnres(runs, out)
    mhc(runs, out)
    sinkhorn(runs, out)
    gradients(runs, out)
    schemes(runs, out)


if __name__ == "__main__":
    main()
