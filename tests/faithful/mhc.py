"""mHC (docs/mhc.md): n streams X (n x C), x = vec(X) stream-major; per layer, from X before it,

    x' = x / sqrt(mean(x^2) + rms_eps)
    Ht_pre = a_pre (x' phi_pre) + b_pre,  Ht_post = a_post (x' phi_post) + b_post,
    Ht_res = a_res mat(x' phi_res) + b_res          (entry (i, j) = column i n + j)
    H_pre = pre_scale sigmoid(Ht_pre) + pre_eps,  H_post = post_scale sigmoid(Ht_post)
    H_res = Sinkhorn_t(exp(Ht_res))                  (column then row; round 1: / colsum + eps_add)
    h = sum_j H_pre[j] X_j,   X_i <- sum_j H_res[i, j] X_j + H_post[i] v,   out = sum_j X_j

Layouts: `res_layout = in_out` stores b_res, the phi_res columns and H_res / Ht_res transposed;
`phi_layout = out_in` gives phi as [out, nC] (converted at the boundary, as a kernel would).
Knobs: `norm_after` ((x phi) / r, DeepSeek's and AMD's fused kernels), `sinkhorn` `exp` (the
spec), `max` (column max subtracted before exp), `log` (log domain, logsumexp per line);
`norm_mul` (reciprocal then multiply); `sigmoid_tanh` (sigmoid(z) = (1 + tanh(z/2)) / 2).
Backward: autograd, or `vjp` (hand-written, docs/mhc.md "Backward"; `vjp_recompute` replays
the Sinkhorn rounds from the logits in the backward instead of saving them)."""
import math

import torch

from .arith import Arith
from .layer import layer_fn, layer_vjp

PRESETS = {"paper": dict(t_max=20, rms_eps=1e-20, pre_eps=0.0, res_eps_add=0.0, res_eps_den=0.0, head_eps=0.0),
           "deepseek-v4": dict(t_max=20, rms_eps=1e-6, pre_eps=1e-6, res_eps_add=1e-6, res_eps_den=1e-6, head_eps=1e-6)}


def knobs(cfg):
    k = dict(PRESETS[cfg.get("preset", "paper")], pre_scale=1.0, post_scale=2.0)
    for name in list(k):
        if name in cfg:
            k[name] = float(cfg[name]) if name != "t_max" else int(cfg[name])
    return k


def swap_cols(x, n):
    return x.reshape(x.shape[:-1] + (n, n)).transpose(-1, -2).reshape(x.shape)


def params(P, cfg):
    """phi_* as [L, nC, out] and the residual in paper orientation."""
    n = cfg["n"]
    phi = {k: P["param." + k] for k in ("phi_pre", "phi_post", "phi_res")}
    if cfg.get("phi_layout", "in_out") == "out_in":
        phi = {k: v.transpose(-1, -2) for k, v in phi.items()}
    b_res = P["param.b_res"]
    if cfg.get("res_layout", "out_in") == "in_out":
        phi["phi_res"] = swap_cols(phi["phi_res"], n)
        b_res = b_res.transpose(-1, -2)
    return phi, b_res


def div(A, x, s):
    return x * (1 / s) if A.k("norm_mul") else x / s


def sigmoid(A, z):
    return (1 + torch.tanh(z / 2)) / 2 if A.k("sigmoid_tanh") else torch.sigmoid(z)


def sinkhorn(A, Z, kn, save=None):
    """The t_max rounds on the logits Z [T, n, n] (columns: dim -2, rows: dim -1)."""
    ea, ed, t = kn["res_eps_add"], kn["res_eps_den"], kn["t_max"]
    if A.k("sinkhorn") == "log":
        def lse(Lg, dim):
            m = Lg.max(dim, keepdim=True).values
            return m + torch.log(A.sum(torch.exp(Lg - m), dim).unsqueeze(dim))
        Lg = Z - lse(Z, -2)
        if ea:
            Lg = torch.logaddexp(Lg, A.const(math.log(ea)))
        for r in range(t):
            if r:
                s = lse(Lg, -2)
                Lg = Lg - (torch.logaddexp(s, A.const(math.log(ed))) if ed else s)
            s = lse(Lg, -1)
            Lg = Lg - (torch.logaddexp(s, A.const(math.log(ed))) if ed else s)
        return torch.exp(Lg)
    E = torch.exp(Z - Z.max(-2, keepdim=True).values) if A.k("sinkhorn") == "max" else torch.exp(Z)
    M = E
    for r in range(t):
        c = A.sum(M, -2).unsqueeze(-2)
        if r:
            c = c + ed
        Y = div(A, M, c)
        if save is not None:
            save.append(("col", M, c, Y))
        M = Y + ea if r == 0 else Y
        s = A.sum(M, -1).unsqueeze(-1) + ed
        Y = div(A, M, s)
        if save is not None:
            save.append(("row", M, s, Y))
        M = Y
    if save is not None:
        save.insert(0, E)
    return M


def projections(A, W, x, r):
    """{k: W[k] x'} for W[k] [out, nC], x' = x / r (with norm_after: (W[k] x) / r)."""
    if A.k("norm_after"):
        return {k: div(A, A.mv(w, x), r) for k, w in W.items()}
    xn = div(A, x, r)
    return {k: A.mv(w, xn) for k, w in W.items()}


def coefficients(A, P, cfg, kn, phi, b_res, l, X, save=None):
    T, n, C = X.shape
    x = X.reshape(T, n * C)
    r = A.rms(x, A.const(kn["rms_eps"])).unsqueeze(-1)
    a = P["param.a"][l]
    proj = projections(A, {k: phi[k][l].transpose(0, 1) for k in phi}, x, r)
    Ht_pre = a[0] * proj["phi_pre"] + P["param.b_pre"][l]
    Ht_post = a[1] * proj["phi_post"] + P["param.b_post"][l]
    Ht_res = a[2] * proj["phi_res"].reshape(T, n, n) + b_res[l]
    H_pre = kn["pre_scale"] * sigmoid(A, Ht_pre) + kn["pre_eps"]
    H_post = kn["post_scale"] * sigmoid(A, Ht_post)
    steps = [] if save is not None and A.k("sinkhorn", "exp") == "exp" else None
    H_res = sinkhorn(A, Ht_res, kn, steps)
    if save is not None:
        save.update(steps=steps, x=x, r=r, proj=proj, Ht_pre=Ht_pre, Ht_post=Ht_post, Ht_res=Ht_res)
    return H_pre, H_post, H_res, Ht_res


def forward(A, P, cfg, save=None):
    L, n = cfg["layers"], cfg["n"]
    kn = knobs(cfg)
    phi, b_res = params(P, cfg)
    e = P["input.e"]
    X = e.unsqueeze(1).expand(-1, n, -1)
    rec = {k: [] for k in ("h", "v", "H_pre", "H_post", "H_res", "Ht_res")}
    for l in range(L):
        sv = {} if save is not None else None
        H_pre, H_post, H_res, Ht_res = coefficients(A, P, cfg, kn, phi, b_res, l, X, sv)
        h = A.dot(X, H_pre.unsqueeze(-1), 1)
        v = layer_fn(A, P, l, h)
        if save is not None:
            sv.update(X=X, h=h, H_pre=H_pre, H_post=H_post, H_res=H_res, v=v)
            save.append(sv)
        rec["v"].append(A.store(v))
        v = A.stream(v)
        for k, t in (("h", h), ("H_pre", H_pre), ("H_post", H_post), ("H_res", H_res), ("Ht_res", Ht_res)):
            rec[k].append(A.store(t))
        mix = A.dot(X.unsqueeze(1), H_res.unsqueeze(-1), 2)  # [T, i, C] = sum_j H_res[i, j] X_j
        X = A.stream(A.fmadd(H_post.unsqueeze(-1), v.unsqueeze(1), mix))
    out = {"output." + k: torch.stack(rec[k], 1) for k in ("h", "H_pre", "H_post", "H_res", "Ht_res")}
    if cfg.get("res_layout", "out_in") == "in_out":
        for k in ("output.H_res", "output.Ht_res"):
            out[k] = out[k].transpose(-1, -2)
    out["output.X"] = A.store(X)
    out["output.out"] = A.store(A.sum(X, 1))
    if "param.W1" in P:
        out["output.v"] = torch.stack(rec["v"], 1)
    return out


def sinkhorn_vjp(A, steps, kn, dH):
    """Reverse the normalisations one at a time: Y = M / s, dM = (dY - sum_line dY Y) / s;
    + eps_add passes the adjoint through; E = exp(Z): dZ = dE E."""
    E, norms = steps[0], steps[1:]
    dY = dH
    for kind, M, s, Y in reversed(norms):
        dim = -2 if kind == "col" else -1
        dY = div(A, dY - A.sum(dY * Y, dim).unsqueeze(dim), s)
    return dY * E


def vjp(A, P, cfg, up):
    """Hand-written backward (kernel level), the reverse walk of docs/mhc.md "Backward"."""
    L, n = cfg["layers"], cfg["n"]
    kn = knobs(cfg)
    save = []
    with torch.no_grad():
        out = forward(A, P, cfg, save)
    phi, b_res = params(P, cfg)
    T, C = P["input.e"].shape
    tr = cfg.get("res_layout", "out_in") == "in_out"
    def upl(name, l):
        u = up.get("output." + name)
        if u is None:
            return 0
        u = u[:, l]
        return u.transpose(-1, -2) if tr and name in ("H_res", "Ht_res") else u
    dX = up.get("output.X", 0) + up["output.out"].unsqueeze(1) if "output.out" in up else up.get("output.X")
    g = {k: torch.zeros_like(P[k]) for k in P if k.startswith("param.")}
    dphi = {k: torch.zeros_like(phi[k]) for k in phi}
    db_res = torch.zeros_like(b_res)
    dv = []
    for l in range(L - 1, -1, -1):
        s = save[l]
        X, H_pre, H_post, H_res, v = s["X"], s["H_pre"], s["H_post"], s["H_res"], s["v"]
        # write^T
        dvl = A.dot(dX, H_post.unsqueeze(-1), 1)
        model = "param.W1" in P
        if model:  # the layer function's VJP: dh gains F^T(dv)
            dvl = dvl + upl("v", l)
            dhF, g["param.W1"][l], g["param.W2"][l] = layer_vjp(A, P, l, s["h"], dvl)
        dv.append(dvl)
        dH_post = A.dot(dX, v.unsqueeze(1), -1)
        dH_res = A.dot(dX.unsqueeze(2), X.unsqueeze(1), -1)  # [T, i, j] = dX'_i . X_j
        dXp = A.dot(dX.unsqueeze(2), H_res.unsqueeze(-1), 1)  # [T, j, C] = sum_i H_res[i, j] dX'_i
        # read^T
        dh = upl("h", l)
        if model:
            dh = dh + dhF
        dXp = dXp + H_pre.unsqueeze(-1) * dh.unsqueeze(1) if torch.is_tensor(dh) else dXp
        dH_pre = A.dot(X, dh.unsqueeze(1), -1) if torch.is_tensor(dh) else torch.zeros_like(H_pre)
        dH_pre, dH_post, dH_res = dH_pre + upl("H_pre", l), dH_post + upl("H_post", l), dH_res + upl("H_res", l)
        # coefficients
        sg = sigmoid(A, s["Ht_pre"])
        dz_pre = dH_pre * kn["pre_scale"] * sg * (1 - sg)
        sg = sigmoid(A, s["Ht_post"])
        dz_post = dH_post * kn["post_scale"] * sg * (1 - sg)
        steps = s["steps"]
        if steps is None or A.k("backward") == "vjp_recompute":  # replay the rounds from the logits
            steps = []
            sinkhorn(Arith(A.dtype, order=A.order, fma=A.fma), s["Ht_res"], kn, steps)
        dz_res = sinkhorn_vjp(A, steps, kn, dH_res) + upl("Ht_res", l)
        a = P["param.a"][l]
        proj, x, r = s["proj"], s["x"], s["r"]
        g["param.b_pre"][l] = A.sum(dz_pre, 0)
        g["param.b_post"][l] = A.sum(dz_post, 0)
        db_res[l] = A.sum(dz_res, 0)
        g["param.a"][l] = torch.stack([A.sum(A.dot(dz_pre, proj["phi_pre"], -1), 0),
                                       A.sum(A.dot(dz_post, proj["phi_post"], -1), 0),
                                       A.sum(A.dot(dz_res.reshape(T, -1), proj["phi_res"], -1), 0)])
        xn = div(A, x, r)
        dxn = 0
        for k, dz in (("phi_pre", dz_pre), ("phi_post", dz_post), ("phi_res", dz_res.reshape(T, -1))):
            dp = a[("phi_pre", "phi_post", "phi_res").index(k)] * dz  # [T, out]
            dphi[k][l] = A.sum(xn.unsqueeze(-1) * dp.unsqueeze(1), 0)
            dxn = dxn + A.mv(phi[k][l], dp)
        dx = div(A, dxn - xn * A.mean(dxn * xn).unsqueeze(-1), r)  # RMSNorm^T, gain 1
        dX = dXp + dx.reshape(T, n, C)
    grads = {"grad.input.e": A.sum(dX, 1)}
    if "param.W1" not in P:
        grads["grad.input.v"] = torch.stack(dv[::-1], 1)
    if cfg.get("res_layout", "out_in") == "in_out":
        dphi["phi_res"] = swap_cols(dphi["phi_res"], n)
        db_res = db_res.transpose(-1, -2)
    if cfg.get("phi_layout", "in_out") == "out_in":
        dphi = {k: v.transpose(-1, -2) for k, v in dphi.items()}
    g.update({"param." + k: v for k, v in dphi.items()})
    g["param.b_res"] = db_res
    grads.update({"grad." + k: v for k, v in g.items()})
    return out, grads
