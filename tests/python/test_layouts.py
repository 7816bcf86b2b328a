"""dmref_fixtures.layouts: DeepSeek-V4's fused mHC layout <-> dmref's tensors
(docs/python.md, "Layouts"). The worked example of the docs is the second
test: a numpy mHC layer written in DeepSeek's layout reproduces the golden
coefficients of a committed fixture after conversion."""
import os

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
