"""lucidrains' hyper-connections (PyPI, pinned in scripts/deps):
ManifoldConstrainedHyperConnections, forward and autograd backward, gated by
dmref as a one-layer kernel-level mHC problem (docs/kernels.md, which states
the mapping and the two conventions in which the module differs from the
paper).  float32 module, float32 inputs: judged at f32.

Shape from the package's own tests (dim 512, 4 streams); T = 16 tokens (the
backward problem is one task: 11 s to certify on this machine).
DMREF_KERNELS_DEEP=1: also T = 64.
"""
import os

import pytest

torch = pytest.importorskip("torch")  # the venv of scripts/deps has it; CTest runs there
import thirdparty as tp  # noqa: E402

FORWARD = ["output.h", "output.H_post", "output.H_res", "output.X", "output.out"]
BACKWARD = ["grad.input.e", "grad.input.v", "grad.param.a", "grad.param.b_pre", "grad.param.b_post", "grad.param.b_res"]
SHAPES = [dict(T=16, n=4, C=512)] + ([dict(T=64, n=4, C=512)] if os.environ.get("DMREF_KERNELS_DEEP") else [])


@pytest.fixture(scope="module", params=SHAPES, ids=lambda s: "T{T}_n{n}_C{C}".format(**s))
def problem(request, tmp_path_factory):
    s = request.param
    g = torch.Generator().manual_seed(5)
    e, v = torch.randn(s["T"], s["C"], generator=g), torch.randn(s["T"], s["C"], generator=g)
    m = tp.lucidrains_module(s["n"], s["C"], seed=3, sinkhorn=tp.paper_order())
    config, captured = tp.lucidrains_problem(m, e, v)
    captured.update(tp.lucidrains_upstreams(s["T"], s["n"], s["C"], seed=9))
    case = tp.certify(tmp_path_factory.mktemp("hc"), "mhc", config, captured,
                      "hyperconn.T{T}_n{n}_C{C}".format(**s), grad=True)
    upstream = {k: a for k, a in case.inputs.items() if k.startswith("input.grad.")}
    return s, e, v, case, upstream


def run(problem, sinkhorn):
    """The module (parameters as in the problem) with the given constraint; None: its default."""
    s, e, v, case, upstream = problem
    tap = tp.Tap(sinkhorn) if sinkhorn is not None else None
    m = tp.lucidrains_module(s["n"], s["C"], seed=3, sinkhorn=tap)
    if tap is None:
        tap = tp.Tap(m.residual_mix_constraint_fn)
        m.residual_mix_constraint_fn = tap
    return tp.lucidrains_run(m, tap, e, v, upstream), case


@pytest.mark.parametrize("log_domain", [False, True], ids=["sinkhorn_knopps", "log_domain_sinkhorn_knopps"])
def test_paper_order_passes_forward_and_backward(problem, log_domain):
    """Both of the module's Sinkhorns, on the transposed logits (the paper's
    order); the log-domain one is the same function, rounded differently."""
    out, case = run(problem, tp.paper_order(20, log_domain=log_domain))
    v, each = tp.judge(out, case, "f32", FORWARD + BACKWARD)
    print(v.report(), {k: round(r[0], 3) for k, r in each.items()})
    assert v.passed, v.report()


def test_sinkhorn_iters_19_fails_and_the_public_rule_passes_it(problem):
    """One Sinkhorn round fewer (the `iters` argument of the module's
    sinkhorn_knopps): every output and gradient is within atol = rtol = 1e-2
    (the public rule passes it), dmref fails H_res and the gradients."""
    out, case = run(problem, tp.paper_order(19))
    v, each = tp.judge(out, case, "f32", FORWARD + BACKWARD)
    public, fractions = tp.public_verdict(out, case)
    print("dmref", v.report(limit=0), {k: round(r[0], 3) for k, r in each.items()},
          "public", {k: round(f, 4) for k, (_, f) in fractions.items()})
    assert not v.passed and each["output.H_res"][1] > 0
    assert public


def test_module_default_is_the_row_first_order(problem):
    """Without the transposition the module normalizes over the source streams
    first (rows of the paper's H_res first): a different function, rejected on
    the forward (H_res, X) and the backward."""
    out, case = run(problem, None)
    v, each = tp.judge(out, case, "f32", FORWARD + BACKWARD)
    print(v.report(limit=0), {k: round(r[0], 3) for k, r in each.items()})
    assert each["output.H_res"][1] > 0 and each["grad.param.b_res"][1] > 0
