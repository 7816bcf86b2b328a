"""Interop with the PyPI `safetensors` package (the format's reference
implementation), measured both ways (docs/python.md, "Interop"): it reads every
committed fixture and every dtype dmref writes (bf16 included) to the same
values and metadata; dmref's readers (Python and C++) read what it writes.
And the JAX example of the gate. Needs safetensors and jax from the venv of
scripts/deps; CTest's python_venv run sets DMREF_REQUIRE_VENV=1 so they cannot skip there."""
import json
import os

import numpy as np
import pytest

import dmref_fixtures as df

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
REQUIRE = bool(os.environ.get("DMREF_REQUIRE_VENV"))


def need(name):
    if REQUIRE:
        return __import__(name)
    return pytest.importorskip(name, reason=f"{name} from PyPI is in the venv of scripts/deps")


def golden_files():
    d = os.path.join(ROOT, "fixtures", "golden")
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".safetensors"))


def test_safetensors_reads_every_fixture():
    st = need("safetensors")
    from safetensors.numpy import load_file
    files = golden_files()
    assert len(files) == len(df.read_manifest(os.path.join(ROOT, "fixtures", "manifest.json")))
    for path in files:
        ours = df.read(path)
        theirs = load_file(path)
        assert sorted(theirs) == sorted(ours.tensors), path
        for k, a in theirs.items():
            assert a.dtype == {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64}[ours.dtypes[k]]
            np.testing.assert_array_equal(a.astype(np.float64), ours.tensors[k], err_msg=f"{path}: {k}")
        with st.safe_open(path, "np") as f:
            assert f.metadata() == ours.metadata


SAMPLE = np.array([[0.0, -0.0, 1.0, -2.5], [3.140625, 65504.0, 2.0 ** -24, -(2.0 ** -14)]])  # exact in every float dtype


@pytest.mark.parametrize("dtype", ["F64", "F32", "F16", "BF16", "I64"])
def test_both_ways_every_dtype(dtype, tmp_path):
    need("safetensors")
    torch = need("torch")
    from safetensors.torch import load_file, save_file
    x = np.round(SAMPLE) if dtype == "I64" else df.round_to(SAMPLE, dtype) if dtype != "F64" else SAMPLE
    tt = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}
    # dmref writes -> safetensors reads.
    ours = tmp_path / "dmref.safetensors"
    df.write(ours, {"a.x": (x, dtype), "b": (x[0], dtype)}, {"k": "v"})
    got = load_file(str(ours))
    assert got["a.x"].dtype == tt[dtype]
    np.testing.assert_array_equal(got["a.x"].double().numpy(), x)
    np.testing.assert_array_equal(got["b"].double().numpy(), x[0])
    # safetensors writes -> dmref reads (Python and the C++ reader), and writes it back byte for byte.
    theirs = tmp_path / "st.safetensors"
    save_file({"a.x": torch.tensor(x, dtype=tt[dtype]), "b": torch.tensor(x[0], dtype=tt[dtype])}, str(theirs),
              metadata={"k": "v"})
    f = df.read(theirs)
    assert f.dtypes == {"a.x": dtype, "b": dtype} and f.metadata == {"k": "v"}
    np.testing.assert_array_equal(f.tensors["a.x"], x)
    assert df.serialize({n: (t, f.dtypes[n]) for n, t in f.tensors.items()}, f.metadata) == ours.read_bytes()


def test_cpp_reads_safetensors_files(tmp_path):
    """A problem written by safetensors (bf16 inputs) is certified by dmref.run from the path (the C++ reader)."""
    need("safetensors")
    torch = need("torch")
    pytest.importorskip("dmref._core")
    import dmref
    from safetensors.torch import save_file
    rng = np.random.default_rng(3)
    e = torch.tensor(df.round_to(rng.standard_normal((2, 8)), "BF16"), dtype=torch.bfloat16)
    v = torch.tensor(df.round_to(rng.standard_normal((2, 4, 8)), "BF16"), dtype=torch.bfloat16)
    save_file({"input.e": e, "input.v": v}, str(tmp_path / "in.safetensors"))
    (tmp_path / "c.json").write_text(json.dumps({"tokens": 2, "layers": 4, "d": 8}))
    res = dmref.run("preln", tmp_path / "c.json", tmp_path / "in.safetensors")
    assert res.file.dtypes["input.e"] == "BF16"
    np.testing.assert_array_equal(res["input.v"], v.double().numpy())
    mem = dmref.run("preln", {"tokens": 2, "layers": 4, "d": 8}, {"input.e": e, "input.v": v})
    assert all(mem.file.tensors[k].tobytes() == t.tobytes() for k, t in res.file.tensors.items())


def test_jax_example():
    """docs/python.md's JAX example: a jax.numpy PreLN kernel (float32 on CPU) gated on the corpus."""
    need("jax")
    import jax.numpy as jnp

    def preln(e, v):  # h_0 = e, h_{l+1} = h_l + v_l; out = h_L
        hs, x = [], e
        for layer in range(v.shape[1]):
            hs.append(x)
            x = x + v[:, layer]
        return {"output.h": jnp.stack(hs, 1), "output.out": x}

    n = 0
    for case in df.cases(pattern="preln.kernel.*.f32.*"):
        out = preln(jnp.asarray(case.inputs["input.e"], jnp.float32), jnp.asarray(case.inputs["input.v"], jnp.float32))
        df.assert_conforms(out, case, "f32")
        n += 1
    assert n > 0
