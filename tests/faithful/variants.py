"""The catalogue of faithful variants: (name, knobs, what it does, where it applies).

Every variant is a correct implementation of the scheme as documented; they differ only in
what real kernels legitimately differ in. `applies(scheme, case_id, config, dtype)` says
where a variant is a different computation (a knob a scheme does not read would repeat
`natural`), so it is run only there."""


def family(name):
    """The variant family of a name (the rows of the family table)."""
    for prefix, fam in (("natural", "natural"), ("stored", "mixed precision: stored streams"),
                        ("fma", "fma"), ("mhc_fused", "fused kernel (mHC)"), ("twophase_fma", "softmax"),
                        ("softmax", "softmax"), ("twophase", "softmax"), ("sinkhorn", "Sinkhorn"),
                        ("p_", "RLS P update form"), ("dense", "dense DWA")):
        if name.startswith(prefix):
            return fam
    if "vjp" in name:
        return "hand-written VJP"
    if name in ("norm_mul", "attnres_norm_after", "mhc_norm_after", "ln_onepass", "sigmoid_tanh"):
        return "norm / activation form"
    return "summation order"


def _any(*_):
    return True


def _lowp(scheme, cid, cfg, dtype):  # storing streams in the dtype is a no-op at f32/f64
    return dtype in ("bf16", "f16")


def _fma(scheme, cid, cfg, dtype):  # fma emulated for float32 arithmetic only
    return dtype != "f64"


def _grad(scheme, cid, cfg, dtype):
    return "_grad." in cid


def _norms(scheme, cid, cfg, dtype):
    return ".model" in cid or scheme in ("attnres", "mhc", "mhc_ops") or (scheme in ("hc", "hc_ops") and cfg.get("dynamic", False) and cfg.get("op") != "depth")


def _sinkhorn(scheme, cid, cfg, dtype):  # mhc_ops' head has no Sinkhorn
    return cfg.get("op") != "head"


def only(*schemes, level=None, test=None):
    def f(scheme, cid, cfg, dtype):
        return (scheme in schemes and (level is None or f".{level}." in cid) and
                (test is None or test(scheme, cid, cfg, dtype)))
    return f


def _rls_kernel_grad(scheme, cid, cfg, dtype):
    return scheme == "ldm" and cfg.get("write", "rls") == "rls" and ".kernel_grad." in cid


def _rls_sym(scheme, cid, cfg, dtype):  # ldm's RLS write and ldm_ops' rls op share ldm.rls_step
    rls = (scheme == "ldm" and cfg.get("write", "rls") == "rls") or (scheme == "ldm_ops" and cfg["op"] == "rls")
    return rls and cfg.get("p_update", "symmetric") != "joseph"


VARIANTS = [
    ("natural", {}, "every reduction left to right, one rounding per operation, the spec's formulas", _any),
    ("reversed", {"order": "reversed"}, "every reduction right to left", _any),
    ("pairwise", {"order": "pairwise"}, "every reduction as a pairwise tree (adjacent pairs, then pairs of pairs)", _any),
    ("split2", {"order": "split2"}, "split-K: 2 contiguous chunks summed left to right, then the partials", _any),
    ("split3", {"order": "split3"}, "split-K with 3 chunks", _any),
    ("split16", {"order": "split16"}, "split-K with 16 chunks (chunks of one where the reduction is shorter)", _any),
    ("block4", {"order": "block4"}, "blocked: chunks of 4, the block partials summed left to right", _any),
    ("lanes8", {"order": "lanes8"}, "8 accumulators, one per SIMD lane (element i into lane i mod 8), then a tree over the lanes", _any),
    ("torch", {"order": "torch"}, "the library's reductions (torch.sum, batched matmul for dot products)", _any),
    ("fma", {"fma": True}, "dot products and rank-one updates as fused multiply-adds (f64 product and sum, one rounding)", _fma),
    ("fma_split4", {"fma": True, "order": "split4"}, "fma chains in 4 split-K chunks", _fma),
    ("stored", {"stored_streams": True}, "mixed recipe: the streams after every layer (and each layer output) stored in the dtype and read back", _lowp),
    ("stored_pairwise", {"stored_streams": True, "order": "pairwise"}, "stored streams with pairwise reductions", _lowp),
    ("norm_mul", {"norm_mul": True}, "norms multiply by the reciprocal 1/r instead of dividing", _norms),
    ("softmax_max", {"softmax": "max"}, "AttnRes: max-subtracted softmax", only("attnres", "attnres_ops")),
    ("softmax_deferred", {"softmax": "deferred"}, "AttnRes: h = (sum exp(z_i) b_i) / sum exp(z_i), the normalisation last", only("attnres", "attnres_ops")),
    ("softmax_online", {"softmax": "online"}, "AttnRes: online softmax (flash style: running max, rescaled sum and accumulator, one source at a time)", only("attnres", "attnres_ops")),
    ("twophase", {"softmax": "twophase"}, "AttnRes: the paper's two-phase block algorithm (phase 1 statistics over the cached sources, phase 2 merges the newest online)", only("attnres", "attnres_ops")),
    ("twophase_fma", {"softmax": "twophase", "fma": True, "order": "split2"}, "AttnRes: two-phase with fma and split-K", only("attnres", "attnres_ops", test=_fma)),
    ("attnres_norm_after", {"norm_after": True}, "AttnRes: z_i = ((w * g) . b_i) / r_i (the key norm after the projection)", only("attnres", "attnres_ops")),
    ("attnres_vjp", {"backward": "vjp"}, "AttnRes: hand-written VJP of every readout (docs/attnres.md Backward), saved activations", only("attnres", level="kernel_grad")),
    ("attnres_vjp_pairwise", {"backward": "vjp", "order": "pairwise", "softmax": "online"}, "AttnRes: hand-written VJP after an online-softmax forward, pairwise reductions", only("attnres", level="kernel_grad")),
    ("attnres_vjp_recompute", {"backward": "vjp_recompute", "softmax": "twophase"}, "AttnRes: hand-written VJP recomputing each readout (max-subtracted) in the backward, after a two-phase forward", only("attnres", level="kernel_grad")),
    ("sinkhorn_max", {"sinkhorn": "max"}, "mHC: column max subtracted before exp (exact for both presets, docs/mhc.md)", only("mhc", "mhc_ops", test=_sinkhorn)),
    ("sinkhorn_log", {"sinkhorn": "log"}, "mHC: Sinkhorn in the log domain (logsumexp per column / row, log1p-free logaddexp for the eps)", only("mhc", "mhc_ops", test=_sinkhorn)),
    ("mhc_norm_after", {"norm_after": True}, "mHC: (x phi) / r, the RMS division after the projection (DeepSeek's and AMD's fused kernels)", only("mhc", "mhc_ops")),
    ("mhc_fused", {"norm_after": True, "sinkhorn": "max", "fma": True, "order": "split4", "norm_mul": True}, "mHC: a fused kernel: norm after the projection by reciprocal, max-subtracted Sinkhorn, fma, split-K", only("mhc", "mhc_ops", test=_fma)),
    ("sigmoid_tanh", {"sigmoid_tanh": True}, "mHC: sigmoid(z) = (1 + tanh(z/2)) / 2", only("mhc", "mhc_ops")),
    ("mhc_vjp", {"backward": "vjp"}, "mHC: hand-written VJP (docs/mhc.md Backward; Sinkhorn iterates saved in the forward)", only("mhc", test=_grad)),
    ("mhc_vjp_recompute", {"backward": "vjp_recompute", "sinkhorn": "log"}, "mHC: hand-written VJP recomputing the Sinkhorn rounds from the logits, after a log-domain forward", only("mhc", test=_grad)),
    ("ln_onepass", {"ln_onepass": True}, "HC: LayerNorm variance from one pass of fused statistics, mean(x^2) - mean(x)^2", only("hc", "hc_ops", test=lambda s, c, cfg, d: cfg.get("dynamic", False) and cfg.get("norm", "layernorm") == "layernorm" and cfg.get("op") != "depth")),
    ("p_avg_before", {"p_form": "avg_before"}, "LDM RLS: P = (D + D^T) / (2 lambda)", _rls_sym),
    ("p_triangle", {"p_form": "triangle"}, "LDM RLS: the upper triangle of D / lambda, mirrored", _rls_sym),
    ("p_gamma", {"p_form": "gamma"}, "LDM RLS: D = P - (omega / gamma) pi pi^T", _rls_sym),
    ("rls_vjp", {"backward": "vjp"}, "LDM RLS: hand-written rls_step_vjp reverse walk (docs/ldm.md Backward; joseph: the step by autograd)", _rls_kernel_grad),
    ("rls_vjp_split4", {"backward": "vjp", "order": "split4", "p_form": "triangle"}, "LDM RLS: hand-written VJP, split-K reductions, triangle P forward", _rls_kernel_grad),
    ("dense", {"dense": True, "order": "torch"}, "DenseFormer: the DWA as a dense row of a (exact zeros outside the pattern) through the library matmul, as a matmul kernel does", only("denseformer")),
]
