"""pytest setup for the dmref_fixtures tests: the package from python/ in this
tree, the golden fixtures, and the dmref command (DMREF_CLI, set by CTest)."""
import os
import shutil
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
FIXTURES = os.environ.get("DMREF_FIXTURES", os.path.join(ROOT, "fixtures", "golden"))


@pytest.fixture(scope="session")
def fixtures_dir():
    return FIXTURES


@pytest.fixture(scope="session")
def dmref_cli():
    """The dmref executable: $DMREF_CLI, else build/tools/dmref, else `dmref` on PATH."""
    for cand in (os.environ.get("DMREF_CLI"), os.path.join(ROOT, "build", "tools", "dmref"), shutil.which("dmref")):
        if cand and os.access(cand, os.X_OK):
            return cand
    if os.environ.get("DMREF_REQUIRE_CLI"):  # CTest sets it: the agreement tests must run there
        pytest.fail("DMREF_REQUIRE_CLI is set but no dmref executable was found (DMREF_CLI)")
    pytest.skip("no dmref executable (set DMREF_CLI)")
