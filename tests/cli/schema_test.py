#!/usr/bin/python3
"""`dmref schema` and `dmref inputs` (issue 21): the declared schema printed,
and inputs drawn through it exactly as the corpus draws them. Standard library
only. Usage: schema_test.py DMREF FIXTURES_DIR"""
import json, os, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st import Checks, read_st  # noqa: E402

DMREF, FIXTURES = sys.argv[1], sys.argv[2]
_c = Checks(DMREF)
check, run, one_line_error = _c.check, _c.run, _c.one_line_error


tmp = tempfile.mkdtemp()
rc, out, _ = run("schema", "list")
schemes = [line.split()[0] for line in out.splitlines()]
check("schema list: the six schemes", rc == 0 and {"preln", "ldm", "attnres", "hc", "mhc", "denseformer"} <= set(schemes), out)

# Inputs drawn through the schema are the corpus's: for one committed case of
# every scheme (forward and backward), `dmref inputs` with the case's config,
# seed, dtype and input options gives its input, param and upstream tensors
# bit for bit (the fixture records them, and its config and options).
by_scheme = {}
for f in sorted(os.listdir(FIXTURES)):
    if not f.endswith(".safetensors"):
        continue
    t, meta = read_st(os.path.join(FIXTURES, f))
    key = (meta["scheme"], ".kernel_grad." in f or ".model_grad." in f)
    if key not in by_scheme and (f.endswith(".f32.s1.safetensors") or f.endswith(".bf16.s1.safetensors")):
        by_scheme[key] = (f, t, meta)
for (scheme, grad), (f, t, meta) in sorted(by_scheme.items()):
    cfg = os.path.join(tmp, "cfg.json")
    with open(cfg, "w") as fh:
        fh.write(meta["config"] if isinstance(meta["config"], str) else json.dumps(meta["config"]))
    dtype = f.split(".")[-3]
    opts = meta.get("input_options", {})
    opts = json.loads(opts) if isinstance(opts, str) else opts
    draw = [a for k, v in sorted(opts.items()) for a in ("--draw", f"{k}={v!r}")]
    out = os.path.join(tmp, "in.safetensors")
    rc, _, err = run("inputs", "--scheme", scheme, "--config", cfg, "--dtype", dtype, "--seed", "1", "--out", out,
                     *(["--grad"] if grad else []), *draw)
    check(f"inputs {f}: exit 0", rc == 0, err)
    if rc != 0:
        continue
    drawn, _ = read_st(out)
    given = {k: v for k, v in t.items() if k.startswith("input.") or k.startswith("param.")}
    check(f"inputs {f}: the fixture's tensors, bit for bit", drawn == given,
          f"{sorted(set(drawn) ^ set(given))} / {[k for k in given if drawn.get(k) != given[k]][:3]}")

# Every tensor of a config's schema with its shape; json and text agree on names.
cfg = os.path.join(tmp, "ldm.json")
with open(cfg, "w") as fh:
    json.dump({"tokens": 2, "layers": 4, "d": 8, "groups": 2, "dk": 4, "write": "rls", "alpha": 1}, fh)
rc, out, err = run("schema", "ldm", "--config", cfg, "--format", "json", "--grad")
doc = json.loads(out) if rc == 0 else {}
shapes = {t["name"]: t["shape"] for t in doc.get("tensors", [])}
check("schema ldm --config: shapes from the config", shapes.get("input.q") == [2, 4, 8] and shapes.get("output.P") == [2, 2, 4, 4]
      and shapes.get("input.grad.P") == [2, 2, 4, 4], out + err)
check("schema ldm --config: the keys' values and defaults",
      {k["key"]: k["value"] for k in doc.get("keys", [])}.get("p_update") == "symmetric", out)
rc, text, _ = run("schema", "ldm", "--config", cfg)
check("schema --config text names every tensor", rc == 0 and all(n in text for n in shapes if "grad" not in n), text)
rc, md, _ = run("schema", "mhc", "--format", "markdown")
check("schema mhc markdown: a tensor table with the layouts", rc == 0 and "`param.phi_res`" in md and "phi_layout" in md, md[:300])

# Bad input: one line naming the field, exit 2, nothing written.
rc, _, err = run("schema", "nosuch")
one_line_error("schema of an unknown scheme", rc, err, "scheme", "nosuch", "mhc")
bad = os.path.join(tmp, "bad.json")
with open(bad, "w") as fh:
    json.dump({"tokens": 2, "layers": 4, "d": 8, "groups": 2, "dk": 4, "write": "rlss"}, fh)
rc, _, err = run("schema", "ldm", "--config", bad)
one_line_error("schema: bad choice", rc, err, "config.write", "rlss")
out = os.path.join(tmp, "never.safetensors")
rc, _, err = run("inputs", "--scheme", "ldm", "--config", bad, "--out", out)
one_line_error("inputs: bad config", rc, err, "config.write")
check("inputs: bad config writes nothing", not os.path.exists(out))
rc, _, err = run("inputs", "--scheme", "ldm", "--config", cfg, "--out", out, "--draw", "res_scale=2")
one_line_error("inputs: a draw option this config's draws do not read", rc, err, "res_scale", "lambda_min")
check("inputs: bad --draw writes nothing", not os.path.exists(out))
rc, _, err = run("inputs", "--scheme", "ldm", "--config", cfg, "--out", out, "--draw", "lambda_min=x")
one_line_error("inputs: a draw option that is not a number", rc, err, "lambda_min")
with open(bad, "w") as fh:
    json.dump({"tokens": 2, "layers": 4, "d": 8, "groups": 3, "dk": 4, "write": "rls", "alpha": 1}, fh)
rc, _, err = run("inputs", "--scheme", "ldm", "--config", bad, "--out", out)
one_line_error("inputs: groups does not divide d (the scheme's rule, named as the config field)", rc, err, "config.groups")

_c.done("schema_test: ")
