"""Hyper-Connections at op level (docs/hc_ops.md), on lucidrains' storage: residual H [T, n, C],
static_alpha [n, n+1] (column 0 A_m, columns 1..n A_r), static_beta [n], dynamic_alpha_fn [C, n+1],
dynamic_alpha_scale [1], dynamic_beta_fn [C], dynamic_beta_scale [1], norm_gain [C] (= gamma + 1),
norm_bias [C] (LayerNorm).

    width:        the coefficients of H (hc.coefficients: every knob of hc.py), h = sum_j A_m[j] H_j,
                  H'_i = sum_j A_r[j, i] H_j, alpha = [A_m | A_r], beta = B
    depth:        Y_i = B_i x + H'_i
    depth_width:  depth, then width on its result.
lucidrains' RMSNorm form, F.normalize(x) * sqrt(C) * gain, is not a variant: at the corpus's
C = 16 and 1024 (powers of 4, sqrt(C) and sum/C exact) and ln_eps 1e-30 it is bit-identical to
rms_norm (measured: a variant of it differed from natural on none of its runs).
Backward: autograd."""
import torch

from . import hc


def as_hc(P, cfg):
    """lucidrains' parameters as hc.py's one-layer ones."""
    sa = P["param.static_alpha"]
    Q = {"param.am": sa[:, 0].unsqueeze(0), "param.ar": sa[:, 1:].unsqueeze(0), "param.b": P["param.static_beta"].unsqueeze(0)}
    if cfg.get("dynamic", False):
        W = P["param.dynamic_alpha_fn"]
        Q.update({"param.wm": W[:, 0].unsqueeze(0), "param.wr": W[:, 1:].unsqueeze(0),
                  "param.wb": P["param.dynamic_beta_fn"].unsqueeze(0),
                  "param.scale": torch.stack([P["param.dynamic_alpha_scale"][0], P["param.dynamic_beta_scale"][0]]).unsqueeze(0),
                  "param.ln_gain": P["param.norm_gain"].unsqueeze(0)})
        if "param.norm_bias" in P:
            Q["param.ln_bias"] = P["param.norm_bias"].unsqueeze(0)
    return Q


def coefficients(A, P, cfg, H):
    return hc.coefficients(A, as_hc(P, cfg), cfg, 0, H)


def forward(A, P, cfg):
    op, out = cfg["op"], {}
    if op != "width":
        Hc, x, B = P["input.carried"], P["input.branch_output"], P["input.beta"]
        H = A.fmadd(B.unsqueeze(-1), x.unsqueeze(1), Hc)
        out["output.residual"] = A.store(H)
        H = A.stream(H)
    else:
        H = P["input.residual"]
    if op != "depth":
        Am, Ar, B = coefficients(A, P, cfg, H)
        out["output.branch_input"] = A.store(A.dot(H, Am.unsqueeze(-1), 1))
        out["output.carried"] = A.store(A.dot(H.unsqueeze(1), Ar.transpose(1, 2).unsqueeze(-1), 2))
        out["output.alpha"] = A.store(torch.cat([Am.unsqueeze(-1), Ar], -1))
        out["output.beta"] = A.store(B)
    return out
