"""Linear Depth Memory (docs/ldm.md, shared/spec/ldm-math.md): a residual x and per group g a
memory M_g (d/G x dk) (RLS: and P_g = R^-1, P_{-1} = alpha I); per layer l

    x_l = x_{l-1} + v_l                                    (write_residual)
    outer: M += v k^T;  delta: M += beta (v - M k) k^T;  rls:
        pi = P k, gamma = lambda + omega k.pi, g = pi / gamma, M += omega (v - M k) g^T,
        P = (P - omega g pi^T) / lambda, symmetric: P = (P + P^T) / 2 (joseph: its own form)
    h_{l+1} = x_l + concat_g M_g q_g  (read_residual; else M q only, and h_0 = 0), h_0 = e, out = the read after L.

Model level: q = normalize(MLP_q(x_l)), (k, omega) from MLP_k(x_l) (or x_{l-1} with keys_from =
x_prev), omega = softplus, normalize per group. Knob `p_form` (symmetric and naive updates; all
equal in exact arithmetic, docs/ldm.md): `spec`, `avg_before` ((D + D^T) / (2 lambda)), `triangle`
(the upper triangle of D / lambda, mirrored), `gamma` (D = P - (omega / gamma) pi pi^T).
Backward: autograd, or `vjp` (hand-written rls_step_vjp of docs/ldm.md, kernel level, RLS)."""
import torch

from .layer import layer_fn, mlp


def softplus(x):
    return torch.clamp(x, min=0) + torch.log1p(torch.exp(-torch.abs(x)))


def normalize(A, z):
    return z / torch.sqrt(A.sum(z * z)).unsqueeze(-1)


def addresses(A, P, cfg, l, x_l, x_prev):
    G, dk = cfg["groups"], cfg["dk"]
    if "input.q" in P:
        return (P["input.q"][:, l].reshape(-1, G, dk), P["input.k"][:, l].reshape(-1, G, dk),
                P["input.omega"][:, l])
    T = x_l.shape[0]
    q = normalize(A, mlp(A, P, "param.mlp_q", x_l).reshape(T, G, dk))
    zk = mlp(A, P, "param.mlp_k", x_prev if cfg.get("keys_from", "x_l") == "x_prev" else x_l)
    return q, normalize(A, zk[:, :G * dk].reshape(T, G, dk)), softplus(zk[:, G * dk:])


def outer(a, b):
    return a.unsqueeze(-1) * b.unsqueeze(-2)


def rls_step(A, M, Pm, k, v, w, lam, update):
    pi = A.mv(Pm, k)
    gamma = lam + w * A.dot(k, pi)
    g = pi / gamma.unsqueeze(-1)
    u = v - A.mv(M, k)
    M = A.fmadd((w.unsqueeze(-1) * u).unsqueeze(-1), g.unsqueeze(-2), M)
    lam2 = lam.unsqueeze(-1).unsqueeze(-1)
    if update == "joseph":
        dk = k.shape[-1]
        I = torch.eye(dk, dtype=k.dtype)
        Km = I - outer(w.unsqueeze(-1) * g, k)
        KP = A.dot(Km.unsqueeze(-2), Pm.transpose(-1, -2).unsqueeze(-3), -1)  # Km @ P
        KPK = A.dot(KP.unsqueeze(-2), Km.unsqueeze(-3), -1)  # (Km P) @ Km^T
        return M, (KPK + lam2 * w.unsqueeze(-1).unsqueeze(-1) * outer(g, g)) / lam2
    form = A.k("p_form", "spec")
    if form == "gamma":
        D = A.fmadd(-(w / gamma).unsqueeze(-1).unsqueeze(-1) * pi.unsqueeze(-1), pi.unsqueeze(-2), Pm)
    else:
        D = A.fmadd(-(w.unsqueeze(-1) * g).unsqueeze(-1), pi.unsqueeze(-2), Pm)
    if update == "naive" and form == "spec":
        return M, D / lam2
    if form == "avg_before":
        return M, (D + D.transpose(-1, -2)) / (2 * lam2)
    if form == "triangle":
        up = torch.triu(D / lam2)
        return M, up + torch.triu(D / lam2, 1).transpose(-1, -2)
    Pn = D / lam2
    return M, (Pn + Pn.transpose(-1, -2)) / 2


def forward(A, P, cfg, save=None):
    L, G, dk, d = cfg["layers"], cfg["groups"], cfg["dk"], cfg["d"]
    dv = d // G
    write = cfg.get("write", "rls")
    update = cfg.get("p_update", "symmetric")
    rr, wr = cfg.get("read_residual", True), cfg.get("write_residual", True)
    e = P["input.e"]
    T = e.shape[0]
    x = e
    M = e.new_zeros(T, G, dv, dk)
    Pm = None
    if write == "rls":
        Pm = (P["config.alpha"] * torch.eye(dk, dtype=e.dtype)).expand(T, G, dk, dk)
    h = e if rr else torch.zeros_like(e)  # memory-only read: h_0 = M_{-1} q = 0
    hs, vs = [], []
    for l in range(L):
        hs.append(A.store(h))
        v = layer_fn(A, P, l, h)
        vs.append(A.store(v))
        v = A.stream(v)
        x_prev = x
        if wr:
            x = A.stream(x + v)
        q, k, w = addresses(A, P, cfg, l, x, x_prev)
        vg = v.reshape(T, G, dv)
        if save is not None:
            save.append(dict(M=M, P=Pm, q=q, k=k, w=w, v=vg))
        if write == "outer_product":
            M = A.fmadd(vg.unsqueeze(-1), k.unsqueeze(-2), M)
        elif write == "delta":
            u = P["param.beta"][l].unsqueeze(-1) * (vg - A.mv(M, k))
            M = A.fmadd(u.unsqueeze(-1), k.unsqueeze(-2), M)
        else:
            # P stays in float32 between layers: the recipe stores the stream, M and q in the
            # 16-bit dtype, not P (docs/fixtures.md "Tolerance rule"; P in bf16 is a numerical
            # failure measured in docs/stability.md, not a correct kernel).
            M, Pm = rls_step(A, M, Pm, k, vg, w, P["param.lambda"][l], update)
        M = A.stream(M)
        r = A.mv(M, q).reshape(T, d)
        h = x + r if rr else r
    out = {"output.h": torch.stack(hs, 1), "output.out": A.store(h), "output.M": A.store(M)}
    if write == "rls":
        out["output.P"] = A.store(Pm)
    if "param.W1" in P:
        out["output.v"] = torch.stack(vs, 1)
    return out


def rls_step_vjp(A, M, Pm, k, v, w, lam, dM2, dP2, update):
    """docs/ldm.md "Backward": (dM, dP, dk, dv, dw, dlambda) of one RLS step, vectorized over [T, G]."""
    pi = A.mv(Pm, k)
    gamma = lam + w * A.dot(k, pi)
    g = pi / gamma.unsqueeze(-1)
    u = v - A.mv(M, k)
    lam2 = lam.unsqueeze(-1).unsqueeze(-1)
    D = Pm - outer(w.unsqueeze(-1) * g, pi)
    dQ = dP2 if update == "naive" else (dP2 + dP2.transpose(-1, -2)) / 2
    Q = D / lam2
    dP = dQ / lam2
    dT = -dQ / lam2
    dlam = -A.sum(A.sum(dQ * Q), -1) / lam
    dw = A.dot(g, A.mv(dT, pi))
    dg = w.unsqueeze(-1) * A.mv(dT, pi)
    dpi = w.unsqueeze(-1) * A.mv(dT.transpose(-1, -2), g)
    dMg = A.mv(dM2, g)  # dM' g
    dw = dw + A.dot(u, dMg)
    du = w.unsqueeze(-1) * dMg
    dg = dg + w.unsqueeze(-1) * A.mv(dM2.transpose(-1, -2), u)
    dv = du
    dk = -A.mv(M.transpose(-1, -2), du)
    dM = dM2 - outer(du, k)
    dpi = dpi + dg / gamma.unsqueeze(-1)
    dgamma = -A.dot(dg, g) / gamma
    dlam = dlam + dgamma
    dw = dw + dgamma * A.dot(k, pi)
    dk = dk + (dgamma * w).unsqueeze(-1) * pi
    dpi = dpi + (dgamma * w).unsqueeze(-1) * k
    dP = dP + outer(dpi, k)
    dk = dk + A.mv(Pm.transpose(-1, -2), dpi)
    return dM, dP, dk, dv, dw, dlam


def vjp(A, P, cfg, up):
    """Hand-written backward of the RLS kernel (symmetric and naive updates; joseph: the step's
    VJP by autograd of rls_step inside the same reverse walk)."""
    L, G, dk, d = cfg["layers"], cfg["groups"], cfg["dk"], cfg["d"]
    dv_ = d // G
    update = cfg.get("p_update", "symmetric")
    rr, wr = cfg.get("read_residual", True), cfg.get("write_residual", True)
    save = []
    with torch.no_grad():
        out = forward(A, P, cfg, save)
    T = P["input.e"].shape[0]
    zero = lambda t: torch.zeros_like(t)
    dout = up["output.out"]
    dx = dout if rr else zero(dout)
    last = save[-1]
    # the streams after the last layer: recompute M_L from the saved state (one step)
    dM = up["output.M"].clone()
    dP = up["output.P"].clone()
    lam = P["param.lambda"]
    # M_{L-1} after the last write is what the final read used
    with torch.no_grad():
        ML, _ = rls_step(A, last["M"], last["P"], last["k"], last["v"], last["w"], lam[L - 1], update)
    dg_out = dout.reshape(T, G, dv_)
    dM = dM + outer(dg_out, last["q"])
    dq = A.mv(ML.transpose(-1, -2), dg_out)
    gq, gk, gw, gv, glam = [None] * L, [None] * L, [None] * L, [None] * L, [None] * L
    de = zero(dout)
    for l in range(L - 1, -1, -1):
        s = save[l]
        gq[l] = dq.reshape(T, G * dk)
        if update == "joseph":
            with torch.enable_grad():
                ins = [t.detach().requires_grad_(True) for t in (s["M"], s["P"], s["k"], s["v"], s["w"], lam[l].expand(T, G))]
                Mo, Po = rls_step(A, *ins, update)
                gr = torch.autograd.grad((Mo, Po), ins, (dM, dP), allow_unused=True)
            dMp, dPp, dkl, dvg, dwl, dll = [x if x is not None else zero(i) for x, i in zip(gr, ins)]
        else:
            dMp, dPp, dkl, dvg, dwl, dll = rls_step_vjp(A, s["M"], s["P"], s["k"], s["v"], s["w"], lam[l], dM, dP, update)
        gk[l], gw[l], glam[l] = dkl.reshape(T, G * dk), dwl, dll
        gv[l] = dvg.reshape(T, d) + (dx if wr else 0)
        dM, dP = dMp, dPp
        # read^T of h_l (the input of layer l): h_0 = e, else x_{l-1} + M_{l-1} q_{l-1}
        dh = up["output.h"][:, l]
        if l == 0:
            de = dh if rr else zero(dh)
        else:
            prev = save[l - 1]
            if rr:
                dx = dx + dh
            dhg = dh.reshape(T, G, dv_)
            dM = dM + outer(dhg, prev["q"])
            dq = A.mv(s["M"].transpose(-1, -2), dhg)
    de = de + dx  # x_{-1} = e
    dalpha = A.sum(A.sum(torch.diagonal(dP, dim1=-2, dim2=-1).reshape(T, -1), -1), 0).reshape(1)
    grads = {"grad.input.e": de, "grad.input.q": torch.stack(gq, 1), "grad.input.k": torch.stack(gk, 1),
             "grad.input.omega": torch.stack(gw, 1), "grad.input.v": torch.stack(gv, 1),
             "grad.param.lambda": A.sum(torch.stack(glam, 0), 1), "grad.config.alpha": dalpha}
    return out, grads
