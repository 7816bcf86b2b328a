"""Reading and writing dmref fixtures (safetensors), numpy only.

The format, and every check made here, is specified in docs/fixtures.md
("File format"); this module is an independent second implementation of the
C++ reader (reference/src/safetensors.cpp). A file that breaks a rule raises
BadInput, whose message is one line "<path>: <field>: <problem>", with the
same fields as the C++ reader.
"""
from __future__ import annotations

import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple, Union

import numpy as np

__all__ = ["BadInput", "File", "read", "read_bounded", "parse", "serialize", "write", "round_to", "DTYPES"]

#: Headers longer than this are refused (the limit of huggingface/safetensors).
MAX_HEADER = 100_000_000
#: I64 values must be exact doubles.
MAX_EXACT_INT = 2 ** 53
_INT63 = 2 ** 63 - 1

#: dtype name -> (size in bytes, little-endian numpy storage type)
DTYPES = {"F64": (8, "<f8"), "F32": (4, "<f4"), "F16": (2, "<f2"), "BF16": (2, "<u2"), "I64": (8, "<i8")}

#: Float formats: dtype -> (p significand bits, emin, emax) (docs/fixtures.md, "Dtypes and values").
FORMATS = {"F32": (24, -126, 127), "F16": (11, -14, 15), "BF16": (8, -126, 127), "F64": (53, -1022, 1023)}


_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _one_line(s: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", s)


class BadInput(ValueError):
    """A file that is not a valid fixture, or lacks what the caller needs."""

    def __init__(self, path: str, field: str, problem: str):
        self.path, self.field, self.problem = path, field, problem
        super().__init__(_one_line(f"{path}: {field}: {problem}"))


def _quote(name: str) -> str:
    return json.dumps(name, ensure_ascii=False)


@dataclass
class File:
    """A whole file: tensors as float64 numpy arrays (exact for every dtype),
    their stored dtypes, the string-to-string metadata, and where it came from."""

    tensors: Dict[str, np.ndarray] = field(default_factory=dict)
    dtypes: Dict[str, str] = field(default_factory=dict)
    metadata: Dict[str, str] = field(default_factory=dict)
    source: str = ""

    def get(self, name: str, shape: Optional[Tuple[int, ...]] = None) -> np.ndarray:
        """The tensor `name` (BadInput if missing or, given `shape`, of another shape)."""
        if name not in self.tensors:
            have = ", ".join(_quote(n) for n in list(self.tensors)[:8])
            raise BadInput(self.source or "<memory>", _quote(name),
                           f"missing (the file has {len(self.tensors)} tensors{': ' + have if have else ''})")
        t = self.tensors[name]
        if shape is not None and tuple(t.shape) != tuple(shape):
            raise BadInput(self.source or "<memory>", _quote(name) + ".shape",
                           f"{_shape(t.shape)}, expected {_shape(shape)}")
        return t


def _shape(s) -> str:
    return "[" + ",".join(str(int(x)) for x in s) + "]"


def _is_int(x) -> bool:
    return type(x) is int  # JSON true/false are bool, a subclass of int: not integers


def _reject_constant(name):  # NaN, Infinity, -Infinity are not JSON
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text):  # like nlohmann::json: a number past the double range is an error, not inf
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"number overflow parsing '{text}'")
    return x


def _json_int(text):  # like nlohmann::json: integers outside int64/uint64 are read as doubles
    x = int(text)
    return x if -(2 ** 63) <= x < 2 ** 64 else _finite_float(text)


def _check_strings(x, path, field="header"):
    """nlohmann::json refuses unpaired surrogates (\\ud800); Python's json keeps them."""
    if isinstance(x, str):
        try:
            x.encode("utf-8")
        except UnicodeEncodeError:
            raise BadInput(path, field, "not valid JSON: a string with an unpaired surrogate escape") from None
    elif isinstance(x, dict):
        for k, v in x.items():
            _check_strings(k, path, field)
            _check_strings(v, path, field)
    elif isinstance(x, list):
        for v in x:
            _check_strings(v, path, field)


#: JSON nesting (objects and arrays) deeper than this is refused (C++: io::kMaxJsonDepth).
MAX_JSON_DEPTH = 64


def check_json_depth(raw: bytes, path: str, field: str) -> None:
    """BadInput if the JSON text nests deeper than MAX_JSON_DEPTH (strings
    skipped), before the parser recurses (C++: io::check_json_depth, the same
    scan: a quote opens or closes a string, inside one a backslash escapes the
    next byte). Linear and vectorized: only the bytes that matter (quotes,
    backslashes, brackets) are looked at, by numpy, so a 32 MiB string costs
    one pass in C, not 32 Mi steps of Python."""
    # A pair of backslashes never matters (inside a string it is one escaped
    # backslash, outside one the scan skips each): without them every
    # backslash left escapes the byte right after it.
    raw = bytes(raw).replace(b"\\\\", b"")
    kind = _JSON_KIND[np.frombuffer(raw, dtype=np.uint8)]  # 0 other, 1 quote, 2 backslash, 3 open, 4 close
    after_bs = np.zeros(kind.size, dtype=bool)  # the byte after a backslash (arrays of bytes: no int64 per byte)
    after_bs[1:] = kind[:-1] == 2
    pos = np.flatnonzero(kind)
    if pos.size == 0:
        return
    v = kind[pos]
    bs = v == 2
    quote = (v == 1) & ~after_bs[pos]
    inside = (np.cumsum(quote, dtype=np.int32) - quote) % 2 == 1  # after an opening quote (a closing one included)
    if np.any(bs & ~inside):  # a backslash outside a string (not JSON): the byte-by-byte scan decides
        _check_json_depth_scan(raw, path, field)
        return
    step = _JSON_STEP[v]
    step[inside | quote] = 0
    if int(np.max(np.cumsum(step, dtype=np.int32))) > MAX_JSON_DEPTH:
        raise BadInput(path, field, f"JSON nesting deeper than {MAX_JSON_DEPTH}")


_JSON_KIND = np.zeros(256, dtype=np.uint8)
_JSON_KIND[[0x22, 0x5C, 0x7B, 0x5B, 0x7D, 0x5D]] = [1, 2, 3, 3, 4, 4]
_JSON_STEP = np.array([0, 0, 0, 1, -1], dtype=np.int8)  # by kind: brackets open +1, close -1


def _check_json_depth_scan(raw: bytes, path: str, field: str) -> None:
    depth, in_string, i, n = 0, False, 0, len(raw)
    while i < n:
        c = raw[i]
        if in_string:
            if c == 0x5C:
                i += 1
            elif c == 0x22:
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c in (0x7B, 0x5B):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise BadInput(path, field, f"JSON nesting deeper than {MAX_JSON_DEPTH}")
        elif c in (0x7D, 0x5D):
            depth -= 1
        i += 1


def loads_strict(raw, path: str, field: str):
    """JSON text (bytes or str) parsed as dmref parses every JSON it reads
    (C++: io::parse_json): nesting checked first, no NUL byte, no duplicate key
    at any level, no NaN/Infinity, numbers within double, valid UTF-8."""
    raw = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
    if raw.startswith(b"\xef\xbb\xbf"):  # as the C++ reader (nlohmann would skip it)
        raise BadInput(path, field, "not valid JSON: a byte order mark at the start")
    if b"\0" in raw:
        raise BadInput(path, field, f"not valid JSON: a NUL byte at offset {raw.index(0)}")
    check_json_depth(raw, path, field)
    duplicate = []

    def pairs(items):
        d = {}
        for k, v in items:
            if k in d and not duplicate:
                duplicate.append(k)
            d[k] = v
        return d

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(path, field, f"not valid JSON: invalid UTF-8 at byte {e.start}") from None
    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_constant=_reject_constant,
                           parse_float=_finite_float, parse_int=_json_int)
    except ValueError as e:
        raise BadInput(path, field, f"not valid JSON: {e}") from None
    _check_strings(value, path, field)
    if duplicate:
        raise BadInput(path, field, f"duplicate key {_quote(duplicate[0])}")
    return value


def _decode_header(raw: bytes, path: str) -> dict:
    header = loads_strict(raw, path, "header")
    if not isinstance(header, dict):
        raise BadInput(path, "header", f"not a JSON object (it is {type(header).__name__})")
    return header


def parse(data: bytes, path: str = "<memory>", buffer_size: Optional[int] = None) -> File:
    """Parses and checks the bytes of a file; `path` only names it in messages.
    With buffer_size, `data` is only the length field and header of a file
    whose byte buffer has that many bytes: the checks run, nothing is decoded."""
    return _parse(data, path, buffer_size)[0]


def _parse(data: bytes, path: str, buffer_size: Optional[int], header: Optional[dict] = None):
    """parse(), and the decoded header; given `header` (this data's, already
    decoded and checked by a header-only pass: read()), it is not decoded again."""
    data = bytes(data)
    header_only = buffer_size is not None
    if len(data) < 8:
        raise BadInput(path, "header length",
                       f"the file has {len(data)} bytes, fewer than the 8 of the header length (truncated)")
    n = int.from_bytes(data[:8], "little")
    rest = len(data) - 8 + (buffer_size or 0)
    if n > rest:
        raise BadInput(path, "header length", f"{n} bytes, but only {rest} bytes follow the length field")
    if n > MAX_HEADER:
        raise BadInput(path, "header length", f"{n} bytes exceeds the limit of {MAX_HEADER}")
    if n == 0:
        raise BadInput(path, "header", "empty (it must be a JSON object)")
    raw = data[8:8 + n]
    if raw[0] != ord("{"):
        raise BadInput(path, "header", f"does not start with '{{' (first byte 0x{raw[0]:02x})")
    if b"\0" in raw:
        raise BadInput(path, "header", f"not valid JSON: a NUL byte at offset {raw.index(0)}")
    if header is None:
        header = _decode_header(raw, path)

    f = File(source=path)
    buffer_size = rest - n
    entries = []  # (begin, end, name)
    # In the byte order of the names, as the C++ reader (a std::map) visits them,
    # so that a file with several problems is refused for the same one.
    for name, e in sorted(header.items(), key=lambda kv: kv[0].encode("utf-8")):
        if name == "__metadata__":
            if not isinstance(e, dict):
                raise BadInput(path, "__metadata__", "not a JSON object")
            for k, v in e.items():
                if not isinstance(v, str):
                    raise BadInput(path, "__metadata__." + _quote(k), "not a string")
                f.metadata[k] = v
            continue
        q = _quote(name)
        if not isinstance(e, dict):
            raise BadInput(path, q, "not a JSON object")
        for k in e:
            if k not in ("dtype", "shape", "data_offsets"):
                raise BadInput(path, q, f"unexpected key {_quote(k)} (an entry has only dtype, shape and data_offsets)")
        if "dtype" not in e:
            raise BadInput(path, q + ".dtype", "missing")
        dt = e["dtype"]
        if not isinstance(dt, str):
            raise BadInput(path, q + ".dtype", "not a string")
        if dt not in DTYPES:
            raise BadInput(path, q + ".dtype", f"unsupported dtype {_quote(dt)} (dmref reads BF16, F16, F32, F64, I64)")
        size = DTYPES[dt][0]
        if "shape" not in e:
            raise BadInput(path, q + ".shape", "missing")
        sh = e["shape"]
        if not isinstance(sh, list):
            raise BadInput(path, q + ".shape", "not an array")
        for i, x in enumerate(sh):
            fld = f"{q}.shape[{i}]"
            if not _is_int(x):
                raise BadInput(path, fld, f"{json.dumps(x)} is not an integer")
            if x < 0:
                raise BadInput(path, fld, f"{x} is negative")
            if x > _INT63:
                raise BadInput(path, fld, f"{x} is too large")
        count = 1
        for x in sh:
            count *= x
            if count > _INT63:
                raise BadInput(path, q + ".shape", f"{_shape(sh)} has more elements than fit in 63 bits")
        if count * size > _INT63:
            raise BadInput(path, q + ".shape", f"{_shape(sh)} of {dt} has more bytes than fit in 63 bits")
        nonzero = 8  # values are held as float64
        for x in sh:
            nonzero *= x or 1
        if nonzero > _INT63:  # an empty [0, 2^63-1]: numpy cannot shape it (C++ refuses it too)
            raise BadInput(path, q + ".shape",
                           f"{_shape(sh)} of {dt} has non-zero extents of more float64 bytes than fit in 63 bits")
        if "data_offsets" not in e:
            raise BadInput(path, q + ".data_offsets", "missing")
        off = e["data_offsets"]
        if not isinstance(off, list) or len(off) != 2:
            raise BadInput(path, q + ".data_offsets", "not [begin, end] (an array of two integers)")
        for i, x in enumerate(off):
            if not _is_int(x) or x < 0 or x >= 2 ** 64:
                raise BadInput(path, f"{q}.data_offsets[{i}]", f"{json.dumps(x)} is not a non-negative integer")
        b, en = off
        if b > en:
            raise BadInput(path, q + ".data_offsets", f"begin {b} > end {en}")
        if en > buffer_size:
            raise BadInput(path, q + ".data_offsets",
                           f"end {en} is past the end of the byte buffer ({buffer_size} bytes)")
        if en - b != count * size:
            raise BadInput(path, q + ".data_offsets",
                           f"{en - b} bytes, but shape {_shape(sh)} of {dt} needs {count * size}")
        entries.append((b, en, name))
        f.dtypes[name] = dt
        f.tensors[name] = tuple(sh)  # replaced by the values below
    covered, prev = 0, None
    for b, en, name in sorted(entries):
        fld = _quote(name) + ".data_offsets"
        if b < covered:
            raise BadInput(path, fld, f"[{b}, {en}] overlaps {_quote(prev[2])} [{prev[0]}, {prev[1]}]")
        if b > covered:
            raise BadInput(path, fld, f"[{b}, {en}] leaves bytes [{covered}, {b}) of the byte buffer unused "
                                      "(tensors must cover it without holes)")
        covered, prev = en, (b, en, name)
    if covered != buffer_size:
        raise BadInput(path, "byte buffer", f"bytes [{covered}, {buffer_size}) are not used by any tensor "
                                            "(tensors must cover it without holes)")
    if header_only:
        return f, header
    base = 8 + n
    for b, en, name in sorted(entries):
        dt, shape = f.dtypes[name], f.tensors[name]
        raw = np.frombuffer(data, dtype=DTYPES[dt][1], count=(en - b) // DTYPES[dt][0], offset=base + b)
        if dt == "BF16":
            vals = (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        elif dt == "I64":
            bad = np.flatnonzero((raw > MAX_EXACT_INT) | (raw < -MAX_EXACT_INT))  # int64 comparisons: exact
            if bad.size:
                k = bad[0]
                idx = np.unravel_index(k, shape) if shape else ()
                raise BadInput(path, _quote(name) + _shape(idx),
                               f"{int(raw[k])} is outside [-2^53, 2^53], where doubles are exact")
            vals = raw.astype(np.float64)
        else:
            vals = raw.astype(np.float64)
        f.tensors[name] = vals.reshape(shape)
    return f, header


def _regular(fd: int, path: str, field: str) -> None:
    """BadInput (and fd closed) unless fd is a regular file: a FIFO would block,
    /dev/zero never end, a directory is not a file (C++: the same words)."""
    import stat as _stat
    if not _stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadInput(path, field, "not a regular file")


def read_bounded(path: Union[str, os.PathLike], field: str, max_bytes: int) -> bytes:
    """The whole of a regular file of at most max_bytes (C++: io::read_bounded):
    BadInput naming `field` if it cannot be opened, is not a regular file (a
    FIFO would block, /dev/zero never end) or is too large."""
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise BadInput(path, field, f"cannot open: {e.strerror}") from None
    _regular(fd, path, field)  # before fdopen, which raises IsADirectoryError for a directory
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if st.st_size > max_bytes:
            raise BadInput(path, field, f"{st.st_size} bytes, more than the limit of {max_bytes}")
        return fh.read(st.st_size)


def read(path: Union[str, os.PathLike]) -> File:
    """Reads and checks a fixture file. Raises BadInput naming the first problem.
    As the C++ reader: a regular file only, the length field checked against
    the file size before the header is read, the header before the buffer."""
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise BadInput(path, "file", f"cannot open: {e.strerror}") from None
    _regular(fd, path, "file")
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        size = st.st_size
        head = fh.read(8)
        if size < 8:
            parse(head, path)  # raises the truncation error
        n = int.from_bytes(head, "little")
        if n > size - 8 or n > MAX_HEADER or n == 0:
            parse(head, path, buffer_size=size - 8)  # raises the length field's error
        raw = fh.read(n)
        _, header = _parse(head + raw, path, size - 8 - n)  # header and layout, before the buffer is read
        data = head + raw + fh.read(size - 8 - n)
    return _parse(data, path, None, header)[0]  # the header decoded once


# ---------------------------------------------------------------- rounding


def round_to(x, dtype: str) -> np.ndarray:
    """float64 values rounded to F32, F16 or BF16 (nearest, ties to even, with
    subnormals; +-inf at and beyond max + ulp(max)/2), returned as exact float64."""
    x = np.asarray(x, dtype=np.float64)
    if dtype == "F64":
        return x.copy()
    p, emin, emax = FORMATS[dtype]
    with np.errstate(all="ignore"):
        _, e = np.frexp(np.abs(x))  # |x| = m 2^e, m in [0.5, 1): leading bit 2^(e-1)
        q = np.maximum(e - 1, emin) - (p - 1)  # exponent of the unit in the last place
        r = np.ldexp(np.rint(np.ldexp(x, -q)), q)  # rint: half to even
        big = np.ldexp(2.0 - 2.0 ** (1 - p), emax)
        r = np.where(np.abs(r) > big, np.copysign(np.inf, x), r)
        return np.where(np.isfinite(x), r, x)


def _encode(values: np.ndarray, dtype: str) -> bytes:
    v = np.ascontiguousarray(values, dtype=np.float64).ravel()
    if dtype == "F64":
        return v.astype("<f8").tobytes()
    if dtype == "I64":
        if not (np.all(np.isfinite(v)) and np.all(np.abs(v) <= MAX_EXACT_INT) and np.all(v == np.trunc(v))):
            raise ValueError("safetensors: I64 values must be integers in [-2^53, 2^53]")
        return v.astype("<i8").tobytes()
    r = round_to(v, dtype)
    if dtype == "F32":
        return r.astype("<f4").tobytes()
    if dtype == "F16":
        return r.astype("<f2").tobytes()
    if dtype == "BF16":  # exact: r is a bfloat16 value, so its float32 has 16 zero low bits
        return (r.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
    raise ValueError(f"safetensors: unsupported dtype {dtype!r} (dmref writes BF16, F16, F32, F64, I64)")


TensorLike = Union[np.ndarray, Tuple[object, str]]


def serialize(tensors: Mapping[str, TensorLike], metadata: Optional[Mapping[str, str]] = None,
              dtype: str = "F64") -> bytes:
    """The canonical bytes dmref's writer produces (docs/fixtures.md, "How dmref
    writes"). `tensors` maps names to arrays (stored in `dtype`) or to
    (array, dtype) pairs; torch tensors are accepted."""
    from .verify import as_float64  # torch-aware conversion

    header, chunks, offset = {}, [], 0
    for name in sorted(tensors, key=lambda s: s.encode("utf-8")):
        t = tensors[name]
        arr, dt = (t if isinstance(t, tuple) else (t, dtype))
        if name == "__metadata__":
            raise ValueError("safetensors: the name __metadata__ is reserved for the metadata")
        if dt not in DTYPES:
            raise ValueError(f"safetensors: {_quote(name)}.dtype: unsupported dtype {dt!r}")
        a = as_float64(arr)
        raw = _encode(a, dt)
        header[name] = {"data_offsets": [offset, offset + len(raw)], "dtype": dt, "shape": [int(s) for s in a.shape]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        for k, v in metadata.items():
            if not isinstance(v, str):
                raise ValueError(f"safetensors: __metadata__.{_quote(k)}: not a string")
        header["__metadata__"] = dict(sorted(metadata.items(), key=lambda kv: kv[0].encode("utf-8")))
    header = dict(sorted(header.items(), key=lambda kv: kv[0].encode("utf-8")))
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(chunks)


def write(path: Union[str, os.PathLike], tensors: Mapping[str, TensorLike],
          metadata: Optional[Mapping[str, str]] = None, dtype: str = "F64") -> None:
    """Writes serialize(...) to a temporary file next to `path`, flushes it and
    renames it over `path`: a failure never leaves a half-written file."""
    path = os.fspath(path)
    data = serialize(tensors, metadata, dtype)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
