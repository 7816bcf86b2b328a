"""Block AttnRes at op level (docs/attnres_ops.md) on the op tensors: blocks [T, N, d], partial
[T, d], v [T, d], phase 1's statistics o [T, S, d] / [T, d] and lse [T, S] / [T].

    partial_sum: b + v
    readout:     attnres.readout over the blocks (and the partial): every softmax knob of attnres.py
    phase1:      per query s, o_s = attnres.readout over the blocks, lse_s = log sum exp(z_i)
                 (softmax plain / deferred: as written; max, online, twophase: m + log sum exp(z_i - m))
    phase2:      z = w . RMSNorm_g(b), merged with (o, lse): softmax plain: the two-term softmax
                 (e^lse o + e^z b) / (e^lse + e^z); max / online / twophase: the flash merge with the
                 running max mn = max(lse, z), h = (e^(lse-mn) o + e^(z-mn) b) / (e^(lse-mn) + e^(z-mn)),
                 lse' = mn + log(.); deferred: flash-attn-res's phase_2 kernel, h = o + sigmoid(z - lse) (b - o),
                 lse' = lse + log1p(exp(z - lse)).
Backward: autograd."""
import torch

from . import attnres


def lse_of(A, z):
    """log sum_i exp(z_i) over the last dim, as the softmax knob computes its denominator."""
    if A.k("softmax", "plain") in ("plain", "deferred"):
        return torch.log(A.sum(torch.exp(z), -1))
    m = z.max(-1).values
    return m + torch.log(A.sum(torch.exp(z - m.unsqueeze(-1)), -1))


def merge(A, o, lse, b, w, g, eps):
    _, z = attnres.logits(A, b.unsqueeze(1), w, g, eps)
    z = z[:, 0]
    style = A.k("softmax", "plain")
    if style == "deferred":
        s = torch.sigmoid(z - lse)
        return A.fmadd(s.unsqueeze(-1), b - o, o), lse + torch.log1p(torch.exp(z - lse))
    mn = torch.maximum(lse, z) if style != "plain" else torch.zeros_like(z)
    c, p = torch.exp(lse - mn), torch.exp(z - mn)
    den = c + p
    h = A.fmadd(c.unsqueeze(-1) / den.unsqueeze(-1), o, p.unsqueeze(-1) / den.unsqueeze(-1) * b)
    return h, mn + torch.log(den)


def forward(A, P, cfg):
    op = cfg.get("op", "readout")
    eps = A.const(cfg.get("eps", 1e-6))
    if op == "partial_sum":
        return {"output.partial": A.store(P["input.partial"] + P["input.v"])}
    w, g = P["param.w"], P["param.g"]
    if op == "phase2":
        h, lse = merge(A, P["input.o"], P["input.lse"], P["input.partial"], w, g, eps)
        return {"output.h": A.store(h), "output.lse": A.store(lse)}
    B = P["input.blocks"]
    if op == "readout":
        if cfg.get("partial", True):
            B = torch.cat([B, P["input.partial"].unsqueeze(1)], 1)
        return {"output.h": A.store(attnres.readout(A, B, w, g, eps))}
    os, lses = [], []
    for s in range(w.shape[0]):
        os.append(attnres.readout(A, B, w[s], g[s], eps))
        lses.append(lse_of(A, attnres.logits(A, B, w[s], g[s], eps)[1]))
    return {"output.o": A.store(torch.stack(os, 1)), "output.lse": A.store(torch.stack(lses, 1))}
