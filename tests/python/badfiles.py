"""Invalid safetensors files, one per rule of docs/fixtures.md ("Errors"), with
the field each must be refused with. Shared by the Python reader test and the
test that the C++ reader (through `dmref verify`) refuses them the same way."""
import json
import struct


def raw(header, data=b"", n=None, pad=True):
    """Bytes of a file with header `header` (a dict, dumped compactly, or text)."""
    h = header if isinstance(header, (bytes, str)) else json.dumps(header, separators=(",", ":"))
    h = h.encode() if isinstance(h, str) else h
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h) if n is None else n) + h + data


def entry(dtype, shape, b, e):
    return {"dtype": dtype, "shape": shape, "data_offsets": [b, e]}


F32_2 = struct.pack("<2f", 1.0, 2.0)
F64_1 = struct.pack("<d", 3.0)
GOOD_HEADER = {"a": entry("F32", [2], 0, 8), "b": entry("F64", [], 8, 16), "__metadata__": {"k": "v"}}
GOOD = raw(GOOD_HEADER, F32_2 + F64_1)


def _with(**changes):
    h = json.loads(json.dumps(GOOD_HEADER))
    for k, v in changes.items():
        if v is None:
            h.pop(k)
        else:
            h[k] = v
    return h


# (name, bytes, field named in the one-line error)
CASES = [
    ("empty file", b"", "header length"),
    ("truncated in the length field", GOOD[:5], "header length"),
    ("truncated in the header", GOOD[:40], "header length"),
    ("header length past the end", raw(GOOD_HEADER, F32_2 + F64_1, n=10 ** 6), "header length"),
    ("header length 2^64-1", raw(GOOD_HEADER, F32_2 + F64_1, n=2 ** 64 - 1), "header length"),
    ("truncated in the byte buffer", GOOD[:-3], '"b".data_offsets'),
    ("empty header", raw(b"", F32_2), "header"),
    ("header not an object", raw(b"[1,2]", b""), "header"),
    ("header with a leading space", raw(b" {}", b""), "header"),
    ("header with a NUL byte", raw(b'{"a":1}\0', b""), "header"),
    ("header not valid JSON", raw(b'{"a":', b""), "header"),
    ("header with NaN", raw(b'{"a":NaN}', b""), "header"),
    ("header with a number past double", raw(b'{"a":1e999}', b""), "header"),  # fuzz_safetensors finding
    ("extent past 2^64 (a double)", raw(_with(a=entry("F32", [2 ** 64], 0, 8)), F32_2 + F64_1), '"a".shape[0]'),
    ("integer past double", raw(b'{"a":1' + b"0" * 400 + b'}', b""), "header"),
    ("header with invalid UTF-8", raw(b'{"\xff":1}', b""), "header"),
    ("duplicate key", raw(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                          b'"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F32_2), "header"),
    ("entry not an object", raw(_with(a=[1]), F32_2 + F64_1), '"a"'),
    ("entry with an unexpected key", raw(_with(a=dict(entry("F32", [2], 0, 8), x=1)), F32_2 + F64_1), '"a"'),
    ("missing dtype", raw(_with(a={"shape": [2], "data_offsets": [0, 8]}), F32_2 + F64_1), '"a".dtype'),
    ("dtype not a string", raw(_with(a=entry(4, [2], 0, 8)), F32_2 + F64_1), '"a".dtype'),
    ("unknown dtype", raw(_with(a=entry("F8_E4M3", [2], 0, 8)), F32_2 + F64_1), '"a".dtype'),
    ("lower-case dtype", raw(_with(a=entry("f32", [2], 0, 8)), F32_2 + F64_1), '"a".dtype'),
    ("missing shape", raw(_with(a={"dtype": "F32", "data_offsets": [0, 8]}), F32_2 + F64_1), '"a".shape'),
    ("shape not an array", raw(_with(a=entry("F32", 2, 0, 8)), F32_2 + F64_1), '"a".shape'),
    ("negative extent", raw(_with(a=entry("F32", [-2], 0, 8)), F32_2 + F64_1), '"a".shape[0]'),
    ("fractional extent", raw(_with(a=entry("F32", [2.0], 0, 8)), F32_2 + F64_1), '"a".shape[0]'),
    ("boolean extent", raw(_with(a=entry("F32", [True], 0, 4)), F32_2[:4] + F64_1), '"a".shape[0]'),
    ("extent past 2^63", raw(_with(a=entry("F32", [2 ** 63], 0, 8)), F32_2 + F64_1), '"a".shape[0]'),
    ("element count past 2^63", raw(_with(a=entry("F32", [2 ** 32, 2 ** 32], 0, 8)), F32_2 + F64_1), '"a".shape'),
    ("byte count past 2^63", raw(_with(a=entry("F32", [2 ** 62], 0, 8)), F32_2 + F64_1), '"a".shape'),
    ("missing data_offsets", raw(_with(a={"dtype": "F32", "shape": [2]}), F32_2 + F64_1), '"a".data_offsets'),
    ("data_offsets of three", raw(_with(a={"dtype": "F32", "shape": [2], "data_offsets": [0, 4, 8]}),
                                  F32_2 + F64_1), '"a".data_offsets'),
    ("negative offset", raw(_with(a=entry("F32", [2], -8, 0)), F32_2 + F64_1), '"a".data_offsets[0]'),
    ("fractional offset", raw(_with(a=entry("F32", [2], 0, 8.0)), F32_2 + F64_1), '"a".data_offsets[1]'),
    ("begin after end", raw(_with(a=entry("F32", [2], 8, 0)), F32_2 + F64_1), '"a".data_offsets'),
    ("offset out of range", raw(_with(b=entry("F64", [], 8, 24)), F32_2 + F64_1), '"b".data_offsets'),
    ("offset past 2^64", raw(_with(b=entry("F64", [], 8, 2 ** 64 + 16)), F32_2 + F64_1), '"b".data_offsets[1]'),
    ("size not matching the shape", raw(_with(a=entry("F32", [3], 0, 8)), F32_2 + F64_1), '"a".data_offsets'),
    ("overlapping tensors", raw(_with(b=entry("F32", [2], 4, 12)), F32_2 + F32_2[:4]), '"b".data_offsets'),
    ("same range twice", raw(_with(b=entry("F32", [2], 0, 8)), F32_2), '"b".data_offsets'),
    ("hole before a tensor", raw(_with(b=entry("F64", [], 12, 20)), F32_2 + b"\0" * 4 + F64_1), '"b".data_offsets'),
    ("bytes after the last tensor", raw(GOOD_HEADER, F32_2 + F64_1 + b"\0" * 8), "byte buffer"),
    ("metadata not an object", raw(_with(__metadata__=["k"]), F32_2 + F64_1), "__metadata__"),
    ("metadata value not a string", raw(_with(__metadata__={"k": 1}), F32_2 + F64_1), '__metadata__."k"'),
    ("I64 past 2^53", raw({"i": entry("I64", [2], 0, 16)}, struct.pack("<2q", 1, 2 ** 53 + 1)), '"i"[1]'),
    # Nesting past 64 levels is refused before parsing (a 5.7 MiB header of
    # nested objects cost the C++ reader 296 MiB; Python hit RecursionError).
    ("header nested 65 deep", raw('{"a":' + '[' * 64 + ']' * 64 + '}'), "header"),
    ("header nested 100000 deep", raw('{"a":' * 100000 + '1' + '}' * 100000), "header"),
    ("nesting inside a string does not count, but the depth still does",
     raw('{"a":"[[[[",' + '"b":' + '[' * 70 + ']' * 70 + '}'), "header"),
]
