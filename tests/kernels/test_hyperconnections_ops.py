"""lucidrains' hyper-connections HyperConnections (the HC module, not mHC): its own
width_connection and depth_connection (torch, CPU, float32) judged directly against committed
hc_ops fixtures (docs/hc_ops.md) at f32: the fixture's inputs and parameters loaded into the
module (norm.gamma = norm_gain - 1: exact for gains in [0.5, 2], Sterbenz), its results named
by dmref_fixtures.hc_ops_outputs. Seeded bugs through the module's own parameters and options
(dynamic_alpha_scale perturbed, tanh off) must fail on the tensors the correct module passes."""
import os

import pytest

torch = pytest.importorskip("torch")
import thirdparty as tp  # noqa: E402

df = tp.df
FIX = os.path.join(tp.ROOT, "fixtures", "golden")
WIDTH = "hc_ops.width.n4_C16.M2.rmsnorm_tanh.f32.s1"
DEPTH = "hc_ops.depth.n4_C16.M2.default.f32.s1"
OUTS = ["output.branch_input", "output.carried", "output.beta"]


def case(cid):
    return df.load_case(os.path.join(FIX, cid + ".safetensors"))


def module(c, tanh=True, alpha_scale_factor=1.0):
    from hyper_connections.hyper_connections import HyperConnections
    n, C = c.config["n"], c.config["d"]
    m = HyperConnections(n, dim=C, layer_index=0, tanh=tanh)
    P = c.params
    f32 = lambda k: torch.tensor(P[k], dtype=torch.float32)  # noqa: E731
    with torch.no_grad():
        m.static_alpha.copy_(f32("param.static_alpha"))
        m.static_beta.copy_(f32("param.static_beta"))
        m.dynamic_alpha_fn.copy_(f32("param.dynamic_alpha_fn"))
        m.dynamic_beta_fn.copy_(f32("param.dynamic_beta_fn"))
        m.dynamic_alpha_scale.copy_(f32("param.dynamic_alpha_scale")[0] * alpha_scale_factor)
        m.dynamic_beta_scale.copy_(f32("param.dynamic_beta_scale")[0])
        m.norm.gamma.copy_(f32("param.norm_gain") - 1)
    return m


def run_width(c, **kw):
    m = module(c, **kw)
    n, C = c.config["n"], c.config["d"]
    H = torch.tensor(c.inputs["input.residual"], dtype=torch.float32).reshape(-1, C)  # '(b s) d'
    with torch.no_grad():
        h, carried, kw_out = m.width_connection(H)
    f64 = lambda x: x.detach().double().numpy()  # noqa: E731
    return df.hc_ops_outputs(n, branch_input=f64(h), carried=f64(carried), beta=f64(kw_out["beta"]))


def test_width_connection_passes_the_width_fixture():
    c = case(WIDTH)
    v, each = tp.judge(run_width(c), c, "f32", OUTS)
    print(WIDTH, v.report(limit=0), each)
    assert v.passed, v.report()


@pytest.mark.parametrize("kw", [{"alpha_scale_factor": 1.01}, {"tanh": False}], ids=["dynamic_alpha_scale*1.01", "tanh off"])
def test_width_connection_seeded_bugs_fail(kw):
    c = case(WIDTH)
    assert not tp.judge(run_width(c, **kw), c, "f32", OUTS)[0].passed


def test_depth_connection_passes_the_depth_fixture_and_beta_off_by_one_percent_fails():
    from hyper_connections.hyper_connections import HyperConnections
    c = case(DEPTH)
    n, C = c.config["n"], c.config["d"]
    m = HyperConnections(n, dim=C, layer_index=0)
    t = {k: torch.tensor(a, dtype=torch.float32) for k, a in c.inputs.items()}
    for scale, ok in ((1.0, True), (1.01, False)):
        with torch.no_grad():
            y = m.depth_connection(t["input.branch_output"], t["input.carried"].reshape(-1, C),
                                   beta=(t["input.beta"] * scale).reshape(-1, 1, n, 1))  # width's [b, f, s, 1]
        got = df.hc_ops_outputs(n, residual=y.double().numpy())
        assert tp.judge(got, c, "f32", ["output.residual"])[0].passed == ok
