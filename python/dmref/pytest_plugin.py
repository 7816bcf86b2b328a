"""The dmref pytest plugin (docs/python.md, "pytest"): loaded by pytest when
the package is installed (entry point pytest11), or with `-p dmref.pytest_plugin`.

- `--dmref-fixtures DIR`: the corpus (default $DMREF_FIXTURES, else the one
  installed with the package); `--dmref-case GLOB` narrows every test's cases.
- `dmref_case`: a test taking it runs once per corpus case matching the glob of
  its marker `@pytest.mark.dmref("attnres_full.kernel*")` (default "*"), with
  the case id as the test id.
- `dmref_conforms(outputs, case, dtype)`: the gate; a failure names each failing
  tensor with its count and its worst elements (index, observed, expected,
  err/tol), and pytest's traceback stops at the test's own line.
"""
from __future__ import annotations

import pytest

import dmref_fixtures as df

WORST = 5  # worst elements shown per failing tensor
KEEP = 1_000_000  # failures collected to find them; past it, "worst of the first KEEP"


def pytest_addoption(parser):
    g = parser.getgroup("dmref", "dmref conformance gate")
    g.addoption("--dmref-fixtures", default=None, metavar="DIR",
                help="fixtures directory, file or manifest.json (default: $DMREF_FIXTURES, else the installed corpus)")
    g.addoption("--dmref-case", default="*", metavar="GLOB", help="only corpus cases matching GLOB (dmref verify --case)")


def pytest_configure(config):
    config.addinivalue_line("markers", "dmref(glob): the corpus cases the dmref_case fixture runs the test on")


def pytest_generate_tests(metafunc):
    if "dmref_case" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("dmref")
    pattern = marker.args[0] if marker and marker.args else "*"
    narrow = metafunc.config.getoption("--dmref-case")
    where = metafunc.config.getoption("--dmref-fixtures")
    found = [c for c in df.cases(where, pattern) if df.glob_match(narrow, c.id)]
    if not found:  # a gate that ran on nothing never passes
        raise df.BadInput(where or df.default_fixtures_dir(), "dmref_case",
                          f"no case matches {pattern!r}" + (f" and --dmref-case {narrow!r}" if narrow != "*" else ""))
    metafunc.parametrize("dmref_case", found, ids=[c.id for c in found])


def report(verdict: df.Verdict, case) -> str:
    """Per failing tensor: how many of its elements failed, its worst ones by
    err/tol, each with its index named by the tensor's axes (token, layer, i,
    ...); then the problems (a missing tensor, a wrong shape)."""
    fx = getattr(case, "file", case)
    lines = [f"dmref gate: case {verdict.id} ({verdict.dtype}) FAILED: {verdict.failed} of {verdict.checked} "
             f"elements out of tolerance; fixture {fx.source or '<memory>'}"]
    by_tensor = {}
    for f in verdict.failures:
        by_tensor.setdefault(f.tensor, []).append(f)
    cut = len(verdict.failures) < verdict.failed
    ratio = lambda f: f.err / f.tol if f.tol > 0 else float("inf")  # noqa: E731
    for t in verdict.tensors:
        if not t.failed:
            continue
        shape = list(fx.tensors[t.tensor].shape) if t.tensor in fx.tensors else "?"
        lines.append(f"  {t.tensor} {shape}: {t.failed} of {t.checked} elements fail; "
                     f"worst{' of the first ' + str(KEEP) + ' failures' if cut else ''}:")
        for f in sorted(by_tensor.get(t.tensor, []), key=lambda f: -ratio(f))[:WORST]:
            at = df.TensorVerdict(t.tensor, 0, 0, 0.0, f.index, t.axes).where
            lines.append(f"    [{at}] observed {f.observed!r} expected {f.expected!r} "
                         f"err/tol {ratio(f):.3g} (err={f.err:.3g} tol={f.tol:.3g})")
    lines += [f"  {p}" for p in verdict.problems]
    return "\n".join(lines)


class GateFailure(df.ConformanceError):
    """ConformanceError with the per-tensor report."""

    def __init__(self, verdict, case):
        AssertionError.__init__(self, report(verdict, case))
        self.verdict = verdict


def conforms(outputs, case, dtype: str = "f32", **kw) -> df.Verdict:
    """dmref_fixtures.check, raising GateFailure (an AssertionError) with the per-tensor report unless it passes."""
    __tracebackhide__ = True
    v = df.check(outputs, case, dtype, keep=KEEP, **kw)
    if not v.passed:
        raise GateFailure(v, case)
    return v


@pytest.fixture
def dmref_conforms():
    """The gate as a fixture: dmref_conforms(outputs, case, dtype, **check_kw)."""
    return conforms


@pytest.fixture(scope="session")
def dmref_fixtures_dir(request):
    return request.config.getoption("--dmref-fixtures") or df.default_fixtures_dir()
