"""Example: a backward pass judged by a gradient fixture (docs/python.md,
docs/fixtures.md "Gradients"). The "kernel" is a float64 PyTorch
implementation of Attention Residuals (Full, Block of size S and of N blocks, kernel level),
differentiated by autograd; the fixture's upstream gradients input.grad.h and
input.grad.out are the seeds of the backward, and every golden grad.* tensor
(d e, d v, d w, d g) is judged like an output. A deliberately wrong backward
(the softmax's normalisation detached, so autograd drops the -a a^T term of
its Jacobian) must fail. The same for mHC through its 20 Sinkhorn rounds, where
the wrong backward misses the last round.

Needs python3-torch (scripts/deps); without it the tests skip with the reason."""
import numpy as np
import pytest

import dmref_fixtures as df

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/deps)")


def attnres_kernel(case, detach_normaliser=False):
    """output.* and grad.* of an AttnRes kernel case, in float64 by autograd."""
    cfg = case.config
    T, L, d = cfg["tokens"], cfg["layers"], cfg["d"]
    # Where blocks end: every S layers (block_size S; Full is S = 1), or N blocks
    # of floor(L/N) layers with the remainder in the last (blocks N).
    if cfg.get("variant", "full") == "block" and "blocks" in cfg:
        N = cfg["blocks"]
        ends = {(b + 1) * (L // N) for b in range(N - 1)} | {L}
    else:
        S = cfg.get("block_size", 1) if cfg.get("variant", "full") == "block" else 1
        ends = set(range(S, L + 1, S))
    eps = float(cfg.get("eps", "1e-6"))
    t = lambda name: torch.tensor(case[name], dtype=torch.float64, requires_grad=True)  # noqa: E731
    e, v, w, g = t("input.e"), t("input.v"), t("param.w"), t("param.g")

    def readout(sources, r):
        V = torch.stack(sources)                                   # [n, T, d]
        k = g[r] * V / torch.sqrt((V * V).mean(-1, keepdim=True) + eps)
        p = torch.exp((k * w[r]).sum(-1))                          # [n, T], no max-subtraction (as the reference)
        total = p.sum(0)
        a = p / (total.detach() if detach_normaliser else total)
        return (a[..., None] * V).sum(0)

    sources, partial, hs = [e], None, []
    for layer in range(L):
        hs.append(readout(sources + ([partial] if partial is not None else []), layer))
        partial = v[:, layer] if partial is None else partial + v[:, layer]
        if layer + 1 in ends:
            sources, partial = sources + [partial], None
    out = readout(sources + ([partial] if partial is not None else []), L)
    h = torch.stack(hs, 1)
    up_h, up_out = (torch.tensor(case[n], dtype=torch.float64) for n in ("input.grad.h", "input.grad.out"))
    ((h * up_h).sum() + (out * up_out).sum()).backward()           # the VJP for the fixture's upstream gradients
    res = {"output.h": h, "output.out": out}
    res.update({"grad.input.e": e.grad, "grad.input.v": v.grad, "grad.param.w": w.grad, "grad.param.g": g.grad})
    return {k: x.detach().numpy() for k, x in res.items()}


CASES = list(df.cases(pattern="attnres_*.kernel_grad.*"))


def test_there_are_attnres_gradient_fixtures():
    assert len(CASES) >= 6 and all(c.gradients for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_autograd_backward_conforms(case):
    out = attnres_kernel(case)
    assert set(case.gradients) <= set(out)
    df.assert_conforms(out, case, "f32")  # float64 results, judged at the tightest dtype


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_gate_catches_a_wrong_backward(case):
    out = attnres_kernel(case, detach_normaliser=True)
    np.testing.assert_array_equal(out["output.h"], attnres_kernel(case)["output.h"])  # the forward is unchanged
    with pytest.raises(df.ConformanceError) as e:
        df.assert_conforms(out, case, "f32")
    failing = [line for line in str(e.value).splitlines() if " observed " in line]
    assert e.value.verdict.failed > 0 and failing and all(":grad." in line for line in failing)


def mhc_kernel(case, skip_last_round_in_backward=False):
    """output.* and grad.* of an mHC kernel case (paper or deepseek-v4), float64 autograd.
    With skip_last_round_in_backward the forward is unchanged but the backward
    misses the last Sinkhorn round (straight-through over it): a typical bug."""
    cfg = case.config
    T, L, C, n = cfg["tokens"], cfg["layers"], cfg["d"], cfg["n"]
    dsv4 = cfg.get("preset", "paper") == "deepseek-v4"
    t_max = cfg.get("t_max", 20)
    rms_eps, pre_eps, eps = (1e-6, 1e-6, 1e-6) if dsv4 else (1e-20, 0.0, 0.0)
    t = lambda name: torch.tensor(case[name], dtype=torch.float64, requires_grad=True)  # noqa: E731
    e, v = t("input.e"), t("input.v")
    P = {k: t("param." + k) for k in ("phi_pre", "phi_post", "phi_res", "a", "b_pre", "b_post", "b_res")}

    def sinkhorn(Z):
        M = torch.exp(Z)
        M = M / M.sum(-2, keepdim=True) + eps                     # columns (a softmax), then eps_add
        M = M / (M.sum(-1, keepdim=True) + eps)                   # rows
        for r in range(2, t_max + 1):
            prev = M
            M = M / (M.sum(-2, keepdim=True) + eps)
            M = M / (M.sum(-1, keepdim=True) + eps)
            if skip_last_round_in_backward and r == t_max:
                M = prev + (M - prev).detach()                      # value of round t, gradient of round t-1
        return M

    X = e[:, None, :].expand(T, n, C)
    hs, rec = [], {k: [] for k in ("H_pre", "H_post", "H_res", "Ht_res")}
    for l in range(L):
        x = X.reshape(T, n * C)
        xn = x / torch.sqrt((x * x).mean(-1, keepdim=True) + rms_eps)
        a = P["a"][l]
        pre = torch.sigmoid(a[0] * (xn @ P["phi_pre"][l]) + P["b_pre"][l]) + pre_eps
        post = 2 * torch.sigmoid(a[1] * (xn @ P["phi_post"][l]) + P["b_post"][l])
        Z = a[2] * (xn @ P["phi_res"][l]).reshape(T, n, n) + P["b_res"][l]
        H = sinkhorn(Z)
        hs.append((pre[..., None] * X).sum(1))
        X = H @ X + post[..., None] * v[:, l][:, None, :]
        for k, x_ in (("H_pre", pre), ("H_post", post), ("H_res", H), ("Ht_res", Z)):
            rec[k].append(x_)
    h, out = torch.stack(hs, 1), X.sum(1)
    # The loss: every output against its upstream gradient, the per-layer coefficients included.
    outs = {"h": h, "out": out, "X": X, **{k: torch.stack(x_, 1) for k, x_ in rec.items()}}
    sum(((y * torch.tensor(case["input.grad." + k], dtype=torch.float64)).sum() for k, y in outs.items())).backward()
    res = {"output." + k: y for k, y in outs.items()}
    res.update({"grad.input.e": e.grad, "grad.input.v": v.grad})
    res.update({"grad.param." + k: p.grad for k, p in P.items()})
    return {k: x.detach().numpy() for k, x in res.items()}


MHC_CASES = list(df.cases(pattern="mhc.kernel_grad.*.f32.*"))


@pytest.mark.parametrize("case", MHC_CASES, ids=lambda c: c.id)
def test_mhc_autograd_backward_conforms(case):
    df.assert_conforms(mhc_kernel(case), case, "f32")


@pytest.mark.parametrize("case", MHC_CASES, ids=lambda c: c.id)
def test_the_gate_catches_a_missing_sinkhorn_round_in_the_backward(case):
    out = mhc_kernel(case, skip_last_round_in_backward=True)
    with pytest.raises(df.ConformanceError) as e:
        df.assert_conforms(out, case, "f32")
    failing = [line for line in str(e.value).splitlines() if " observed " in line]
    assert e.value.verdict.failed > 0 and failing and all(":grad." in line for line in failing)


def ldm_ops_kernel(case):
    """A kernel's results for an ldm_ops case (one layer's write and readout, docs/ldm_ops.md):
    the spec's RLS recursion (shared/spec/ldm-math.md: pi = P k, gamma = lambda + omega k^T pi,
    kappa = omega pi / gamma, M' = M + (v - M k) kappa^T, P' = (P - kappa pi^T) / lambda, not
    symmetrised), the outer-product and delta writes, r = M' q; float64 autograd. Returns the
    outputs and the kernel's raw gradients, as its arguments are shaped."""
    cfg = case.config
    op, G, dk = cfg["op"], cfg["groups"], cfg["dk"]
    dv = cfg["d"] // G
    t = lambda name: torch.tensor(case[name], dtype=torch.float64, requires_grad=True)  # noqa: E731
    M, q, k = t("input.M"), t("input.q"), t("input.k")
    v = t("input.v")
    vg = v.reshape(v.shape[0], G, dv)
    out = {}
    if op == "rls":
        P, w, lam = t("input.P"), t("input.omega"), t("param.lambda")
        pi = (P @ k[..., None])[..., 0]                                  # [T, G, dk]
        gamma = lam + w * (k * pi).sum(-1)                               # [T, G]
        kappa = (w / gamma)[..., None] * pi
        u = vg - (M @ k[..., None])[..., 0]
        M2 = M + u[..., None] * kappa[..., None, :]
        P2 = (P - kappa[..., :, None] * pi[..., None, :]) / lam[:, None, None]
        out["output.P"] = P2
    elif op == "outer":
        M2 = M + vg[..., None] * k[..., None, :]
    else:
        beta = t("param.beta")
        u = vg - (M @ k[..., None])[..., 0]
        M2 = M + beta[:, None, None] * u[..., None] * k[..., None, :]
    out["output.M"] = M2
    out["output.r"] = (M2 @ q[..., None])[..., 0].reshape(v.shape)
    sum(((y * torch.tensor(case["input.grad." + n[7:]], dtype=torch.float64)).sum() for n, y in out.items())).backward()
    res = {n: y.detach().numpy() for n, y in out.items()}
    raw = {"dM": M.grad, "dq": q.grad, "dk": k.grad, "dv": v.grad}
    if op == "rls":
        raw.update(dP=P.grad, domega=w.grad, dlam=lam.grad)
    if op == "delta":
        raw["dbeta"] = beta.grad
    return res, {n: g.numpy() for n, g in raw.items()}


LDM_OPS_CASES = list(df.cases(pattern="ldm_ops*_grad.*.f32.*"))


def test_there_are_ldm_ops_gradient_fixtures():
    assert {c.config["op"] for c in LDM_OPS_CASES} == {"rls", "outer", "delta"} and len(LDM_OPS_CASES) == 5


@pytest.mark.parametrize("case", LDM_OPS_CASES, ids=lambda c: c.id)
def test_ldm_ops_autograd_backward_conforms_through_ldm_ops_grads(case):
    out, raw = ldm_ops_kernel(case)
    out.update(df.ldm_ops_grads(case.config["op"], **raw))
    assert set(case.gradients) == {n for n in out if n.startswith("grad.")}
    df.assert_conforms(out, case, "f32")


@pytest.mark.parametrize("case", [c for c in LDM_OPS_CASES if c.config["op"] == "rls"], ids=lambda c: c.id)
def test_ldm_ops_raw_dP_of_the_spec_form_is_not_the_convention(case):
    # The spec's P update, differentiated as written, gives a dP with an antisymmetric
    # part (the update is not symmetric in P's two indices): the fixture's grad.input.P is
    # its symmetric part (docs/ldm_ops.md), so the raw dP is rejected, on grad.input.P alone.
    out, raw = ldm_ops_kernel(case)
    good = df.ldm_ops_grads("rls", **raw)
    assert np.abs(raw["dP"] - np.swapaxes(raw["dP"], -1, -2)).max() > 1e-2
    bad = dict(good, **{"grad.input.P": raw["dP"].reshape(good["grad.input.P"].shape)})
    with pytest.raises(df.ConformanceError) as e:
        df.assert_conforms({**out, **bad}, case, "f32")
    failing = [line for line in str(e.value).splitlines() if " observed " in line]
    assert failing and all(":grad.input.P" in line for line in failing), failing
