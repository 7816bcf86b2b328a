#!/usr/bin/python3
"""bench/e2e.py: `dmref run` end to end at model sizes, side by side
(docs/performance.md). For each case it writes the inputs (bench/make_inputs.py),
then runs every variant once per repetition, interleaved (variant order
rotated each repetition), and reports wall-time min and median and peak
memory (ru_maxrss of the process; for MPI, of mpirun's largest rank is not
visible, so the figure is mpirun's own), with the load average before and
after. Outputs of every variant are compared: the new binary's files must be
byte-identical whatever --jobs or ranks, and an --old binary's output tensors
equal (its metadata differs in the precision fields; newer files also carry the inputs). The speedup columns are
against the old binary, or without --old against the new one's --jobs 1.
Standard library only.

  bench/e2e.py --new build/tools/dmref [--old OLD_DMREF [--old-jobs N] [--no-jobs1]] [--reps 5] \
               [--layers 24] [--tokens 2] [--case ldm,mhc,attnres,ldm_model] [--mpi] [--work DIR]

1 -> 2 ranks (docs/performance.md): bench/e2e.py --new build/tools/dmref --mpi --case ... shows
`--jobs 1`, `--jobs 2` and `mpirun -n 2 ... --jobs 1`, interleaved, against `--jobs 1`.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OLD = "old binary"


def cases(a):
    L, T = str(a.layers), str(a.tokens)
    return {
        "ldm": ["ldm", "--groups", "16", "--dk", "64", "--d", "1024", "--layers", L, "--tokens", T],
        "mhc": ["mhc", "--n", "4", "--d", "1024", "--layers", L, "--tokens", T],
        "attnres": ["attnres", "--d", "1024", "--block-size", "8", "--layers", L, "--tokens", T],
        "ldm_model": ["ldm", "--level", "model", "--groups", "16", "--dk", "16", "--d", "256", "--hidden", "64",
                      "--layers", L, "--tokens", T],
    }


def run_rss(cmd):
    """Wall seconds, exit status, output, peak RSS in KiB and CPU seconds (user + system) of the child (wait4)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    return dt, p.returncode, out.decode(errors="replace"), ru.ru_maxrss, ru.ru_utime + ru.ru_stime


def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}


def outputs_equal(old, new):
    """The output tensors (output.*) of both files, byte for byte: the same names, shapes and bytes. (Since issue
    11 `run` also writes the inputs and parameters into its file, as a complete fixture; older binaries did not.)"""
    a = {k: v for k, v in tensors(old).items() if k.startswith("output.")}
    b = {k: v for k, v in tensors(new).items() if k.startswith("output.")}
    return bool(a) and a == b


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--new", required=True)
    ap.add_argument("--old", help="the binary to compare with (run as is, or with --old-jobs N)")
    ap.add_argument("--old-jobs", type=int, help="pass --jobs N to the old binary (if it has the option)")
    ap.add_argument("--no-jobs1", action="store_true", help="leave out the new binary's --jobs 1 variant")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--tokens", type=int, default=2)
    ap.add_argument("--case", default="ldm,mhc,attnres")
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--mpi", action="store_true", help="also mpirun -n 2 (1 thread each)")
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="dmref_e2e_")
    print("Command: `bench/e2e.py " + " ".join(sys.argv[1:]) + "`  ")
    print(f"Load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores\n")
    base_label = "old" if a.old else "new --jobs 1"
    print(f"| case | variant | wall min | wall median | CPU median | reps | max RSS | wall min vs {base_label} "
          f"| wall median vs {base_label} |")
    print("|---|---|---|---|---|---|---|---|---|")
    mpirun = ["mpirun", "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    ok = True
    for name in a.case.split(","):
        spec = cases(a)[name]
        d = os.path.join(work, f"{name}_L{a.layers}_T{a.tokens}")
        if not os.path.exists(os.path.join(d, "inputs.safetensors")):
            subprocess.run([sys.executable, os.path.join(HERE, "make_inputs.py"), *spec, "--out", d], check=True,
                           stdout=subprocess.DEVNULL)
        scheme = spec[0]
        base = ["run", "--scheme", scheme, "--config", os.path.join(d, "config.json"), "--inputs",
                os.path.join(d, "inputs.safetensors"), "--out"]
        variants = []
        if a.old:
            variants.append((OLD, lambda o: [a.old, *base, o] + ([] if a.old_jobs is None else ["--jobs", str(a.old_jobs)])))
        if not (a.no_jobs1 and a.old):
            variants.append(("new --jobs 1", lambda o: [a.new, *base, o, "--jobs", "1"]))
        if a.jobs > 1:
            variants.append((f"new --jobs {a.jobs}", lambda o: [a.new, *base, o, "--jobs", str(a.jobs)]))
        if a.mpi:
            variants.append(("new mpirun -n 2", lambda o: [*mpirun, "-n", "2", a.new, *base, o, "--jobs", "1"]))
        res = {v[0]: [] for v in variants}
        cpus = {v[0]: [] for v in variants}
        rss = {v[0]: 0 for v in variants}
        outs = {}
        for r in range(a.reps):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for label, mk in order:
                o = os.path.join(d, f"out-{len(outs)}.safetensors")
                dt, rc, text, kib, cpu = run_rss(mk(o))
                if rc != 0:
                    raise SystemExit(f"bench/e2e.py: {label} failed ({rc}): {text}")
                res[label].append(dt)
                cpus[label].append(cpu)
                rss[label] = max(rss[label], kib)
                if label not in outs:
                    outs[label] = o
        files = {label: open(o, "rb").read() for label, o in outs.items()}
        new_labels = [l for l in files if not l.startswith("old")]
        same_new = all(files[l] == files[new_labels[0]] for l in new_labels)
        same_old = True
        if a.old:
            same_old = outputs_equal(outs[OLD], outs[new_labels[0]])
        ok = ok and same_new and same_old
        ref = res[OLD if a.old else "new --jobs 1"]
        for label, ts in res.items():
            med = statistics.median(ts)
            print(f"| {name} L={a.layers} T={a.tokens} | {label} | {min(ts):.2f} s | {med:.2f} s | "
                  f"{statistics.median(cpus[label]):.2f} s | {len(ts)} | "
                  f"{rss[label] / 1024:.0f} MiB | {min(ref) / min(ts):.2f}x | {statistics.median(ref) / med:.2f}x |")
        print(f"| | new outputs byte-identical across variants: {'yes' if same_new else 'NO'}"
              + (f"; output tensors equal to old: {'yes' if same_old else 'NO'}" if a.old else "") + " | | | | | | | |")
        sys.stdout.flush()
    print(f"\nLoad average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
