"""DenseFormer (docs/denseformer.md): X_0 = e, X_{l+1} = v_l (block outputs),
Y_i = sum_{j <= i} a[i, j] X_j where p | i (j = i mod k), else Y_i = X_i; h_l = Y_l, out = Y_L.

Knob `dense`: the DWA as the full row of `a` (the zeros outside the pattern and the identity
rows are exact, so it is the same function, as a matrix-product kernel computes it) instead
of the pattern's terms only."""
import torch

from .layer import layer_fn


def dwa(A, P, cfg, X, i):
    """Y_i. Y_0 = X_0 and rows without a DWA are structural (no weight, zero gradient)."""
    k, p = cfg.get("dilation", 1), cfg.get("period", 1)
    a = P["param.a"]
    keep = [j for j in range(i + 1) if (i - j) % k == 0] if i > 0 and i % p == 0 else None
    if keep is None and not A.k("dense"):
        return X[i]
    js = list(range(i + 1)) if A.k("dense") else keep
    one, zero = a.new_ones(()), a.new_zeros(())
    w = torch.stack([(a[i, j] if j in keep else zero) if keep is not None else (one if j == i else zero) for j in js])
    return A.dot(torch.stack([X[j] for j in js], -1), w, -1)


def forward(A, P, cfg):
    L = cfg["layers"]
    X = [P["input.e"]]
    hs, vs = [], []
    for l in range(L):
        h = dwa(A, P, cfg, X, l)
        hs.append(A.store(h))
        v = layer_fn(A, P, l, h)
        vs.append(A.store(v))
        v = A.stream(v)
        X.append(v)
    out = {"output.h": torch.stack(hs, 1), "output.out": A.store(dwa(A, P, cfg, X, L))}
    if "param.W1" in P:
        out["output.v"] = torch.stack(vs, 1)
    return out
