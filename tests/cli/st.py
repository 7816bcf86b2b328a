"""Minimal safetensors reading (F64, F32) and writing (F64) for the command-line
tests (cli_test.py, mpi_test.py). Standard library only."""
import json, struct


def read_st(path):
    """(tensors, metadata): tensors[name] = (shape, values)."""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    out = {}
    for k, v in h.items():
        s, e = v["data_offsets"]
        fmt, size = {"F64": ("d", 8), "F32": ("f", 4)}[v["dtype"]]  # goldens F64, tolerance bounds F32
        out[k] = (v["shape"], list(struct.unpack(f"<{(e - s) // size}{fmt}", b[8 + n + s:8 + n + e])))
    return out, meta


def write_st(path, tensors, meta=None):
    hdr, data = {}, b""
    for k in sorted(tensors):
        shape, vals = tensors[k]
        raw = struct.pack(f"<{len(vals)}d", *vals)
        hdr[k] = {"dtype": "F64", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if meta:
        hdr["__metadata__"] = meta
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
