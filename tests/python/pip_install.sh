#!/usr/bin/env bash
# The fresh-machine check (docs/python.md, "Install, measured"; CTest
# `pip_install`, registered only with DMREF_TEST_PIP=1 at configure time: the
# wheel's build compiles the conformance library again, ~15 min on 2 cores).
# Builds the wheel offline from this tree with the venv's pinned build
# dependencies, installs it into a new venv (Debian's python,
# --system-site-packages), and runs README.md's pytest file and its kernel
# (the blocks marked "pytest" and "file my_kernels.py") from a directory
# outside the tree, with no dmref on PATH and no DMREF_FIXTURES: the plugin
# comes from the entry point, the corpus from the wheel.
# Usage: pip_install.sh SOURCE_DIR BUILD_VENV WORK_DIR
set -euo pipefail
src=$1 venv=$2 work=$3
rm -rf "$work"
mkdir -p "$work/wheels" "$work/run"
"$venv/bin/pip" wheel -q --no-build-isolation --no-deps --no-index -w "$work/wheels" "$src"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install -q --no-deps --no-index "$work"/wheels/dmref-*.whl
/usr/bin/python3 - "$src" "$work/run" <<'PY'
import os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "tests", "docs"))
import run_docs
for line, lang, marker, text in run_docs.blocks(os.path.join(sys.argv[1], "README.md")):
    name = {"file my_kernels.py": "my_kernels.py", "pytest": "test_readme.py"}.get(marker)
    if name:
        open(os.path.join(sys.argv[2], name), "w").write(text + "\n")
PY
cd "$work/run"
out=$(env -u DMREF_FIXTURES -u PYTHONPATH PATH=/usr/bin:/bin "$work/venv/bin/python" -m pytest -q -p no:cacheprovider 2>&1) || { echo "$out"; exit 1; }
echo "$out"
grep -q "^2 passed" <<<"$out"
