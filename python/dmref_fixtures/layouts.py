"""Converters between the tensor layouts public mHC implementations use and
dmref's (docs/python.md, "Layouts"). numpy only; every function is a pure
permutation of its input (no arithmetic), so a round trip is exact.

dmref's mHC tensors, per layer l (docs/fixtures.md): phi_pre, phi_post
[nC, n], phi_res [nC, n^2] with column i*n + j giving Ht_res[i, j] (paper
orientation: entry (i, j) weighs stream j into stream i), a = (a_pre, a_post,
a_res), b_pre, b_post [n], b_res [n, n] (paper orientation).

DeepSeek-V4 / TileKernels fuse the three projections into one torch Linear
weight fn [(2 + n) n, nC] ([out, in]) whose outputs are [pre | post | comb],
with a base vector [(2 + n) n] and scale [3]; comb is stored [in, out], the
transpose of the paper's H_res (mhc.hpp, mhc_to_storage). The same problem can
also be handed to dmref as is, with config res_layout = "in_out" and
phi_layout = "out_in" (reference/include/dmref/conformance/evaluate_impl.hpp).

Every argument is checked before anything is converted: a shape or dtype
that does not fit raises ValueError naming the function and the argument
("mhc_to_fused: a: shape [4], expected [3]"). Arrays may be numpy arrays,
lists or torch tensors of any real dtype (bf16 and tensors that require grad
included: they are detached and converted exactly to float64); numpy inputs
keep their dtype.

The op-level problems (scheme mhc_ops, docs/mhc_ops.md) keep the kernels'
storage; mhc_ops_inputs / mhc_ops_outputs only name the kernels' arguments and
results as the fixture's tensors (flattening leading token axes, squeezing
post_layer_mix [M, n, 1], reshaping comb_mix [M, n^2]). Op head is DeepSeek-V4's
hc_head(x, hc_fn, hc_scale, hc_base): its parameters hc_head_fn [n, nC],
hc_head_scale [1], hc_head_base [n] are given as fn, hc_scale, hc_base.

Hyper-Connections at op level (scheme hc_ops, docs/hc_ops.md) keep lucidrains'
storage; hc_ops_inputs / hc_ops_outputs name its module's parameters and the
results of width_connection / depth_connection as the fixture's tensors. Their one
computation: norm_gain = float32(norm.gamma + 1), the gain the module multiplies by.
"""
import numpy as np

__all__ = ["mhc_from_fused", "mhc_to_fused", "res_from_storage", "res_to_storage", "mhc_ops_inputs", "mhc_ops_outputs",
           "hc_ops_inputs", "hc_ops_outputs", "attnres_ops_kernel_args", "attnres_ops_outputs", "ldm_ops_inputs", "ldm_ops_outputs",
           "ldm_ops_grads"]


def _array(x, fn, name):
    """x as a numpy array of real numbers; torch tensors (any dtype, requires_grad) exactly as float64."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch, without importing it
        if x.is_complex():
            raise ValueError(f"{fn}: {name}: a complex tensor (expected real numbers)")
        x = x.detach().cpu().double().numpy()
    a = np.asarray(x)
    if a.dtype.kind not in "biuf":
        raise ValueError(f"{fn}: {name}: dtype {a.dtype} (expected real numbers)")
    return a


def _shape(a, fn, name, want):
    if tuple(a.shape) != tuple(want):
        raise ValueError(f"{fn}: {name}: shape [{','.join(map(str, a.shape))}], expected [{','.join(map(str, want))}]")
    return a


def _n(n, fn):
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{fn}: n: {n!r} is not an integer >= 1")
    return int(n)


def _square(x, fn, name):
    a = _array(x, fn, name)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{fn}: {name}: shape [{','.join(map(str, a.shape))}], expected [..., n, n]")
    return a


def _swap_in_out(cols, n):
    """Columns indexed a*n + b -> b*n + a on the last axis (an involution)."""
    x = np.asarray(cols)
    return x.reshape(x.shape[:-1] + (n, n)).swapaxes(-1, -2).reshape(x.shape)


def res_to_storage(h_res):
    """Paper-orientation H_res [..., n, n] -> DeepSeek's comb [..., in, out]."""
    return np.swapaxes(_square(h_res, "res_to_storage", "h_res"), -1, -2)


def res_from_storage(comb):
    """DeepSeek's comb [..., in, out] -> paper-orientation H_res [..., n, n]."""
    return np.swapaxes(_square(comb, "res_from_storage", "comb"), -1, -2)


def mhc_from_fused(fn, base, scale, n):
    """One layer of DeepSeek-V4's fused parameters -> dmref's param tensors.

    fn [(2+n) n, nC], base [(2+n) n], scale [3] -> dict with phi_pre, phi_post
    [nC, n], phi_res [nC, n^2], a [3], b_pre, b_post [n], b_res [n, n].
    Stack the dicts of L layers on a new first axis for a dmref problem."""
    f = "mhc_from_fused"
    n = _n(n, f)
    m = (2 + n) * n
    fn = _array(fn, f, "fn")
    if fn.ndim != 2 or fn.shape[0] != m or fn.shape[1] < 1 or fn.shape[1] % n:
        raise ValueError(f"{f}: fn: shape [{','.join(map(str, fn.shape))}], expected [{m}, nC] with nC a multiple "
                         f"of n = {n}")
    base = _shape(_array(base, f, "base"), f, "base", (m,))
    scale = _shape(_array(scale, f, "scale"), f, "scale", (3,))
    w = fn.T  # [nC, (2+n) n]: x' phi
    return {"phi_pre": w[:, :n].copy(), "phi_post": w[:, n:2 * n].copy(),
            "phi_res": _swap_in_out(w[:, 2 * n:], n), "a": scale.copy(),
            "b_pre": base[:n].copy(), "b_post": base[n:2 * n].copy(),
            "b_res": np.swapaxes(base[2 * n:].reshape(n, n), -1, -2).copy()}


def mhc_to_fused(p, n):
    """The inverse of mhc_from_fused: dmref's tensors of one layer -> (fn, base, scale)."""
    f = "mhc_to_fused"
    n = _n(n, f)
    for k in ("phi_pre", "phi_post", "phi_res", "a", "b_pre", "b_post", "b_res"):
        if k not in p:
            raise ValueError(f"{f}: {k}: missing (one layer's phi_pre, phi_post, phi_res, a, b_pre, b_post, b_res)")
    x = {k: _array(p[k], f, k) for k in ("phi_pre", "phi_post", "phi_res", "a", "b_pre", "b_post", "b_res")}
    pre = x["phi_pre"]
    if pre.ndim != 2 or pre.shape[0] < 1 or pre.shape[0] % n:
        raise ValueError(f"{f}: phi_pre: shape [{','.join(map(str, pre.shape))}], expected [nC, {n}] with nC a "
                         f"multiple of n = {n}")
    nc = pre.shape[0]
    for k, want in (("phi_pre", (nc, n)), ("phi_post", (nc, n)), ("phi_res", (nc, n * n)), ("a", (3,)),
                    ("b_pre", (n,)), ("b_post", (n,)), ("b_res", (n, n))):
        _shape(x[k], f, k, want)
    w = np.concatenate([x["phi_pre"], x["phi_post"], _swap_in_out(x["phi_res"], n)], axis=1)
    base = np.concatenate([x["b_pre"], x["b_post"], np.swapaxes(x["b_res"], -1, -2).reshape(n * n)])
    return w.T.copy(), base, x["a"].copy()


_OPS = {"pre": (True, False), "post": (False, True), "post_pre": (True, True), "head": (False, False)}  # (has pre, has post)


def _op(op, fn):
    if op not in _OPS:
        raise ValueError(f"{fn}: op: {op!r} is not one of {', '.join(_OPS)}")
    return _OPS[op]


def _tokens(a, fn, name, tail):
    """a [..., *tail] -> [M, *tail] (the kernels take any leading token axes)."""
    k = len(tail)
    if a.ndim < k + 1 or tuple(a.shape[a.ndim - k:]) != tuple(tail):
        raise ValueError(f"{fn}: {name}: shape [{','.join(map(str, a.shape))}], expected [..., "
                         f"{', '.join(map(str, tail))}]")
    return a.reshape((-1,) + tuple(tail)).copy()


def mhc_ops_inputs(op, residual, fn=None, hc_scale=None, hc_base=None, x=None, post_layer_mix=None,
                   comb_res_mix=None):
    """The arguments of the public kernels -> an mhc_ops problem's tensors (and its sizes).

    pre:  flag-gems / TileKernels mhc_pre(residual [..., n, C], fn [(2+n) n, nC], hc_scale [3],
          hc_base [(2+n) n], ...);
    post: mhc_post(x [..., C], residual [..., n, C], post_layer_mix [..., n] or [..., n, 1],
          comb_res_mix [..., n, n] stored [in, out]);
    post_pre: post's arguments and the next layer's fn, hc_scale, hc_base;
    head: DeepSeek-V4's hc_head(x [..., n, C], hc_fn [n, nC], hc_scale [1], hc_base [n]) as
          residual, fn, hc_scale, hc_base.
    Returns (tensors, {"tokens": M, "n": n, "d": C}) with tensors named input.residual, input.x,
    input.post_mix, input.comb_mix, param.fn, param.hc_scale, param.hc_base, or (head)
    param.hc_head_fn, param.hc_head_scale, param.hc_head_base (those of the op)."""
    f = "mhc_ops_inputs"
    pre, post = _op(op, f)
    head = op == "head"
    r = _array(residual, f, "residual")
    if r.ndim < 3:
        raise ValueError(f"{f}: residual: shape [{','.join(map(str, r.shape))}], expected [..., n, C]")
    n, C = int(r.shape[-2]), int(r.shape[-1])
    t = {"input.residual": _tokens(r, f, "residual", (n, C))}
    M = t["input.residual"].shape[0]
    given = {"fn": fn, "hc_scale": hc_scale, "hc_base": hc_base, "x": x, "post_layer_mix": post_layer_mix,
             "comb_res_mix": comb_res_mix}
    want = (["fn", "hc_scale", "hc_base"] if pre or head else []) + (["x", "post_layer_mix", "comb_res_mix"] if post else [])
    for k, v in given.items():
        if (v is None) == (k in want):
            raise ValueError(f"{f}: {k}: " + (f"missing (op {op})" if v is None else f"not an argument of op {op}"))
    if post:
        t["input.x"] = _tokens(_array(x, f, "x"), f, "x", (C,))
        pm = _array(post_layer_mix, f, "post_layer_mix")
        if pm.ndim >= 1 and pm.shape[-1] == 1 and pm.ndim >= 2 and pm.shape[-2] == n:
            pm = pm[..., 0]
        t["input.post_mix"] = _tokens(pm, f, "post_layer_mix", (n,))
        t["input.comb_mix"] = _tokens(_array(comb_res_mix, f, "comb_res_mix"), f, "comb_res_mix", (n, n))
        for k in ("input.x", "input.post_mix", "input.comb_mix"):
            if t[k].shape[0] != M:
                raise ValueError(f"{f}: {k[6:]}: {t[k].shape[0]} tokens, residual has {M}")
    if pre or head:
        m, k = (n, 1) if head else ((2 + n) * n, 3)
        names = ("param.hc_head_fn", "param.hc_head_scale", "param.hc_head_base") if head else \
            ("param.fn", "param.hc_scale", "param.hc_base")
        for name, arg, v, want in zip(names, ("fn", "hc_scale", "hc_base"), (fn, hc_scale, hc_base),
                                      ((m, n * C), (k,), (m,))):
            t[name] = _shape(_array(v, f, arg), f, arg, want).copy()
    return t, {"tokens": int(M), "n": n, "d": C}


def mhc_ops_outputs(op, n, post_mix=None, comb_mix=None, layer_input=None, residual=None, pre_mix=None,
                    hidden=None):
    """The results of the public kernels -> the fixture's output names: flag-gems' mhc_pre returns
    (post_mix [M, n, 1], comb_mix [M, n, n] or [M, n^2], layer_input [M, C]), mhc_post the next
    residual [M, n, C], DeepSeek-V4's hc_head the hidden state [M, C]. pre_mix (H_pre) only where a
    kernel returns it. Leading token axes flattened."""
    f = "mhc_ops_outputs"
    pre, post = _op(op, f)
    n = _n(n, f)
    out = {}
    if op == "head":
        if hidden is None:
            raise ValueError(f"{f}: hidden: missing (op head)")
        if any(v is not None for v in (post_mix, comb_mix, layer_input, residual, pre_mix)):
            raise ValueError(f"{f}: op head returns only the hidden state")
        h = _array(hidden, f, "hidden")
        return {"output.hidden": _tokens(h, f, "hidden", (h.shape[-1] if h.ndim else 0,))}
    if hidden is not None:
        raise ValueError(f"{f}: hidden: not a result of op {op} (only of head)")
    if post:
        if residual is None:
            raise ValueError(f"{f}: residual: missing (op {op})")
        r = _array(residual, f, "residual")
        out["output.residual"] = _tokens(r, f, "residual", (n, r.shape[-1] if r.ndim else 0))
    if pre:
        for k, v in (("post_mix", post_mix), ("comb_mix", comb_mix), ("layer_input", layer_input)):
            if v is None:
                raise ValueError(f"{f}: {k}: missing (op {op})")
        pm = _array(post_mix, f, "post_mix")
        if pm.ndim >= 2 and pm.shape[-1] == 1 and pm.shape[-2] == n:
            pm = pm[..., 0]
        out["output.post_mix"] = _tokens(pm, f, "post_mix", (n,))
        cm = _array(comb_mix, f, "comb_mix")
        if cm.ndim >= 1 and cm.shape[-1] == n * n and not (cm.ndim >= 2 and cm.shape[-2:] == (n, n)):
            cm = cm.reshape(cm.shape[:-1] + (n, n))
        out["output.comb_mix"] = _tokens(cm, f, "comb_mix", (n, n))
        li = _array(layer_input, f, "layer_input")
        out["output.layer_input"] = _tokens(li, f, "layer_input", (li.shape[-1] if li.ndim else 0,))
        if pre_mix is not None:
            out["output.pre_mix"] = _tokens(_array(pre_mix, f, "pre_mix"), f, "pre_mix", (n,))
    elif any(v is not None for v in (post_mix, comb_mix, layer_input, pre_mix)):
        raise ValueError(f"{f}: op post returns only the residual")
    return out


_HC_OPS = ("width", "depth", "depth_width")


def hc_ops_inputs(op, n, residual=None, module=None, branch_output=None, carried=None, beta=None):
    """lucidrains' HyperConnections (hyper-connections) -> an hc_ops problem's tensors and config
    (docs/hc_ops.md, "Conventions"). `residual` and `carried` in the module's '(b s) d' layout
    ([M n, C], or [M, n, C]); `beta` as width_connection returns it ([M, n, 1] or [M, n]);
    `module` (ops width, depth_width): the HyperConnections, or a dict of its parameters by name
    (static_alpha, static_beta, dynamic_alpha_fn, dynamic_alpha_scale, dynamic_beta_fn,
    dynamic_beta_scale, norm.gamma; static HC: only the first two).
    The one computation: norm_gain = float32(norm.gamma + 1), the gain the module multiplies
    by (its RMSNorm has no eps: use a negligible config ln_eps, the corpus's 1e-30).
    Returns (tensors, config keys: op, tokens, n, d, and dynamic / norm / ln_eps for a width)."""
    f = "hc_ops_inputs"
    if op not in _HC_OPS:
        raise ValueError(f"{f}: op: {op!r} is not one of {', '.join(_HC_OPS)}")
    n = _n(n, f)
    width, depth = op != "depth", op != "width"
    given = {"residual": residual, "module": module, "branch_output": branch_output, "carried": carried, "beta": beta}
    want = (["residual"] if op == "width" else []) + (["module"] if width else []) + \
        (["branch_output", "carried", "beta"] if depth else [])
    for k, v in given.items():
        if (v is None) == (k in want):
            raise ValueError(f"{f}: {k}: " + (f"missing (op {op})" if v is None else f"not an argument of op {op}"))
    t = {}

    def streams(x, name):
        a = _array(x, f, name)
        if a.ndim < 2 or a.shape[0] % n:
            raise ValueError(f"{f}: {name}: shape [{','.join(map(str, a.shape))}], expected [M n, C] or [M, n, C]")
        return a.reshape(-1, n, a.shape[-1]).copy()
    if op == "width":
        t["input.residual"] = streams(residual, "residual")
    if depth:
        t["input.carried"] = streams(carried, "carried")
        b = _array(beta, f, "beta")
        if b.ndim >= 1 and b.shape[-1] == 1:
            b = b[..., 0]
        t["input.beta"] = _tokens(b, f, "beta", (n,))
        t["input.branch_output"] = _tokens(_array(branch_output, f, "branch_output"), f, "branch_output",
                                           (t["input.carried"].shape[-1],))
    x = t.get("input.residual", t.get("input.carried"))
    M, C = int(x.shape[0]), int(x.shape[-1])
    cfg = {"op": op, "tokens": M, "n": n, "d": C}
    if width:
        P = module if isinstance(module, dict) else dict(module.named_parameters())
        t["param.static_alpha"] = _shape(_array(P["static_alpha"], f, "static_alpha"), f, "static_alpha", (n, n + 1)).copy()
        t["param.static_beta"] = _shape(_array(P["static_beta"], f, "static_beta"), f, "static_beta", (n,)).copy()
        dynamic = "dynamic_alpha_fn" in P
        cfg["dynamic"] = dynamic
        if dynamic:
            for k, shape in (("dynamic_alpha_fn", (C, n + 1)), ("dynamic_beta_fn", (C,)), ("dynamic_alpha_scale", (1,)),
                             ("dynamic_beta_scale", (1,))):
                t["param." + k] = _shape(_array(P[k], f, k).reshape(-1) if shape == (1,) else _array(P[k], f, k),
                                         f, k, shape).copy()
            g = _shape(_array(P["norm.gamma"], f, "norm.gamma"), f, "norm.gamma", (C,))
            t["param.norm_gain"] = (g.astype(np.float32) + np.float32(1)).astype(np.float64)
            cfg.update({"norm": "rmsnorm", "ln_eps": "1e-30"})
    return t, cfg


def hc_ops_outputs(n, branch_input=None, carried=None, alpha=None, beta=None, residual=None):
    """The module's results -> the fixture's output names: width_connection's (branch_input [M, C],
    residuals '(b s) d' as carried, beta [M, n, 1]; alpha [M, n, 1, n+1] or [M, n, n+1] where a test
    captures it), depth_connection's residual '(b s) d'. Pure reshapes."""
    f = "hc_ops_outputs"
    n = _n(n, f)
    out = {}
    if branch_input is not None:
        out["output.branch_input"] = _array(branch_input, f, "branch_input").reshape(-1, np.shape(branch_input)[-1]).copy()
    for name, v in (("carried", carried), ("residual", residual)):
        if v is not None:
            a = _array(v, f, name)
            out["output." + name] = a.reshape(-1, n, a.shape[-1]).copy()
    if alpha is not None:
        out["output.alpha"] = _tokens(_array(alpha, f, "alpha").reshape(-1, n, n + 1), f, "alpha", (n, n + 1))
    if beta is not None:
        out["output.beta"] = _tokens(_array(beta, f, "beta").reshape(-1, n), f, "beta", (n,))
    return out


_ATTNRES_OPS = ("readout", "phase1", "phase2", "partial_sum")


def _attnres_op(op, fn):
    if op not in _ATTNRES_OPS:
        raise ValueError(f"{fn}: op: {op!r} is not one of {', '.join(_ATTNRES_OPS)}")
    return op


def attnres_ops_kernel_args(op, tensors):
    """An attnres_ops problem's tensors (input.*, param.* as in the fixture) -> the arguments of the
    public two-phase kernels (flash-attn-res: docs/attnres_ops.md, "Conventions"), float64 arrays:
      block_representations [N, M, C]   input.blocks [M, N, C] made source-major (readout, phase1)
      pseudo_queries [S, C] (phase1) / pseudo_query [C]   param.w * param.g: the RMSNorm gain folded
                                        into the query (exact in float32 for bf16 and f16 inputs)
      intrablock_partial_sum [M, C]     input.partial (readout with a partial, phase2, partial_sum)
      interblock_normalized_output [M, C], interblock_lse [M]   input.o, input.lse (phase2)
      v [M, C]                          input.v (partial_sum)
    Only the arguments of the op are returned."""
    f = "attnres_ops_kernel_args"
    _attnres_op(op, f)
    t = {k: _array(v, f, k) for k, v in tensors.items()}
    out = {}
    if op in ("readout", "phase1"):
        b = t.get("input.blocks")
        if b is None or b.ndim != 3:
            raise ValueError(f"{f}: input.blocks: " + ("missing" if b is None else
                             f"shape [{','.join(map(str, b.shape))}], expected [M, N, C]"))
        out["block_representations"] = np.ascontiguousarray(b.transpose(1, 0, 2))
    if op != "partial_sum":
        for k in ("param.w", "param.g"):
            if k not in t:
                raise ValueError(f"{f}: {k}: missing (op {op})")
        w, g = t["param.w"], t["param.g"]
        if w.shape != g.shape or w.ndim != (2 if op == "phase1" else 1):
            raise ValueError(f"{f}: param.g: shape [{','.join(map(str, g.shape))}], param.w [{','.join(map(str, w.shape))}]"
                             f" (expected both [{'S, C' if op == 'phase1' else 'C'}])")
        out["pseudo_queries" if op == "phase1" else "pseudo_query"] = w * g
    if "input.partial" in t and op != "phase1":
        out["intrablock_partial_sum"] = t["input.partial"].copy()
    if op == "phase2":
        for k, name in (("input.o", "interblock_normalized_output"), ("input.lse", "interblock_lse")):
            if k not in t:
                raise ValueError(f"{f}: {k}: missing (op phase2)")
            out[name] = t[k].copy()
    if op == "partial_sum":
        for k in ("input.partial", "input.v"):
            if k not in t:
                raise ValueError(f"{f}: {k}: missing (op partial_sum)")
        out["v"] = t["input.v"].copy()
    return out


def attnres_ops_outputs(op, h=None, softmax_outputs=None, lses=None, merged_lse=None, partial=None):
    """The results of the two-phase kernels -> the fixture's output names:
      readout: h [M, C] -> output.h;  phase2: merged_output [M, C] as h -> output.h, and the merged lse [M]
      where a kernel returns it (merged_lse) -> output.lse;  phase1: softmax_outputs [S, M, C] and lses [S, M]
      (flash-attn-res's query-major storage) -> output.o [M, S, C], output.lse [M, S];
      partial_sum: partial [M, C] -> output.partial."""
    f = "attnres_ops_outputs"
    _attnres_op(op, f)
    given = {"h": h, "softmax_outputs": softmax_outputs, "lses": lses, "merged_lse": merged_lse, "partial": partial}
    want = {"readout": ["h"], "phase2": ["h"], "phase1": ["softmax_outputs", "lses"], "partial_sum": ["partial"]}[op]
    for k, v in given.items():
        if v is None and k in want:
            raise ValueError(f"{f}: {k}: missing (op {op})")
        if v is not None and k not in want and not (op == "phase2" and k == "merged_lse"):
            raise ValueError(f"{f}: {k}: not a result of op {op}")
    if op == "phase1":
        o, lse = _array(softmax_outputs, f, "softmax_outputs"), _array(lses, f, "lses")
        if o.ndim != 3 or lse.shape != o.shape[:2]:
            raise ValueError(f"{f}: softmax_outputs [{','.join(map(str, o.shape))}], lses [{','.join(map(str, lse.shape))}]:"
                             " expected [S, M, C] and [S, M]")
        return {"output.o": np.ascontiguousarray(o.transpose(1, 0, 2)), "output.lse": np.ascontiguousarray(lse.T)}
    if op == "partial_sum":
        p = _array(partial, f, "partial")
        return {"output.partial": _tokens(p, f, "partial", (p.shape[-1] if p.ndim else 0,))}
    x = _array(h, f, "h")
    out = {"output.h": _tokens(x, f, "h", (x.shape[-1] if x.ndim else 0,))}
    if merged_lse is not None:
        out["output.lse"] = _array(merged_lse, f, "merged_lse").reshape(-1).copy()
    return out


_LDM_OPS = {"rls": ("P", "omega", "lam"), "outer": (), "delta": ("beta",)}  # each op's arguments beyond M, q, k, v


def ldm_ops_inputs(op, M, q, k, v, P=None, omega=None, lam=None, beta=None):
    """A kernel's arguments -> an ldm_ops problem's tensors (and its sizes), docs/ldm_ops.md:
    M [..., G, dv, dk] (the memories before the write), q, k [..., G, dk], v [..., G dv]
    (or [..., G, dv]); rls: P [..., G, dk, dk], omega [..., G], lam [G]; delta: beta [G].
    Leading token axes flattened. Returns (tensors, {"op", "tokens", "d", "groups", "dk"})."""
    f = "ldm_ops_inputs"
    if op not in _LDM_OPS:
        raise ValueError(f"{f}: op: {op!r} is not one of {', '.join(_LDM_OPS)}")
    m = _array(M, f, "M")
    if m.ndim < 4:
        raise ValueError(f"{f}: M: shape [{','.join(map(str, m.shape))}], expected [..., G, dv, dk]")
    G, dv, dk = (int(x) for x in m.shape[-3:])
    _ldm_ops_arguments(f, op, {"P": P, "omega": omega, "lam": lam, "beta": beta}, "", "an argument")
    t = {"input.M": _tokens(m, f, "M", (G, dv, dk))}
    T = t["input.M"].shape[0]
    vv = _array(v, f, "v")
    if vv.ndim >= 2 and tuple(vv.shape[-2:]) == (G, dv):
        vv = vv.reshape(vv.shape[:-2] + (G * dv,))
    per_token = [("input.q", "q", q, (G, dk)), ("input.k", "k", k, (G, dk)), ("input.v", "v", vv, (G * dv,))]
    if op == "rls":
        per_token += [("input.P", "P", P, (G, dk, dk)), ("input.omega", "omega", omega, (G,))]
    _ldm_ops_per_token(t, f, per_token, T, "M")
    if op == "rls":
        t["param.lambda"] = _shape(_array(lam, f, "lam"), f, "lam", (G,)).copy()
    if op == "delta":
        t["param.beta"] = _shape(_array(beta, f, "beta"), f, "beta", (G,)).copy()
    return t, {"op": op, "tokens": int(T), "d": G * dv, "groups": G, "dk": dk}


def _ldm_ops_arguments(f, op, given, prefix, kind):
    """The op's optional arguments (P, omega, lam, beta) given exactly when the op has them."""
    for name, x in given.items():
        if (x is None) == (name in _LDM_OPS[op]):
            raise ValueError(f"{f}: {prefix}{name}: " + (f"missing (op {op})" if x is None else f"not {kind} of op {op}"))


def _ldm_ops_per_token(out, f, rows, T, first):
    """Each (name, argument, array, trailing shape) of `rows` as out[name], T tokens like `first`."""
    for name, arg, x, tail in rows:
        out[name] = _tokens(_array(x, f, arg), f, arg, tail)
        if out[name].shape[0] != T:
            raise ValueError(f"{f}: {arg}: {out[name].shape[0]} tokens, {first} has {T}")


def ldm_ops_outputs(op, M, r, P=None):
    """A kernel's results -> the fixture's output names: M' [..., G, dv, dk] (output.M), the
    readout r [..., d] (output.r), rls: P' [..., G, dk, dk] (output.P). Leading token axes flattened."""
    f = "ldm_ops_outputs"
    if op not in _LDM_OPS:
        raise ValueError(f"{f}: op: {op!r} is not one of {', '.join(_LDM_OPS)}")
    if (P is None) == (op == "rls"):
        raise ValueError(f"{f}: P: " + ("missing (op rls)" if P is None else f"not a result of op {op}"))
    m = _array(M, f, "M")
    if m.ndim < 4:
        raise ValueError(f"{f}: M: shape [{','.join(map(str, m.shape))}], expected [..., G, dv, dk]")
    G, dv, dk = (int(x) for x in m.shape[-3:])
    out = {"output.M": _tokens(m, f, "M", (G, dv, dk)), "output.r": _tokens(_array(r, f, "r"), f, "r", (G * dv,))}
    if P is not None:
        out["output.P"] = _tokens(_array(P, f, "P"), f, "P", (G, dk, dk))
    return out


def ldm_ops_grads(op, dM, dq, dk, dv, dP=None, domega=None, dlam=None, dbeta=None):
    """A kernel's backward results -> the fixture's gradient names (docs/ldm_ops.md, "Backward"):
    dM [..., G, dv, dk] (grad.input.M), dq, dk [..., G, dk], dv [..., G dv] (or [..., G, dv]);
    rls: dP [..., G, dk, dk], domega [..., G], dlam [G]; delta: dbeta [G]. Leading token axes
    flattened. grad.input.P is the gradient among symmetric matrices, (dP + dP^T) / 2: P is an
    inverse covariance, and P updates that are equal on every symmetric P (the spec's form, the
    symmetrised one, the upper triangle mirrored) give raw gradients that differ by an
    antisymmetric part; their symmetric parts agree. A kernel's raw dP (autograd of its own
    update) is therefore symmetrised here, as the reference symmetrises its own."""
    f = "ldm_ops_grads"
    if op not in _LDM_OPS:
        raise ValueError(f"{f}: op: {op!r} is not one of {', '.join(_LDM_OPS)}")
    _ldm_ops_arguments(f, op, {"P": dP, "omega": domega, "lam": dlam, "beta": dbeta}, "d", "a gradient")
    m = _array(dM, f, "dM")
    if m.ndim < 4:
        raise ValueError(f"{f}: dM: shape [{','.join(map(str, m.shape))}], expected [..., G, dv, dk]")
    G, dvn, dkn = (int(x) for x in m.shape[-3:])
    out = {"grad.input.M": _tokens(m, f, "dM", (G, dvn, dkn))}
    T = out["grad.input.M"].shape[0]
    vv = _array(dv, f, "dv")
    if vv.ndim >= 2 and tuple(vv.shape[-2:]) == (G, dvn):
        vv = vv.reshape(vv.shape[:-2] + (G * dvn,))
    per_token = [("grad.input.q", "dq", dq, (G, dkn)), ("grad.input.k", "dk", dk, (G, dkn)),
                 ("grad.input.v", "dv", vv, (G * dvn,))]
    if op == "rls":
        per_token += [("grad.input.P", "dP", dP, (G, dkn, dkn)), ("grad.input.omega", "domega", domega, (G,))]
    _ldm_ops_per_token(out, f, per_token, T, "dM")
    if op == "rls":
        p = out["grad.input.P"]
        out["grad.input.P"] = (p + np.swapaxes(p, -1, -2)) / 2
        out["grad.param.lambda"] = _shape(_array(dlam, f, "dlam"), f, "dlam", (G,)).copy()
    if op == "delta":
        out["grad.param.beta"] = _shape(_array(dbeta, f, "dbeta"), f, "dbeta", (G,)).copy()
    return out
