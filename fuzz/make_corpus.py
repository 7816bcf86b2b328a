#!/usr/bin/python3
"""Writes the seed corpora fuzz/corpus/<target>/ from the golden fixtures and
the Python writer (python/dmref_fixtures). Deterministic; rerun after the
fixture format changes: /usr/bin/python3 fuzz/make_corpus.py"""
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

# config: for each fixture of fuzz_config.cpp's table (by index), its own config.
FUZZ_CONFIG_FIXTURES = [
    "preln.kernel.d8.L6.f32.s1", "preln.model.d8_h8.L6.f32.s1",
    "ldm_rls.kernel.g2_dk4_d8.L8.f32.s1", "ldm_rls.model.g2_dk4_d8_h8.L8.f32.s1",
    "ldm_delta.kernel.g2_dk4_d8.L8.f32.s1", "ldm_outer.kernel.g2_dk4_d8.L8.f32.s1",
    "attnres_block.kernel.d8_S3.L8.f32.s1", "attnres_full.kernel.d8.L8.f32.s1",
    "hc_dynamic.kernel.n4_d8.L6.f32.s1", "hc_static.kernel.n4_d8.L6.f32.s1",
    "mhc.kernel.n4_d8.L6.paper.f32.s1", "mhc.model.n4_d8_h8.L6.deepseek-v4.f32.s1",
    "denseformer.kernel.d8.L6.f32.s1", "denseformer.model.d8_h8.L6.f32.s1",
]
for i, cid in enumerate(FUZZ_CONFIG_FIXTURES):
    cfg = df.read(os.path.join(GOLDEN, cid + ".safetensors")).metadata["config"]
    put("config", bytes([i]) + cfg.encode())
    put("run", bytes([i]) + cfg.encode())  # fuzz_run.cpp has the same table

# run: inputs like the classes of issue 11 (docs/hardening.md): values valid
# but outside float's range, narrowing integers, unknown keys, hex strings.
for i, extra in [(2, {"alpha": 1e-50}), (2, {"dk": 2 ** 32 + 4}), (6, {"varaint": "full"}), (6, {"block_size": 2 ** 32 + 3}),
                 (9, {"ln_eps": "0x1p-3"}), (9, {"ln_eps": "1e-50"}), (10, {"t_max": 2 ** 31}), (12, {"period": 2 ** 32 + 1})]:
    cfg = json.loads(df.read(os.path.join(GOLDEN, FUZZ_CONFIG_FIXTURES[i] + ".safetensors")).metadata["config"])
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
