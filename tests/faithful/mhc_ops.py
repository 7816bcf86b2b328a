"""mHC at op level (docs/mhc_ops.md), on the public kernels' storage: the residual X [T, n, C],
fn [2n + n^2, nC] (rows pre | post | comb, comb row in*n + out), hc_scale [3], hc_base [2n + n^2],
comb_mix [T, in, out] = H_res transposed.

    post:      X_i <- sum_j H_res[i, j] X_j + H_post[i] x            (H_res = comb_mix^T)
    pre:       the coefficients of X (mhc.coefficients, every knob of mhc.py), h = sum_j H_pre[j] X_j
    post_pre:  post, then pre on its result.
    head:      DeepSeek-V4's hc_head on hc_head_fn [n, nC], hc_head_scale [1], hc_head_base [n]:
               w = sigmoid(a (hc_head_fn x') + b) + head_eps, y = sum_j w_j X_j.
Backward: autograd."""
from . import mhc


def layer(P, cfg):
    """fn, hc_scale, hc_base as mhc.py's one-layer parameters ([1, nC, out], paper orientation)."""
    n = cfg["n"]
    fn, base = P["param.fn"], P["param.hc_base"]
    Q = {"param.a": P["param.hc_scale"].unsqueeze(0), "param.b_pre": base[:n].unsqueeze(0),
         "param.b_post": base[n:2 * n].unsqueeze(0)}
    phi = {"phi_pre": fn[:n].T.unsqueeze(0), "phi_post": fn[n:2 * n].T.unsqueeze(0),
           "phi_res": mhc.swap_cols(fn[2 * n:].T, n).unsqueeze(0)}
    return Q, phi, base[2 * n:].reshape(n, n).T.unsqueeze(0)


def head(A, P, cfg, X):
    """hc_head: the weights from the RMS-normalised streams (mhc.projections: norm_after, norm_mul),
    then the mix."""
    kn = mhc.knobs(cfg)
    T, n, C = X.shape
    x = X.reshape(T, n * C)
    r = A.rms(x, A.const(kn["rms_eps"])).unsqueeze(-1)
    z = P["param.hc_head_scale"][0] * mhc.projections(A, {"w": P["param.hc_head_fn"]}, x, r)["w"] + P["param.hc_head_base"]
    w = mhc.sigmoid(A, z) + kn["head_eps"]
    return {"output.hidden": A.store(A.dot(X, w.unsqueeze(-1), 1))}


def forward(A, P, cfg):
    op, out = cfg["op"], {}
    X = P["input.residual"]
    if op == "head":
        return head(A, P, cfg, X)
    if op != "pre":
        H_res = P["input.comb_mix"].transpose(-1, -2)
        mix = A.dot(X.unsqueeze(1), H_res.unsqueeze(-1), 2)  # [T, i, C] = sum_j H_res[i, j] X_j
        X = A.fmadd(P["input.post_mix"].unsqueeze(-1), P["input.x"].unsqueeze(1), mix)
        out["output.residual"] = A.store(X)
        X = A.stream(X)
    if op != "post":
        Q, phi, b_res = layer(P, cfg)
        H_pre, H_post, H_res, _ = mhc.coefficients(A, Q, cfg, mhc.knobs(cfg), phi, b_res, 0, X)
        out["output.layer_input"] = A.store(A.dot(X, H_pre.unsqueeze(-1), 1))
        out["output.pre_mix"] = A.store(H_pre)
        out["output.post_mix"] = A.store(H_post)
        out["output.comb_mix"] = A.store(H_res.transpose(-1, -2))
    return out
