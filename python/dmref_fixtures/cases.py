"""Iterating the golden fixture cases (docs/fixtures.md, docs/python.md)."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from .safetensors import BadInput, File, loads_strict, parse, read, read_bounded

__all__ = ["Case", "load_case", "cases", "glob_match", "read_manifest", "default_fixtures_dir", "judged_fixture",
           "manifest_near", "is_fixture_name"]


def glob_match(pattern: str, text: str) -> bool:
    """The glob of `dmref verify --case`: '*' any run, '?' one character, nothing else special."""
    i = j = 0
    star, mark = -1, 0
    while j < len(text):
        if i < len(pattern) and (pattern[i] == "?" or pattern[i] == text[j]):
            i, j = i + 1, j + 1
        elif i < len(pattern) and pattern[i] == "*":
            star, mark, i = i, j, i + 1
        elif star >= 0:
            i, mark = star + 1, mark + 1
            j = mark
        else:
            return False
    while i < len(pattern) and pattern[i] == "*":
        i += 1
    return i == len(pattern)


@dataclass
class Case:
    """One golden case: its metadata, inputs, parameters and golden outputs."""

    file: File

    @property
    def id(self) -> str:
        return self.file.metadata["case"]

    @property
    def path(self) -> str:
        return self.file.source

    @property
    def scheme(self) -> str:
        return self.file.metadata.get("scheme", "")

    @property
    def preset(self) -> str:
        return self.file.metadata.get("preset", "")

    @property
    def input_dtype(self) -> str:
        """The dtype the inputs are exact in (f32, bf16, f16)."""
        return self.file.metadata.get("input_dtype", "")

    @property
    def config(self) -> dict:
        """The scheme's configuration (d, layers, tokens, groups, ...)."""
        return json.loads(self.file.metadata.get("config", "{}"))

    @property
    def tolerance(self) -> dict:
        return json.loads(self.file.metadata.get("tolerance", "{}"))

    @property
    def baselines(self) -> dict:
        return json.loads(self.file.metadata.get("baselines", "{}"))

    def _prefixed(self, prefix: str) -> Dict[str, np.ndarray]:
        return {k: v for k, v in self.file.tensors.items() if k.startswith(prefix)}

    @property
    def inputs(self) -> Dict[str, np.ndarray]:
        """input.* tensors (float64, exact in input_dtype)."""
        return self._prefixed("input.")

    @property
    def params(self) -> Dict[str, np.ndarray]:
        """param.* tensors (float64, exact in input_dtype)."""
        return self._prefixed("param.")

    @property
    def expected(self) -> Dict[str, np.ndarray]:
        """Golden outputs output.<name> (the high doubles; output.<name>.lo hold the low parts)."""
        return {k: v for k, v in self._prefixed("output.").items() if not k.endswith(".lo")}

    @property
    def gradients(self) -> Dict[str, np.ndarray]:
        """Golden gradients grad.<input> of a backward case (the high doubles; .lo the low parts).
        Their upstream gradients are the inputs input.grad.<output> (docs/fixtures.md, "Gradients")."""
        return {k: v for k, v in self._prefixed("grad.").items() if not k.endswith(".lo")}

    def __getitem__(self, name: str) -> np.ndarray:
        return self.file.get(name)

    def __repr__(self) -> str:
        return f"Case({self.id!r})"


def load_case(path: Union[str, os.PathLike]) -> Case:
    f = read(path)
    if "case" not in f.metadata:
        raise BadInput(f.source, "__metadata__.case", "missing")
    return Case(f)


def default_fixtures_dir() -> str:
    """$DMREF_FIXTURES; else the corpus installed with the package (`pip install .`,
    `cmake --install`: _location.py says where); else this source tree's
    fixtures/golden. BadInput naming DMREF_FIXTURES when there is none."""
    env = os.environ.get("DMREF_FIXTURES")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from ._location import FIXTURES  # written at install (python/CMakeLists.txt)
        tried = [os.path.normpath(os.path.join(here, FIXTURES))]
    except ImportError:  # a source tree
        tried = [os.path.normpath(os.path.join(here, "..", "..", "fixtures", "golden"))]
    if not os.path.isdir(tried[0]):
        raise BadInput(tried[0], "DMREF_FIXTURES", "not set, and no corpus here: set DMREF_FIXTURES to a fixtures "
                       "directory (fixtures/golden of the dmref tree, or the installed share/dmref/fixtures/golden)")
    return tried[0]


_INT64_MAX = 2 ** 63 - 1


def is_fixture_name(name: str) -> bool:
    """A directory entry that is a fixture (`dmref verify` lists the same):
    `<stem>.safetensors` with a non-empty stem. Files and directories alike:
    a directory of that name is then refused by the reader (not a regular file)."""
    return len(name) > len(".safetensors") and name.endswith(".safetensors")


def manifest_near(where: Union[str, os.PathLike], single: bool) -> Optional[str]:
    """The manifest `dmref verify` checks `where` against (without --manifest):
    manifest.json in the fixtures' directory (the file's directory, for one
    file), else one up when that directory is named golden (the corpus layout:
    fixtures/manifest.json + fixtures/golden/); None if there is none."""
    d = os.path.normpath(os.path.abspath(where))
    if single:
        d = os.path.dirname(d)
    rel = os.path.dirname(os.fspath(where)) if single else os.fspath(where)
    rel = rel or "."
    look = [os.path.join(rel, "manifest.json")]
    if os.path.basename(d) == "golden":
        look.append(os.path.join(rel, "..", "manifest.json"))
    return next((os.path.normpath(m) for m in look if os.path.isfile(m)), None)


def manifest_problem(path: str, data: bytes, case_id: str, listed: Dict[str, "ManifestCase"],
                     manifest: str) -> Optional[Tuple[str, str]]:
    """Why a fixture (its path, bytes and case id) does not match the manifest
    `manifest` (listed: file name -> case), as (field, the words of `dmref
    verify`'s refusal); None when it matches. One rule for cases() and check()
    (C++: conf::load_corpus, gate.cpp)."""
    base = os.path.basename(path)
    mc = listed.get(base)
    if mc is None:
        return "file", f"fixture {base} is not in the manifest {manifest} (check_hashes=False to skip the check)"
    if mc.id != case_id:
        return "__metadata__.case", f"fixture {base} is case {mc.id} in the manifest {manifest}"
    if hashlib.sha256(data).hexdigest() != mc.sha256:
        return "sha256", f"fixture {base} does not match the sha256 in the manifest {manifest} (edited?)"
    return None


def selected(pattern: str, case_id: str, listed: Optional[Dict[str, "ManifestCase"]], name: str) -> bool:
    """A fixture is judged when its case id, or the id the manifest lists for
    its file, matches the glob (so an edited id is reported, never skipped)."""
    mc = listed.get(name) if listed is not None else None
    return glob_match(pattern, case_id) or (mc is not None and glob_match(pattern, mc.id))


@dataclass
class ManifestCase:
    id: str
    file: str
    sha256: str
    command: str = ""
    precision_bits: int = 0


def read_manifest(path: Union[str, os.PathLike]) -> List[ManifestCase]:
    """The cases listed in fixtures/manifest.json, every field checked."""
    path = os.fspath(path)
    # A regular file of at most 64 MiB, parsed strictly (duplicate keys, NUL,
    # deep nesting refused), as the C++ read_manifest.
    m = loads_strict(read_bounded(path, "manifest", 64 << 20), path, "manifest")
    if not isinstance(m, dict):
        raise BadInput(path, "manifest", "not a JSON object")
    if not isinstance(m.get("cases"), list):
        raise BadInput(path, "cases", "missing or not an array")
    for k in m:
        if k not in ("cases", "generated", "generator"):
            raise BadInput(path, k, "unknown key (a manifest has cases, generated, generator)")
    out, ids, files = [], set(), set()
    for i, c in enumerate(m["cases"]):
        f = f"cases[{i}]"
        if not isinstance(c, dict):
            raise BadInput(path, f, "not a JSON object")
        for k in c:
            if k not in ("id", "file", "sha256", "command", "precision_bits"):
                raise BadInput(path, f"{f}.{k}", "unknown key (a case has id, file, sha256, command, precision_bits)")
        for k in ("id", "file", "sha256"):
            if k not in c:
                raise BadInput(path, f"{f}.{k}", "missing")
        for k in ("id", "file", "sha256", "command"):
            if k in c and not isinstance(c[k], str):
                raise BadInput(path, f"{f}.{k}", "not a string")
        if not c["id"]:
            raise BadInput(path, f + ".id", "empty")
        if c["id"] in ids:
            raise BadInput(path, f + ".id", f"duplicate case id {json.dumps(c['id'])}")
        ids.add(c["id"])
        if c["file"] in ("", ".", "..") or "/" in c["file"] or "\0" in c["file"]:
            raise BadInput(path, f + ".file", "not a plain file name")
        if c["file"] in files:  # one file, one case: two would leave one unchecked
            raise BadInput(path, f + ".file", f"duplicate file {json.dumps(c['file'])}")
        files.add(c["file"])
        if len(c["sha256"]) != 64 or any(ch not in "0123456789abcdef" for ch in c["sha256"]):
            raise BadInput(path, f + ".sha256", "not 64 lower-case hex digits")
        bits = c.get("precision_bits", 0)
        if type(bits) is not int or not 0 <= bits <= _INT64_MAX:  # C++ holds it in an int64
            raise BadInput(path, f + ".precision_bits", "not a non-negative integer (at most 2^63 - 1)")
        out.append(ManifestCase(c["id"], c["file"], c["sha256"], c.get("command", ""), bits))
    return out


def cases(where: Optional[Union[str, os.PathLike]] = None, pattern: str = "*",
          check_hashes: bool = True) -> Iterator[Case]:
    """The fixture cases matching `pattern` (the glob of `dmref verify --case`),
    in file-name order (the order of `dmref verify`).

    where: a directory of *.safetensors fixtures (default: default_fixtures_dir()),
      one fixture file, or a manifest.json; with a manifest, the files are looked
      up in golden/ next to it (then next to it), and with check_hashes their
      sha256 must match the manifest's.
    The rules are those of `dmref verify` (docs/fixtures.md, "Commands"):
    manifest discovery (manifest_near), which entries are fixtures
    (is_fixture_name), which are selected (selected) and what a match is
    (manifest_problem); a mismatch is BadInput with verify's words, before any
    case is yielded (C++: conf::load_corpus; tests/python/test_manifest_policy.py).
    """
    where = os.fspath(where) if where is not None else default_fixtures_dir()
    if where.endswith(".json") and not os.path.isdir(where):
        base = os.path.dirname(where)
        listed = sorted(read_manifest(where), key=lambda m: m.file)
        if not any(glob_match(pattern, mc.id) for mc in listed):  # a run over no case is not a pass
            raise BadInput(where, "fixtures", f"no fixture case matches --case '{pattern}'")
        for mc in listed:
            if not glob_match(pattern, mc.id):
                continue
            path = os.path.join(base, "golden", mc.file)
            if not os.path.exists(path):
                path = os.path.join(base, mc.file)
            data = read_bounded(path, "file", 1 << 40)
            c = Case(_fixture(data, path))
            if check_hashes:
                bad = manifest_problem(path, data, c.id, {mc.file: mc}, where)
                if bad:
                    raise BadInput(path, *bad)
            yield c
        return
    single = not os.path.isdir(where)
    manifest = manifest_near(where, single) if check_hashes else None
    listed = {mc.file: mc for mc in read_manifest(manifest)} if manifest else None
    names = [os.path.basename(where)] if single else sorted(n for n in os.listdir(where) if is_fixture_name(n))
    paths = [where] if single else [os.path.join(where, n) for n in names]
    # As `dmref verify`: every fixture is read first (an unreadable file or a
    # duplicate case id is bad input, whatever else is wrong), then the
    # selected ones are matched against the manifest, then the listed cases
    # looked for; the first problem is raised, with verify's words.
    file_of_case, chosen, problems = {}, [], []
    for name, path in zip(names, paths):
        data = read_bounded(path, "file", 1 << 40)
        c = Case(_fixture(data, path))
        if c.id in file_of_case:  # a case is judged once (as `dmref verify`)
            raise BadInput(path, "__metadata__.case", f"duplicate case id {c.id}, also in {file_of_case[c.id]}")
        file_of_case[c.id] = path
        if not selected(pattern, c.id, listed, name):
            continue
        bad = manifest_problem(path, data, c.id, listed, manifest) if listed is not None else None
        if bad:
            problems.append(BadInput(path, *bad))
        chosen.append(c)
    if listed is not None and not single:  # every listed case (that the glob selects) must have its file
        for file, mc in sorted(listed.items()):
            if file not in names and glob_match(pattern, mc.id):
                problems.append(BadInput(os.path.join(where, file), "file",
                                         f"fixture {file} of the manifest {manifest} is missing"))
    if problems:
        raise problems[0]
    if not chosen:  # a run over no case is not a pass (as verify: exit 2)
        raise BadInput(where, "fixtures", f"no fixture case matches --case '{pattern}'")
    yield from chosen


def _fixture(data: bytes, path: str) -> File:
    """A fixture from its bytes (read once: the bytes hashed are the bytes judged)."""
    f = parse(data, path)
    if "case" not in f.metadata:
        raise BadInput(path, "__metadata__.case", "missing")
    return f


def judged_fixture(path: Union[str, os.PathLike]) -> File:
    """One fixture file as `dmref verify --fixtures FILE` takes it: read, and
    checked against the manifest next to it (manifest_near) before anything is
    judged; a mismatch is BadInput naming the file and the field, with
    verify's words (exit 2 there)."""
    path = os.fspath(path)
    data = read_bounded(path, "file", 1 << 40)
    f = _fixture(data, path)
    manifest = manifest_near(path, True)
    if manifest is not None:
        bad = manifest_problem(path, data, f.metadata["case"], {mc.file: mc for mc in read_manifest(manifest)}, manifest)
        if bad:
            raise BadInput(path, *bad)
    return f
