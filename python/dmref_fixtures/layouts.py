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
"""
import numpy as np

__all__ = ["mhc_from_fused", "mhc_to_fused", "res_from_storage", "res_to_storage"]


def _swap_in_out(cols, n):
    """Columns indexed a*n + b -> b*n + a on the last axis (an involution)."""
    x = np.asarray(cols)
    return x.reshape(x.shape[:-1] + (n, n)).swapaxes(-1, -2).reshape(x.shape)


def res_to_storage(h_res):
    """Paper-orientation H_res [..., n, n] -> DeepSeek's comb [..., in, out]."""
    return np.swapaxes(np.asarray(h_res), -1, -2)


def res_from_storage(comb):
    """DeepSeek's comb [..., in, out] -> paper-orientation H_res [..., n, n]."""
    return np.swapaxes(np.asarray(comb), -1, -2)


def mhc_from_fused(fn, base, scale, n):
    """One layer of DeepSeek-V4's fused parameters -> dmref's param tensors.

    fn [(2+n) n, nC], base [(2+n) n], scale [3] -> dict with phi_pre, phi_post
    [nC, n], phi_res [nC, n^2], a [3], b_pre, b_post [n], b_res [n, n].
    Stack the dicts of L layers on a new first axis for a dmref problem."""
    fn, base, scale = np.asarray(fn), np.asarray(base), np.asarray(scale)
    m = (2 + n) * n
    if fn.ndim != 2 or fn.shape[0] != m or base.shape != (m,) or scale.shape != (3,):
        raise ValueError(f"mhc_from_fused: expected fn [{m}, nC], base [{m}], scale [3]; "
                         f"got {fn.shape}, {base.shape}, {scale.shape}")
    w = fn.T  # [nC, (2+n) n]: x' phi
    return {"phi_pre": w[:, :n].copy(), "phi_post": w[:, n:2 * n].copy(),
            "phi_res": _swap_in_out(w[:, 2 * n:], n), "a": scale.copy(),
            "b_pre": base[:n].copy(), "b_post": base[n:2 * n].copy(),
            "b_res": res_from_storage(base[2 * n:].reshape(n, n)).copy()}


def mhc_to_fused(p, n):
    """The inverse of mhc_from_fused: dmref's tensors of one layer -> (fn, base, scale)."""
    w = np.concatenate([np.asarray(p["phi_pre"]), np.asarray(p["phi_post"]),
                        _swap_in_out(p["phi_res"], n)], axis=1)
    base = np.concatenate([np.asarray(p["b_pre"]), np.asarray(p["b_post"]),
                           res_to_storage(p["b_res"]).reshape(n * n)])
    return w.T.copy(), base, np.asarray(p["a"]).copy()
