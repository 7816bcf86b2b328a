"""The tolerance rule of `dmref verify`, in numpy (docs/fixtures.md,
"Tolerance rule"; C++: reference/src/conformance/verify.cpp).

For a fixture golden tensor (output.<name>, or a gradient grad.<input>) with golden value y = hi + lo
(double-double) and the candidate's dtype D, element i passes when

    |(observed_i - hi_i) - lo_i| <= factor * baseline_D(name) + floor_ulps * ulp_D(hi_i)

where baseline_D(name) is the fixture's `__metadata__.baselines[D][name].max_abs`
(the max abs error of the reference algorithm itself run in D) and factor,
floor_ulps come from `__metadata__.tolerance` (2 and 4 if absent). A NaN or
+-inf observation fails. The arithmetic is the same sequence of IEEE double
operations as the C++ gate, so both give the same verdict on every element.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np

from .safetensors import BadInput, File

__all__ = ["CANDIDATE_DTYPES", "ulp", "as_float64", "Failure", "Verdict", "check", "assert_conforms",
           "ConformanceError", "tolerance_rule"]

#: Candidate dtype -> (p significand bits, emin).
CANDIDATE_DTYPES = {"f32": (24, -126), "bf16": (8, -126), "f16": (11, -14)}


def ulp(dtype: str, x) -> np.ndarray:
    """Units in the last place of x in format `dtype` (f32, bf16, f16): the
    spacing at |x|, the subnormal spacing below the normal range."""
    p, emin = CANDIDATE_DTYPES[dtype]
    ax = np.abs(np.asarray(x, dtype=np.float64))
    with np.errstate(all="ignore"):
        _, e = np.frexp(np.where(ax == 0, np.ldexp(1.0, emin), ax))
        e = np.maximum(e - 1, emin)  # frexp's exponent is ilogb + 1
        u = np.ldexp(1.0, e - (p - 1))
    return np.where(np.isinf(ax), np.inf, u)


def as_float64(x) -> np.ndarray:
    """An array-like (numpy, torch tensor on any device and dtype, list, scalar)
    as a float64 numpy array; exact for every float format up to float64."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch, without importing it
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


class ConformanceError(AssertionError):
    """Raised by assert_conforms: the candidate is out of tolerance."""

    def __init__(self, verdict: "Verdict"):
        self.verdict = verdict
        super().__init__(verdict.report())


@dataclass
class Failure:
    tensor: str
    index: Tuple[int, ...]
    observed: float
    expected: float
    err: float
    tol: float


@dataclass
class Verdict:
    """The judgement of one case, with the fields of `dmref verify --format json`."""

    id: str
    dtype: str
    passed: bool = True
    checked: int = 0
    failed: int = 0
    worst_ratio: float = 0.0  # max err / tol
    problems: List[str] = field(default_factory=list)
    failures: List[Failure] = field(default_factory=list)  # the first few

    def report(self, limit: int = 20) -> str:
        lines = [f"{self.id}:{f.tensor}[{','.join(map(str, f.index))}] observed {f.observed!r} "
                 f"expected {f.expected!r} err={f.err:.3g} tol={f.tol:.3g}" for f in self.failures[:limit]]
        status = "PASS" if self.passed else "FAIL"
        detail = (f"{self.checked} elements, worst err/tol {self.worst_ratio:.3g}" if self.passed else
                  f"{self.failed} of {self.checked} elements out of tolerance")
        if self.problems:
            detail += "; " + "; ".join(self.problems)
        return "\n".join(lines + [f"{status} {self.id} ({self.dtype}): {detail}"])


def tolerance_rule(fixture: File, dtype: str):
    """(factor, floor_ulps, baselines) of a fixture for candidate dtype `dtype`,
    read from its metadata. BadInput if they are missing or malformed."""
    src = fixture.source or "<memory>"
    if dtype not in CANDIDATE_DTYPES:
        raise ValueError(f"unknown candidate dtype {dtype!r} (f32, bf16, f16)")
    for k in ("case", "baselines", "tolerance"):
        if k not in fixture.metadata:
            raise BadInput(src, "__metadata__." + k, "missing")
    try:
        base = json.loads(fixture.metadata["baselines"])
        tol = json.loads(fixture.metadata["tolerance"])
    except ValueError:
        raise BadInput(src, "__metadata__", "baselines/tolerance are not valid JSON") from None
    if not isinstance(tol, dict):
        raise BadInput(src, "__metadata__.tolerance", "not a JSON object")
    if not isinstance(base, dict) or not isinstance(base.get(dtype), dict):
        raise BadInput(src, "__metadata__.baselines", f"no baseline for dtype {dtype}")
    rule = [rule_number(tol[k], src, "__metadata__.tolerance." + k) if k in tol else dflt
            for k, dflt in (("factor", 2.0), ("floor_ulps", 4.0))]
    return rule[0], rule[1], base[dtype]


def rule_number(x, src: str, field: str) -> float:
    """A number of the rule: finite and >= 0 (a malformed fixture is BadInput)."""
    if type(x) not in (int, float) or not math.isfinite(x) or x < 0:
        raise BadInput(src, field, "not a finite number >= 0")
    return float(x)


def _output_names(fixture: File) -> List[str]:
    """The golden tensors: outputs and gradients (grad.*), each with a .lo twin."""
    return sorted(n for n in fixture.tensors if n.startswith(("output.", "grad.")) and not n.endswith(".lo"))


def _lookup(outputs: Mapping[str, object], case_id: str, name: str):
    short = [name[len("output."):]] if name.startswith("output.") else []
    for key in [f"{case_id}/{name}", name] + short:
        if key in outputs:
            return key, outputs[key]
    return None, None


def check(outputs, case, dtype: str = "f32", *, factor: Optional[float] = None,
          floor_ulps: Optional[float] = None, keep: int = 20) -> Verdict:
    """Judges a candidate's outputs against one fixture case; never raises for
    a bad candidate (only for a bad fixture).

    outputs: a mapping from names to arrays (numpy, torch, lists) or a File. For
      the fixture tensor output.<name>, the candidate is looked up as
      "<case id>/output.<name>", then "output.<name>", then "<name>".
    case: a Case (cases.py) or a fixture File.
    dtype: the candidate's dtype: f32, bf16 or f16.
    factor, floor_ulps: override the fixture's tolerance rule (as --factor does).
    """
    fx: File = getattr(case, "file", case)
    f_meta, fl_meta, base = tolerance_rule(fx, dtype)
    factor = f_meta if factor is None else rule_number(float(factor), "factor", "argument")
    floor_ulps = fl_meta if floor_ulps is None else rule_number(float(floor_ulps), "floor_ulps", "argument")
    src = fx.source or "<memory>"
    cid = fx.metadata["case"]
    if isinstance(outputs, File):
        outputs = outputs.tensors
    v = Verdict(id=cid, dtype=dtype)
    for name in _output_names(fx):
        if name + ".lo" not in fx.tensors:
            raise BadInput(src, name + ".lo", "missing tensor")
        hi, lo = fx.tensors[name], fx.tensors[name + ".lo"]
        if lo.shape != hi.shape:
            raise BadInput(src, name + ".lo", "not the shape of " + name)
        bfield = f"__metadata__.baselines.{dtype}.{name}.max_abs"
        if not isinstance(base.get(name), dict) or "max_abs" not in base[name]:
            raise BadInput(src, bfield, "missing")
        b = rule_number(base[name]["max_abs"], src, bfield)
        key, got = _lookup(outputs, cid, name)
        if key is None:
            v.passed = False
            v.problems.append(f"candidate has no tensor {cid}/{name}")
            continue
        obs = as_float64(got)
        if obs.shape != hi.shape:
            v.passed = False
            v.problems.append(f"candidate tensor {key} has the wrong shape "
                              f"{list(obs.shape)}, expected {list(hi.shape)}")
            continue
        with np.errstate(all="ignore"):
            err = np.where(np.isfinite(obs), np.abs((obs - hi) - lo), np.inf)
            tol = factor * b + floor_ulps * ulp(dtype, hi)
            ratio = err / tol
        bad = ~(err <= tol)
        v.checked += hi.size
        if hi.size:
            v.worst_ratio = max(v.worst_ratio, float(np.max(np.where(np.isnan(ratio), -np.inf, ratio))))
        nbad = int(np.count_nonzero(bad))
        if nbad:
            v.passed = False
            v.failed += nbad
            for k in np.flatnonzero(bad)[: max(0, keep - len(v.failures))]:
                idx = tuple(int(i) for i in np.unravel_index(k, hi.shape)) if hi.ndim else ()
                v.failures.append(Failure(name, idx, float(obs.flat[k]), float(hi.flat[k]),
                                          float(err.flat[k]), float(np.broadcast_to(tol, hi.shape).flat[k])))
    return v


def assert_conforms(outputs, case, dtype: str = "f32", **kw) -> Verdict:
    """Like check(), but raises ConformanceError (an AssertionError, so pytest
    shows the report) unless every output is within tolerance. Returns the verdict."""
    v = check(outputs, case, dtype, **kw)
    if not v.passed:
        raise ConformanceError(v)
    return v
