"""Evaluate one faithful variant on one fixture problem at one dtype: inputs rounded to the
dtype (as the fixture's baseline for that dtype), the variant's forward, and for a backward
case the gradients of loss = sum over the upstreams of <input.grad.<name>, output.<name>>,
by autograd of the forward or by the scheme's hand-written VJP; every result stored in the dtype."""
import importlib

import numpy as np
import torch

import dmref_fixtures as df

from .arith import Arith

ROUND = {"f32": "F32", "bf16": "BF16", "f16": "F16"}
SCHEMES = ("preln", "ldm", "ldm_ops", "attnres", "attnres_ops", "hc", "hc_ops", "mhc", "mhc_ops", "denseformer")  # one module each


def module(scheme):
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}")
    return importlib.import_module(f"{__package__}.{scheme}")


def problem(tensors, dtype):
    """The input.* and param.* tensors of a problem, rounded to the dtype (float64 arrays)."""
    out = {}
    for k, v in tensors.items():
        if k.startswith(("input.", "param.")) and not k.endswith(".lo"):
            out[k] = v if dtype == "f64" else df.round_to(v, ROUND[dtype])
    return out


def run(scheme, tensors, config, dtype, knobs, grad=False):
    """Outputs (and gradients) of the variant `knobs` as float64 arrays named as the fixture's goldens."""
    A = Arith(dtype, **knobs)
    mod = module(scheme)
    prob = problem(tensors, dtype)
    P = {k: A.t(v) for k, v in prob.items() if not k.startswith("input.grad.")}
    up = {"output." + k[len("input.grad."):]: A.t(v) for k, v in prob.items() if k.startswith("input.grad.")}
    if scheme == "ldm" and config.get("write", "rls") == "rls":
        P["config.alpha"] = A.const(config.get("alpha", 1.0)).reshape(1)
    back = A.k("backward", "autograd")
    torch.set_grad_enabled(grad)
    if grad and back.startswith("vjp"):
        out, grads = mod.vjp(A, P, config, up)
    else:
        if grad:
            for v in P.values():
                v.requires_grad_(True)
        out = mod.forward(A, P, config)
        grads = {}
        if grad:
            loss = sum((up[k] * out[k]).sum() for k in sorted(up))
            loss.backward()
            grads = {"grad." + k: v.grad if v.grad is not None else torch.zeros_like(v) for k, v in P.items()}
    res = {k: np.asarray(A.store(v.detach()).double().numpy(), dtype=np.float64) for k, v in out.items()}
    res.update({k: np.asarray(A.store(v.detach()).double().numpy(), dtype=np.float64) for k, v in grads.items()})
    torch.set_grad_enabled(True)
    return res
