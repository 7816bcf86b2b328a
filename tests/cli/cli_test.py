#!/usr/bin/python3
"""End-to-end checks of the dmref command line: exit codes, one-line errors,
nothing half-written. Standard library only. Usage: cli_test.py DMREF FIXTURES_DIR"""
import json, os, struct, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st import Checks, read_st, write_st  # noqa: E402

DMREF, FIXTURES = sys.argv[1], sys.argv[2]
_c = Checks(DMREF)
check, run, one_line_error = _c.check, _c.run, _c.one_line_error


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
# --report DIR: report.md names the worst tensor (the NaN's: err/tol inf) and its picture, err/tol
# per (token, layer) cell; output.out is [token, i], so one column, a row per token, token 0 red.
rep = os.path.join(tmp, "rep")
rc, out, err = run("verify", "--fixtures", fx, "--candidate", cpath, "--report", rep)
check("verify --report: exit 1, the files named on stderr",
      rc == 1 and err == f"wrote {rep}/0.svg\nwrote {rep}/report.md\n", repr(err))
md = open(os.path.join(rep, "report.md")).read()
check("verify --report: the case row names the worst tensor and its picture",
      f"| {case} | FAIL | output.out | inf | token 0, i 0 | ![output.out](0.svg) |" in md, md)
golden = sorted(k for k in tensors if k.startswith("output.") and not k.endswith(".lo"))
check("verify --report: a row per judged tensor", [l.split(" | ")[1] for l in md.splitlines()
                                                   if l.startswith(f"| {case} | output.")] == golden, md)
import xml.etree.ElementTree as ET
svg = ET.parse(os.path.join(rep, "0.svg")).getroot()
cells = [r for r in svg.iter("{http://www.w3.org/2000/svg}rect") if r.find("{http://www.w3.org/2000/svg}title") is not None]
check("verify --report: the picture is output.out's, a cell per token, token 0 past the tolerance",
      "output.out, max err/tol inf at token 0, i 0" in ET.tostring(svg, encoding="unicode") and
      len(cells) == tensors["output.out"][0][0] and cells[0].get("fill") == "#c00000" and
      all(c.get("fill") != "#c00000" for c in cells[1:]), ET.tostring(svg, encoding="unicode")[:400])

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
# Tokens are certified in parallel (this case has 2): the file does not depend on --jobs.
by_jobs = {}
for jobs in ("1", "2", "3"):
    o = os.path.join(tmp, f"out-jobs{jobs}.safetensors")
    rc, out, err = run("run", "--scheme", "ldm", "--config", cfgpath, "--inputs", ipath, "--out", o, "--jobs", jobs)
    by_jobs[jobs] = open(o, "rb").read() if rc == 0 else None
check("run --jobs 1, 2, 3 write the same bytes",
      by_jobs["1"] is not None and by_jobs["1"] == by_jobs["2"] == by_jobs["3"], "")
rc, _, err = run("run", "--scheme", "ldm", "--config", cfgpath, "--inputs", ipath, "--out", opath, "--jobs", "0")
check("run --jobs 0 rejected: exit 2", rc == 2, err)
# P_0 = 1e300 I is past float's range (the layout/validation pass runs in float)
# but exact in the intervals: the outputs are finite and certify.
json.dump(dict(config, alpha=1e300), open(os.path.join(tmp, "alpha.json"), "w"))
rc, out, err = run("run", "--scheme", "ldm", "--config", os.path.join(tmp, "alpha.json"), "--inputs", ipath,
                   "--out", os.path.join(tmp, "alpha.safetensors"))
check("run: alpha = 1e300 (infinite in float) certifies", rc == 0 and "certified at" in out, out + err)
json.dump(config, open(cfgpath, "w"))

# A documented limit (docs/fixtures.md): an output exactly on a rounding tie,
# reached through inexact weights (1/3 each), never certifies. AttnRes with
# zero pseudo-queries: h_2 = (e + v_0 + v_1) / 3 = 1 + 2^-53, the midpoint of
# 1 and 1 + 2^-52. Exit 3, the element named by tensor and index, no file.
a, c = 1 + 2**-52, 1 - 2**-53
tie_in, tie_cfg, tie_out = (os.path.join(tmp, n) for n in ("tie.safetensors", "tie.json", "tie-out.safetensors"))
write_st(tie_in, {"input.e": ([1, 2], [a, a]), "input.v": ([1, 3, 2], [a, a, c, c, 0.5, 0.5]),
                  "param.w": ([4, 2], [0.0] * 8), "param.g": ([4, 2], [1.0] * 8)})
json.dump({"tokens": 1, "layers": 3, "d": 2, "level": "kernel", "variant": "full"}, open(tie_cfg, "w"))
rc, _, err = run("run", "--scheme", "attnres", "--config", tie_cfg, "--inputs", tie_in, "--out", tie_out)
check("run: a value on a rounding tie is not certified (exit 3, names output.h[0,2,0])",
      rc == 3 and "output.h[0,2,0]" in err and "not certified at 128, 512, 2048, 8192 bits" in err
      and not os.path.exists(tie_out), err)

# An output beyond double's range while the others are finite (docs/fixtures.md):
# LDM-RLS with the last key coordinate of group 1 zero in every layer, so that
# P's (3, 3) entry of group 1 only scales: P_L[3,3] = alpha / prod(lambda) =
# 1e10 / 1e-299 = 1e309 > DBL_MAX (lambda = 1 except 1e-299 at the last layer),
# while out and M use P k, which is zero in that coordinate. The file has every
# other output, metadata says why P is not there, stderr has one note line,
# exit 0. P_{L-1}[3,3] = 1e10 is finite in double, so the f64 baseline of out
# exists (lambda 1e-299 is 0 in float: no float baseline); verify judges out, h,
# M and reports P. (With alpha = 1e300 instead, P's other entries start at 1e300
# and the first update cancels them down to O(1): a correct double kernel errs by
# 100% on out there, and the generator marks out, h and M not judged in f64.)
big_in = dict(inputs)
kshape, kvals = big_in["input.k"]
big_in["input.k"] = (kshape, [0.0 if i % kshape[-1] == kshape[-1] - 1 else x for i, x in enumerate(kvals)])
lshape, _ = big_in["param.lambda"]
big_in["param.lambda"] = (lshape, [1.0] * (lshape[0] - 1) * lshape[1] + [1e-299] * lshape[1])
big_ipath, big_cfg, big_out = (os.path.join(tmp, n) for n in ("big-in.safetensors", "big.json", "big.safetensors"))
write_st(big_ipath, big_in)
json.dump(dict(config, alpha=1e10), open(big_cfg, "w"))
rc, out, err = run("run", "--scheme", "ldm", "--config", big_cfg, "--inputs", big_ipath, "--out", big_out)
beyond = "element [0,1,3,3] is beyond double's range: x >= 2^1026 (about 7.19e308)"  # 2^1026 <= 1e309 < 2^1027
check("run: P beyond double's range, out finite: exit 0, one note line naming output.P and the element",
      rc == 0 and err.count("\n") == 1 and err.startswith("dmref: note: ") and "output.P left out" in err
      and beyond in err, f"rc={rc} {out}{err}")
if rc == 0:
    got, gmeta = read_st(big_out)
    check("run: the file has out, h, M and not P", {"output.out", "output.h", "output.M", "output.out.lo"} <= set(got)
          and "output.P" not in got and "output.P.lo" not in got, sorted(got))
    why = json.loads(gmeta.get("unrepresentable", "{}"))
    check("run: metadata says why P is left out", list(why) == ["output.P"] and beyond in why["output.P"], gmeta)
    base = json.loads(gmeta["baselines"])
    check("run: no baseline for P, an f64 one for out; none in float (lambda = 1e-299 is 0 there)",
          base["f32"] is None and "output.P" not in base["f64"] and "output.out" in base["f64"], base)
    # The fixture is its own correct candidate: PASS, with the not-judged line.
    rc, vout, verr = run("verify", "--fixtures", big_out, "--candidate", big_out, "--dtype", "f64")
    check("verify: a correct candidate passes and P is reported not judged",
          rc == 0 and "PASS " in vout and "NOT JUDGED " in vout and ":output.P: the fixture has no golden for it (" + beyond in vout,
          vout + verr)
    # A candidate supplying P (any values, NaN included) is neither passed nor failed on it...
    cand_big = {k: v for k, v in got.items() if k.startswith("output.") and not k.endswith(".lo")}
    cand_big["output.P"] = ([2, 2, 4, 4], [float("nan")] * 64)
    write_st(gpath_big := os.path.join(tmp, "big-cand.safetensors"), cand_big)
    rc, vout, verr = run("verify", "--fixtures", big_out, "--candidate", gpath_big, "--dtype", "f64", "--format", "json")
    j = json.loads(vout) if rc in (0, 1) else {}
    c0 = (j.get("cases") or [{}])[0]
    check("verify: a candidate's P is not judged (json not_judged), the rest passes",
          rc == 0 and c0.get("pass") and [n["tensor"] for n in c0.get("not_judged", [])] == ["output.P"], vout + verr)
    # ... while a wrong out still fails.
    s, v = cand_big["output.out"]
    cand_big["output.out"] = (s, [v[0] + 1000] + v[1:])
    write_st(gpath_big, cand_big)
    rc, vout, _ = run("verify", "--fixtures", big_out, "--candidate", gpath_big, "--dtype", "f64")
    check("verify: a wrong out fails beside the not-judged P", rc == 1 and "FAIL " in vout and "NOT JUDGED " in vout, vout)
    rc, _, verr = run("verify", "--fixtures", big_out, "--candidate", gpath_big, "--dtype", "f64", "--outputs", "P")
    one_line_error("verify --outputs P (left out)", rc, verr, "--outputs", "output.P has no golden", "beyond double's range")
# Every output beyond double's range: nothing to write, exit 3 as before.
# PreLN at kernel level sums the layer outputs, out = h_L: with e = v_l = 1e308,
# h_1 = 2e308 (exact, beyond) and out = 3e308, so both outputs are left out.
all_in, all_cfg, all_out = (os.path.join(tmp, n) for n in ("all-in.safetensors", "all.json", "all.safetensors"))
write_st(all_in, {"input.e": ([1, 2], [1e308, 1e308]), "input.v": ([1, 2, 2], [1e308] * 4)})
json.dump({"tokens": 1, "layers": 2, "d": 2, "level": "kernel"}, open(all_cfg, "w"))
rc, _, err = run("run", "--scheme", "preln", "--config", all_cfg, "--inputs", all_in, "--out", all_out)
check("run: every output beyond double's range: exit 3, one line, no file",
      rc == 3 and err.count("\n") == 1 and "every output is beyond double's range" in err and not os.path.exists(all_out),
      f"rc={rc} {err!r}")


# `dmref run` refusing a config or inputs: exit 2, one line naming the file and
# field, no output (files in tmp/gate/).
gate = os.path.join(tmp, "gate")
os.makedirs(gate)


def gpath(n):
    return os.path.join(gate, n)


def fixture_inputs(case_id):
    t, m = read_st(os.path.join(FIXTURES, case_id + ".safetensors"))
    return {k: v for k, v in t.items() if k.startswith(("input.", "param."))}, json.loads(m["config"]), t


def run_cfg(scheme, cfg, ins, out=None, *extra):
    """dmref run with this config (dict, or text) and inputs; returns (rc, stdout, stderr, out path)."""
    c, i = gpath("cfg.json"), gpath("in.safetensors")
    open(c, "w").write(cfg if isinstance(cfg, str) else json.dumps(cfg))
    write_st(i, ins)
    o = out or gpath("out.safetensors")
    if os.path.exists(o):
        os.remove(o)
    rc, so, se = run("run", "--scheme", scheme, "--config", c, "--inputs", i, "--out", o, *extra)
    return rc, so, se, o


def refused_run(name, scheme, cfg, ins, *words):
    rc, _, err, o = run_cfg(scheme, cfg, ins)
    one_line_error(name, rc, err, *words)
    check(name + ": no output written", not os.path.exists(o))


def bad_run(name, cfg, ins, *words):
    refused_run(name, "ldm", cfg, ins, *words)


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
    refused_run(name, "mhc", cfg, minputs, *words)


bad_mhc("wrong n for mHC (3 for tensors of n = 4)", dict(mcfg, n=3), "in.safetensors", "param.phi_pre")
bad_mhc("wrong n for mHC (0)", dict(mcfg, n=0), "config.n")
bad_mhc("wrong n for mHC (not an integer)", dict(mcfg, n=4.5), "config.n")
bad_mhc("mHC res_layout unknown", dict(mcfg, res_layout="rows"), "config.res_layout")
bad_mhc("mHC negative Sinkhorn eps", dict(mcfg, res_eps_den=-1e-6), "config.res_eps_den")
bad_mhc("mHC phi_layout out_in for [L, nC, n] tensors", dict(mcfg, phi_layout="out_in"), "param.phi_pre")

# Model-level LDM: the MLP widths are required (0 and > 0 are both common), keys_from is checked.
lfx = os.path.join(FIXTURES, "ldm_rls.model.g2_dk4_d8_h8.L8.f32.s1.safetensors")
ltensors, lmeta = read_st(lfx)
lcfg = json.loads(lmeta["config"])
linputs = {k: v for k, v in ltensors.items() if k.startswith(("input.", "param."))}
bad_run("LDM model without mlp_q_hidden", {k: v for k, v in lcfg.items() if k != "mlp_q_hidden"}, linputs,
        "config.mlp_q_hidden")
bad_run("LDM keys_from unknown", dict(lcfg, keys_from="x_next"), linputs, "config.keys_from")

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

# ---- issue 11: a gate that cannot be fooled (docs/hardening.md, one block per class).
import resource, shutil, xml.etree.ElementTree as ET



ldm_in, ldm_cfg, ldm_t = fixture_inputs(case)

# 1. `run` writes a complete fixture that verify accepts; --case-id; derived ids.
rc, so, se, o = run_cfg("ldm", ldm_cfg, ldm_in, gpath("mine.safetensors"), "--case-id", "my.ldm_case")
check("run --case-id: exit 0", rc == 0, so + se)
rt, rm = read_st(o)
check("run fixture: case id, baselines, tolerance recorded",
      rm.get("case") == "my.ldm_case" and "f32" in json.loads(rm["baselines"]) and "factor" in json.loads(rm["tolerance"]),
      str(rm.keys()))
check("run fixture: inputs recorded with the outputs", all(k in rt for k in ldm_in))
check("run fixture: baselines equal the corpus fixture's (computed as generate does)",
      json.loads(rm["baselines"]) == json.loads(meta["baselines"]), "")
rc, so, _ = run("verify", "--fixtures", o, "--candidate", o)
check("verify accepts a run fixture (itself as candidate)", rc == 0 and "PASS my.ldm_case" in so, so)
bare = {k[len("output."):]: v for k, v in rt.items() if k.startswith("output.") and not k.endswith(".lo")}
write_st(gpath("bare.safetensors"), bare)
rc, so, _ = run("verify", "--fixtures", o, "--candidate", gpath("bare.safetensors"))
check("verify: bare candidate names (out for output.out), as dmref_fixtures.check", rc == 0, so)
rc, so, _, o2 = run_cfg("ldm", ldm_cfg, ldm_in)
check("run: case id derived from config and inputs", rc == 0 and "case user.ldm." in so, so)
rc, _, err, _ = run_cfg("ldm", ldm_cfg, ldm_in, None, "--case-id", "bad\nid")
one_line_error("run --case-id with a newline", rc, err, "--case-id")
# --dtype f64: the golden hi passes (err = |lo| <= 4 ulp_f64), a float32 rounding of it does not.
rc, so, _ = run("verify", "--fixtures", o, "--candidate", o, "--dtype", "f64")
check("verify --dtype f64: golden passes", rc == 0, so)
f32c = {k: (v[0], [struct.unpack("<f", struct.pack("<f", x))[0] for x in v[1]]) for k, v in bare.items()}
write_st(gpath("f32c.safetensors"), f32c)
rc, so, _ = run("verify", "--fixtures", o, "--candidate", gpath("f32c.safetensors"), "--dtype", "f64")
check("verify --dtype f64: a float32 candidate fails", rc == 1, so)
rc, so, _ = run("verify", "--fixtures", o, "--candidate", gpath("f32c.safetensors"), "--dtype", "f32")
check("verify --dtype f32: the same float32 candidate passes", rc == 0, so)
rc, so, _ = run("verify", "--fixtures", o, "--candidate", o, "--outputs", "out,output.M")
check("verify --outputs: judges a subset and says which were left out",
      rc == 0 and "not judged (--outputs): output.P, output.h" in so, so)
rc, _, err = run("verify", "--fixtures", o, "--candidate", o, "--outputs", "nosuch")
one_line_error("verify --outputs with an unknown name", rc, err, "--outputs", "nosuch")
# An empty name in the list is refused, never dropped; a lone "," does not take
# the next argument as the list (before: "out,,M" judged out and M; "," read
# "--no-manifest" as a tensor name). The one comma-list flag of the CLI.
for text in ("out,,output.M", "out,", ",out", "", ","):
    rc, _, err = run("verify", "--fixtures", o, "--candidate", o, "--outputs", text, "--no-manifest")
    one_line_error(f"verify --outputs {text!r}", rc, err, "--outputs", "empty name")
rc, so, _ = run("verify", "--fixtures", o, "--candidate", o, "--outputs", "out", "--outputs", "output.M")
check("verify --outputs repeated: the union", rc == 0 and "not judged (--outputs): output.P, output.h" in so, so)

# 2. `run` certifies exactly the problem it records.
hc_in, hc_cfg, _ = fixture_inputs("hc_dynamic.kernel.n4_d8.L6.f32.s1")
ar_in, ar_cfg, _ = fixture_inputs("attnres_block.kernel.d8_S3.L8.f32.s1")
mh_in, mh_cfg, _ = fixture_inputs("mhc.kernel.n4_d8.L6.paper.f32.s1")
df_in, df_cfg, _ = fixture_inputs("denseformer.kernel.d8.L6.f32.s1")
for scheme, cfg, ins, key, value in [("mhc", mh_cfg, mh_in, "t_max", 2 ** 32 + 20), ("mhc", mh_cfg, mh_in, "t_max", 2 ** 31),
                                     ("attnres", ar_cfg, ar_in, "block_size", 2 ** 32 + 3),
                                     ("ldm", ldm_cfg, ldm_in, "groups", 2 ** 32 + 2), ("ldm", ldm_cfg, ldm_in, "dk", 2 ** 32 + 4),
                                     ("denseformer", df_cfg, df_in, "dilation", 2 ** 32 + 1),
                                     ("denseformer", df_cfg, df_in, "period", 2 ** 32 + 1),
                                     ("ldm", ldm_cfg, ldm_in, "tokens", 10 ** 12), ("mhc", mh_cfg, mh_in, "t_max", 10 ** 9)]:
    refused_run(f"{scheme} {key} = {value} (never narrowed)", scheme, dict(cfg, **{key: value}), ins, "config." + key,
                str(value), "cfg.json")
refused_run("unknown key varaint", "attnres", dict(ar_cfg, varaint="full"), ar_in, "config.varaint", '"variant"')
static = {k: v for k, v in hc_cfg.items() if k != "dynamic"}
refused_run("HC dynamic tensors without dynamic", "hc", static, hc_in, "param.", "not used")
refused_run("dk 2^30: resource bound before allocation", "ldm", dict(ldm_cfg, dk=2 ** 30), ldm_in, "output.M",
            "4194304")
refused_run("hex-float string", "hc", dict(hc_cfg, ln_eps="0x1p-3"), hc_in, "config.ln_eps")
refused_run("alpha -5e-324 printed so it reads back", "ldm", dict(ldm_cfg, alpha=-5e-324), ldm_in, "config.alpha",
            "-5e-324")
refused_run("config with a duplicate key (never the last one silently)", "ldm",
            json.dumps(ldm_cfg)[:-1] + ', "alpha": 1e-50}', ldm_in, "cfg.json", "duplicate key \"alpha\"")
refused_run("config nested 10000 deep", "ldm", '{"a":' * 10000 + "1" + "}" * 10000, ldm_in, "cfg.json", "nesting")
# Valid inputs outside float's range are accepted: validation is not a float evaluation.
for name, scheme, cfg, ins in [
        ("alpha 1e-50", "ldm", dict(ldm_cfg, alpha=1e-50), ldm_in),
        ("lambda 1e-50", "ldm", ldm_cfg, dict(ldm_in, **{"param.lambda": (ldm_in["param.lambda"][0],
                                                                           [1e-50] + ldm_in["param.lambda"][1][1:])})),
        ("omega 1e40", "ldm", ldm_cfg, dict(ldm_in, **{"input.omega": (ldm_in["input.omega"][0],
                                                                        [1e40] + ldm_in["input.omega"][1][1:])})),
        ("HC ln_eps 1e-50", "hc", dict(hc_cfg, ln_eps="1e-50"), hc_in),
        ("AttnRes logits past float's exp range", "attnres", ar_cfg,
         dict(ar_in, **{"param.w": (ar_in["param.w"][0], [200.0] * len(ar_in["param.w"][1]))}))]:
    rc, so, se, o = run_cfg(scheme, cfg, ins)
    check(f"valid input {name} accepted", rc == 0, so + se)
    if rc == 0 and name == "alpha 1e-50":
        b = json.loads(read_st(o)[1]["baselines"])
        check("alpha 1e-50: no f32 baseline (0 in float), an f64 one", b["f32"] is None and b["f64"] is not None, str(b)[:200])
        nb = json.loads(read_st(o)[1]["tolerance"]).get("no_bound", {})
        check("alpha 1e-50: no f32 bounds (alpha is 0 in float, the reference refuses), f64 bounds",
              "f32" in nb and "f64" not in nb and "bound.f64.output.h" in read_st(o)[0], str(nb)[:300])
        rc, _, err = run("verify", "--fixtures", o, "--candidate", o, "--dtype", "f32")
        one_line_error("verify --dtype f32 without bounds", rc, err, "bound.f32.", "no bound for dtype f32", "refuses")

# Progress in a pipe (issue 20): a short run prints nothing on stderr; every DMREF_PROGRESS_EVERY seconds
# (default 30) a long one prints a line with its stage (tokens certified, then the tolerance model's
# samples), the count done, the rate and the time left in the stage. With a 1 ms period this LDM case
# (tens of ms) prints at least one line, each of that form, the stages in order and each stage's counts
# never decreasing; a period that is not a number of seconds > 0 is refused (exit 2, one line naming the
# variable), nothing written.
def run_env(env_extra, *args):
    p = subprocess.run([DMREF, *args], capture_output=True, text=True, env=dict(os.environ, **env_extra))
    return p.returncode, p.stdout, p.stderr


import re as _re
prog_out = gpath("prog.safetensors")
rc, so, se = run_env({}, "run", "--scheme", "ldm", "--config", cfgpath, "--inputs", ipath, "--out", prog_out)
check("run in a pipe, short: nothing on stderr", rc == 0 and se == "", se)
rc, so, se = run_env({"DMREF_PROGRESS_EVERY": "0.001"}, "run", "--scheme", "ldm", "--config", cfgpath, "--inputs", ipath,
                     "--out", prog_out)
lines = se.splitlines()
prog_re = (r"dmref run: ldm: (?:starting|(certifying|tolerance model): (\d+) of (\d+) (?:tokens|samples)"
           r"(?:, [0-9.e+]+ a second, about \d+ s left in this stage)?); \d+ s so far")
seen = [m.groups() for m in (_re.fullmatch(prog_re, l) for l in lines) if m]
keyed = [(0 if st == "certifying" else 1, int(n)) for st, n, _ in seen if st]
check("run in a pipe, DMREF_PROGRESS_EVERY=0.001: progress lines, stages in order, counts never decreasing",
      rc == 0 and lines and len(seen) == len(lines) and keyed == sorted(keyed), se[:500])
check("run in a pipe: the tolerance model's stage is reported (4 recipes x 32 samples)",
      any(st == "tolerance model" and total == "128" for st, _, total in seen), se[:500])
for bad in ("0", "-1", "x", "", "nan"):
    if os.path.exists(prog_out):
        os.remove(prog_out)
    rc, so, se = run_env({"DMREF_PROGRESS_EVERY": bad}, "run", "--scheme", "ldm", "--config", cfgpath, "--inputs", ipath,
                         "--out", prog_out)
    one_line_error(f"DMREF_PROGRESS_EVERY={bad!r}", rc, se, "DMREF_PROGRESS_EVERY")
    check(f"DMREF_PROGRESS_EVERY={bad!r}: nothing written", not os.path.exists(prog_out))

# An ill-conditioned problem (issue 19's capture study, class 3): LDM-RLS with the naive P update and
# forgetting factors near 0.5 over 39 layers winds P up by about 2^26. A correct float32 kernel's
# error there is of the size of the values (different correct orders disagree by far more than any
# sample says: the study's `natural`, `reversed`, `split16` all failed), so the generator refuses the
# 32- and 16-bit recipes with the reason (factor ||B|| >= ||y||) and keeps f64; the same problem
# with the corpus's forgetting factors is judged in every recipe.
ill_cfg = {"tokens": 1, "layers": 39, "d": 22, "groups": 2, "dk": 4, "write": "rls", "alpha": 0.5, "p_update": "naive"}
open(gpath("ill_cfg.json"), "w").write(json.dumps(ill_cfg))
rc, _, err = run("inputs", "--scheme", "ldm", "--config", gpath("ill_cfg.json"), "--out",
                 gpath("ill_in.safetensors"), "--dtype", "f32")
check("ill-conditioned RLS: inputs drawn", rc == 0, err)
ill_in, _ = read_st(gpath("ill_in.safetensors"))
for lam, refused in ((0.515625, True), (0.984375, False)):
    ins = dict(ill_in, **{"param.lambda": (ill_in["param.lambda"][0], [lam] * len(ill_in["param.lambda"][1]))})
    rc, so, se, o = run_cfg("ldm", ill_cfg, ins)
    check(f"RLS lambda {lam}, 39 layers: certified", rc == 0, so + se)
    if rc != 0:
        continue
    nb = json.loads(read_st(o)[1]["tolerance"]).get("no_bound", {})
    nj = json.loads(read_st(o)[1]["tolerance"]).get("not_judged", {})
    if refused:
        outs = ["output.M", "output.P", "output.h", "output.out"]
        check("ill-conditioned RLS: every output not judged in f32, bf16, f16 (the reason), all judged in f64",
              nb == {} and sorted(nj) == ["bf16", "f16", "f32"] and all(sorted(nj[d]) == outs for d in nj)
              and all("||B|| / ||y||" in w and "first-order" in w for d in nj for w in nj[d].values())
              and not any(f"bound.f32.{n}" in read_st(o)[0] for n in outs) and f"bound.f64.output.out" in read_st(o)[0],
              str(nj)[:400])
        rc, so, err = run("verify", "--fixtures", o, "--candidate", o, "--dtype", "f32")
        check("ill-conditioned RLS: verify --dtype f32: FAIL, nothing judged, a NOT JUDGED line per output",
              rc == 1 and "no element judged" in so and sum(l.startswith("NOT JUDGED ") for l in so.splitlines()) == 4
              and "first-order" in so, so + err)
        rc, so, err = run("verify", "--fixtures", o, "--candidate", o, "--dtype", "f64")
        check("ill-conditioned RLS: verify --dtype f64 judges (the golden passes)", rc == 0 and "PASS" in so, so + err)
    else:
        check("well-conditioned RLS (lambda 0.98): every recipe judges every output", nb == {} and nj == {},
              str(nb)[:300] + str(nj)[:300])

# 3. verify cannot be fooled by a bad or tampered corpus.
corp = os.path.join(gate, "corpus")
os.makedirs(os.path.join(corp, "golden"))
man = json.load(open(os.path.join(FIXTURES, "..", "manifest.json")))
keep = [c for c in man["cases"] if c["id"].startswith("preln.kernel.")]
for c in keep:
    shutil.copy(os.path.join(FIXTURES, c["file"]), os.path.join(corp, "golden", c["file"]))
json.dump(dict(man, cases=keep), open(os.path.join(corp, "manifest.json"), "w"))
cand = {}
for c in keep:
    t, _ = read_st(os.path.join(FIXTURES, c["file"]))
    cand.update({f"{c['id']}/{k}": v for k, v in t.items() if k.startswith("output.") and not k.endswith(".lo")})
write_st(gpath("corpus_cand.safetensors"), cand)
rc, so, _ = run("verify", "--fixtures", os.path.join(corp, "golden"), "--candidate", gpath("corpus_cand.safetensors"))
check("verify: an intact corpus passes, checked against its manifest", rc == 0 and "checked against" in so, so)
victim = os.path.join(corp, "golden", keep[0]["file"])
orig = open(victim, "rb").read()
open(victim, "wb").write(orig.replace(b'\\"factor\\":8.0', b'\\"factor\\":1e6'))
check("tamper: the tolerance factor was edited", open(victim, "rb").read() != orig)
rc, so, err = run("verify", "--fixtures", os.path.join(corp, "golden"), "--candidate", gpath("corpus_cand.safetensors"))
one_line_error("verify: an edited fixture is refused against the manifest", rc, err, victim + ": sha256:",
               "does not match the sha256")
check("verify: an edited fixture: nothing judged", so == "", so)
rc, so, _ = run("verify", "--fixtures", os.path.join(corp, "golden"), "--candidate", gpath("corpus_cand.safetensors"),
                "--no-manifest")
check("verify --no-manifest: the check is skipped only when asked", rc == 0, so)
rc, so, _ = run("generate", "--case", "preln.model.d8_h8.L6.f32.s1", "--out", gpath("regen"), "--check",
                os.path.join(corp, "manifest.json"))
check("generate --check: an edited committed fixture is a mismatch", rc == 1 and keep[0]["id"] in so, so)
rc, so, _ = run("generate", "--case", keep[0]["id"], "--out", os.path.join(corp, "golden"), "--check",
                os.path.join(corp, "manifest.json"))
check("generate --check into the committed directory: hashed before it is regenerated", rc == 1 and "does not match" in so, so)
open(victim, "wb").write(open(victim, "rb").read().replace(b'\\"factor\\":8.0', b'\\"factor\\":1e6'))
os.remove(victim)
rc, so, err = run("verify", "--fixtures", os.path.join(corp, "golden"), "--candidate", gpath("corpus_cand.safetensors"))
one_line_error("verify: a deleted fixture of the manifest is refused", rc, err, victim + ": file:", "is missing")
check("verify: a deleted fixture: nothing judged", so == "", so)
# A fixture is sane before it judges anything.
bounds = lambda m: {f"bound.{d}.output.x": ([3], [m, 1e-3, 1e-3]) for d in ("f32", "bf16", "f16", "f64")}
gold = {"output.x": ([3], [1.0, -2.0, 0.5]), "output.x.lo": ([3], [0.0, 0.0, 0.0]), **bounds(1e-3)}
base = lambda m: json.dumps({d: {"output.x": {"max_abs": m, "rel": 0.0}} for d in ("f32", "bf16", "f16", "f64")})
tolr = json.dumps({"factor": 8.0, "floor_ulps": 1.0})
write_st(gpath("nan_cand.safetensors"), {"output.x": ([3], [float("nan")] * 3)})
for name, tens, m, field in [
        ("bound 1e308 (x factor 8 = inf)", dict(gold, **bounds(1e308)), base(1e-3), "bound.f32.output.x[0]"),
        ("golden NaN", dict(gold, **{"output.x": ([3], [float("nan"), 1.0, 1.0])}), base(1e-3), "output.x"),
        ("no output tensor", {"input.e": ([1], [1.0])}, base(1e-3), "no golden tensor")]:
    write_st(gpath("insane.safetensors"), tens, {"case": "insane", "baselines": m, "tolerance": tolr})
    rc, so, err = run("verify", "--fixtures", gpath("insane.safetensors"), "--candidate", gpath("nan_cand.safetensors"))
    one_line_error(f"insane fixture: {name}", rc, err, field)
# Case ids and tensor names are data.
write_st(gpath("forge.safetensors"), gold, {"case": "x\nPASS forged: 1 elements", "baselines": base(1e-3), "tolerance": tolr})
write_st(gpath("forge_cand.safetensors"), {"output.x": ([3], [9.0, 9.0, 9.0])})
rc, so, _ = run("verify", "--fixtures", gpath("forge.safetensors"), "--candidate", gpath("forge_cand.safetensors"))
check("a case id with a newline cannot forge a report line",
      rc == 1 and not any(l.startswith("PASS") for l in so.splitlines()), so)
rc, so, _ = run("verify", "--fixtures", gpath("forge.safetensors"), "--candidate", gpath("forge_cand.safetensors"),
                "--format", "junit")
try:
    tree = ET.fromstring(so)
    check("JUnit XML with a newline in the case id parses, one failing testcase",
          len(tree.findall("testcase")) == 1 and tree.find("testcase/failure") is not None, so)
except ET.ParseError as e:
    check("JUnit XML with a newline in the case id parses", False, str(e) + so)

# 4. Safe files and processes.
for args, word in [(("generate", "--jobs", "40000", "--case", "none"), "--jobs"),
                   (("verify", "--fixtures", fx, "--candidate", fx, "--errors", "-1"), "--errors")]:
    rc, _, err = run(*args)
    check(f"{args[0]} {word} out of range: exit 2", rc == 2 and word in err, err)
write_st(gpath("same.safetensors"), ldm_in)
before = open(gpath("same.safetensors"), "rb").read()
json.dump(ldm_cfg, open(gpath("same.json"), "w"))
for target in (gpath("same.safetensors"), gpath("same.json")):
    rc, _, err = run("run", "--scheme", "ldm", "--config", gpath("same.json"), "--inputs", gpath("same.safetensors"),
                     "--out", target)
    one_line_error(f"run --out equal to an input ({os.path.basename(target)})", rc, err, "--out")
check("run --out equal to --inputs: the input is untouched", open(gpath("same.safetensors"), "rb").read() == before)
rc, _, err = run("verify", "--fixtures", fx, "--candidate", "/dev/zero")
one_line_error("candidate /dev/zero (not a regular file)", rc, err, "/dev/zero", "not a regular file")
sparse = gpath("sparse.safetensors")
with open(sparse, "wb") as fh:
    fh.write(struct.pack("<Q", 0))
    fh.truncate(512 << 20)
rc, _, err = run("verify", "--fixtures", fx, "--candidate", sparse)
one_line_error("512 MiB sparse candidate with an empty header", rc, err, "header")
# The peak memory of that one verify, measured in a fresh process (RUSAGE_CHILDREN of this script is the
# maximum over every earlier child). Reading the file would take at least its 512 MiB; half of it bounds the
# reader's own needs with room for a sanitizer's shadow memory (134 MiB under ASan+UBSan, ~10 MiB without).
probe = subprocess.run([sys.executable, "-c", "import resource, subprocess, sys; "
                        "subprocess.run(sys.argv[1:], capture_output=True); "
                        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
                        DMREF, "verify", "--fixtures", fx, "--candidate", sparse], capture_output=True, text=True)
rss = int(probe.stdout.strip() or 0)
check("512 MiB sparse candidate: read without reading the file (peak RSS < 256 MiB)", 0 < rss < 256 * 1024, f"{rss} KiB")
os.remove(sparse)
nested = gpath("nested.safetensors")
open(nested, "wb").write(raw_st_text := (lambda h: struct.pack("<Q", len(h)) + h)(
    (b'{"a":' * 100000 + b"1" + b"}" * 100000 + b" " * (-(200001 + 5 * 100000) % 8))))
rc, _, err = run("verify", "--fixtures", fx, "--candidate", nested)
one_line_error("header nested 100000 deep", rc, err, "header", "nesting")
man_victim = gpath("victim.txt")
open(man_victim, "w").write("keep")
os.symlink(man_victim, gpath("m.json.tmp"))
rc, _, _ = run("generate", "--case", "preln.kernel.d8.L6.f32.s1", "--out", gpath("gen2"), "--write-manifest",
               gpath("m.json"))
check("generate --write-manifest: never through a planted .tmp symlink",
      rc == 0 and open(man_victim).read() == "keep" and os.path.exists(gpath("m.json")), rc)
rc, _, err, _ = run_cfg("ldm", ldm_cfg, ldm_in, os.path.join(gate, "no", "such", "dir", "o.safetensors"))
check("run: a write that fails is exit 4 (I/O), one line", rc == 4 and err.count("\n") == 1, f"rc={rc} {err!r}")

open(gpath("a_file"), "w").write("x")
rc, _, err = run("generate", "--case", "preln.kernel.d8.L6.f32.s1", "--out", gpath("a_file/sub"))
check("generate into a directory that cannot be created: exit 4, one line", rc == 4 and err.count("\n") == 1,
      f"rc={rc} {err!r}")

# stability: the plotting step runs with an argument vector, never a shell.
pwned = gpath("PWNED")
rc, _, err = run("stability", "--quick", "--only", "preln", "--out", gpath("st'; touch " + pwned + "; '"))
check("stability --out with shell syntax runs no command", rc in (0, 4) and not os.path.exists(pwned), f"rc={rc} {err}")

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
# A backward problem's tokens are certified in parallel (their parameter-gradient terms summed as
# balls): three tokens (the case's 0, 1, 0) give the same bytes with --jobs 1, 2 (windows of 2 tokens
# and 1), 3; its tokens' rows are the case's, and grad.param.* is not the case's (a third term).
g3 = {}
for k, (shape, vals) in gtensors.items():
    if k.startswith("input.") and shape[0] == 2:
        row = len(vals) // 2
        g3[k] = ([3] + shape[1:], vals + vals[:row])
    elif k.startswith(("input.", "param.")):
        g3[k] = (shape, vals)
gin3, gcfg3 = os.path.join(tmp, "grad3-in.safetensors"), os.path.join(tmp, "grad3-cfg.json")
write_st(gin3, g3)
json.dump(dict(json.loads(gmeta["config"]), tokens=3), open(gcfg3, "w"))
by_jobs = {}
for jobs in ("1", "2", "3"):
    o = os.path.join(tmp, f"grad3-jobs{jobs}.safetensors")
    rc, out, err = run("run", "--grad", "--scheme", "mhc", "--config", gcfg3, "--inputs", gin3, "--out", o, "--jobs", jobs)
    by_jobs[jobs] = open(o, "rb").read() if rc == 0 else None
check("run --grad --jobs 1, 2, 3 write the same bytes (3 tokens)",
      by_jobs["1"] is not None and by_jobs["1"] == by_jobs["2"] == by_jobs["3"], "")
if by_jobs["1"] is not None:
    got, _ = read_st(os.path.join(tmp, "grad3-jobs1.safetensors"))
    rows = [k for k in gtensors if k.startswith(("output.", "grad.input.")) and gtensors[k][0][0] == 2]
    check("run --grad, 3 tokens: every token's rows are the case's",
          rows and all(got[k][1] == gtensors[k][1] + gtensors[k][1][:len(gtensors[k][1]) // 2] for k in rows), "")
    check("run --grad, 3 tokens: the parameter gradients are sums over the 3 (not the case's 2)",
          all(got[k][1] != gtensors[k][1] for k in gtensors if k.startswith("grad.param.") and not k.endswith(".lo")), "")
os.remove(gout)
rc, _, err = run("run", "--scheme", "mhc", "--config", gcfg, "--inputs", gin, "--out", gout)
one_line_error("upstream gradients without --grad", rc, err, "input.grad.", "--grad")
check("upstream gradients without --grad: nothing written", not os.path.exists(gout))
write_st(gin, {k: v for k, v in gtensors.items() if k.startswith(("input.", "param.")) and k != "input.grad.out"})
rc, _, err = run("run", "--grad", "--scheme", "mhc", "--config", gcfg, "--inputs", gin, "--out", gout)
one_line_error("--grad without an upstream gradient", rc, err, "input.grad.out", "missing")

# An output that is not a regular file is refused before any work (exit 2):
# the rename would replace a device node (before: `--out /dev/null` replaced
# /dev/null with the fixture, as root) or a FIFO, or fail on a directory
# after the work (exit 4).
json.dump(config, open(cfgpath, "w"))
write_st(ipath, inputs)
fifo_out = os.path.join(tmp, "out-fifo")
os.mkfifo(fifo_out)
dir_out = os.path.join(tmp, "out-dir")
os.mkdir(dir_out)
for what, target in (("a FIFO", fifo_out), ("a directory", dir_out)):
    rc, _, err = run("run", "--scheme", "ldm", "--config", cfgpath, "--inputs", ipath, "--out", target)
    one_line_error(f"run --out {what}", rc, err, target, "--out", "not a regular file")
    rc, _, err = run("generate", "--case", "preln.kernel.d8.L6.f32.s1", "--out", os.path.join(tmp, "gen-nr"),
                     "--write-manifest", target)
    one_line_error(f"generate --write-manifest {what}", rc, err, "--write-manifest", "not a regular file")
    check(f"generate --write-manifest {what}: nothing generated", not os.path.exists(os.path.join(tmp, "gen-nr")))
check("run --out a FIFO: still a FIFO", __import__("stat").S_ISFIFO(os.lstat(fifo_out).st_mode))
rc, _, err = run("run", "--scheme", "ldm", "--config", cfgpath, "--inputs", ipath, "--out", "")
one_line_error("run --out ''", rc, err, "--out", "empty")

# SIGINT / SIGTERM while the output is being written: the temporary file
# <out>.tmp.XXXXXX is removed (io::install_cleanup_handlers) and no output
# appears; the process ends with the signal's status. The run is stopped
# (SIGSTOP) as soon as its temporary file is listed; if the file is still there
# once stopped, the signal is pending mid-write and is delivered on SIGCONT.
# A run that renamed first (about 1 in 5 here: the window is the write and
# fsync) is tried again, up to 20 times. Without the handlers the temporary
# file stays behind (as it does after SIGKILL, which no handler sees).
import signal
import time


def stopped(pid):
    """True once every thread of pid is in the stopped state; False if it ended first."""
    while True:
        try:
            states = []
            for t in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{t}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
        except (FileNotFoundError, ProcessLookupError):
            return False
        if any(s in "ZX" for s in states):
            return False
        if states and all(s in "tT" for s in states):
            return True
        time.sleep(0.0005)


def signal_mid_write(sig):
    d = tempfile.mkdtemp(dir=tmp)
    out = os.path.join(d, "out.safetensors")
    for _ in range(20):
        p = subprocess.Popen([DMREF, "run", "--scheme", "ldm", "--config", cfgpath, "--inputs", ipath, "--out", out],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        caught = False
        while p.poll() is None:
            if any(".tmp." in n for n in os.listdir(d)):
                os.kill(p.pid, signal.SIGSTOP)
                # kill() returns before the process has stopped: it may still
                # rename (the sanitizer build's CI run did, once). Only once
                # /proc says stopped (T) is the listing the state the signal meets.
                if not stopped(p.pid):
                    break
                caught = any(".tmp." in n for n in os.listdir(d))
                if caught:
                    os.kill(p.pid, sig)
                os.kill(p.pid, signal.SIGCONT)
                break
        rc = p.wait()
        if caught:
            return rc, os.listdir(d)
        for n in os.listdir(d):
            os.remove(os.path.join(d, n))
    return None, None


for sig in (signal.SIGINT, signal.SIGTERM):
    rc, left = signal_mid_write(sig)
    check(f"run: {sig.name} mid-write caught within 20 runs", rc is not None)
    if rc is not None:
        check(f"run: {sig.name} mid-write: ends by the signal", rc == -sig, f"rc={rc}")
        check(f"run: {sig.name} mid-write: no temporary file, no output", left == [], repr(left))

# --factor is a decimal number, all of it (before: "" and "0x10" were read, as 0 and 16).
for f in ("", "0x10", "2x", "nan", "-1"):
    rc, _, err = run("verify", "--fixtures", fx, "--candidate", fx, "--factor", f)
    check(f"verify --factor {f!r}: exit 2, one line", rc == 2 and "--factor" in err, f"rc={rc} {err!r}")

# ---- Issue 24. A knob that has no effect for the chosen variant is an error
# naming the key and why (before: accepted, ignored, and recorded in the
# fixture); test_fixtures "every key and tensor of a scheme is read or
# declared unread by every variant" checks the declarations are complete.
pre_in, pre_cfg, _ = fixture_inputs("preln.kernel.d8.L6.f32.s1")
lo_in, lo_cfg, _ = fixture_inputs("ldm_outer.kernel.g2_dk4_d8.L8.f32.s1")
ld_in, ld_cfg, _ = fixture_inputs("ldm_delta.kernel.g2_dk4_d8.L8.f32.s1")
hs_in, hs_cfg, _ = fixture_inputs("hc_static.kernel.n4_d8.L6.f32.s1")
af_in, af_cfg, _ = fixture_inputs("attnres_full.kernel.d8.L8.f32.s1")
for name, scheme, cfg, ins, words in [
        ("hc static with tanh", "hc", dict(hs_cfg, tanh=False), hs_in, ("config.tanh", "no effect", "dynamic")),
        ("hc static with ln_eps", "hc", dict(hs_cfg, ln_eps="1e-6"), hs_in, ("config.ln_eps", "no effect")),
        ("LDM outer product with p_update", "ldm", dict(lo_cfg, p_update="joseph"), lo_in,
         ("config.p_update", "no effect", "rls")),
        ("LDM delta with p_update", "ldm", dict(ld_cfg, p_update="naive"), ld_in, ("config.p_update", "no effect")),
        ("LDM delta with alpha", "ldm", dict(ld_cfg, alpha=1.0), ld_in, ("config.alpha", "no effect")),
        ("LDM kernel with keys_from", "ldm", dict(lo_cfg, keys_from="x_prev"), lo_in, ("config.keys_from", "level model")),
        ("AttnRes full with block_size", "attnres", dict(af_cfg, block_size=3), af_in,
         ("config.block_size", "no effect", "block variant")),
        ("PreLN kernel with hidden", "preln", dict(pre_cfg, hidden=8), pre_in, ("config.hidden", "level model")),
        ("HC RMSNorm with ln_bias", "hc", dict(hc_cfg, norm="rmsnorm"), hc_in, ("param.ln_bias", "RMSNorm has no bias")),
        ("LDM outer product with param.lambda", "ldm", lo_cfg,
         dict(lo_in, **{"param.lambda": ([8, 2], [0.9] * 16)}), ("param.lambda", "rls write"))]:
    refused_run(f"knob with no effect: {name}", scheme, cfg, ins, *words)
# Unknown keys are reported first, and a tensor of an option that is off says which key.
refused_run("varaint with block_size names varaint (issue 23)", "attnres",
            {k: v for k, v in dict(ar_cfg, varaint="block").items() if k != "variant"}, ar_in, "config.varaint",
            '"variant"')
refused_run("HC dynamic tensors without dynamic name the key (issue 23)", "hc", static, hc_in, "param.",
            "config.dynamic is missing")
refused_run("HC dynamic tensors with dynamic false", "hc", dict(hc_cfg, dynamic=False), hc_in, "param.",
            "config.dynamic is false")
# Values refused by a scheme name the file and the field, printed so they read back (before:
# `dmref: attnres: eps: must be finite and > 0, got -1.000000`).
refused_run("AttnRes eps -1 names the config field", "attnres", dict(af_cfg, eps=-1), af_in,
            "cfg.json: config.eps: must be finite and > 0, got -1\n")
refused_run("HC ln_eps -1e-300 names the config field", "hc", dict(hc_cfg, ln_eps="-1e-300"), hc_in,
            "cfg.json: config.ln_eps: must be finite and > 0, got -1e-300\n")
dfa = dict(df_in)
shape_a, vals_a = df_in["param.a"]
vals_a = list(vals_a)
vals_a[1 * shape_a[1] + 3] = 0.5
dfa["param.a"] = (shape_a, vals_a)
refused_run("DenseFormer a[1,3] names the tensor entry", "denseformer", df_cfg, dfa,
            "in.safetensors: param.a[1,3]: 0.5 must be 0: the matrix is lower triangular")
shp = dict(ldm_in)
shp["input.e"] = ([1, 16], ldm_in["input.e"][1])
refused_run("shapes print without a trailing comma (issue 23)", "ldm", ldm_cfg, shp, "shape [1,16] expected [2,8]\n")
# A golden file's bytes do not depend on the paths given on the command line (its `command` metadata).
sub = os.path.join(gate, "sub")
os.makedirs(sub, exist_ok=True)
shutil.copy(gpath("cfg.json"), os.path.join(sub, "c.json"))
write_st(os.path.join(sub, "i.safetensors"), ldm_in)
json.dump(ldm_cfg, open(os.path.join(sub, "c.json"), "w"))
outs = []
for cwd, c, i in [(sub, "c.json", "i.safetensors"), (gate, "sub/c.json", "sub/./i.safetensors"),
                  ("/", os.path.join(sub, "c.json"), os.path.join(sub, "i.safetensors"))]:
    o = os.path.join(sub, f"o{len(outs)}.safetensors")
    p = subprocess.run([os.path.abspath(DMREF) if os.sep in DMREF else DMREF, "run", "--scheme", "ldm", "--config", c,
                        "--inputs", i, "--out", o], cwd=cwd,
                       capture_output=True, text=True)
    outs.append(open(o, "rb").read() if p.returncode == 0 else p.stderr)
check("run: the same bytes whatever the relative paths given", outs[0] == outs[1] == outs[2] and
      isinstance(outs[0], bytes), repr([x[:80] if isinstance(x, str) else len(x) for x in outs]))
check("run: the command metadata names the files, not their directories",
      "--config c.json --inputs i.safetensors" in read_st(os.path.join(sub, "o2.safetensors"))[1]["command"])

_c.done()
