"""The Python fixture reader and writer (python/dmref_fixtures/safetensors.py)
against the format of docs/fixtures.md."""
import glob
import os
import struct

import numpy as np
import pytest

import dmref_fixtures as df
from badfiles import CASES, GOOD


def golden_files(fixtures_dir):
    files = sorted(glob.glob(os.path.join(fixtures_dir, "*.safetensors")))
    assert files, f"no fixtures in {fixtures_dir}"
    return files


def test_writer_reproduces_every_golden_file_byte_for_byte(fixtures_dir):
    # Reading then writing with the same dtypes must give the canonical bytes
    # the C++ writer produced: checks the reader (values, names, metadata) and
    # the writer (key order, escaping, padding, layout) at once.
    for path in golden_files(fixtures_dir):
        f = df.read(path)
        data = open(path, "rb").read()
        assert df.serialize({k: (v, f.dtypes[k]) for k, v in f.tensors.items()}, f.metadata) == data, path


def test_documented_example_bytes():
    # docs/fixtures.md, "How dmref writes": a = I64 scalar 7, b = F32 [1, 2], metadata {"k": "v"}.
    b = df.serialize({"a": (np.array(7.0), "I64"), "b": (np.array([1.0, 2.0]), "F32")}, {"k": "v"})
    assert len(b) == 8 + 136 + 16
    assert struct.unpack("<Q", b[:8])[0] == 0x88
    assert b[8:24] == b'{"__metadata__":'
    assert b[-16:] == bytes.fromhex("0700000000000000 0000803f 00000040")
    f = df.parse(b, "example")
    assert f.tensors["a"].shape == () and f.tensors["a"] == 7
    assert f.tensors["b"].tolist() == [1.0, 2.0] and f.dtypes["b"] == "F32"
    assert f.metadata == {"k": "v"}


@pytest.mark.parametrize("name,data,field", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_naming_the_field(name, data, field):
    with pytest.raises(df.BadInput) as e:
        df.parse(data, "bad.safetensors")
    assert e.value.field == field, str(e.value)
    msg = str(e.value)
    assert msg.startswith(f"bad.safetensors: {field}: ") and "\n" not in msg


def test_good_file_of_the_bad_input_cases_is_read():
    f = df.parse(GOOD, "good")
    assert f.tensors["a"].tolist() == [1.0, 2.0] and float(f.tensors["b"]) == 3.0


def test_every_dtype_decodes_exactly():
    vals = np.array([0.0, -0.0, 1.0, -2.5, 65504.0, 2.0 ** -24, np.inf, -np.inf])
    for dt in ("F64", "F32", "F16", "BF16"):
        r = df.round_to(vals, dt)
        got = df.parse(df.serialize({"x": (vals, dt)}), "t").tensors["x"]
        assert np.array_equal(np.signbit(got), np.signbit(r)) and np.array_equal(got, r), dt
    nan = df.parse(df.serialize({"x": (np.array([np.nan]), "BF16")}), "t").tensors["x"]
    assert np.isnan(nan).all()


def test_round_to_is_round_to_nearest_even():
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(50000) * 10.0 ** rng.integers(-45, 45, 50000),
                        rng.standard_normal(5000) * 1e-42, [0.0, -0.0, np.inf, -np.inf]])
    with np.errstate(all="ignore"):
        # numpy's float64 -> float32 and -> float16 casts are correctly rounded (IEEE).
        assert np.array_equal(df.round_to(x, "F32"), x.astype(np.float32).astype(np.float64))
        assert np.array_equal(df.round_to(x, "F16"), x.astype(np.float16).astype(np.float64))
        # bfloat16 of a float32 value by the integer trick (round the low 16 bits to even).
        x32 = x.astype(np.float32)
        u = x32.view(np.uint32).astype(np.uint64)
        bf = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32).astype(np.float64)
        ok = np.isfinite(x32)
        assert np.array_equal(df.round_to(x32.astype(np.float64), "BF16")[ok], bf[ok])
    # Overflow at and beyond max + ulp(max)/2, not below.
    assert df.round_to(65519.99, "F16") == 65504 and df.round_to(65520.0, "F16") == np.inf
    assert df.round_to(-65520.0, "F16") == -np.inf
    bmax = (2 - 2.0 ** -7) * 2.0 ** 127
    assert df.round_to(bmax + 2.0 ** 119 * 0.999, "BF16") == bmax and df.round_to(bmax + 2.0 ** 119, "BF16") == np.inf


def test_write_is_atomic(tmp_path):
    path = tmp_path / "out.safetensors"
    df.write(path, {"x": np.arange(3.0)}, {"k": "v"})
    before = path.read_bytes()
    with pytest.raises(ValueError):
        df.write(path, {"x": (np.arange(3.0), "F8")})  # refused before anything is written
    with pytest.raises(ValueError):
        df.write(path, {"x": (np.array([0.5]), "I64")})  # not an integer
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["out.safetensors"]  # no temporary left behind
    assert df.read(path).tensors["x"].tolist() == [0.0, 1.0, 2.0]


def test_cases_from_directory_and_manifest(fixtures_dir):
    by_dir = [c.id for c in df.cases(fixtures_dir)]
    assert len(by_dir) == len(golden_files(fixtures_dir))
    manifest = os.path.join(fixtures_dir, "..", "manifest.json")
    if os.path.exists(manifest):
        by_manifest = [c.id for c in df.cases(manifest)]  # sha256 of every file checked
        assert sorted(by_manifest) == sorted(by_dir)
    sel = list(df.cases(fixtures_dir, "ldm_rls.kernel.*.f32.*"))
    assert sel and all(c.scheme == "ldm" and c.input_dtype == "f32" for c in sel)
    c = sel[0]
    assert set(c.expected) == {k for k in c.file.tensors if k.startswith("output.") and not k.endswith(".lo")}
    assert c.config["d"] == c.inputs["input.e"].shape[-1]
    # The rule's constants, as reference/include/dmref/conformance/tolerance.hpp writes them.
    assert c.tolerance["factor"] == 8.0 and c.tolerance["floor_ulps"] == 1.0 and c.tolerance["samples"] == 32


def test_manifest_hash_mismatch_is_refused(tmp_path, fixtures_dir):
    src = sorted(glob.glob(os.path.join(fixtures_dir, "preln.kernel.*.f32.*.safetensors")))[0]
    f = df.read(src)
    (tmp_path / "golden").mkdir()
    df.write(tmp_path / "golden" / os.path.basename(src), {k: (v, f.dtypes[k]) for k, v in f.tensors.items()},
             f.metadata)
    m = tmp_path / "manifest.json"
    m.write_text('{"cases": [{"id": "%s", "file": "%s", "sha256": "%s"}]}'
                 % (f.metadata["case"], os.path.basename(src), "0" * 64))
    with pytest.raises(df.BadInput, match="sha256"):
        list(df.cases(m))
    m.write_text('{"cases": [1]}')
    with pytest.raises(df.BadInput, match=r"cases\[0\]"):
        list(df.cases(m))


def test_glob_matches_like_dmref_verify():
    assert df.glob_match("*", "") and df.glob_match("a*c", "abbc") and df.glob_match("a?c", "abc")
    assert not df.glob_match("a?c", "ac") and not df.glob_match("[a]", "a") and df.glob_match("[a]", "[a]")


# ---- Issue 24: the reader's input handling.

def test_a_directory_is_bad_input_not_is_a_directory_error(tmp_path):
    d = tmp_path / "x.safetensors"
    d.mkdir()
    for read in (df.read, lambda p: df.safetensors.read_bounded(p, "file", 1 << 20), df.load_case):
        with pytest.raises(df.BadInput) as e:  # before: IsADirectoryError from os.fdopen
            read(d)
        assert e.value.field == "file" and e.value.problem == "not a regular file", str(e.value)


def test_the_depth_check_is_the_byte_scan_of_the_cpp_reader():
    """check_json_depth (vectorized) gives the verdict of the byte-by-byte scan (io::check_json_depth's
    algorithm, kept as _check_json_depth_scan) on random texts of the bytes that matter."""
    import random
    from dmref_fixtures.safetensors import _check_json_depth_scan, check_json_depth

    def verdict(f, t):
        try:
            f(t, "x", "f")
            return None
        except df.BadInput as e:
            return str(e)

    rng = random.Random(24)
    refused = 0
    for _ in range(5000):
        t = bytes(rng.choice(b'[]{}"\\a') for _ in range(rng.randint(0, 120)))
        if rng.random() < 0.5:
            t = b"[" * rng.randint(55, 70) + t
        assert verdict(check_json_depth, t) == verdict(_check_json_depth_scan, t), t
        refused += verdict(check_json_depth, t) is not None
    assert 500 < refused < 4500  # both verdicts were exercised


def test_a_32_mib_metadata_string_is_read(tmp_path):
    """A metadata string of 32 MiB (plain, all backslashes, all escaped quotes) is read; the depth check is
    one vectorized pass (before: a Python loop per byte, and the reader took over 30 s). Measured, not
    asserted (docs/hardening.md, "Resource bounds")."""
    for big in ("a" * (32 << 20), "\\" * (16 << 20), '"' * (8 << 20)):
        p = tmp_path / "big.safetensors"
        df.write(p, {"output.x": np.zeros(2)}, {"case": "big", "note": big})
        assert df.read(p).metadata["note"] == big
