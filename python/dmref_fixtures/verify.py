"""The tolerance rule of `dmref verify`, in numpy (docs/fixtures.md,
"Tolerance rule"; C++: reference/src/conformance/verify.cpp and tolerance.hpp).

For a fixture golden tensor (output.<name>, or a gradient grad.<input>) with golden value y = hi + lo
(double-double) and the candidate's recipe D, element i passes when

    |(observed_i - hi_i) - lo_i| <= factor * B_i + floor_ulps * ulp_D(|hi_i| + factor * B_i)

(for every golden tensor: each tensor with a `.lo` twin), where B_i is the fixture's tensor
`bound.<D>.<name>` at i (the first-order running error bound of element i for a correct kernel of
recipe D, computed by the generator) and factor, floor_ulps come from `__metadata__.tolerance`
(required: there is no default). A NaN or +-inf observation fails. The arithmetic is the same
sequence of IEEE double operations as the C++ gate, so both give the same verdict on every element.
Recipes: f32, bf16, f16, f64, also spelled storage:arithmetic (f32:f32, bf16:f32, f16:f32, f64:f64).
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, NamedTuple, Optional, Tuple

import numpy as np

from .cases import judged_fixture
from .safetensors import BadInput, File, loads_strict

__all__ = ["CANDIDATE_DTYPES", "ulp", "as_float64", "Failure", "Verdict", "check", "assert_conforms",
           "ConformanceError", "tolerance_rule", "tolerance", "check_fixture", "golden_names", "unrepresentable", "recipe",
           "TensorVerdict"]

#: Candidate dtype -> (p significand bits, emin).
CANDIDATE_DTYPES = {"f32": (24, -126), "bf16": (8, -126), "f16": (11, -14), "f64": (53, -1022)}
#: The recipes as storage:arithmetic (tolerance.hpp `Recipe::spelled`) -> the dtype naming their bounds.
RECIPE_SPELLINGS = {"f32:f32": "f32", "bf16:f32": "bf16", "f16:f32": "f16", "f64:f64": "f64"}


def recipe(dtype: str) -> str:
    """The recipe a dtype argument names ("bf16" or "bf16:f32", ...); ValueError otherwise."""
    if dtype in CANDIDATE_DTYPES:
        return dtype
    if dtype in RECIPE_SPELLINGS:
        return RECIPE_SPELLINGS[dtype]
    raise ValueError(f"unknown dtype {dtype!r} (f32, bf16, f16, f64; or as storage:arithmetic "
                     "f32:f32, bf16:f32, f16:f32, f64:f64)")


def ulp(dtype: str, x) -> np.ndarray:
    """Units in the last place of x in format `dtype` (f32, bf16, f16, f64): the
    spacing at |x|, the subnormal spacing below the normal range."""
    p, emin = CANDIDATE_DTYPES[dtype]
    ax = np.abs(np.asarray(x, dtype=np.float64))
    with np.errstate(all="ignore"):
        _, e = np.frexp(np.where(ax == 0, np.ldexp(1.0, emin), ax))
        e = np.maximum(e - 1, emin)  # frexp's exponent is ilogb + 1
        u = np.ldexp(1.0, e - (p - 1))
    return np.where(np.isinf(ax), np.inf, u)


def tolerance(factor: float, bound, floor_ulps: float, dtype: str, hi) -> np.ndarray:
    """The rule for each element: factor * B + floor_ulps * ulp_D(|y| + factor * B), the ulp taken at
    the largest magnitude a passing unrounded value can have (C++: conf::tolerance, the same IEEE
    double operations in the same order)."""
    fb = factor * np.asarray(bound, dtype=np.float64)
    return fb + floor_ulps * ulp(dtype, np.abs(np.asarray(hi, dtype=np.float64)) + fb)


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
class TensorVerdict:
    """One golden tensor's verdict: where its margin is (`dmref verify --format json` "tensors")."""

    tensor: str
    checked: int
    failed: int
    worst_ratio: float
    worst_index: Tuple[int, ...]
    axes: List[str]

    @property
    def where(self) -> str:
        """"token 1, layer 4, i 3": the worst element named by its axes (C++: conf::where)."""
        return ", ".join(f"{self.axes[k] if k < len(self.axes) else 'i' + str(k)} {i}"
                         for k, i in enumerate(self.worst_index))


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
    left_out: List[str] = field(default_factory=list)  # golden tensors not judged (check(only=...))
    #: (tensor, why) of the outputs the fixture has no golden for (metadata
    #: "unrepresentable": beyond double's range): never judged, whatever the candidate holds.
    not_judged: List[Tuple[str, str]] = field(default_factory=list)
    tensors: List[TensorVerdict] = field(default_factory=list)  # every judged tensor, in name order

    def worst_tensor(self) -> Optional[TensorVerdict]:
        """The judged tensor with the largest err/tol (the first of equals), or None."""
        best = None
        for t in self.tensors:
            if t.checked and (best is None or t.worst_ratio > best.worst_ratio):
                best = t
        return best

    def report(self, limit: int = 20) -> str:
        lines = [f"{safe(self.id)}:{safe(f.tensor)}[{','.join(map(str, f.index))}] observed {f.observed!r} "
                 f"expected {f.expected!r} err={f.err:.3g} tol={f.tol:.3g}" for f in self.failures[:limit]]
        status = "PASS" if self.passed else "FAIL"
        w = self.worst_tensor()
        at = f" ({safe(w.tensor)} [{w.where}])" if w else ""
        detail = (f"{self.checked} elements, worst err/tol {self.worst_ratio:.3g}{at}" if self.passed else
                  f"{self.failed} of {self.checked} elements out of tolerance" +
                  (f", worst err/tol {self.worst_ratio:.3g}{at}" if self.checked else ""))
        if self.problems:
            detail += "; " + safe("; ".join(self.problems))
        if self.left_out:
            detail += "; not judged (only=): " + ", ".join(safe(n) for n in self.left_out)
        notes = [f"NOT JUDGED {safe(self.id)}:{safe(n)}: the fixture has no golden for it ({safe(why)})"
                 for n, why in self.not_judged]  # the line `dmref verify` prints
        return "\n".join(lines + [f"{status} {safe(self.id)} ({self.dtype}): {detail}"] + notes)


#: The problem of a case in which no element was judged (C++: conf::kNothingJudged).
NOTHING_JUDGED = ("no element judged (every golden tensor empty, unrepresentable, not judged in this recipe or left "
                  "out by --outputs): a verdict on nothing is not a PASS")


def safe(s: str) -> str:
    """Names are data: bytes outside printable ASCII written as \\xNN (the CLI's
    report does the same), so no name can forge a report line."""
    return _UNSAFE.sub(lambda m: b"\\x%02x" % m.group()[0], s.encode("utf-8", "surrogateescape")).decode("ascii")


_UNSAFE = re.compile(rb"[^\x20-\x5b\x5d-\x7e]")


class Rule(NamedTuple):
    """The tolerance rule of a fixture for one candidate recipe, from its metadata `tolerance`."""
    factor: float
    floor_ulps: float
    no_bound: str  # why the fixture has no bounds for the recipe ("" if it has)
    not_judged: Dict[str, str]  # golden tensors the recipe cannot judge, and why (tolerance.not_judged.<dtype>)


def tolerance_rule(fixture: File, dtype: str) -> Rule:
    """The Rule of a fixture for candidate recipe `dtype`, read from its metadata (one parse).
    not_judged is the generator's refusal of an ill-conditioned tensor (docs/precision.md).
    BadInput if anything is missing or malformed, or not_judged names a tensor that is not a
    golden of the fixture (C++: verify_case, the same checks)."""
    src = fixture.source or "<memory>"
    dtype = recipe(dtype)
    for k in ("case", "tolerance"):
        if k not in fixture.metadata:
            raise BadInput(src, "__metadata__." + k, "missing")
    check_fixture(fixture)
    # Strictly, as the C++ gate (io::parse_json): duplicate keys, deep nesting refused.
    tol = loads_strict(fixture.metadata["tolerance"], src, "__metadata__.tolerance")
    if not isinstance(tol, dict):
        raise BadInput(src, "__metadata__.tolerance", "not a JSON object")
    rule = []
    for k in ("factor", "floor_ulps"):
        if k not in tol:
            raise BadInput(src, "__metadata__.tolerance." + k, "missing")
        rule.append(rule_number(tol[k], src, "__metadata__.tolerance." + k))
    no_bound = ""
    if "no_bound" in tol:
        nb = tol["no_bound"]
        if not isinstance(nb, dict):
            raise BadInput(src, "__metadata__.tolerance.no_bound", "not a JSON object")
        if dtype in nb:
            if not isinstance(nb[dtype], str):
                raise BadInput(src, "__metadata__.tolerance.no_bound." + dtype, "not a string")
            no_bound = nb[dtype]
    fld = "__metadata__.tolerance.not_judged"
    nj = tol.get("not_judged", {})
    if not isinstance(nj, dict):
        raise BadInput(src, fld, "not a JSON object")
    per = nj.get(dtype, {})
    if not isinstance(per, dict):
        raise BadInput(src, f"{fld}.{dtype}", "not a JSON object")
    names = set(golden_names(fixture))
    for name, why in per.items():
        if not isinstance(why, str):
            raise BadInput(src, f"{fld}.{dtype}.{name}", "not a string")
        if name not in names:
            raise BadInput(src, f"{fld}.{dtype}.{name}", "not a golden tensor of this fixture")
    return Rule(rule[0], rule[1], no_bound, dict(per))


def rule_number(x, src: str, field: str) -> float:
    """A number of the rule: finite and >= 0 (a malformed fixture is BadInput)."""
    if type(x) not in (int, float) or not math.isfinite(x) or x < 0:
        raise BadInput(src, field, "not a finite number >= 0")
    return float(x)


def golden_names(fixture: File) -> List[str]:
    """The golden tensors: every tensor with a `.lo` twin, and every output.*
    (whose missing twin check_fixture refuses), in name order (as the C++ gate)."""
    return sorted((n for n in fixture.tensors if not n.endswith(".lo") and not n.startswith("bound.") and
                   (n + ".lo" in fixture.tensors or n.startswith("output."))), key=lambda s: s.encode("utf-8"))


def check_fixture(fixture: File) -> None:
    """A fixture is sane before it judges anything (BadInput otherwise): a
    case id, at least one golden tensor, each with a `.lo` twin of its shape,
    finite golden values (C++: conf::check_fixture)."""
    src = fixture.source or "<memory>"
    if "case" not in fixture.metadata:
        raise BadInput(src, "__metadata__.case", "missing")
    names = golden_names(fixture)
    if not names:
        raise BadInput(src, "fixture", "no golden tensor (output.* with a .lo twin)")
    for name in names:
        if name + ".lo" not in fixture.tensors:
            raise BadInput(src, name + ".lo", "missing tensor")
        hi, lo = fixture.tensors[name], fixture.tensors[name + ".lo"]
        if lo.shape != hi.shape:
            raise BadInput(src, name + ".lo", "not the shape of " + name)
        for t, n in ((hi, name), (lo, name + ".lo")):
            bad = np.flatnonzero(~np.isfinite(t))
            if bad.size:
                raise BadInput(src, n, f"golden element {int(bad[0])} is not finite")


def unrepresentable(fixture: File) -> Dict[str, str]:
    """The outputs the fixture leaves out as beyond double's range, name -> why
    (metadata "unrepresentable", a JSON object of strings; absent: none).
    BadInput if malformed or naming a tensor the fixture has (C++: conf::unrepresentable)."""
    src = fixture.source or "<memory>"
    if "unrepresentable" not in fixture.metadata:
        return {}
    fld = "__metadata__.unrepresentable"
    j = loads_strict(fixture.metadata["unrepresentable"], src, fld)
    if not isinstance(j, dict) or not j:
        raise BadInput(src, fld, "not a JSON object of tensor name -> reason")
    for name, why in j.items():
        if not isinstance(why, str):
            raise BadInput(src, f"{fld}.{name}", "not a string")
        if not name.startswith(("output.", "grad.")):
            raise BadInput(src, f"{fld}.{name}", "not an output name (output.* or grad.*)")
        if name in fixture.tensors or name + ".lo" in fixture.tensors:
            raise BadInput(src, f"{fld}.{name}", "the fixture has this tensor: it is not left out")
    return dict(sorted(j.items(), key=lambda kv: kv[0].encode("utf-8")))


def _axes(fixture: File, name: str, rank: int) -> List[str]:
    """What each index of golden `name` means, from the metadata "axes" the generator writes
    (C++ conf::axes_of, the one table); generic names if absent."""
    try:
        axes = json.loads(fixture.metadata.get("axes", "{}")).get(name)
    except (ValueError, AttributeError):
        axes = None
    if isinstance(axes, list) and len(axes) == rank and all(isinstance(a, str) for a in axes):
        return axes
    per_token = name.startswith(("output.", "grad.input."))
    return ["token" if k == 0 and per_token else f"i{k}" for k in range(rank)]


def _lookup(outputs: Mapping[str, object], case_id: str, name: str):
    keys = [f"{case_id}/{name}", name] + ([name[len("output."):]] if name.startswith("output.") else [])
    for key in keys:
        if key in outputs:
            return key, outputs[key]
    return None, None


def _real_array(x):
    """The candidate as float64, or None if it is not an array of real numbers
    (complex, strings, objects): never silently cast."""
    try:
        if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch
            if x.is_complex():
                return None
            return as_float64(x)
        a = np.asarray(x)
    except Exception:
        return None
    if a.dtype.kind not in "biuf":
        return None
    return a.astype(np.float64)


def check(outputs, case, dtype: str = "f32", *, factor: Optional[float] = None,
          floor_ulps: Optional[float] = None, keep: int = 20, only: Optional[List[str]] = None) -> Verdict:
    """Judges a candidate's outputs against one fixture case; never raises for
    a bad candidate (only for a bad fixture).

    outputs: a mapping from names to arrays (numpy, torch, lists) or a File. For
      the golden tensor output.<name>, the candidate is looked up as
      "<case id>/output.<name>", then "output.<name>", then "<name>"; a
      candidate that is not an array of real numbers (complex, strings) fails.
    case: a Case (cases.py), a fixture File or the path of a fixture file; a
      path is checked against the manifest next to it as `dmref verify
      --fixtures FILE` does (a mismatch is BadInput, before anything is
      judged), a File is not.
    dtype: the candidate's dtype: f32, bf16, f16 or f64.
    factor, floor_ulps: override the fixture's tolerance rule (as --factor does).
    only: judge only these golden tensors ("out" or "output.out"; as
      `dmref verify --outputs`); the others are listed in Verdict.left_out.
    """
    if isinstance(case, (str, os.PathLike)):  # a fixture path: checked against its manifest as the CLI does (BadInput)
        case = judged_fixture(case)
    fx: File = getattr(case, "file", case)
    dtype = recipe(dtype)
    f_meta, fl_meta, no_bound, ill = tolerance_rule(fx, dtype)
    factor = f_meta if factor is None else rule_number(float(factor), "factor", "argument")
    floor_ulps = fl_meta if floor_ulps is None else rule_number(float(floor_ulps), "floor_ulps", "argument")
    src = fx.source or "<memory>"
    cid = fx.metadata["case"]
    if isinstance(outputs, File):
        outputs = outputs.tensors
    v = Verdict(id=cid, dtype=dtype)
    if not isinstance(outputs, Mapping):  # None, a list, an array: a bad candidate fails, never raises
        outputs = {}
        v.problems.append("candidate is not a mapping from tensor names to arrays")
        v.passed = False
    if isinstance(only, str):  # a string would be taken letter by letter
        raise BadInput(src, "--outputs", f"only= takes a list of names, not the string {only!r}")
    beyond = unrepresentable(fx)
    wanted = []
    for w in only or []:
        if not isinstance(w, str) or not w:
            raise BadInput(src, "--outputs", f"{w!r} is not a tensor name (names are non-empty strings)")
        for n in (w, "output." + w):
            if n in beyond:
                raise BadInput(src, "--outputs", f"{n} has no golden in case {cid}: {beyond[n]}")
        full = w if w + ".lo" in fx.tensors else "output." + w
        if full + ".lo" not in fx.tensors:
            raise BadInput(src, "--outputs", f"no golden tensor {w} in case {cid}")
        wanted.append(full)
    v.not_judged = list(beyond.items())  # a candidate's tensor of that name is neither passed nor failed
    for name in golden_names(fx):
        if wanted and name not in wanted:
            v.left_out.append(name)
            continue
        if name in ill:
            v.not_judged.append((name, f"not judged in recipe {dtype}: {ill[name]}"))
            continue
        hi, lo = fx.tensors[name], fx.tensors[name + ".lo"]
        bname = f"bound.{dtype}.{name}"
        if bname not in fx.tensors:
            raise BadInput(src, bname, "missing tensor (a fixture from before the per-element tolerance "
                           "bounds: regenerate it with this dmref)" if not no_bound else
                           f"no bound for dtype {dtype}: {no_bound}")
        b = np.asarray(fx.tensors[bname], dtype=np.float64)
        if b.shape != hi.shape:
            raise BadInput(src, bname, "not the shape of " + name)
        badb = np.flatnonzero(~(np.isfinite(b) & (b >= 0)))
        if badb.size:
            raise BadInput(src, f"{bname}[{int(badb[0])}]", "not a finite number >= 0")
        key, got = _lookup(outputs, cid, name)
        if key is None:
            v.passed = False
            v.problems.append(f"candidate has no tensor {cid}/{name}")
            continue
        obs = _real_array(got)
        if obs is None:
            v.passed = False
            v.problems.append(f"candidate tensor {key} is not an array of real numbers")
            continue
        if obs.shape != hi.shape:
            v.passed = False
            v.problems.append(f"candidate tensor {key} has the wrong shape "
                              f"{list(obs.shape)}, expected {list(hi.shape)}")
            continue
        with np.errstate(all="ignore"):
            err = np.where(np.isfinite(obs), np.abs((obs - hi) - lo), np.inf)
            tol = tolerance(factor, b, floor_ulps, dtype, hi)
            ratio = err / tol
        if not np.all(np.isfinite(tol)):
            k = int(np.flatnonzero(~np.isfinite(tol))[0])
            raise BadInput(src, f"{bname}[{k}]", "factor x bound is not finite")
        bad = ~(err <= tol)
        v.checked += hi.size
        if hi.size:
            k = int(np.argmax(np.where(np.isnan(ratio), -np.inf, ratio)))  # the first of equals, as the C++ gate
            v.tensors.append(TensorVerdict(name, int(hi.size), int(np.count_nonzero(bad)), float(ratio.flat[k]),
                                           tuple(int(i) for i in np.unravel_index(k, hi.shape)) if hi.ndim else (),
                                           _axes(fx, name, hi.ndim)))
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
    if v.checked == 0 and v.passed:  # a verdict on nothing is never a PASS (C++: verify_case, the same words)
        v.passed = False
        v.problems.append(NOTHING_JUDGED)
    return v


def assert_conforms(outputs, case, dtype: str = "f32", **kw) -> Verdict:
    """Like check(), but raises ConformanceError (an AssertionError, so pytest
    shows the report) unless every output is within tolerance. Returns the verdict."""
    __tracebackhide__ = True  # pytest shows the caller's line and the report, not this frame
    v = check(outputs, case, dtype, **kw)
    if not v.passed:
        raise ConformanceError(v)
    return v
