"""Attention Residuals (docs/attnres.md): a softmax over depth with a pseudo-query per read.

    r_i = sqrt(mean(b_i^2) + eps),  k_i = g * b_i / r_i,  z_i = w . k_i,  a = softmax(z),  h = sum_i a_i b_i

Full: layer l reads [e, v_0 .. v_{l-1}]; Block: finished block sums and the open block's
partial sum (a partial of one output is that output); final: (w_L, g_L) over all.
Knobs: `softmax` plain (exp(z) / sum, as the spec), `max` (max-subtracted), `deferred`
(h = (sum_i exp(z_i) b_i) / sum exp(z)), `online` (flash: one source at a time, running max,
rescaled sum and accumulator), `twophase` (the AttnRes paper's block algorithm: phase 1 the
statistics over the cached sources, phase 2 merges the newest source online);
`norm_after`: z_i = ((w * g) . b_i) / r_i (the norm applied after the projection).
Backward: autograd of this forward, or `vjp` (hand-written, docs/attnres.md "Backward", from the
forward's saved weights; `vjp_recompute` recomputes every readout's norms and softmax)."""
import torch

from .layer import layer_fn


def layout(cfg):
    """Block index of every layer (Full: every layer its own block of one)."""
    L = cfg["layers"]
    if cfg.get("variant", "full") == "full":
        return list(range(L))
    if "block_size" in cfg:
        return [l // cfg["block_size"] for l in range(L)]
    N = cfg["blocks"]
    size = L // N
    return [min(l // size, N - 1) for l in range(L)]


def logits(A, B, w, g, eps):
    """(r, z): the keys' RMS [T, n] and the logits z_i = w . RMSNorm_g(B_i) [T, n]."""
    r = A.rms(B, eps)  # [T, n]
    if A.k("norm_after"):
        return r, A.dot(B, w * g, -1) / r
    return r, A.dot(B / r.unsqueeze(-1) * g, w, -1)


def readout(A, B, w, g, eps, save=None):
    """h = attnres_mix(B, w, g, eps), B [T, n, d]."""
    r, z = logits(A, B, w, g, eps)
    style = A.k("softmax", "plain")
    n = B.shape[1]
    if style in ("online", "twophase") and n > 1:
        first = n - 1 if style == "twophase" else 1
        m = z[:, :first].max(1).values
        p = torch.exp(z[:, :first] - m.unsqueeze(1))
        s = A.sum(p, 1)
        acc = A.dot(B[:, :first], p.unsqueeze(-1), 1)
        for i in range(first, n):
            mn = torch.maximum(m, z[:, i])
            c, p = torch.exp(m - mn), torch.exp(z[:, i] - mn)
            s = A.fmadd(s, c, p)
            acc = A.fmadd(acc, c.unsqueeze(-1), p.unsqueeze(-1) * B[:, i])
            m = mn
        h = acc / s.unsqueeze(-1)
        a = None
    else:
        zz = z - z.max(1, keepdim=True).values if style == "max" else z
        e = torch.exp(zz)
        s = A.sum(e, 1).unsqueeze(1)
        if style == "deferred":
            h = A.dot(B, e.unsqueeze(-1), 1) / s
            a = e / s
        else:
            a = e / s
            h = A.dot(B, a.unsqueeze(-1), 1)
    if save is not None:
        save.append((B, r, a if a is not None else torch.softmax(z, 1)))
    return h


def forward(A, P, cfg, save=None):
    L = cfg["layers"]
    eps = A.const(cfg.get("eps", 1e-6))
    w, g = P["param.w"], P["param.g"]
    blk = layout(cfg)
    done = [P["input.e"]]  # finished sources
    partial = None
    hs, vs = [], []
    for l in range(L):
        src = done + ([partial] if partial is not None else [])
        h = readout(A, torch.stack(src, 1), w[l], g[l], eps, save)
        hs.append(A.store(h))
        v = layer_fn(A, P, l, h)
        vs.append(A.store(v))
        v = A.stream(v)
        partial = v if partial is None else A.stream(partial + v)
        if l == L - 1 or blk[l + 1] != blk[l]:
            done.append(partial)
            partial = None
    hout = readout(A, torch.stack(done, 1), w[L], g[L], eps, save)
    out = {"output.h": torch.stack(hs, 1), "output.out": A.store(hout)}
    if "param.W1" in P:
        out["output.v"] = torch.stack(vs, 1)
    return out


def readout_vjp(A, B, r, a, w, g, dh):
    """The readout's VJP (docs/attnres.md, "Backward"): (dB [T, n, d], dw [T, d], dg [T, d])."""
    d = B.shape[-1]
    dB = a.unsqueeze(-1) * dh.unsqueeze(1)  # value path
    da = A.dot(B, dh.unsqueeze(1), -1)  # [T, n]
    dz = a * (da - A.dot(a, da, 1).unsqueeze(1))
    xh = B / r.unsqueeze(-1)  # v_i / r_i
    dw = A.dot(xh * g, dz.unsqueeze(-1), 1)
    dg = A.dot(xh * w, dz.unsqueeze(-1), 1)
    dn = g * w * dz.unsqueeze(-1)  # [T, n, d]
    dB = dB + dn / r.unsqueeze(-1) - B * (A.dot(B, dn, -1) / (d * r ** 3)).unsqueeze(-1)
    return dB, dw, dg


def vjp(A, P, cfg, up):
    """Hand-written backward, kernel level: every readout's VJP in reverse, source adjoints
    routed to the layer outputs through the block partial sums (suffix sums)."""
    L = cfg["layers"]
    save = []
    out = forward(A, P, cfg, save)
    w, g = P["param.w"], P["param.g"]
    eps = A.const(cfg.get("eps", 1e-6))
    blk = layout(cfg)
    T, d = P["input.e"].shape
    dh = [up["output.h"][:, l] if "output.h" in up else None for l in range(L)] + [up["output.out"]]
    # source objects: e, then per layer l the partial ending at l (b_{blk}^{pos+1})
    dpart = [torch.zeros(T, d, dtype=A.ct) for _ in range(L)]  # adjoint of the partial ending at layer l
    dW = [None] * (L + 1)
    dG = [None] * (L + 1)
    ends = []  # for each readout: the list of source keys (e or the last layer of that partial)
    done, partial_end = ["e"], None
    for l in range(L + 1):
        ends.append(done + ([partial_end] if partial_end is not None else []))
        if l == L:
            break
        partial_end = l
        if l == L - 1 or blk[l + 1] != blk[l]:
            done = done + [l]
            partial_end = None
    de = torch.zeros(T, d, dtype=A.ct)
    for l in range(L, -1, -1):
        B, r, a = save[l]
        if A.k("backward") == "vjp_recompute":  # the readout recomputed from its sources, max-subtracted
            r = A.rms(B, eps)
            z = A.dot(B / r.unsqueeze(-1) * g[l], w[l], -1)
            e_ = torch.exp(z - z.max(1, keepdim=True).values)
            a = e_ / A.sum(e_, 1).unsqueeze(1)
        dB, dW[l], dG[l] = readout_vjp(A, B, r, a, w[l], g[l], dh[l])
        for i, key in enumerate(ends[l]):
            if key == "e":
                de = de + dB[:, i]
            else:
                dpart[key] = dpart[key] + dB[:, i]
    # v_l is in every partial of its block from position l on: a suffix sum over the block
    dv = [None] * L
    for l in range(L - 1, -1, -1):
        later = l + 1 < L and blk[l + 1] == blk[l]
        dv[l] = dpart[l] + dv[l + 1] if later else dpart[l]
    grads = {"grad.input.e": de, "grad.input.v": torch.stack(dv, 1),
             "grad.param.w": A.sum(torch.stack(dW, 1), 0), "grad.param.g": A.sum(torch.stack(dG, 1), 0)}
    return out, grads
