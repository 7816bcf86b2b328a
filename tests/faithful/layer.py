"""The model-level layer function of every `model` fixture (docs/framework.md):
F_l(h) = W2_l tanh(W1_l RMSNorm(h)), RMSNorm eps 1e-6, gain 1 -- and LDM's addressing
MLP(z) = W2 silu(W1 RMSNorm(z)) (docs/ldm.md; an empty W1: the single map W RMSNorm(z))."""
import torch

RMS_EPS = 1e-6


def rmsnorm(A, z, eps=RMS_EPS):
    """z / sqrt(mean(z^2) + eps) (the faithful variants keep the division; `norm_mul`
    multiplies by the reciprocal, as fused kernels do)."""
    r = A.rms(z, A.const(eps)).unsqueeze(-1)
    return z * (1 / r) if A.k("norm_mul") else z / r


def layer_fn(A, P, l, h):
    """v_l = F_l(h_l) at model level; the given v_l at kernel level."""
    if "param.W1" not in P:
        return P["input.v"][:, l]
    u = torch.tanh(A.mv(P["param.W1"][l], rmsnorm(A, h)))
    return A.mv(P["param.W2"][l], u)


def silu(x):
    return x * torch.sigmoid(x)


def mlp(A, P, prefix, z):
    n = rmsnorm(A, z)
    if prefix + ".W" in P:
        return A.mv(P[prefix + ".W"], n)
    return A.mv(P[prefix + ".W2"], silu(A.mv(P[prefix + ".W1"], n)))


def rmsnorm_vjp(A, z, dn, eps=RMS_EPS):
    """RMSNorm^T, gain 1: (dn - n mean(dn * n)) / r."""
    r = A.rms(z, A.const(eps)).unsqueeze(-1)
    n = z / r
    return (dn - n * A.mean(dn * n).unsqueeze(-1)) / r


def layer_vjp(A, P, l, h, dv):
    """Hand-written VJP of F_l at h for dv: (dh, dW1_l, dW2_l), parameter adjoints summed over tokens
    (docs/framework.md: dW2 += dv a^T, du = (W2^T dv)(1 - a^2), dW1 += du n^T, dh = RMSNorm^T(W1^T du))."""
    W1, W2 = P["param.W1"][l], P["param.W2"][l]
    n = rmsnorm(A, h)
    a = torch.tanh(A.mv(W1, n))
    dW2 = A.sum(dv.unsqueeze(-1) * a.unsqueeze(-2), 0)
    du = A.mv(W2.transpose(0, 1), dv) * (1 - a * a)
    dW1 = A.sum(du.unsqueeze(-1) * n.unsqueeze(-2), 0)
    return rmsnorm_vjp(A, h, A.mv(W1.transpose(0, 1), du)), dW1, dW2
