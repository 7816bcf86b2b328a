"""Example: how a kernel repository tests its implementation against the
golden fixtures with pytest (docs/python.md). The "kernel" here is a numpy
PreLN stream in float32 (h_0 = e, h_{l+1} = h_l + v_l, out = h_L); yours
would be a CUDA/Triton/torch kernel called the same way.

Copy this file, replace `my_preln_kernel`, point DMREF_FIXTURES at the
fixtures directory (or pass it to df.cases) and run pytest."""
import numpy as np
import pytest

import dmref_fixtures as df

FORMAT = {"f32": "F32", "bf16": "BF16", "f16": "F16"}


def my_preln_kernel(e, v, dtype):
    """e [T, d], v [T, L, d] -> {output.h [T, L, d], output.out [T, d]}: float32
    arithmetic on inputs in `dtype`, every stored result rounded to `dtype`."""
    rnd = lambda x: df.round_to(x, FORMAT[dtype]).astype(np.float32)  # noqa: E731 (stand-in for a cast)
    x = rnd(e)
    hs = []
    for layer in range(v.shape[1]):
        hs.append(x)
        x = rnd(x + rnd(v[:, layer]))  # float32 add, stored in dtype
    return {"output.h": np.stack(hs, axis=1), "output.out": x}


def buggy_preln_kernel(e, v, dtype):
    """A typical bug: the last layer's write is dropped."""
    out = my_preln_kernel(e, v, dtype)
    out["output.out"] = out["output.h"][:, -1]
    return out


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("case", list(df.cases(pattern="preln.kernel.*")), ids=lambda c: c.id)
def test_preln_kernel_conforms(case, dtype):
    out = my_preln_kernel(case.inputs["input.e"], case.inputs["input.v"], dtype)
    df.assert_conforms(out, case, dtype)  # raises with a per-element report if out of tolerance


@pytest.mark.parametrize("case", list(df.cases(pattern="preln.kernel.*.f32.*")), ids=lambda c: c.id)
def test_the_gate_catches_a_bug(case):
    out = buggy_preln_kernel(case.inputs["input.e"], case.inputs["input.v"], "f32")
    with pytest.raises(df.ConformanceError) as e:
        df.assert_conforms(out, case, "f32")
    assert e.value.verdict.failed > 0 and "output.out[" in str(e.value)


def test_torch_tensors_are_accepted():
    torch = pytest.importorskip("torch")  # optional dependency
    case = next(df.cases(pattern="preln.kernel.*.bf16.*"))
    e = torch.tensor(case.inputs["input.e"], dtype=torch.bfloat16)
    v = torch.tensor(case.inputs["input.v"], dtype=torch.bfloat16)
    x, hs = e, []
    for layer in range(v.shape[1]):
        hs.append(x)
        x = (x.float() + v[:, layer].float()).to(torch.bfloat16)
    df.assert_conforms({"output.h": torch.stack(hs, 1), "output.out": x}, case, "bf16")
