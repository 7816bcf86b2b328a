"""Hyper-Connections (docs/hc.md): n streams H (n x d), per layer

    h = sum_j A_m[j] H_j,   H_i <- B[i] v + sum_j A_r[j, i] H_j,   out = sum_j H_j

static: A = the parameters; dynamic: A_m[j] = am[j] + s_a act(Hb_j . wm),
A_r[j, i] = ar[j, i] + s_a act(Hb_j . wr[:, i]), B[i] = b[i] + s_b act(Hb_i . wb), Hb_j the
per-stream LayerNorm (gain, bias, biased variance, eps 1e-5) or RMSNorm (gain, eps), act tanh
or the identity. Knobs: `ln_onepass` (variance as mean(x^2) - mean(x)^2 from one pass of
fused statistics instead of the centred two-pass form); `norm_mul` (multiply by 1/sigma)."""
import torch

from .layer import layer_fn


def norm(A, P, cfg, l, H):
    eps = A.const(cfg.get("ln_eps", 1e-5))
    gain = P["param.ln_gain"][l]
    if cfg.get("norm", "layernorm") == "rmsnorm":
        x = H
        r = A.rms(H, eps).unsqueeze(-1)
    else:
        mu = A.mean(H).unsqueeze(-1)
        x = H - mu
        if A.k("ln_onepass"):
            r = torch.sqrt(A.mean(H * H).unsqueeze(-1) - mu * mu + eps)
        else:
            r = A.rms(x, eps).unsqueeze(-1)
    y = x * (1 / r) if A.k("norm_mul") else x / r
    y = y * gain
    return y + P["param.ln_bias"][l] if cfg.get("norm", "layernorm") != "rmsnorm" else y


def coefficients(A, P, cfg, l, H):
    am, ar, b = P["param.am"][l], P["param.ar"][l], P["param.b"][l]
    if not cfg.get("dynamic", False):
        T = H.shape[0]
        return am.expand(T, -1), ar.expand(T, -1, -1), b.expand(T, -1)
    act = torch.tanh if cfg.get("tanh", True) else (lambda x: x)
    Hb = norm(A, P, cfg, l, H)  # [T, n, d]
    sa, sb = P["param.scale"][l, 0], P["param.scale"][l, 1]
    zm = A.dot(Hb, P["param.wm"][l], -1)  # [T, n]
    zr = A.dot(Hb.unsqueeze(-2), P["param.wr"][l].transpose(0, 1), -1)  # [T, n(j), n(i)]
    zb = A.dot(Hb, P["param.wb"][l], -1)
    return am + sa * act(zm), ar + sa * act(zr), b + sb * act(zb)


def forward(A, P, cfg):
    L, n = cfg["layers"], cfg["n"]
    e = P["input.e"]
    H = e.unsqueeze(1).expand(-1, n, -1)
    hs, vs = [], []
    for l in range(L):
        Am, Ar, B = coefficients(A, P, cfg, l, H)
        h = A.dot(H, Am.unsqueeze(-1), 1)
        hs.append(A.store(h))
        v = layer_fn(A, P, l, h)
        vs.append(A.store(v))
        v = A.stream(v)
        carry = A.dot(H.unsqueeze(1), Ar.transpose(1, 2).unsqueeze(-1), 2)  # [T, i, d] = sum_j Ar[j,i] H_j
        H = A.stream(A.fmadd(B.unsqueeze(-1), v.unsqueeze(1), carry))
    out = {"output.h": torch.stack(hs, 1), "output.out": A.store(A.sum(H, 1)), "output.H": A.store(H)}
    if "param.W1" in P:
        out["output.v"] = torch.stack(vs, 1)
    return out
