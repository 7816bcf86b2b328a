#!/usr/bin/python3
"""bench/make_inputs.py: inputs and a config for `dmref run` at model sizes
(docs/performance.md). The distributions are those of the corpus generators
(reference/src/conformance/corpus.cpp: uniform weights scaled by 1/sqrt(fan_in),
unit-norm key/query groups, omega in [0, 2), lambda in [lambda_min, 1)), every
value rounded to bfloat16 so it is exact in every type; Python's random seeded
with --seed, so a command reproduces the same file. Standard library only.

  bench/make_inputs.py ldm --level kernel --groups 16 --dk 64 --d 1024 --layers 96 --tokens 64 --out DIR
  bench/make_inputs.py mhc --n 4 --d 1024 --layers 96 --tokens 64 --out DIR
  bench/make_inputs.py attnres --d 1024 --layers 96 --block-size 8 --tokens 64 --out DIR
writes DIR/config.json and DIR/inputs.safetensors.
"""
import argparse
import json
import os
import sys

import math
import random
import struct


def bf16(x):
    """x rounded to 8 significant bits (bfloat16's), ties to even; exact in double."""
    if x == 0:
        return 0.0
    m, e = math.frexp(x)
    return math.ldexp(round(m * 256), e - 8)


class Tensor:
    def __init__(self, shape, values):
        self.shape, self.values = list(shape), values


def size(shape):
    return math.prod(shape)


def write_safetensors(path, tensors):
    """dmref's canonical layout: F64, names sorted, header padded to 8 bytes."""
    header, chunks, off = {}, [], 0
    for k in sorted(tensors):
        raw = struct.pack(f"<{len(tensors[k].values)}d", *tensors[k].values)
        header[k] = {"data_offsets": [off, off + len(raw)], "dtype": "F64", "shape": tensors[k].shape}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))
    os.replace(tmp, path)


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
    a = ap.parse_args()
    rng = random.Random(a.seed)
    U = lambda shape, s: Tensor(shape, [bf16(rng.uniform(-1, 1) * s) for _ in range(size(shape))])
    R = lambda shape, lo, hi: Tensor(shape, [bf16(rng.uniform(lo, hi)) for _ in range(size(shape))])
    T, L, d = a.tokens, a.layers, a.d
    cfg = {"tokens": T, "layers": L, "d": d, "level": a.level}
    t = {"input.e": U((T, d), 1.0)}
    if a.level == "model":
        cfg["hidden"] = a.hidden
        t["param.W1"] = U((L, a.hidden, d), 1 / math.sqrt(d))
        t["param.W2"] = U((L, d, a.hidden), 1 / math.sqrt(a.hidden))
    else:
        t["input.v"] = U((T, L, d), 1.0)
    if a.scheme == "ldm":
        G, dk = a.groups, a.dk
        cfg.update(groups=G, dk=dk, write="rls", alpha=a.alpha)
        if a.level == "model":
            cfg.update(mlp_q_hidden=0, mlp_k_hidden=0)
            t["param.mlp_q.W"] = U((G * dk, d), 1 / math.sqrt(d))
            t["param.mlp_k.W"] = U((G * dk + G, d), 1 / math.sqrt(d))
        else:
            for name in ("input.q", "input.k"):
                vals = []
                for _ in range(T * L * G):
                    z = [rng.uniform(-1, 1) for _ in range(dk)]
                    nz = math.sqrt(sum(x * x for x in z))
                    vals += [bf16(x / nz) for x in z]
                t[name] = Tensor((T, L, G * dk), vals)
            t["input.omega"] = R((T, L, G), 0.0, 2.0)
        t["param.lambda"] = R((L, G), a.lambda_min, 1.0)
    elif a.scheme == "mhc":
        n, nC = a.n, a.n * d
        cfg.update(n=n, preset="paper")
        s = 1 / math.sqrt(nC)
        t["param.phi_pre"] = U((L, nC, n), s)
        t["param.phi_post"] = U((L, nC, n), s)
        t["param.phi_res"] = U((L, nC, n * n), 2 * s)
        t["param.a"] = R((L, 3), 0.5, 1.5)
        t["param.b_pre"] = U((L, n), 0.5)
        t["param.b_post"] = U((L, n), 0.5)
        t["param.b_res"] = U((L, n, n), 1.0)
    elif a.scheme == "attnres":
        cfg.update(variant=a.variant)
        if a.variant == "block":
            cfg.update(block_size=a.block_size)
        t["param.w"] = U((L + 1, d), 2 / math.sqrt(d))
        t["param.g"] = R((L + 1, d), 0.5, 1.5)
    elif a.scheme == "hc":  # static, around the paper's init (A_m = e_{l mod n}, A_r = I, B = 1), perturbed
        n = a.n
        cfg.update(n=n, dynamic=False)
        am, ar, b = U((L, n), 0.2), U((L, n, n), 0.2), U((L, n), 0.2)
        for l in range(L):
            am.values[l * n + l % n] = bf16(am.values[l * n + l % n] + 1)
            for i in range(n):
                ar.values[(l * n + i) * n + i] = bf16(ar.values[(l * n + i) * n + i] + 1)
                b.values[l * n + i] = bf16(b.values[l * n + i] + 1)
        t.update({"param.am": am, "param.ar": ar, "param.b": b})
    elif a.scheme == "denseformer":
        A = U((L + 1, L + 1), 0.3)
        for i in range(L + 1):
            for j in range(L + 1):
                x = A.values[i * (L + 1) + j]
                A.values[i * (L + 1) + j] = 0.0 if j > i else 1.0 if i == 0 else bf16(1 + x / 3) if j == i else x
        t["param.a"] = A
    os.makedirs(a.out, exist_ok=True)
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=1, sort_keys=True)
    write_safetensors(os.path.join(a.out, "inputs.safetensors"), t)
    print(f"wrote {a.out}/config.json, {a.out}/inputs.safetensors")


if __name__ == "__main__":
    main()
