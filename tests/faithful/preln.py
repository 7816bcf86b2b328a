"""PreLN (docs/preln.md): x = e; h_l = x; x = x + v_l; out = x."""
import torch

from .layer import layer_fn


def forward(A, P, cfg):
    L = cfg["layers"]
    x = P["input.e"]
    hs, vs = [], []
    for l in range(L):
        hs.append(A.store(x))
        v = layer_fn(A, P, l, x)
        vs.append(A.store(v))
        v = A.stream(v)  # the next layer reads the stored output with stored_streams
        x = A.stream(x + v)
    out = {"output.h": torch.stack(hs, 1), "output.out": A.store(x)}
    if "param.W1" in P:
        out["output.v"] = torch.stack(vs, 1)
    return out
