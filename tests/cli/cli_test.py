#!/usr/bin/python3
"""End-to-end checks of the dmref command line: exit codes, one-line errors,
nothing half-written. Standard library only. Usage: cli_test.py DMREF FIXTURES_DIR"""
import json, os, struct, subprocess, sys, tempfile

DMREF, FIXTURES = sys.argv[1], sys.argv[2]
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {name} {detail}")


def run(*args):
    p = subprocess.run([DMREF, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    out = {}
    for k, v in h.items():
        s, e = v["data_offsets"]
        assert v["dtype"] == "F64"
        out[k] = (v["shape"], list(struct.unpack(f"<{(e - s) // 8}d", b[8 + n + s:8 + n + e])))
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


def one_line_error(name, rc, err, *words):
    check(name + ": exit 2", rc == 2, f"(rc={rc}, stderr={err!r})")
    check(name + ": one line", err.count("\n") == 1, repr(err))
    for w in words:
        check(name + f": names {w}", w in err, repr(err))


tmp = tempfile.mkdtemp()
case = "ldm_rls.kernel.g2_dk4_d8.L8.f32.s1"
fx = os.path.join(FIXTURES, case + ".safetensors")
tensors, meta = read_st(fx)

# A fixture is its own (perfect) candidate.
rc, out, _ = run("verify", "--fixtures", fx, "--candidate", fx)
check("verify golden vs itself passes", rc == 0 and "1 passed, 0 failed" in out, out)
for fmt in ("json", "junit"):
    rc, out, _ = run("verify", "--fixtures", fx, "--candidate", fx, "--format", fmt)
    check(f"verify --format {fmt}", rc == 0 and ('"failed": 0' in out if fmt == "json" else 'failures="0"' in out), out)

# The whole directory with a candidate whose tensors are named <case>/output.*.
cand = {f"{case}/{k}": v for k, v in tensors.items() if k.startswith("output.") and not k.endswith(".lo")}
cpath = os.path.join(tmp, "cand.safetensors")
write_st(cpath, cand)
rc, out, _ = run("verify", "--fixtures", FIXTURES, "--candidate", cpath, "--case", case)
check("verify directory + --case passes", rc == 0, out)
rc, out, _ = run("verify", "--fixtures", FIXTURES, "--candidate", cpath, "--case", "ldm_rls.kernel.*")
check("verify: cases missing from the candidate fail", rc == 1 and "candidate has no tensor" in out, out)

# One NaN: exit 1, one line naming case, tensor and index.
shape, vals = cand[f"{case}/output.out"]
cand[f"{case}/output.out"] = (shape, [float("nan")] + vals[1:])
write_st(cpath, cand)
rc, out, _ = run("verify", "--fixtures", fx, "--candidate", cpath)
check("verify NaN fails with exit 1", rc == 1, out)
check("verify failure line format", f"{case}:output.out[0,0] observed nan expected" in out, out)

# Bad input: exit 2 and one line naming the file and field.
rc, _, err = run("verify", "--fixtures", fx, "--candidate", os.path.join(tmp, "missing.safetensors"))
one_line_error("missing candidate", rc, err, "missing.safetensors")
trunc = os.path.join(tmp, "trunc.safetensors")
open(trunc, "wb").write(open(fx, "rb").read()[:100])
rc, _, err = run("verify", "--fixtures", fx, "--candidate", trunc)
one_line_error("truncated candidate", rc, err, "trunc.safetensors")
rc, _, err = run("verify", "--fixtures", fx, "--candidate", fx, "--dtype", "f8")
one_line_error("unknown dtype", rc, err, "f8")

# dmref run: certified outputs for user inputs; bad configs rejected, nothing written.
inputs = {k: v for k, v in tensors.items() if k.startswith(("input.", "param."))}
ipath, cfgpath, opath = (os.path.join(tmp, n) for n in ("in.safetensors", "cfg.json", "out.safetensors"))
write_st(ipath, inputs)
config = json.loads(meta["config"])
json.dump(config, open(cfgpath, "w"))
rc, out, err = run("run", "--scheme", "ldm", "--config", cfgpath, "--inputs", ipath, "--out", opath)
check("run succeeds", rc == 0 and os.path.exists(opath), out + err)
if rc == 0:
    got, _ = read_st(opath)
    check("run reproduces the fixture's golden values",
          all(got[k] == tensors[k] for k in got), "")


def bad_run(name, cfg, ins, *words):
    json.dump(cfg, open(cfgpath, "w"))
    write_st(ipath, ins)
    if os.path.exists(opath):
        os.remove(opath)
    rc, _, err = run("run", "--scheme", "ldm", "--config", cfgpath, "--inputs", ipath, "--out", opath)
    one_line_error(name, rc, err, *words)
    check(name + ": no output written", not os.path.exists(opath))


bad_run("alpha <= 0", dict(config, alpha=0), inputs, "alpha")
bad_run("G not dividing d", dict(config, groups=3), inputs, "groups")
lam = dict(inputs)
lam["param.lambda"] = (inputs["param.lambda"][0], [1.5] + inputs["param.lambda"][1][1:])
bad_run("lambda > 1", config, lam, "param.lambda")
om = dict(inputs)
om["input.omega"] = (inputs["input.omega"][0], [-1.0] + inputs["input.omega"][1][1:])
bad_run("omega < 0", config, om, "input.omega")
nan = dict(inputs)
nan["input.v"] = (inputs["input.v"][0], [float("nan")] + inputs["input.v"][1][1:])
bad_run("NaN input", config, nan, "input.v")
miss = {k: v for k, v in inputs.items() if k != "input.q"}
bad_run("missing tensor", config, miss, "input.q")
shp = dict(inputs)
shp["input.e"] = ([1, 16], inputs["input.e"][1])
bad_run("shape mismatch", config, shp, "input.e")
# JSON has no NaN/Inf: an overflowing literal is a JSON error, a string is not a number.
open(cfgpath, "w").write(json.dumps(config).replace('"alpha": 1.0', '"alpha": 1e999'))
write_st(ipath, inputs)
rc, _, err = run("run", "--scheme", "ldm", "--config", cfgpath, "--inputs", ipath, "--out", opath)
one_line_error("non-finite config value (1e999)", rc, err, "cfg.json", "1e999")
bad_run("non-finite config value (string)", dict(config, alpha="inf"), inputs, "config.alpha")

# ---- The rest of the bad-input contract (docs/hardening.md): damaged files on
# every path that reads one, wrong n for mHC, a damaged manifest.
def raw_st(header, data):
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def ent(dtype, shape, b, e):
    return {"dtype": dtype, "shape": shape, "data_offsets": [b, e]}


good = open(fx, "rb").read()
damaged = {
    "header length past the end": (struct.pack("<Q", len(good)) + good[8:], "header length"),
    "overlapping offsets": (raw_st({"a": ent("F32", [2], 0, 8), "b": ent("F32", [2], 4, 12)}, bytes(12)),
                            '"b".data_offsets'),
    "out-of-range offsets": (raw_st({"a": ent("F32", [2], 0, 8), "b": ent("F32", [2], 8, 24)}, bytes(16)),
                             '"b".data_offsets'),
    "unknown dtype": (raw_st({"a": ent("F8_E4M3", [2], 0, 2)}, bytes(2)), '"a".dtype'),
}
for what, (data, field) in damaged.items():
    bad = os.path.join(tmp, "damaged.safetensors")
    open(bad, "wb").write(data)
    rc, _, err = run("verify", "--fixtures", fx, "--candidate", bad)
    one_line_error(f"candidate with {what}", rc, err, "damaged.safetensors: " + field + ":")
    rc, _, err = run("verify", "--fixtures", bad, "--candidate", fx)
    one_line_error(f"fixture with {what}", rc, err, "damaged.safetensors: " + field + ":")
    if os.path.exists(opath):
        os.remove(opath)
    json.dump(config, open(cfgpath, "w"))
    rc, _, err = run("run", "--scheme", "ldm", "--config", cfgpath, "--inputs", bad, "--out", opath)
    one_line_error(f"run inputs with {what}", rc, err, "damaged.safetensors: " + field + ":")
    check(f"run inputs with {what}: no output written", not os.path.exists(opath))

# mHC: the config's n must match the tensors' shapes (and be >= 1).
mfx = os.path.join(FIXTURES, "mhc.kernel.n4_d8.L6.paper.f32.s1.safetensors")
mtensors, mmeta = read_st(mfx)
mcfg = json.loads(mmeta["config"])
minputs = {k: v for k, v in mtensors.items() if k.startswith(("input.", "param."))}


def bad_mhc(name, cfg, *words):
    json.dump(cfg, open(cfgpath, "w"))
    write_st(ipath, minputs)
    if os.path.exists(opath):
        os.remove(opath)
    rc, _, err = run("run", "--scheme", "mhc", "--config", cfgpath, "--inputs", ipath, "--out", opath)
    one_line_error(name, rc, err, *words)
    check(name + ": no output written", not os.path.exists(opath))


bad_mhc("wrong n for mHC (3 for tensors of n = 4)", dict(mcfg, n=3), "in.safetensors", "param.phi_pre")
bad_mhc("wrong n for mHC (0)", dict(mcfg, n=0), "config.n")
bad_mhc("wrong n for mHC (not an integer)", dict(mcfg, n=4.5), "config.n")

# A damaged manifest (generate --check): exit 2 naming the manifest and field, not an internal error.
man = os.path.join(tmp, "manifest.json")
for what, text, field in [("not JSON", "{", "manifest"), ("cases not a list", '{"cases": 1}', "cases"),
                          ("a case not an object", '{"cases": [1]}', "cases[0]"),
                          ("an id not a string", '{"cases": [{"id": 1, "file": "x", "sha256": "0"}]}', "cases[0].id")]:
    open(man, "w").write(text)
    rc, _, err = run("generate", "--case", "preln.kernel.d8.L6.f32.s1", "--out", os.path.join(tmp, "gen"),
                     "--check", man)
    one_line_error(f"manifest {what}", rc, err, "manifest.json: " + field + ":")

# Progress: shown on a terminal (stderr a tty), never in a pipe or under CI=...
def on_terminal(env_ci, *args):
    """Runs dmref with stderr on a pseudo-terminal; returns (rc, what the terminal got)."""
    import pty
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if env_ci:
        env["CI"] = "true"
    p = subprocess.Popen([DMREF, *args], stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    got = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    return p.wait(), got.decode(errors="replace")


gen_args = ("generate", "--case", "preln.kernel.*", "--jobs", "1", "--out", os.path.join(tmp, "gen-progress"))
rc, term = on_terminal(False, *gen_args)
check("generate on a terminal: progress [i/n] shown", rc == 0 and "[1/" in term and "preln.kernel" in term, repr(term))
rc, term = on_terminal(True, *gen_args)
check("generate on a terminal with CI set: quiet", rc == 0 and "[1/" not in term, repr(term))
rc, _, err = run(*gen_args)
check("generate into a pipe: no progress on stderr", rc == 0 and err == "", repr(err))
ins = os.path.join(tmp, "progress-in.safetensors")
write_st(ins, {k: v for k, v in tensors.items() if k.startswith(("input.", "param."))})
json.dump(json.loads(meta["config"]), open(os.path.join(tmp, "progress-cfg.json"), "w"))
run_args = ("run", "--scheme", "ldm", "--config", os.path.join(tmp, "progress-cfg.json"), "--inputs", ins,
            "--out", os.path.join(tmp, "progress-out.safetensors"))
rc, term = on_terminal(False, *run_args)
check("run on a terminal: says what it certifies", rc == 0 and "certifying" in term, repr(term))
rc, _, err = run(*run_args)
check("run into a pipe: nothing on stderr", rc == 0 and err == "", repr(err))

# dmref run --grad: certified backward goldens for user inputs (upstream gradients input.grad.*).
gcase = "mhc.kernel_grad.n4_d8.L6.paper.f32.s1"
gtensors, gmeta = read_st(os.path.join(FIXTURES, gcase + ".safetensors"))
gin, gcfg, gout = (os.path.join(tmp, n) for n in ("grad-in.safetensors", "grad-cfg.json", "grad-out.safetensors"))
write_st(gin, {k: v for k, v in gtensors.items() if k.startswith(("input.", "param."))})
json.dump(json.loads(gmeta["config"]), open(gcfg, "w"))
rc, out, err = run("run", "--grad", "--scheme", "mhc", "--config", gcfg, "--inputs", gin, "--out", gout)
check("run --grad succeeds", rc == 0 and os.path.exists(gout), out + err)
if rc == 0:
    got, _ = read_st(gout)
    check("run --grad reproduces the fixture's golden gradients",
          any(k.startswith("grad.") for k in got) and all(got[k] == gtensors[k] for k in got), "")
os.remove(gout)
rc, _, err = run("run", "--scheme", "mhc", "--config", gcfg, "--inputs", gin, "--out", gout)
one_line_error("upstream gradients without --grad", rc, err, "input.grad.", "--grad")
check("upstream gradients without --grad: nothing written", not os.path.exists(gout))
write_st(gin, {k: v for k, v in gtensors.items() if k.startswith(("input.", "param.")) and k != "input.grad.out"})
rc, _, err = run("run", "--grad", "--scheme", "mhc", "--config", gcfg, "--inputs", gin, "--out", gout)
one_line_error("--grad without an upstream gradient", rc, err, "input.grad.out", "missing")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
