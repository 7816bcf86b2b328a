"""dmref_fixtures.layouts: DeepSeek-V4's fused mHC layout <-> dmref's tensors
(docs/python.md, "Layouts"). The worked example of the docs is the second
test: a numpy mHC layer written in DeepSeek's layout reproduces the golden
coefficients of a committed fixture after conversion."""
import os
import re

import numpy as np

import dmref_fixtures as df

NAMES = ("phi_pre", "phi_post", "phi_res", "a", "b_pre", "b_post", "b_res")


def layer(case, l):
    return {k: case.params["param." + k][l] for k in NAMES}


def test_round_trip_is_exact(fixtures_dir):
    case = df.load_case(os.path.join(fixtures_dir, "mhc.kernel.n4_d8.L6.deepseek-v4.f32.s1.safetensors"))
    n = case.config["n"]
    for l in range(case.config["layers"]):
        p = layer(case, l)
        fn, base, scale = df.mhc_to_fused(p, n)
        assert fn.shape == ((2 + n) * n, n * case.config["d"]) and base.shape == ((2 + n) * n,)
        back = df.mhc_from_fused(fn, base, scale, n)
        for k in NAMES:
            assert np.array_equal(back[k], p[k]), k
        # comb entry [in, out] is the paper's [out, in]; fn row 2n + in*n + out is phi_res column out*n + in
        assert base[2 * n + 1 * n + 2] == p["b_res"][2, 1]
        assert np.array_equal(fn[2 * n + 1 * n + 2], p["phi_res"][:, 2 * n + 1])


def deepseek_layer0(fn, base, scale, e, n, t_max=20, eps=1e-6, norm_eps=1e-6):
    """Layer-0 coefficients written the way DeepSeek-V4's kernels store them."""
    x = np.tile(e, n)                                   # X = n copies of e, stream-major
    xn = x / np.sqrt(np.mean(x * x) + norm_eps)         # RMSNorm over all nC values
    mix = fn @ xn                                       # [pre | post | comb]
    pre = 1 / (1 + np.exp(-(scale[0] * mix[:n] + base[:n]))) + eps
    post = 2 / (1 + np.exp(-(scale[1] * mix[n:2 * n] + base[n:2 * n])))
    comb = (scale[2] * mix[2 * n:] + base[2 * n:]).reshape(n, n)  # [in, out]
    a = np.exp(comb)
    a = a / a.sum(-1, keepdims=True) + eps               # softmax over out, then + eps
    a = a / (a.sum(-2, keepdims=True) + eps)
    for _ in range(t_max - 1):
        a = a / (a.sum(-1, keepdims=True) + eps)
        a = a / (a.sum(-2, keepdims=True) + eps)
    return pre, post, a


def test_worked_example_deepseek_layout_reproduces_the_fixture(fixtures_dir):
    case = df.load_case(os.path.join(fixtures_dir, "mhc.kernel.n4_d8.L6.deepseek-v4.f32.s1.safetensors"))
    n = case.config["n"]
    fn, base, scale = df.mhc_to_fused(layer(case, 0), n)
    pre, post, comb = deepseek_layer0(fn, base, scale, case.inputs["input.e"][0], n)
    # float64 against the certified golden, first order in eps = 2^-53: the
    # logits carry <= ~40 eps (RMSNorm, 32-term dot products), exp keeps that
    # relative size, and each of the 40 Sinkhorn normalisations adds <= 5 eps
    # (a 4-term sum and a division): <= 240 eps relative on entries <= 2.
    # 1e-12 is ~4500 eps: 10x margin over 2 * 240 eps.
    tol = 1e-12
    assert np.max(np.abs(pre - case.expected["output.H_pre"][0, 0])) < tol
    assert np.max(np.abs(post - case.expected["output.H_post"][0, 0])) < tol
    assert np.max(np.abs(df.res_from_storage(comb) - case.expected["output.H_res"][0, 0])) < tol
    # Without the conversion (comb read as H_res) the fixture disagrees.
    assert np.max(np.abs(comb - case.expected["output.H_res"][0, 0])) > 1e-3


# ---- Issue 24: the converters check what they are given.
import pytest  # noqa: E402


def good_layer(n=4, C=2):
    rng = np.random.default_rng(24)
    nc = n * C
    return {"phi_pre": rng.standard_normal((nc, n)), "phi_post": rng.standard_normal((nc, n)),
            "phi_res": rng.standard_normal((nc, n * n)), "a": rng.standard_normal(3),
            "b_pre": rng.standard_normal(n), "b_post": rng.standard_normal(n), "b_res": rng.standard_normal((n, n))}


@pytest.mark.parametrize("call,words", [
    (lambda: df.res_from_storage(np.zeros((2, 4, 3))), "res_from_storage: comb: shape [2,4,3]"),  # before: [2, 3, 4]
    (lambda: df.res_to_storage(np.zeros(3)), "res_to_storage: h_res: shape [3]"),
    (lambda: df.mhc_to_fused(dict(good_layer(), a=np.zeros(4)), 4), "mhc_to_fused: a: shape [4], expected [3]"),
    (lambda: df.mhc_to_fused(dict(good_layer(), b_post=np.zeros(5)), 4), "mhc_to_fused: b_post: shape [5]"),
    (lambda: df.mhc_to_fused(dict(good_layer(), phi_pre=np.zeros((8, 3))), 4), "mhc_to_fused: phi_pre: shape [8,3]"),
    (lambda: df.mhc_to_fused({k: v for k, v in good_layer().items() if k != "b_res"}, 4), "mhc_to_fused: b_res: missing"),
    (lambda: df.mhc_to_fused(dict(good_layer(), a=np.array(["1", "2", "3"])), 4), "mhc_to_fused: a: dtype"),
    (lambda: df.mhc_from_fused(np.zeros((24, 8)), np.zeros(23), np.zeros(3), 4), "mhc_from_fused: base: shape [23]"),
    (lambda: df.mhc_from_fused(np.zeros((24, 7)), np.zeros(24), np.zeros(3), 4), "mhc_from_fused: fn: shape [24,7]"),
    (lambda: df.mhc_from_fused(np.zeros((24, 8)), np.zeros(24), np.zeros(3), 0), "mhc_from_fused: n: 0"),
], ids=["non-square comb", "1-D h_res", "a of 4", "b_post of n+1", "phi_pre n-1 columns", "b_res missing",
        "a of strings", "base short", "fn columns not a multiple of n", "n = 0"])
def test_converters_refuse_bad_shapes_naming_the_argument(call, words):
    with pytest.raises(ValueError) as e:  # before: wrong shapes returned, or numpy's own errors
        call()
    assert words in str(e.value), str(e.value)


def test_converters_take_torch_tensors_of_any_dtype():
    torch = pytest.importorskip("torch")
    p = good_layer()
    fn, base, scale = df.mhc_to_fused(p, 4)
    for dt in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        # values exact in every dtype: rounded to bf16 (8 bits) and to f16's range first
        t = {k: torch.tensor(np.round(v * 8) / 8, dtype=dt, requires_grad=True) for k, v in p.items()}
        want = {k: np.round(v * 8) / 8 for k, v in p.items()}
        f2, b2, s2 = df.mhc_to_fused(t, 4)  # before: torch's own error (requires_grad, bf16)
        fw, bw, sw = df.mhc_to_fused(want, 4)
        assert np.array_equal(f2, fw) and np.array_equal(b2, bw) and np.array_equal(s2, sw), dt
        back = df.mhc_from_fused(torch.tensor(fw, dtype=dt, requires_grad=True), torch.tensor(bw, dtype=dt),
                                 torch.tensor(sw, dtype=dt), 4)
        assert all(np.array_equal(back[k], want[k]) for k in want), dt
        comb = torch.tensor(want["b_res"], dtype=dt, requires_grad=True)
        assert np.array_equal(df.res_from_storage(comb), want["b_res"].T)


# ---- mhc_ops (docs/mhc_ops.md): the kernels' arguments and results named as the fixture's tensors.
def numpy_mhc_pre(residual, fn, hc_scale, hc_base, n, t_max=20, eps=1e-6, norm_eps=1e-6):
    """flag-gems' mhc_pre written in numpy on its own storage: (post_mix [M, n, 1], comb_mix [M, n^2],
    layer_input [M, C]) as that kernel returns them."""
    M = residual.shape[0]
    x = residual.reshape(M, -1)
    mix = (x @ fn.T) / np.sqrt(np.mean(x * x, -1, keepdims=True) + norm_eps)   # GEMM, then the norm
    pre = 1 / (1 + np.exp(-(hc_scale[0] * mix[:, :n] + hc_base[:n]))) + eps
    post = 2 / (1 + np.exp(-(hc_scale[1] * mix[:, n:2 * n] + hc_base[n:2 * n])))
    a = np.exp((hc_scale[2] * mix[:, 2 * n:] + hc_base[2 * n:]).reshape(M, n, n))  # [in, out]
    a = a / a.sum(-1, keepdims=True) + eps
    a = a / (a.sum(-2, keepdims=True) + eps)
    for _ in range(t_max - 1):
        a = a / (a.sum(-1, keepdims=True) + eps)
        a = a / (a.sum(-2, keepdims=True) + eps)
    return post[..., None], a.reshape(M, n * n), np.einsum("mj,mjc->mc", pre, residual)


def test_mhc_ops_converters_reproduce_the_pre_fixture(fixtures_dir):
    case = df.load_case(os.path.join(fixtures_dir, "mhc_ops.pre.n4_C16.M2.deepseek-v4.f32.s1.safetensors"))
    n = case.config["n"]
    t = {**case.inputs, **case.params}
    # The kernel's arguments with an extra leading token axis ([1, M, n, C]), as a batch would have.
    given, sizes = df.mhc_ops_inputs("pre", t["input.residual"][None], fn=t["param.fn"], hc_scale=t["param.hc_scale"],
                                     hc_base=t["param.hc_base"])
    assert sizes == {"tokens": case.config["tokens"], "n": n, "d": case.config["d"]}
    assert set(given) == set(t) and all(np.array_equal(given[k], t[k]) for k in t)
    out = df.mhc_ops_outputs("pre", n, *numpy_mhc_pre(t["input.residual"], t["param.fn"], t["param.hc_scale"],
                                                      t["param.hc_base"], n))
    # float64 against the certified golden: nC = 64-term dot products and the norm (<= ~70 eps on
    # the logits), 40 Sinkhorn normalisations (<= 5 eps each): <= ~300 eps relative on entries <= 2;
    # 1e-12 is ~4500 eps.
    for k, y in out.items():
        assert y.shape == case.expected[k].shape, k
        assert np.max(np.abs(y - case.expected[k])) < 1e-12, k
    # comb_mix read in the paper's orientation disagrees with the fixture.
    assert np.max(np.abs(df.res_from_storage(out["output.comb_mix"]) - case.expected["output.comb_mix"])) > 1e-3


def numpy_hc_head(residual, fn, hc_scale, hc_base, eps=1e-6, norm_eps=1e-6):
    """DeepSeek-V4's ParallelHead.hc_head written in numpy on its own storage: the hidden state [M, C]."""
    M = residual.shape[0]
    x = residual.reshape(M, -1)
    mix = (x @ fn.T) / np.sqrt(np.mean(x * x, -1, keepdims=True) + norm_eps)   # GEMM, then the norm
    pre = 1 / (1 + np.exp(-(mix * hc_scale + hc_base))) + eps
    return np.einsum("mj,mjc->mc", pre, residual)


@pytest.mark.parametrize("name", ["mhc_ops.head.n4_C16.M2.deepseek-v4.f32.s1", "mhc_ops.head.n4_C1024.M1.deepseek-v4.bf16.s1"])
def test_mhc_ops_converters_reproduce_the_head_fixture(fixtures_dir, name):
    case = df.load_case(os.path.join(fixtures_dir, name + ".safetensors"))
    n = case.config["n"]
    t = {**case.inputs, **case.params}
    given, sizes = df.mhc_ops_inputs("head", t["input.residual"][None], fn=t["param.hc_head_fn"],
                                     hc_scale=t["param.hc_head_scale"], hc_base=t["param.hc_head_base"])
    assert sizes == {"tokens": case.config["tokens"], "n": n, "d": case.config["d"]}
    assert set(given) == set(t) and all(np.array_equal(given[k], t[k]) for k in t)
    out = df.mhc_ops_outputs("head", n, hidden=numpy_hc_head(t["input.residual"], t["param.hc_head_fn"],
                                                             t["param.hc_head_scale"], t["param.hc_head_base"]))
    # float64 (u = 2^-53) against the certified golden: each logit's dot product has nC <= 4096 terms
    # with sum |fn_k x_k| <= nC x 2 / sqrt(nC) = 128 (the draws: |fn| <= 2 / sqrt(nC), |x| <= 1), so
    # errs by <= nC u 128 = 5.8e-11; times 1/r (mean(x^2) >= 0.3 in both files: < 1.9), the scale
    # (< 1.5) and sigmoid' (<= 1/4): <= 4.1e-11 per weight (the norm's own O(nC u) relative error
    # is smaller); the mix of n = 4 rows |X_j| <= 1: <= 1.7e-10 with its own rounding. Measured: 3e-16.
    y = out["output.hidden"]
    assert y.shape == case.expected["output.hidden"].shape
    assert np.max(np.abs(y - case.expected["output.hidden"])) < 2e-10
    # The weights read from hc_head_fn transposed ([nC, n] row-major) disagree with the fixture.
    wrong = numpy_hc_head(t["input.residual"], t["param.hc_head_fn"].reshape(-1, n).T, t["param.hc_head_scale"],
                          t["param.hc_head_base"])
    assert np.max(np.abs(wrong - case.expected["output.hidden"])) > 1e-3


@pytest.mark.parametrize("call,words", [
    (lambda: df.mhc_ops_inputs("prepost", np.zeros((2, 4, 3))), "mhc_ops_inputs: op: 'prepost'"),
    (lambda: df.mhc_ops_inputs("pre", np.zeros((2, 4, 3))), "mhc_ops_inputs: fn: missing"),
    (lambda: df.mhc_ops_inputs("post", np.zeros((2, 4, 3)), x=np.zeros((2, 3)), post_layer_mix=np.zeros((2, 4)),
                               comb_res_mix=np.zeros((2, 4, 4)), fn=np.zeros((24, 12))), "mhc_ops_inputs: fn: not an argument"),
    (lambda: df.mhc_ops_inputs("post", np.zeros((2, 4, 3)), x=np.zeros((3, 3)), post_layer_mix=np.zeros((2, 4)),
                               comb_res_mix=np.zeros((2, 4, 4))), "mhc_ops_inputs: x: 3 tokens"),
    (lambda: df.mhc_ops_inputs("pre", np.zeros((2, 4, 3)), fn=np.zeros((24, 11)), hc_scale=np.zeros(3),
                               hc_base=np.zeros(24)), "mhc_ops_inputs: fn: shape [24,11], expected [24,12]"),
    (lambda: df.mhc_ops_outputs("post", 4, residual=np.zeros((2, 4, 3)), post_mix=np.zeros((2, 4))),
     "mhc_ops_outputs: op post returns only the residual"),
    (lambda: df.mhc_ops_inputs("head", np.zeros((2, 4, 3)), fn=np.zeros((24, 12)), hc_scale=np.zeros(1),
                               hc_base=np.zeros(4)), "mhc_ops_inputs: fn: shape [24,12], expected [4,12]"),
    (lambda: df.mhc_ops_inputs("head", np.zeros((2, 4, 3)), fn=np.zeros((4, 12)), hc_scale=np.zeros(3),
                               hc_base=np.zeros(4)), "mhc_ops_inputs: hc_scale: shape [3], expected [1]"),
    (lambda: df.mhc_ops_inputs("head", np.zeros((2, 4, 3)), fn=np.zeros((4, 12)), hc_scale=np.zeros(1),
                               hc_base=np.zeros(4), x=np.zeros((2, 3))), "mhc_ops_inputs: x: not an argument of op head"),
    (lambda: df.mhc_ops_outputs("head", 4), "mhc_ops_outputs: hidden: missing"),
    (lambda: df.mhc_ops_outputs("head", 4, hidden=np.zeros((2, 3)), residual=np.zeros((2, 4, 3))),
     "mhc_ops_outputs: op head returns only the hidden state"),
    (lambda: df.mhc_ops_outputs("post", 4, residual=np.zeros((2, 4, 3)), hidden=np.zeros((2, 3))),
     "mhc_ops_outputs: hidden: not a result of op post"),
], ids=["unknown op", "pre without fn", "post given fn", "x of another M", "fn short", "post with a mix",
        "head given pre's fn", "head scale of 3", "head given x", "head without hidden", "head with a residual",
        "post with hidden"])
def test_mhc_ops_converters_refuse_naming_the_argument(call, words):
    with pytest.raises(ValueError) as e:
        call()
    assert words in str(e.value), str(e.value)


def lucidrains_params(case):
    """A committed hc_ops width case's parameters as lucidrains' module names them (norm.gamma = gain - 1,
    exact by Sterbenz for the corpus's gains in [0.5, 1.5); the scales 0-d)."""
    P = case.params
    return {"static_alpha": P["param.static_alpha"], "static_beta": P["param.static_beta"],
            "dynamic_alpha_fn": P["param.dynamic_alpha_fn"], "dynamic_beta_fn": P["param.dynamic_beta_fn"],
            "dynamic_alpha_scale": P["param.dynamic_alpha_scale"].reshape(()),
            "dynamic_beta_scale": P["param.dynamic_beta_scale"].reshape(()),
            "norm.gamma": (P["param.norm_gain"].astype(np.float32) - np.float32(1)).astype(np.float64)}


def test_hc_ops_converters_reproduce_the_width_fixture(fixtures_dir):
    """lucidrains' storage ('(b s) d' residuals, gamma, 0-d scales) -> the fixture's tensors and
    config exactly; and a numpy width_connection on the module's parameters reproduces the goldens
    through hc_ops_outputs (within the f32 tolerance of the fixture)."""
    case = df.load_case(os.path.join(fixtures_dir, "hc_ops.width.n4_C16.M2.rmsnorm_tanh.f32.s1.safetensors"))
    n, C = case.config["n"], case.config["d"]
    R = case.inputs["input.residual"]
    P = lucidrains_params(case)
    t, cfg = df.hc_ops_inputs("width", n, residual=R.reshape(-1, C), module=P)
    for k, v in {**case.inputs, **case.params}.items():
        np.testing.assert_array_equal(t[k], v, err_msg=k)
    assert cfg == {k: case.config[k] for k in cfg}
    # lucidrains' width_connection in numpy (float64): F.normalize(x) * sqrt(C) * (gamma + 1).
    normed = R / np.linalg.norm(R, axis=-1, keepdims=True) * np.sqrt(C) * (P["norm.gamma"] + 1)
    alpha = np.tanh(normed @ P["dynamic_alpha_fn"]) * P["dynamic_alpha_scale"] + P["static_alpha"]
    beta = np.tanh(normed @ P["dynamic_beta_fn"]) * P["dynamic_beta_scale"] + P["static_beta"]
    mix = np.einsum("mst,msd->mtd", alpha, R)
    got = df.hc_ops_outputs(n, branch_input=mix[:, 0], carried=mix[:, 1:].reshape(-1, C), alpha=alpha,
                            beta=beta[..., None])
    assert df.check(got, case, "f32").passed


@pytest.mark.parametrize("call, words", [
    (lambda: df.hc_ops_inputs("width", 4, residual=np.zeros((6, 16)), module={}), "residual"),
    (lambda: df.hc_ops_inputs("depth", 4, residual=np.zeros((8, 16))), "residual: not an argument"),
    (lambda: df.hc_ops_inputs("fused", 4), "op"),
])
def test_hc_ops_converters_refuse_naming_the_argument(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def numpy_flash_phase1(block_representations, pseudo_queries, eps=1e-6):
    """flash-attn-res's phase 1 written in numpy on its storage ([N, M, C] sources, [S, C] queries with
    the gain folded in, no gain in the norm): softmax_outputs [S, M, C], lses [S, M]."""
    b = block_representations
    inv = 1 / np.sqrt(np.mean(b * b, -1) + eps)                      # [N, M]
    z = np.einsum("nmc,sc->snm", b, pseudo_queries) * inv[None]     # the norm after the projection
    m = z.max(1, keepdims=True)
    p = np.exp(z - m)
    l = p.sum(1)
    return np.einsum("snm,nmc->smc", p, b) / l[..., None], m[:, 0] + np.log(l)


def numpy_flash_phase2(partial, pseudo_query, o, lse, eps=1e-6):
    """flash-attn-res's phase 2: merged_output = o + sigmoid(z - lse) (b - o)."""
    z = (partial @ pseudo_query) / np.sqrt(np.mean(partial * partial, -1) + eps)
    s = 1 / (1 + np.exp(lse - z))
    return o + s[:, None] * (partial - o), np.logaddexp(lse, z)


@pytest.mark.parametrize("name", ["attnres_ops.phase1.N3_S4_C16.M2.f32.s1", "attnres_ops.phase1.N4_S2_C1024.M1.bf16.s1",
                                  "attnres_ops.phase2.C16.M2.f32.s1", "attnres_ops.phase2.C1024.M1.bf16.s1",
                                  "attnres_ops.readout.N3_C16.M2.f32.s1"])
def test_attnres_ops_converters_reproduce_the_two_phase_fixtures(fixtures_dir, name):
    case = df.load_case(os.path.join(fixtures_dir, name + ".safetensors"))
    op = case.config["op"]
    a = df.attnres_ops_kernel_args(op, {**case.inputs, **case.params})
    if op == "phase1":
        o, lses = numpy_flash_phase1(a["block_representations"], a["pseudo_queries"])
        out = df.attnres_ops_outputs("phase1", softmax_outputs=o, lses=lses)
    elif op == "phase2":
        h, lse = numpy_flash_phase2(a["intrablock_partial_sum"], a["pseudo_query"], a["interblock_normalized_output"],
                                    a["interblock_lse"])
        out = df.attnres_ops_outputs("phase2", h=h, merged_lse=lse)
    else:  # readout: phase 1 over the blocks and the partial, one query
        src = np.concatenate([a["block_representations"], a["intrablock_partial_sum"][None]], 0)
        out = df.attnres_ops_outputs("readout", h=numpy_flash_phase1(src, a["pseudo_query"][None])[0][0])
    # float64 against the certified golden: C-term dot products, an N-term softmax: <= ~10^3 eps
    # on outputs of size <= 3 (lse); 1e-12 is ~4500 eps.
    assert set(out) == set(case.expected)
    for k, y in out.items():
        assert y.shape == case.expected[k].shape, k
        assert np.max(np.abs(y - case.expected[k])) < 1e-12, k
    if op == "phase1" and case.config["tokens"] > 1:  # the statistics read query-major ([S, M] as [M, S]) disagree with the fixture
        assert np.max(np.abs(out["output.lse"].T.reshape(out["output.lse"].shape) - case.expected["output.lse"])) > 1e-3


@pytest.mark.parametrize("call, words", [
    (lambda: df.attnres_ops_kernel_args("merge", {}), "attnres_ops_kernel_args: op: 'merge' is not one of"),
    (lambda: df.attnres_ops_kernel_args("phase1", {"input.blocks": np.zeros((2, 3))}),
     "attnres_ops_kernel_args: input.blocks: shape [2,3], expected [M, N, C]"),
    (lambda: df.attnres_ops_kernel_args("phase2", {"param.w": np.zeros(4), "param.g": np.zeros(4), "input.partial": np.zeros((1, 4))}),
     "attnres_ops_kernel_args: input.o: missing (op phase2)"),
    (lambda: df.attnres_ops_outputs("phase1", softmax_outputs=np.zeros((2, 1, 4))), "attnres_ops_outputs: lses: missing"),
    (lambda: df.attnres_ops_outputs("readout", h=np.zeros((1, 4)), partial=np.zeros((1, 4))),
     "attnres_ops_outputs: partial: not a result of op readout"),
], ids=["unknown op", "blocks of rank 2", "phase2 without o", "phase1 without lses", "readout with a partial"])
def test_attnres_ops_converters_refuse_naming_the_argument(call, words):
    with pytest.raises(ValueError) as e:
        call()
    assert words in str(e.value), str(e.value)


def numpy_rls_information(M, P, k, v, w, lam):
    """One RLS step of one group from the information form with explicit inverses (not the
    recursion the reference runs): R = P^-1, B = M R; R' = lam R + w k k^T, B' = lam B + w v k^T;
    P' = R'^-1, M' = B' P' (shared/spec/ldm-math.md, closed form)."""
    R = np.linalg.inv(P)
    R2 = lam * R + w * np.outer(k, k)
    P2 = np.linalg.inv(R2)
    return (lam * M @ R + w * np.outer(v, k)) @ P2, P2, np.linalg.cond(P) * np.linalg.cond(R2)


def test_ldm_ops_converters_and_an_information_form_step_reproduce_the_rls_fixture(fixtures_dir):
    case = df.load_case(os.path.join(fixtures_dir, "ldm_ops.rls.g2_dk4_d8.M2.f32.s1.safetensors"))
    c = case.config
    t = {**case.inputs, **case.params}
    G, dk, T = c["groups"], c["dk"], c["tokens"]
    dv = c["d"] // G
    # A kernel's arguments with an extra leading token axis and v split per group ([1, M, G, dv]).
    given, sizes = df.ldm_ops_inputs("rls", t["input.M"][None], t["input.q"][None], t["input.k"][None],
                                     t["input.v"].reshape(1, T, G, dv), P=t["input.P"][None],
                                     omega=t["input.omega"][None], lam=t["param.lambda"])
    assert sizes == {"op": "rls", "tokens": T, "d": c["d"], "groups": G, "dk": dk}
    assert set(given) == set(t) and all(np.array_equal(given[k], t[k]) for k in t)
    Ms, Ps, rs = np.zeros_like(t["input.M"]), np.zeros_like(t["input.P"]), np.zeros_like(t["input.v"])
    for i in range(T):
        for g in range(G):
            Mn, Pn, cond = numpy_rls_information(t["input.M"][i, g], t["input.P"][i, g], t["input.k"][i, g],
                                                 t["input.v"][i, g * dv:(g + 1) * dv], t["input.omega"][i, g],
                                                 t["param.lambda"][g])
            Ms[i, g], Ps[i, g], rs[i, g * dv:(g + 1) * dv] = Mn, Pn, Mn @ t["input.q"][i, g]
            # Two explicit 4 x 4 inverses in float64: each relative error <~ dk cond eps; 1e3 eps cond
            # (cond = cond(P) cond(R'), both inverses' amplification) leaves a factor > 10 of margin.
            tol = 1e3 * np.finfo(float).eps * cond
            assert np.max(np.abs(Mn - case.expected["output.M"][i, g])) < tol
            assert np.max(np.abs(Pn - case.expected["output.P"][i, g])) < tol
    out = df.ldm_ops_outputs("rls", Ms, rs, P=Ps)
    assert set(out) == {"output.M", "output.P", "output.r"}
    assert np.max(np.abs(out["output.r"] - case.expected["output.r"])) < 1e-10
    # The readout from the memory before the write disagrees with the fixture.
    old = np.einsum("tgij,tgj->tgi", t["input.M"], t["input.q"]).reshape(T, -1)
    assert np.max(np.abs(old - case.expected["output.r"])) > 1e-3


@pytest.mark.parametrize("call, words", [
    (lambda: df.ldm_ops_inputs("gru", np.zeros((2, 2, 2, 2)), None, None, None), "ldm_ops_inputs: op: 'gru'"),
    (lambda: df.ldm_ops_inputs("rls", np.zeros((2, 2, 2, 2)), np.zeros((2, 2, 2)), np.zeros((2, 2, 2)),
                               np.zeros((2, 4))), "ldm_ops_inputs: P: missing (op rls)"),
    (lambda: df.ldm_ops_inputs("outer", np.zeros((2, 2, 2, 2)), np.zeros((2, 2, 2)), np.zeros((2, 2, 2)),
                               np.zeros((2, 4)), beta=np.zeros(2)), "ldm_ops_inputs: beta: not an argument of op outer"),
    (lambda: df.ldm_ops_inputs("outer", np.zeros((2, 2, 2, 2)), np.zeros((2, 2, 3)), np.zeros((2, 2, 2)),
                               np.zeros((2, 4))), "ldm_ops_inputs: q: shape [2,2,3], expected [..., 2, 2]"),
    (lambda: df.ldm_ops_inputs("outer", np.zeros((2, 2, 2, 2)), np.zeros((3, 2, 2)), np.zeros((2, 2, 2)),
                               np.zeros((2, 4))), "ldm_ops_inputs: q: 3 tokens, M has 2"),
    (lambda: df.ldm_ops_outputs("outer", np.zeros((2, 2, 2, 2)), np.zeros((2, 4)), P=np.zeros((2, 2, 2, 2))),
     "ldm_ops_outputs: P: not a result of op outer"),
    (lambda: df.ldm_ops_grads("rls", np.zeros((2, 2, 2, 2)), np.zeros((2, 2, 2)), np.zeros((2, 2, 2)),
                              np.zeros((2, 4))), "ldm_ops_grads: dP: missing (op rls)"),
    (lambda: df.ldm_ops_grads("delta", np.zeros((2, 2, 2, 2)), np.zeros((2, 2, 2)), np.zeros((2, 2, 2)),
                              np.zeros((2, 4)), dP=np.zeros((2, 2, 2, 2)), dbeta=np.zeros(2)),
     "ldm_ops_grads: dP: not a gradient of op delta"),
    (lambda: df.ldm_ops_grads("outer", np.zeros((2, 2, 2, 2)), np.zeros((2, 2, 2)), np.zeros((3, 2, 2)),
                              np.zeros((2, 4))), "ldm_ops_grads: dk: 3 tokens, dM has 2"),
])
def test_ldm_ops_converters_refuse_naming_the_argument(call, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        call()


def test_ldm_ops_grads_is_the_symmetric_part_of_dP_and_keeps_the_fixture_gradient(fixtures_dir):
    # The fixture's grad.input.P is symmetric (the gradient among symmetric P, docs/ldm_ops.md):
    # ldm_ops_grads returns it unchanged, and returns it again from it plus any antisymmetric part.
    case = df.load_case(os.path.join(fixtures_dir, "ldm_ops.rls_grad.g2_dk4_d8.M2.f32.s1.safetensors"))
    g = case.gradients
    dP = g["grad.input.P"]
    assert np.array_equal(dP, np.swapaxes(dP, -1, -2))
    A = np.random.default_rng(1).uniform(-1, 1, dP.shape)
    skew = A - np.swapaxes(A, -1, -2)  # exactly antisymmetric: a - b = -(b - a)
    args = dict(dM=g["grad.input.M"], dq=g["grad.input.q"], dk=g["grad.input.k"], dv=g["grad.input.v"],
                domega=g["grad.input.omega"], dlam=g["grad.param.lambda"])
    for given in (dP, dP + skew):
        out = df.ldm_ops_grads("rls", dP=given, **args)
        assert set(out) == set(g)
        # (x + y) / 2 with y = x, and (x + s + x - s) / 2: exact at these magnitudes up to one rounding of x + s
        np.testing.assert_allclose(out["grad.input.P"], dP, rtol=0, atol=4 * np.finfo(dP.dtype).eps * np.abs(dP + skew).max())
        for n in set(g) - {"grad.input.P"}:
            assert np.array_equal(out[n], g[n]), n
