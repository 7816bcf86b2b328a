#!/usr/bin/python3
"""`mpirun -n 2 dmref run` writes the same bytes as one process (tokens sharded
over ranks, rank 0 writes), and a bad config fails with exit 2, one message and
no file. Standard library only. Usage: mpi_test.py DMREF MPIEXEC MAKE_INPUTS"""
import os, subprocess, sys, tempfile

DMREF, MPIEXEC, MAKE_INPUTS = sys.argv[1:4]
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
