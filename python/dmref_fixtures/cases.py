"""Iterating the golden fixture cases (docs/fixtures.md, docs/python.md)."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Union

import numpy as np

from .safetensors import BadInput, File, loads_strict, read, read_bounded

__all__ = ["Case", "load_case", "cases", "glob_match", "read_manifest", "default_fixtures_dir"]


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
        if type(bits) is not int or bits < 0:
            raise BadInput(path, f + ".precision_bits", "not a non-negative integer")
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
    """
    where = os.fspath(where) if where is not None else default_fixtures_dir()
    if os.path.isdir(where):
        # As `dmref verify`: with check_hashes, the manifest.json in the
        # directory or one up must list every fixture with
        # its sha256, and every case it lists (matching `pattern`) must be there.
        # (one up only when the directory is named golden: fixtures/golden + fixtures/manifest.json)
        norm = os.path.normpath(os.path.abspath(where))
        up = [os.path.join(os.path.dirname(norm), "manifest.json")] if os.path.basename(norm) == "golden" else []
        manifest = next((m for m in [os.path.join(where, "manifest.json")] + up if os.path.isfile(m)), None)
        listed = {mc.file: mc for mc in read_manifest(manifest)} if manifest and check_hashes else None
        names = sorted(n for n in os.listdir(where) if n.endswith(".safetensors"))
        if listed is not None:
            for file, mc in sorted(listed.items()):
                if file not in names and glob_match(pattern, mc.id):
                    raise BadInput(os.path.join(where, file), "file", f"missing, but {manifest} lists case {mc.id}")
        file_of_case = {}
        for name in names:
            path = os.path.join(where, name)
            c = load_case(path)
            if c.id in file_of_case:  # a case is judged once (as `dmref verify`)
                raise BadInput(path, "__metadata__.case",
                               f"duplicate case id {c.id}, also in {file_of_case[c.id]}")
            file_of_case[c.id] = path
            if not glob_match(pattern, c.id):
                continue
            if listed is not None:
                mc = listed.get(name)
                if mc is None:
                    raise BadInput(path, "file", f"not in the manifest {manifest} (check_hashes=False to skip)")
                digest = hashlib.sha256(read_bounded(path, "file", 1 << 40)).hexdigest()
                if digest != mc.sha256:
                    raise BadInput(path, "sha256", f"{digest}, but {manifest} lists {mc.sha256}")
                if c.id != mc.id:
                    raise BadInput(path, "__metadata__.case", f"{c.id!r}, but {manifest} lists {mc.id!r}")
            yield c
    elif where.endswith(".json"):
        base = os.path.dirname(where)
        for mc in sorted(read_manifest(where), key=lambda m: m.file):
            if not glob_match(pattern, mc.id):
                continue
            path = os.path.join(base, "golden", mc.file)
            if not os.path.exists(path):
                path = os.path.join(base, mc.file)
            if check_hashes:
                digest = hashlib.sha256(read_bounded(path, "file", 1 << 40)).hexdigest()
                if digest != mc.sha256:
                    raise BadInput(path, "sha256", f"{digest}, but {where} lists {mc.sha256}")
            c = load_case(path)
            if c.id != mc.id:
                raise BadInput(path, "__metadata__.case", f"{c.id!r}, but {where} lists {mc.id!r}")
            yield c
    else:
        c = load_case(where)
        # As `dmref verify --fixtures FILE`: manifest.json next to the file, or
        # one up when the file is in a directory named golden (the corpus layout).
        d = os.path.dirname(os.path.normpath(os.path.abspath(where)))
        where_m = [os.path.join(d, "manifest.json")] + (
            [os.path.join(os.path.dirname(d), "manifest.json")] if os.path.basename(d) == "golden" else [])
        manifest = next((m for m in where_m if os.path.isfile(m)), None)
        if check_hashes and manifest:
            mc = {m.file: m for m in read_manifest(manifest)}.get(os.path.basename(where))
            if mc is None:
                raise BadInput(where, "file", f"not in the manifest {manifest} (check_hashes=False to skip)")
            digest = hashlib.sha256(read_bounded(where, "file", 1 << 40)).hexdigest()
            if digest != mc.sha256:
                raise BadInput(where, "sha256", f"{digest}, but {manifest} lists {mc.sha256}")
            if c.id != mc.id:
                raise BadInput(where, "__metadata__.case", f"{c.id!r}, but {manifest} lists {mc.id!r}")
        if glob_match(pattern, c.id):
            yield c
