#!/usr/bin/python3
"""bench/make_inputs.py: inputs and a config for `dmref run` at model sizes
(docs/performance.md). The config is written from the flags below; the tensors
are drawn by `dmref inputs` through the scheme's declared schema, exactly as
the corpus draws them (SplitMix64 from --seed, every value rounded to
bfloat16 so it is exact in every type): no Python copy of a generator, so a
command reproduces the same file and the distributions are the documented
ones (each scheme page's "Files" table).

  bench/make_inputs.py ldm --level kernel --groups 16 --dk 64 --d 1024 --layers 96 --tokens 64 --out DIR
  bench/make_inputs.py mhc --n 4 --d 1024 --layers 96 --tokens 64 --out DIR
  bench/make_inputs.py attnres --d 1024 --layers 96 --block-size 8 --tokens 64 --out DIR
writes DIR/config.json and DIR/inputs.safetensors.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scheme", choices=["ldm", "mhc", "attnres", "preln", "hc", "denseformer"])
    ap.add_argument("--level", choices=["kernel", "model"], default="kernel")
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--d", type=int, required=True)
    ap.add_argument("--hidden", type=int, default=64, help="model level: width of the layer MLP")
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--dk", type=int, default=64)
    ap.add_argument("--lambda-min", type=float, default=0.5)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--block-size", type=int, default=8)
    ap.add_argument("--variant", choices=["full", "block"], default="block", help="attnres")
    ap.add_argument("--alpha", type=float, default=1.0, help="ldm: P_0 = alpha I")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dmref", default=os.path.join(ROOT, "build", "tools", "dmref"), help="the dmref CLI")
    a = ap.parse_args()
    T, L, d = a.tokens, a.layers, a.d
    cfg = {"tokens": T, "layers": L, "d": d, "level": a.level}
    draw = []
    if a.level == "model":
        cfg["hidden"] = a.hidden
    if a.scheme == "ldm":
        cfg.update(groups=a.groups, dk=a.dk, write="rls", alpha=a.alpha)
        if a.level == "model":
            cfg.update(mlp_q_hidden=0, mlp_k_hidden=0)
        draw = ["--draw", f"lambda_min={a.lambda_min!r}"]
    elif a.scheme == "mhc":
        cfg.update(n=a.n, preset="paper")
    elif a.scheme == "attnres":
        cfg.update(variant=a.variant)
        if a.variant == "block":
            cfg.update(block_size=a.block_size)
    elif a.scheme == "hc":  # static, around the paper's init (A_m = e_{l mod n}, A_r = I, B = 1), perturbed
        cfg.update(n=a.n, dynamic=False)
    os.makedirs(a.out, exist_ok=True)
    config = os.path.join(a.out, "config.json")
    with open(config, "w") as f:
        json.dump(cfg, f, indent=1, sort_keys=True)
    subprocess.run([a.dmref, "inputs", "--scheme", a.scheme, "--config", config, "--out",
                    os.path.join(a.out, "inputs.safetensors"), "--seed", str(a.seed), "--dtype", "bf16", *draw],
                   check=True)
    print(f"wrote {a.out}/config.json, {a.out}/inputs.safetensors")


if __name__ == "__main__":
    main()
