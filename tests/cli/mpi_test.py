#!/usr/bin/python3
"""`mpirun -n 2 dmref run` writes the same bytes as one process (tokens sharded
over ranks, rank 0 writes), also with --grad (a backward problem runs whole on
rank 0: its parameter gradients sum over tokens), and a bad config fails with
exit 2, one message and no file. Standard library only.
Usage: mpi_test.py DMREF MPIEXEC MAKE_INPUTS FIXTURES_DIR"""
import json, os, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st import read_st, write_st  # noqa: E402

DMREF, MPIEXEC, MAKE_INPUTS, FIXTURES = sys.argv[1:5]
# As root OpenMPI needs --allow-run-as-root; --oversubscribe: 2 ranks even on a 1-core machine.
MPI = [MPIEXEC, "-n", "2", "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
tmp = tempfile.mkdtemp()
failed = 0


def check(name, ok, detail=""):
    global failed
    if not ok:
        failed += 1
        print(f"FAIL: {name} {detail}")


for scheme, extra, tokens in (("ldm", ["--groups", "2", "--dk", "4"], 3), ("mhc", ["--n", "2"], 4)):
    d = os.path.join(tmp, f"{scheme}{tokens}")
    subprocess.run(["/usr/bin/python3", MAKE_INPUTS, scheme, "--d", "8", "--layers", "4", "--tokens", str(tokens),
                    *extra, "--out", d], check=True, stdout=subprocess.DEVNULL)
    args = ["run", "--scheme", scheme, "--config", os.path.join(d, "config.json"), "--inputs",
            os.path.join(d, "inputs.safetensors"), "--jobs", "1", "--out"]
    one, two = os.path.join(d, "one.safetensors"), os.path.join(d, "two.safetensors")
    r1 = subprocess.run([DMREF, *args, one], capture_output=True, text=True)
    r2 = subprocess.run([*MPI, DMREF, *args, two], capture_output=True, text=True)
    check(f"{scheme}, {tokens} tokens: one process succeeds", r1.returncode == 0, r1.stderr)
    check(f"{scheme}, {tokens} tokens: 2 ranks succeed", r2.returncode == 0 and "on 2 MPI ranks" in r2.stdout,
          r2.stdout + r2.stderr)
    if r1.returncode == 0 and r2.returncode == 0:
        check(f"{scheme}, {tokens} tokens: same bytes", open(one, "rb").read() == open(two, "rb").read())

# --grad: the inputs and upstream gradients of two committed backward cases
# (2 tokens each); one process and 2 ranks write the same bytes, and the
# golden gradients are the fixture's.
for case, scheme in (("ldm_rls.kernel_grad.g2_dk4_d8.L6.f32.s1", "ldm"),
                     ("hc_dynamic_rmsnorm.kernel_grad.n4_d8.L6.f32.s1", "hc")):
    tensors, meta = read_st(os.path.join(FIXTURES, case + ".safetensors"))
    ins, cfg = os.path.join(tmp, case + ".in.safetensors"), os.path.join(tmp, case + ".json")
    write_st(ins, {k: v for k, v in tensors.items() if k.startswith(("input.", "param."))})
    json.dump(json.loads(meta["config"]), open(cfg, "w"))
    args = ["run", "--grad", "--scheme", scheme, "--config", cfg, "--inputs", ins, "--jobs", "1", "--out"]
    one, two = os.path.join(tmp, case + ".one.safetensors"), os.path.join(tmp, case + ".two.safetensors")
    r1 = subprocess.run([DMREF, *args, one], capture_output=True, text=True)
    r2 = subprocess.run([*MPI, DMREF, *args, two], capture_output=True, text=True)
    check(f"{case} --grad: one process succeeds", r1.returncode == 0, r1.stderr)
    check(f"{case} --grad: 2 ranks succeed", r2.returncode == 0, r2.stdout + r2.stderr)
    if r1.returncode == 0 and r2.returncode == 0:
        check(f"{case} --grad: same bytes", open(one, "rb").read() == open(two, "rb").read())
        got, _ = read_st(two)
        grads = [k for k in got if k.startswith("grad.")]
        check(f"{case} --grad: the fixture's golden gradients", grads and all(got[k] == tensors[k] for k in grads))

bad = os.path.join(tmp, "bad.json")
open(bad, "w").write('{"tokens": 2}')
out = os.path.join(tmp, "bad.safetensors")
r = subprocess.run([*MPI, DMREF, "run", "--scheme", "ldm", "--config", bad, "--inputs",
                    os.path.join(tmp, "ldm3", "inputs.safetensors"), "--out", out], capture_output=True, text=True)
check("bad config on 2 ranks: exit 2", r.returncode == 2, f"rc={r.returncode}")
check("bad config on 2 ranks: printed once", r.stderr.count("dmref: ") == 1 and "config.layers" in r.stderr, r.stderr)
check("bad config on 2 ranks: no file", not os.path.exists(out))
print("mpi_test:", "FAILED" if failed else "all passed")
sys.exit(1 if failed else 0)
