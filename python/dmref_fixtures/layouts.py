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
"""
import numpy as np

__all__ = ["mhc_from_fused", "mhc_to_fused", "res_from_storage", "res_to_storage"]


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
