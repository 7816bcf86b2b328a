"""Linear Depth Memory at op level (docs/ldm_ops.md): one layer's write and readout over G groups,
M tokens, in a kernel's storage: M [T, G, dv, dk], P [T, G, dk, dk], q, k [T, G, dk], v [T, d],
omega [T, G], lambda, beta [G].

    rls:   ldm.rls_step (every p_form knob of ldm.py; P stays float32)
    outer: M' = M + v k^T;  delta: M' = M + beta (v - M k) k^T
    r = concat_g M'_g q_g, read from M' as stored (A.stream: the activation dtype).
P is symmetric; its gradient is the symmetric one, (dP + dP^T) / 2 (read through (P + P^T) / 2).
Backward: autograd."""
from . import ldm


def forward(A, P, cfg):
    op, G, dk, d = cfg["op"], cfg["groups"], cfg["dk"], cfg["d"]
    M, q, k = P["input.M"], P["input.q"], P["input.k"]
    T = M.shape[0]
    v = P["input.v"].reshape(T, G, d // G)
    out = {}
    if op == "outer":
        M = A.fmadd(v.unsqueeze(-1), k.unsqueeze(-2), M)
    elif op == "delta":
        u = P["param.beta"].unsqueeze(-1) * (v - A.mv(M, k))
        M = A.fmadd(u.unsqueeze(-1), k.unsqueeze(-2), M)
    else:
        Ps = (P["input.P"] + P["input.P"].transpose(-1, -2)) / 2  # exact on the symmetric input; the gradient among symmetric P
        M, Pm = ldm.rls_step(A, M, Ps, k, v, P["input.omega"], P["param.lambda"],
                             cfg.get("p_update", "symmetric"))
        out["output.P"] = A.store(Pm)
    M = A.stream(M)
    out["output.M"] = A.store(M)
    out["output.r"] = A.store(A.mv(M, q).reshape(T, d))
    return out
