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


class Checks:
    """The checks of one command-line test script: check(name, ok, detail) counts and prints
    failures; run(*args) runs the CLI; one_line_error asserts the bad-input contract (exit 2,
    one line on stderr naming each of `words`); done() prints the tally and exits."""

    def __init__(self, dmref):
        import subprocess
        self.dmref, self.passed, self.failed, self._sp = dmref, 0, 0, subprocess

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL: {name} {detail}")

    def run(self, *args):
        p = self._sp.run([self.dmref, *args], capture_output=True, text=True)
        return p.returncode, p.stdout, p.stderr

    def one_line_error(self, name, rc, err, *words):
        self.check(name + ": exit 2", rc == 2, f"(rc={rc}, stderr={err!r})")
        self.check(name + ": one line", err.count("\n") == 1, repr(err))
        for w in words:
            self.check(name + f": names {w}", w in err, repr(err))

    def done(self, label=""):
        import sys
        print(f"{label}{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)
