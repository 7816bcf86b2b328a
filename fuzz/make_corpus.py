#!/usr/bin/python3
"""Writes the seed corpora fuzz/corpus/<target>/ from the golden fixtures and
the Python writer (python/dmref_fixtures). Deterministic; rerun after the
fixture format changes: /usr/bin/python3 fuzz/make_corpus.py

--check: write nothing; exit 1 naming each id of fuzz/seed_fixtures.txt that
has no readable fixture with a scheme and a config (CTest fuzz_seed_fixtures:
the fuzz targets load the same list at start-up)."""
import hashlib
import json
import os
import shutil
import sys

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import dmref_fixtures as df  # noqa: E402

GOLDEN = os.path.join(ROOT, "fixtures", "golden")
OUT = os.path.join(ROOT, "fuzz", "corpus")
SEED_LIST = os.path.join(ROOT, "fuzz", "seed_fixtures.txt")


def seed_fixture_ids():
    """The ids of fuzz/seed_fixtures.txt, in order (a seed's first byte indexes them)."""
    with open(SEED_LIST) as f:
        return [ln.rstrip("\n") for ln in f if ln.strip() and not ln.startswith("#")]


def check():
    ids = seed_fixture_ids()
    bad = [] if ids else [f"{SEED_LIST}: no fixture ids"]
    if len(set(ids)) != len(ids):
        bad.append(f"{SEED_LIST}: an id is listed twice")
    for cid in ids:
        path = os.path.join(GOLDEN, cid + ".safetensors")
        try:
            meta = df.read(path).metadata
            for key in ("scheme", "config"):
                if key not in meta:
                    bad.append(f"{path}: __metadata__.{key}: missing")
        except (OSError, df.BadInput) as e:
            bad.append(f"{SEED_LIST}: {cid}: {e}")
    for b in bad:
        print(b, file=sys.stderr)
    print(f"{len(ids)} seed fixtures listed, {len(bad)} problems")
    return 1 if bad else 0


if sys.argv[1:] == ["--check"]:
    sys.exit(check())
if sys.argv[1:]:
    sys.exit(f"usage: {sys.argv[0]} [--check]")
shutil.rmtree(OUT, ignore_errors=True)  # only what this script writes


def put(target, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    data = data if isinstance(data, bytes) else data.encode()
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


def fixture_bytes(cid):
    with open(os.path.join(GOLDEN, cid + ".safetensors"), "rb") as f:
        return f.read()


# safetensors: every dtype, scalars, empty tensors, metadata, a small real fixture.
put("safetensors", df.serialize({}))
put("safetensors", df.serialize({"a": (np.array(7.0), "I64"), "b": (np.array([1.0, 2.0]), "F32")}, {"k": "v"}))
put("safetensors", df.serialize({"h": (np.array([[1.5, -0.0], [np.inf, np.nan]]), "F16"),
                                 "b": (np.array([1e-40, 3e38, -2.0]), "BF16"),
                                 "d": (np.array([np.pi]), "F64"), "e": (np.zeros((0, 3)), "F32"),
                                 "": (np.array([-(2.0 ** 53)]), "I64")},
                                {"\u00e9\n": "x\ty", "__x": "{}"}))
put("safetensors", fixture_bytes("preln.kernel.d8.L6.f32.s1"))

# verify: a small real fixture and a minimal one (metadata + one output).
put("verify", fixture_bytes("preln.kernel.d8.L6.f32.s1"))
meta = {"case": "tiny", "tolerance": json.dumps({"factor": 2.0, "floor_ulps": 4.0}),
        "baselines": json.dumps({d: {"output.x": {"max_abs": 1e-3, "rel": 0.0}} for d in ("f32", "bf16", "f16")})}
put("verify", df.serialize({"output.x": np.array([1.0, -2.0, 0.0]), "output.x.lo": np.array([1e-17, 0.0, 0.0])},
                           meta))

# Regressions: inputs like those of past findings (docs/hardening.md).
put("safetensors", b"\x10" + b"\0" * 7 + b'{"a":1e999}     ')  # number past double in the header: exit 3
put("verify", df.serialize({"output.x": np.array([1.0]), "output.x.lo": np.array([0.0])},
                           dict(meta, baselines=json.dumps({"f32": {"output.x": {}}}))))  # no max_abs: exit 3
put("verify", df.serialize({"output.x": np.array([1.0, 2.0]), "output.x.lo": np.array([0.0])}, meta))  # .lo overrun

# config, run: for each fixture of fuzz/seed_fixtures.txt (by index), its own config.
SEED_FIXTURES = seed_fixture_ids()
for i, cid in enumerate(SEED_FIXTURES):
    cfg = df.read(os.path.join(GOLDEN, cid + ".safetensors")).metadata["config"]
    put("config", bytes([i]) + cfg.encode())
    put("run", bytes([i]) + cfg.encode())

# run: inputs like the classes of issue 11 (docs/hardening.md): values valid
# but outside float's range, narrowing integers, unknown keys, hex strings.
for i, extra in [(2, {"alpha": 1e-50}), (2, {"dk": 2 ** 32 + 4}), (6, {"varaint": "full"}), (6, {"block_size": 2 ** 32 + 3}),
                 (9, {"ln_eps": "0x1p-3"}), (9, {"ln_eps": "1e-50"}), (10, {"t_max": 2 ** 31}), (12, {"period": 2 ** 32 + 1})]:
    cfg = json.loads(df.read(os.path.join(GOLDEN, SEED_FIXTURES[i] + ".safetensors")).metadata["config"])
    put("run", bytes([i]) + json.dumps(dict(cfg, **extra)).encode())

# verify: like the finding of fuzz_verify (docs/hardening.md): a dtype's
# baselines without an entry for the output (const operator[] on a missing key).
put("verify", df.serialize({"output.x": np.array([1.0, 2.0]), "output.x.lo": np.zeros(2)},
                           {"case": "c", "baselines": json.dumps({"f32": {}, "bf16": {}, "f16": {}}), "tolerance": "{}"}))

# manifest: the real one and a minimal one.
with open(os.path.join(ROOT, "fixtures", "manifest.json"), "rb") as f:
    put("manifest", f.read())
put("manifest", json.dumps({"cases": [{"id": "a.b", "file": "a.b.safetensors", "command": "dmref generate --case 'a.b'",
                                       "precision_bits": 134, "sha256": "0" * 64}]}))
print("wrote", OUT)
