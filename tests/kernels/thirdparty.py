"""Third-party mHC/HC kernels through dmref's gate (docs/kernels.md).

Shared by the CTest entry `kernels` (tests/kernels/test_*.py) and the commands
in docs/kernels.md: load the pinned PyPI kernels (scripts/deps installs them in
/opt/dmref-venv), capture their inputs as a dmref problem, certify it with
`dmref run`, and judge their outputs with `dmref_fixtures.check` (the rule of
`dmref verify`, read from the fixture).  Nothing here re-implements a kernel:
every number judged comes out of the third-party code.
"""
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import dmref_fixtures as df  # noqa: E402


def dmref_cli():
    for cand in (os.environ.get("DMREF_CLI"), os.path.join(ROOT, "build", "tools", "dmref")):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise RuntimeError("no dmref executable: build dmref_cli or set DMREF_CLI")


def certify(workdir, scheme, config, captured, case_id, grad=False):
    """`dmref run` on the captured tensors; returns the fixture as a Case."""
    os.makedirs(workdir, exist_ok=True)
    cfg, inp, out = (os.path.join(workdir, f) for f in ("config.json", "captured.safetensors", "golden.safetensors"))
    with open(cfg, "w") as f:
        json.dump(config, f)
    df.write(inp, captured)
    cmd = [dmref_cli(), "run", "--scheme", scheme, "--config", cfg, "--inputs", inp, "--out", out, "--case-id", case_id]
    if grad:
        cmd.append("--grad")
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return df.load_case(out)


def public_rule(observed, expected, atol=1e-2, rtol=1e-2, allowed=0.05):
    """The public kernels' test rule (issue 20): |obs - ref| <= atol + rtol |ref| on
    all but `allowed` of the elements, ref = the golden here (the most generous
    reading: their own tests compare against a float32 reference, which is
    itself off).  Returns (passed, fraction of elements out)."""
    obs, ref = np.asarray(observed, np.float64), np.asarray(expected, np.float64)
    bad = ~(np.abs(obs - ref) <= atol + rtol * np.abs(ref))
    return bool(bad.mean() <= allowed), float(bad.mean())


def public_verdict(outputs, case):
    """public_rule on every tensor of `outputs` that the case has a golden for."""
    res = {}
    for name, obs in outputs.items():
        key = name if name.startswith(("output.", "grad.")) else "output." + name
        ref = case.gradients.get(key) if key.startswith("grad.") else case.expected.get(key)
        if ref is not None:
            res[key] = public_rule(obs, ref)
    return all(ok for ok, _ in res.values()), res


# ---------------------------------------------------------------- flag-gems
def flaggems_modules(base=None, interpreter=True):
    """flag-gems' mHC kernel modules, loaded from the installed wheel's files
    (or from the folder `base` holding its fused/mhc/mhc_pre.py and mhc_post.py).

    `import flag_gems` refuses to start without an accelerator ("No device were
    detected on your machine", flag_gems/runtime); its fused/mhc/*.py import only
    torch and triton, so they are loaded by path, unchanged.  On the interpreter
    their triton.autotune lists are cut to the first config: the autotuner times
    every config through the active GPU driver, which the interpreter does not
    have (RuntimeError "0 active drivers"); BLOCK_H only tiles the loops.  On a
    GPU (interpreter=False) the autotuner runs as shipped."""
    if base is None:
        base = importlib.metadata.distribution("flag-gems").locate_file("flag_gems/fused/mhc")
    mods = {}
    for name in ("mhc_pre", "mhc_post"):
        spec = importlib.util.spec_from_file_location("flag_gems_mhc_" + name, os.path.join(str(base), name + ".py"))
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        mods[name] = m
    if interpreter:
        for k in (mods["mhc_pre"].mhc_pre_fused_kernel_hc_mult_4, mods["mhc_pre"].mhc_pre_generic_kernel,
                  mods["mhc_post"].mhc_post_kernel_hc_mult_4, mods["mhc_post"].mhc_post_kernel_generic):
            k.configs = k.configs[:1]
    return mods["mhc_pre"].mhc_pre, mods["mhc_post"].mhc_post


DSV4 = dict(rms_eps=1e-6, hc_pre_eps=1e-6, hc_sinkhorn_eps=1e-6, hc_post_mult_value=2.0, sinkhorn_repeat=20)


def flaggems_inputs(T, n, C, L, seed, comb_logits=0.0, act_scale=1.0):
    """Inputs drawn as TileKernels' tests/mhc/test_pre_big_fuse.py draws them
    (residual randn bf16; fn randn * 1e-4 * (1 + 0.01 j) per stream j; scale,
    base randn * 0.1), one set per layer, plus layer outputs randn bf16.
    comb_logits > 0 adds a nearly triangular comb base (-comb_logits below the
    diagonal of H_res): slow Sinkhorn, as docs/mhc.md's separating cases.
    act_scale scales the residual and the layer outputs (0.02: the N(0, 0.02)
    embedding init of GPT-style models; mHC's coefficients are scale-invariant)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    n3 = 2 * n + n * n
    e = (torch.randn(T, C, generator=g) * act_scale).bfloat16()
    v = (torch.randn(T, L, C, generator=g) * act_scale).bfloat16()
    fn = (torch.randn(L, n3, n, C, generator=g) * 1e-4 * (1 + 0.01 * torch.arange(n)).view(1, 1, n, 1)).flatten(2)
    scale = torch.randn(L, 3, generator=g) * 0.1
    base = torch.randn(L, n3, generator=g) * 0.1
    if comb_logits:
        lower = torch.tril(torch.ones(n, n), -1)          # paper orientation: H_res[out, in], out > in
        base[:, 2 * n:] += (-comb_logits * lower).T.reshape(n * n)  # stored [in, out]
    return e, v, fn, scale, base


def flaggems_stack(e, v, fn, scale, base, pre_kw=None, transpose_comb=False, kernels=None, raw=False):
    """The kernel-level mHC stack of flag-gems: X = n copies of e; per layer
    (post, comb, h) = mhc_pre(X), X = mhc_post(v_l, X, post, comb).  Returns the
    outputs under dmref's names (H_res in DeepSeek's stored [in, out] order:
    the problem is certified with res_layout = in_out), as float64 arrays, or
    with raw=True as the kernels' own tensors (on their device, in their dtype).
    kernels: (mhc_pre, mhc_post), default flaggems_modules()."""
    import torch
    mhc_pre, mhc_post = kernels or flaggems_modules()
    kw = dict(DSV4, **(pre_kw or {}))
    T, L, C = v.shape
    n = (int(np.sqrt(fn.shape[1] + 1)) - 1)
    X = e[:, None, :].expand(T, n, C).contiguous()
    hs, posts, combs = [], [], []
    for l in range(L):
        post, comb, h = mhc_pre(X, fn[l].contiguous(), scale[l].contiguous(), base[l].contiguous(), **kw)
        X = mhc_post(v[:, l].contiguous(), X, post, comb.mT.contiguous() if transpose_comb else comb)
        hs.append(h), posts.append(post.squeeze(-1)), combs.append(comb)
    out = {"output.h": torch.stack(hs, 1), "output.H_post": torch.stack(posts, 1),
           "output.H_res": torch.stack(combs, 1), "output.X": X}
    return out if raw else {k: t.detach().cpu().to(torch.float64).numpy() for k, t in out.items()}


def flaggems_problem(e, v, fn, scale, base):
    """The same call as a dmref problem: DeepSeek-V4 preset, tensors as stored
    (phi_layout = out_in: fn's rows [pre | post | comb]; res_layout = in_out)."""
    T, L, C = v.shape
    n = (int(np.sqrt(fn.shape[1] + 1)) - 1)
    f64 = lambda t: t.detach().to(__import__("torch").float64).numpy()
    fn64, base64 = f64(fn), f64(base)
    captured = {"input.e": f64(e), "input.v": f64(v),
                "param.phi_pre": fn64[:, :n], "param.phi_post": fn64[:, n:2 * n], "param.phi_res": fn64[:, 2 * n:],
                "param.a": f64(scale), "param.b_pre": base64[:, :n], "param.b_post": base64[:, n:2 * n],
                "param.b_res": base64[:, 2 * n:].reshape(L, n, n)}
    config = {"tokens": T, "layers": L, "d": C, "n": n, "preset": "deepseek-v4",
              "res_layout": "in_out", "phi_layout": "out_in"}
    return config, captured


# --------------------------------------------------------- hyper-connections
def lucidrains_module(n, C, seed, sinkhorn=None, comb_logits=10.0):
    """lucidrains' ManifoldConstrainedHyperConnections (hyper-connections), every
    parameter drawn away from its init so that each one matters; float32.

    sinkhorn: the residual-mix constraint, a callable on the logits [..., s, t]
    (source stream s, target t), passed as the module's own
    residual_mix_constraint_fn.  None keeps the module's default.
    comb_logits: the static residual logits drop by this much below the
    diagonal of H_res (nearly triangular: slow Sinkhorn, docs/mhc.md)."""
    import torch
    from hyper_connections.manifold_constrained_hyper_connections import ManifoldConstrainedHyperConnections
    kw = {} if sinkhorn is None else {"residual_mix_constraint_fn": sinkhorn}
    m = ManifoldConstrainedHyperConnections(n, dim=C, layer_index=0, **kw)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(p + torch.randn(p.shape, generator=g) * {0: 0.1, 1: 0.3}[p.ndim > 0])
        m.dynamic_alpha_fn.mul_(3.0)   # logits of O(1): the residual mix away from uniform
        lower = torch.tril(torch.ones(n, n), -1)        # paper orientation H_res[out, in]; stored [in, out]
        m.static_alpha[:, 1:].add_(-comb_logits * lower.T)
    return m


def paper_order(iters=20, log_domain=False):
    """The module's own Sinkhorn (sinkhorn_knopps / log_domain_sinkhorn_knopps)
    applied to the transposed logits: columns, then rows of H_res in the paper's
    orientation (docs/kernels.md, "hyper-connections")."""
    from hyper_connections.manifold_constrained_hyper_connections import (log_domain_sinkhorn_knopps,
                                                                          sinkhorn_knopps)
    f = log_domain_sinkhorn_knopps if log_domain else sinkhorn_knopps
    return lambda logits: f(logits.mT, iters=iters).mT


class Tap:
    """Wraps a residual-mix constraint and keeps its output (the mix matrix the
    module applies), so that H_res can be judged; values and autograd unchanged."""
    def __init__(self, fn):
        self.fn, self.out = fn, None

    def __call__(self, logits):
        self.out = self.fn(logits)
        return self.out


def lucidrains_problem(m, e, v):
    """The module as a one-layer dmref mHC problem (paper preset), exactly.

    Lucidrains' RMSNorm is per stream (F.normalize over d, times sqrt(d) and
    (1 + gamma)) and each stream's logits read only that stream; dmref's reads
    all nC entries.  At layer 0 the n streams are copies of e, where the two are
    the same function: phi is block-diagonal (block s: W (1 + gamma) into stream
    s's columns), a = (pre_branch_scale, h_post_scale, residual_scale),
    b = static_alpha / static_beta.  rms_eps = 0: F.normalize divides by
    max(||x||, 1e-12), the same for any ||x|| > 1e-12.  Logits [s, t] are stored
    [in, out]: res_layout = in_out."""
    n, C = m.num_residual_streams, e.shape[-1]
    T = e.shape[0]
    f = lambda t: t.detach().double().numpy()
    W, g = f(m.dynamic_alpha_fn)[0], 1.0 + f(m.norm.gamma)          # [C, 1 + n], [C]
    Wg, bg = W * g[:, None], f(m.dynamic_beta_fn) * g                 # exact: products of two floats in f64
    phi_pre, phi_post, phi_res = np.zeros((1, n * C, n)), np.zeros((1, n * C, n)), np.zeros((1, n * C, n * n))
    for s in range(n):
        rows = slice(s * C, (s + 1) * C)
        phi_pre[0, rows, s] = Wg[:, 0]
        phi_post[0, rows, s] = bg
        phi_res[0, rows, s * n:(s + 1) * n] = Wg[:, 1:]                # column in * n + out, in = s
    sa = f(m.static_alpha)
    captured = {"input.e": f(e), "input.v": f(v)[:, None, :], "param.phi_pre": phi_pre, "param.phi_post": phi_post,
                "param.phi_res": phi_res,
                "param.a": np.array([[f(m.pre_branch_scale)[0], float(f(m.h_post_scale)), f(m.residual_scale)[0]]]),
                "param.b_pre": sa[None, :, 0], "param.b_post": f(m.static_beta)[None], "param.b_res": sa[None, :, 1:]}
    config = {"tokens": T, "layers": 1, "d": C, "n": n, "preset": "paper", "rms_eps": 0, "res_layout": "in_out"}
    return config, captured


def lucidrains_upstreams(T, n, C, seed):
    """Upstream gradients for a backward problem: uniform [-1, 1) rounded to
    f32 for what the module returns or applies (h, X, out, H_post, H_res), zero
    for H_pre and Ht_res, which it keeps inside (the loss then ignores them)."""
    rng = np.random.default_rng(seed)
    u = lambda *shape: df.round_to(rng.uniform(-1, 1, shape), "F32")
    return {"input.grad.h": u(T, 1, C), "input.grad.X": u(T, n, C), "input.grad.out": u(T, C),
            "input.grad.H_post": u(T, 1, n), "input.grad.H_res": u(T, 1, n, n),
            "input.grad.H_pre": np.zeros((T, 1, n)), "input.grad.Ht_res": np.zeros((T, 1, n, n))}


def lucidrains_run(m, tap, e, v, upstream=None):
    """One call of the module on e [T, C] (expanded to n streams by the
    package's own expand function) with layer output v [T, C].  Returns the
    outputs under dmref's names; with `upstream` (input.grad.*), also the
    autograd VJP of sum <upstream, output> as grad.*.  H_post is the module's
    beta, read where its depth connection receives it."""
    import torch
    from hyper_connections.manifold_constrained_hyper_connections import get_expand_reduce_stream_functions
    n = m.num_residual_streams
    expand, reduce = get_expand_reduce_stream_functions(n)
    e = e.clone().requires_grad_(upstream is not None)
    v = v.clone().requires_grad_(upstream is not None)
    m.zero_grad()
    seen = {}
    depth = type(m).depth_connection

    def depth_tap(branch_output, residuals, *, beta):
        seen["beta"] = beta
        return depth(m, branch_output, residuals, beta=beta)

    m.depth_connection = depth_tap
    try:
        branch_input, add_residual = m(expand(e))             # streams [(T n), C], stream-major per token
        X = add_residual(v)
    finally:
        del m.depth_connection
    outs = {"output.h": branch_input[:, None, :], "output.X": X.view(-1, n, X.shape[-1]),
            "output.out": reduce(X), "output.H_res": tap.out.reshape(-1, 1, n, n),
            "output.H_post": seen["beta"].reshape(-1, 1, n)}
    f = lambda t: t.detach().double().numpy()
    res = {k: f(t) for k, t in outs.items()}
    if upstream is not None:
        sum((t * torch.as_tensor(upstream["input.grad." + k[7:]], dtype=t.dtype)).sum() for k, t in outs.items()).backward()
        sa = f(m.static_alpha.grad)
        res.update({"grad.input.e": f(e.grad), "grad.input.v": f(v.grad)[:, None, :],
                    "grad.param.a": np.array([[f(m.pre_branch_scale.grad)[0], float(f(m.h_post_scale.grad)),
                                               f(m.residual_scale.grad)[0]]]),
                    "grad.param.b_pre": sa[None, :, 0], "grad.param.b_post": f(m.static_beta.grad)[None],
                    "grad.param.b_res": sa[None, :, 1:]})
    return res


def judge(outputs, case, dtype, names):
    """dmref_fixtures.check on `names` together (the verdict) and one by one
    (worst err/tol and failures per tensor, for the reports in docs/kernels.md)."""
    whole = df.check(outputs, case, dtype, only=list(names))
    each = {}
    for nm in names:
        v = df.check(outputs, case, dtype, only=[nm])
        each[nm] = (v.worst_ratio, v.failed, v.checked)  # worst_ratio: over every element, passed or not
    return whole, each


def one_round_fewer(n, widths=(4, 6, 8, 10, 12, 14, 16), seed=1):
    """max |H(20 rounds) - H(19 rounds)| over nearly triangular comb logits of each
    width (float64, DeepSeek's Sinkhorn with eps 1e-6 on the stored [in, out]
    matrix, plus N(0, 0.1) noise): how large a `sinkhorn_repeat` 19 bug can be."""
    def sinkhorn(A, rounds, eps=1e-6):
        A = np.exp(A - A.max(-1, keepdims=True))
        A = A / A.sum(-1, keepdims=True) + eps
        A = A / (A.sum(-2, keepdims=True) + eps)
        for _ in range(rounds - 1):
            A = A / (A.sum(-1, keepdims=True) + eps)
            A = A / (A.sum(-2, keepdims=True) + eps)
        return A
    rng = np.random.default_rng(seed)
    lower = np.tril(np.ones((n, n)), -1)
    out = {}
    for w in widths:
        A = (-w * lower).T + rng.standard_normal((n, n)) * 0.1
        out[w] = float(np.abs(sinkhorn(A, 20) - sinkhorn(A, 19)).max())
    return out


if __name__ == "__main__":  # python3 tests/kernels/thirdparty.py: the figures of docs/kernels.md's "nobody can see"
    for n in (4, 8, 16):
        r = one_round_fewer(n)
        print(f"n = {n:2d}: max |H_20 - H_19| = {max(r.values()):.2g} (logit width {max(r, key=r.get)})")
