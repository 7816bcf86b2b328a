"""dmref: the certified reference and the conformance gate, in-process
(docs/python.md). The reference runs in this process through the C++ module
`dmref._core` (the code of `dmref run`); the gate is `check` (numpy, the
package dmref_fixtures) or `verify` (the C++ gate of `dmref verify`).

    import dmref
    golden = dmref.run("preln", {"tokens": 3, "layers": 5, "d": 16},
                       {"input.e": e, "input.v": v}, grad=False)  # a certified fixture
    dmref.assert_conforms(my_kernel(e, v), golden, "f32")
"""
import pkgutil

# The module _core is built into build/python/dmref/ by a CMake build and
# installed next to this file by `pip install .`: both halves of the package.
__path__ = pkgutil.extend_path(__path__, __name__)

from dmref_fixtures import (BadInput, Case, ConformanceError, Verdict, assert_conforms, cases, check,  # noqa: E402
                            default_fixtures_dir, load_case, read, write)

from ._run import Result, run, schema, schemes, verify  # noqa: E402

__version__ = "0.1.0"
__all__ = ["BadInput", "Case", "ConformanceError", "Result", "Verdict", "assert_conforms", "cases", "check",
           "default_fixtures_dir", "load_case", "read", "run", "schema", "schemes", "verify", "write"]
