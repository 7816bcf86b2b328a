"""dmref.run and dmref.verify: the C++ reference and gate in-process (docs/python.md)."""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Optional

import numpy as np

from dmref_fixtures import BadInput, Case, File, Verdict, parse, serialize, write
from dmref_fixtures.verify import Failure, TensorVerdict, as_float64

__all__ = ["Result", "run", "verify"]

# numpy / ml_dtypes (jax) / torch dtype names -> the safetensors dtype of an input tensor.
_DTYPE = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64"}


def _core():
    try:
        from . import _core as core
    except ImportError as e:
        raise ImportError("dmref._core, the compiled module, is not built: `pip install .` from the dmref tree, or "
                          "`cmake --build build --target dmref_python` and PYTHONPATH=python:build/python "
                          "(docs/python.md)") from e
    return core


def _is_torch(x) -> bool:
    return hasattr(x, "detach") and hasattr(x, "cpu")  # torch, without importing it


def _stored(name: str, x):
    """(array, safetensors dtype) of an input tensor: its own dtype, never narrowed."""
    if isinstance(x, tuple):  # (array, "F32"), as dmref_fixtures.write takes
        return x
    dt = str(getattr(x, "dtype", "")).replace("torch.", "")
    if not dt:
        x = np.asarray(x)
        dt = x.dtype.name
    if dt not in _DTYPE:
        raise TypeError(f"dmref.run: inputs[{name!r}]: dtype {dt} is not one of float64, float32, float16, bfloat16")
    return as_float64(x), _DTYPE[dt]


class Result(Case):
    """The fixture of dmref.run: a Case (check, verify and assert_conforms take
    it) whose file is exactly the bytes `dmref run` writes (`.data`). When the
    inputs were torch tensors, .inputs, .params, .expected, .gradients and
    result[name] are float64 torch tensors on the inputs' device."""

    def __init__(self, data: bytes, device=None):
        super().__init__(parse(data, "<dmref.run>"))
        self.data = data
        self.device = device  # a torch device, or None: numpy

    def _out(self, a):
        if self.device is None:
            return a
        import torch
        return torch.from_numpy(a).to(self.device)

    def _prefixed(self, prefix):
        return {k: self._out(v) for k, v in super()._prefixed(prefix).items()}

    def __getitem__(self, name):
        return self._out(self.file.get(name))

    def __repr__(self) -> str:
        return f"Result({self.id!r})"

    @property
    def precision_bits(self) -> int:
        return int(self.file.metadata["precision_bits"])

    def write(self, path) -> None:
        """Writes the fixture (the same bytes as `dmref run --out`), atomically."""
        write(path, {n: (t, self.file.dtypes[n]) for n, t in self.file.tensors.items()}, self.file.metadata)


def run(scheme: str, config, inputs, grad: bool = False, *, case_id: Optional[str] = None,
        jobs: Optional[int] = None) -> Result:
    """The certified fixture of a problem, as `dmref run` makes it, in-process.

    scheme: preln, ldm, attnres, hc, mhc, denseformer (docs/fixtures.md).
    config: a dict (the JSON object of --config) or the path of a config file.
    inputs: a mapping from tensor names (input.*, param.*, and input.grad.* with
      grad) to arrays (numpy, torch, jax; stored in their own dtype: float64,
      float32, float16, bfloat16), or the path of a safetensors file.
    grad: the backward too (grad.* goldens; `dmref run --grad`).
    case_id, jobs: as --case-id and --jobs (default: every core).
    Paths are read as the CLI reads them and recorded in the fixture's command,
    so the bytes equal `dmref run --config PATH --inputs PATH`'s. BadInput (the
    one line of the CLI) for a bad config or inputs.
    """
    core = _core()
    if isinstance(config, (str, os.PathLike)):
        config_text, config_name = None, os.fspath(config)
    elif isinstance(config, Mapping):
        config_text, config_name = json.dumps(config, allow_nan=False), "<config>"
    else:
        raise TypeError(f"dmref.run: config must be a dict or a path, not {type(config).__name__}")
    device = None
    if isinstance(inputs, (str, os.PathLike)):
        data, inputs_name = None, os.fspath(inputs)
    elif isinstance(inputs, Mapping):
        torch_in = [t for t in inputs.values() if _is_torch(t)]
        device = torch_in[0].device if torch_in else None
        data, inputs_name = serialize({k: _stored(k, v) for k, v in inputs.items()}), "<inputs>"
    else:
        raise TypeError(f"dmref.run: inputs must be a mapping of arrays or a path, not {type(inputs).__name__}")
    raw = core.run(scheme, config_text, config_name, data, inputs_name, bool(grad), case_id or "",
                   core.default_jobs() if jobs is None else int(jobs))
    return Result(raw, device)


def verify(outputs, case, dtype: str = "f32", *, factor: Optional[float] = None,
           floor_ulps: Optional[float] = None, keep: int = 20, only=None) -> Verdict:
    """check(), judged by the C++ gate of `dmref verify` in-process: the same
    arguments and the same Verdict (tests/python/test_package.py checks they agree).
    A candidate tensor that is not an array of real numbers is left out (the gate then reports it missing)."""
    core = _core()
    path = os.fspath(case) if isinstance(case, (str, os.PathLike)) else None
    if path is not None:  # read and checked against its manifest by the C++ gate, as `verify --fixtures FILE`
        fx, data = None, None
    else:
        fx = getattr(case, "file", case)
        data = getattr(case, "data", None) or serialize(
            {n: (t, fx.dtypes[n]) for n, t in fx.tensors.items()}, fx.metadata)
    if isinstance(outputs, File):
        outputs = outputs.tensors
    cand = {}
    for k, v in (outputs.items() if isinstance(outputs, Mapping) else ()):
        if _is_torch(v):
            real = not (v.is_complex() or v.dtype.is_complex)
        else:
            v = np.asarray(v)
            real = v.dtype.kind in "fiub" or v.dtype.name == "bfloat16"
        if real:
            cand[str(k)] = (as_float64(v), "F64")  # exact for every float format
    name = path if path is not None else fx.source or "<memory>"
    if isinstance(only, str):
        raise BadInput(name, "--outputs", f"only= takes a list of names, not the string {only!r}")
    d = core.verify(data, name, serialize(cand), dtype, factor, floor_ulps, list(only or []), keep)
    return Verdict(id=d["id"], dtype=dtype, passed=d["pass"], checked=d["checked"], failed=d["failed"],
                   worst_ratio=d["worst_err_over_tol"], problems=[d["problem"]] if d["problem"] else [],
                   failures=[Failure(f["tensor"], tuple(f["index"]), f["observed"], f["expected"], f["err"], f["tol"])
                             for f in d["failures"]],
                   left_out=list(d["left_out"]), not_judged=[tuple(x) for x in d["not_judged"]],
                   tensors=[TensorVerdict(t["tensor"], t["checked"], t["failed"], t["worst_err_over_tol"],
                                          tuple(t["worst"]), list(t["axes"])) for t in d["tensors"]])


def schemes() -> list:
    """The registered schemes (`dmref schema list`), in registry order."""
    return list(_core().schemes())


def schema(scheme: str, config=None, grad: bool = False) -> dict:
    """The declared schema of a scheme (`dmref schema`, issue 21): with `config`
    (a dict), that config's keys (type, range, default, meaning, value) and
    tensors (name, dims, shape, role, how the corpus draws it), after the
    checks `dmref run` makes of the config (BadInput naming the field);
    without, every key and tensor over the scheme's documented configs. With
    grad, the upstream gradients of a backward problem too."""
    text = None if config is None else json.dumps(config)
    return json.loads(_core().schema(scheme, text, grad))
