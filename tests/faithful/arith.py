"""How a faithful kernel does its arithmetic: the knobs that real kernels legitimately
differ in (issue 19, part 1), in one object every scheme module computes through.

- dtype recipe: `f64` computes in float64, `f32` in float32; `bf16`/`f16` are the mixed
  recipe of training kernels: operands in the dtype, float32 arithmetic and accumulation,
  rounding to the dtype only where a tensor is stored (`store`: every output; with
  `stored_streams` also the scheme's streams after every layer, which then feed the
  next layer rounded -- and autograd rounds their adjoints the same way, since the
  backward of a cast casts the gradient).
- summation order of every reduction (`order`): `natural` (left to right, one rounding per
  addition), `reversed`, `pairwise` (adjacent pairs, then pairs of pairs), `splitK`
  (K contiguous chunks summed left to right, then the K partials: split-K / blocked),
  `blockB` (chunks of B), `lanesW` (W accumulators, one per SIMD lane, strided, then a
  tree over the lanes), `torch` (the library's own reduction: torch.sum / matmul).
- `fma`: dot products and rank-one updates as fused multiply-adds (one rounding for
  a*b + c), emulated by computing a*b + c in float64 and rounding once to float32
  (a product of two floats is exact in double; the one double rounding of the sum is
  below a float ulp except at ties). Only for float32 arithmetic (`f32`, `bf16`, `f16`).
Scheme-specific knobs (softmax style, Sinkhorn domain, norm placement, P update form,
backward by autograd / hand-written VJP, recomputation) are read by the scheme modules
from `knobs`.
"""
import math

import torch

#: The scheme knobs a module reads (a misspelt knob would silently run `natural`).
KNOBS = {"softmax", "sinkhorn", "norm_after", "norm_mul", "sigmoid_tanh", "ln_onepass", "p_form", "backward", "dense"}

STORE = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64}


class Arith:
    def __init__(self, dtype, order="natural", fma=False, stored_streams=False, **knobs):
        if dtype not in STORE:
            raise ValueError(f"unknown dtype {dtype}")
        self.dtype = dtype
        self.ct = torch.float64 if dtype == "f64" else torch.float32
        self.st = STORE[dtype]
        self.order = order
        self.fma = bool(fma) and self.ct == torch.float32
        self.stored_streams = stored_streams
        unknown = set(knobs) - KNOBS
        if unknown:
            raise ValueError(f"unknown knob(s) {sorted(unknown)}")
        self.knobs = knobs

    def k(self, name, default=None):
        return self.knobs.get(name, default)

    # ---- values in and out -------------------------------------------------
    def t(self, x):
        """An input or parameter (float64 numpy, exact in the case's dtype) in the compute type."""
        return torch.as_tensor(x, dtype=torch.float64).to(self.ct)

    def const(self, c):
        """A real constant of the config, rounded once to the compute type."""
        return torch.tensor(float(c), dtype=torch.float64).to(self.ct)

    def store(self, x):
        """A tensor stored in the dtype (outputs): rounded to nearest even, read back."""
        return x if self.st == self.ct else x.to(self.st).to(self.ct)

    def stream(self, x):
        """A scheme's stream after a layer: stored in the dtype with `stored_streams`."""
        return self.store(x) if self.stored_streams else x

    # ---- reductions ----------------------------------------------------------
    def sum(self, x, dim=-1):
        x = x.movedim(dim, -1)
        return self._sum_last(x, self.order)

    def _sum_last(self, x, order):
        n = x.shape[-1]
        if n == 1:
            return x[..., 0]
        if order == "torch":
            return x.sum(-1)
        if order == "natural":
            return _seq(x)
        if order == "reversed":
            return _seq(x.flip(-1))
        if order == "pairwise":
            return _tree(x)
        if order.startswith("split"):
            return self._chunks(x, math.ceil(n / int(order[5:])), lambda c: _seq(c))
        if order.startswith("block"):
            return self._chunks(x, int(order[5:]), lambda c: _seq(c))
        if order.startswith("lanes"):
            w = int(order[5:])
            m = math.ceil(n / w)
            xp = _pad(x, m * w).reshape(x.shape[:-1] + (m, w))
            return _tree(_seq(xp.movedim(-2, -1)))  # lane j accumulates x[j], x[j+w], ..; then a tree
        raise ValueError(f"unknown summation order {order}")

    def _chunks(self, x, c, inner):
        n = x.shape[-1]
        k = math.ceil(n / c)
        xp = _pad(x, k * c).reshape(x.shape[:-1] + (k, c))  # zeros added are exact
        return _seq(inner(xp))

    def dot(self, a, b, dim=-1):
        """sum_i a_i b_i along dim (broadcasting), in the chosen order, with or without fma."""
        a, b = torch.broadcast_tensors(a, b)
        if not self.fma:
            if self.order == "torch":
                return (a.movedim(dim, -1).unsqueeze(-2) @ b.movedim(dim, -1).unsqueeze(-1))[..., 0, 0]
            return self.sum(a * b, dim)
        a, b = a.movedim(dim, -1), b.movedim(dim, -1)
        n = a.shape[-1]
        if self.order.startswith("split"):
            c = math.ceil(n / int(self.order[5:]))
        elif self.order.startswith("block"):
            c = int(self.order[5:])
        else:
            c = n
        k = math.ceil(n / c)
        ap = _pad(a, k * c).reshape(a.shape[:-1] + (k, c))
        bp = _pad(b, k * c).reshape(b.shape[:-1] + (k, c))
        rng = range(c - 1, -1, -1) if self.order == "reversed" else range(c)
        acc = None
        for i in rng:  # acc = fma(a_i, b_i, acc): one rounding per step
            p = ap[..., i].double() * bp[..., i].double()
            acc = p.float() if acc is None else (acc.double() + p).float()
        return _seq(acc)

    def mv(self, W, x):
        """W [..., m, k] times x [..., k] -> [..., m]."""
        return self.dot(W, x.unsqueeze(-2), -1)

    def fmadd(self, a, b, c):
        """a * b + c elementwise: one rounding with fma, else two."""
        if self.fma:
            a, b, c = torch.broadcast_tensors(a, b, c)
            return (a.double() * b.double() + c.double()).float()
        return a * b + c

    def mean(self, x, dim=-1):
        return self.sum(x, dim) / x.shape[dim]

    def rms(self, x, eps, dim=-1):
        """sqrt(mean(x^2) + eps)."""
        return torch.sqrt(self.mean(x * x, dim) + eps)


def _seq(x):
    acc = x[..., 0]
    for i in range(1, x.shape[-1]):
        acc = acc + x[..., i]
    return acc


def _tree(x):
    while x.shape[-1] > 1:
        n = x.shape[-1]
        h = n // 2
        y = x[..., 0:2 * h:2] + x[..., 1:2 * h:2]
        x = torch.cat([y, x[..., 2 * h:]], -1) if n % 2 else y
    return x[..., 0]


def _pad(x, n):
    if x.shape[-1] == n:
        return x
    return torch.cat([x, x.new_zeros(x.shape[:-1] + (n - x.shape[-1],))], -1)
