#!/usr/bin/python3
"""bench/build_cost.py: CPU seconds of building dmref targets (issue 21's compile
targets, docs/performance.md "Compile time"). CPU = user + sys of every compiler
and linker process (getrusage of the children), which a loaded machine does not
inflate the way it inflates wall time; wall and the load average are printed too.
ccache is disabled (CCACHE_DISABLE=1), so every figure is a real compile.

  bench/build_cost.py fresh SRC BUILD TARGET...     configure SRC into an empty BUILD, build TARGETs (-j2)
  bench/build_cost.py fresh-reps SRC REPS           REPS times in a new empty directory: configure, build dmref_cli
                                                     (what scripts/fixtures builds), then everything else (what
                                                     scripts/test builds on top); min and median of each and the sum
  bench/build_cost.py touch BUILD REPS TARGET FILE...  REPS rounds, interleaved: touch each FILE in turn, rebuild TARGET
                                                     (BUILD already built); min and median per FILE
  bench/build_cost.py ab BUILD1,BUILD2 REPS TARGET FILE   REPS rounds, interleaved: touch FILE, rebuild TARGET in
                                                     each BUILD in turn (two configurations of one tree, e.g.
                                                     -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON); min and median per BUILD
"""
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def build(cmd, env):
    c0, w0 = children_cpu(), time.monotonic()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return children_cpu() - c0, time.monotonic() - w0


def configure(src, bdir, env):
    """CPU and wall of configuring SRC into BUILD, Release, no compiler launcher."""
    return build(["cmake", "-S", src, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_CXX_COMPILER_LAUNCHER="], env)


def rounds(reps, target, env, arms):
    """REPS rounds, interleaved: in each, every arm (label, build dir, file) in turn touches
    its file and rebuilds TARGET in its build dir; min and median CPU per arm."""
    cpus = {label: [] for label, _, _ in arms}
    for r in range(reps):
        for label, bdir, path in arms:
            os.utime(path)
            cpu, wall = build(["cmake", "--build", bdir, "-j2", "--target", target], env)
            cpus[label].append(cpu)
            print(f"  round {r + 1}: {bdir}: rebuild {target} after touching {path}: CPU {cpu:.1f} s, wall {wall:.1f} s, "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
    for label, c in cpus.items():
        c.sort()
        print(f"{label}: CPU min {c[0]:.1f} s, median {c[len(c) // 2]:.1f} s over {reps}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main():
    env = dict(os.environ, CCACHE_DISABLE="1")
    env.pop("CMAKE_CXX_COMPILER_LAUNCHER", None)
    if len(sys.argv) < 2 or sys.argv[1] not in ("fresh", "fresh-reps", "touch", "ab"):
        sys.exit(__doc__)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print("Command: `bench/build_cost.py " + " ".join(sys.argv[1:]) + f"`; load average before: {load}; {os.cpu_count()} cores")
    if sys.argv[1] == "fresh":
        src, bdir, targets = sys.argv[2], sys.argv[3], sys.argv[4:]
        if os.path.exists(bdir) and os.listdir(bdir):
            sys.exit(f"{bdir} is not empty")
        cpu, wall = configure(src, bdir, env)
        print(f"configure: CPU {cpu:.0f} s, wall {wall:.0f} s")
        tg = [a for t in targets for a in ("--target", t)]
        cpu, wall = build(["cmake", "--build", bdir, "-j2", *tg], env)
        print(f"build {' '.join(targets)}: CPU {cpu:.0f} s, wall {wall:.0f} s, "
              f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    elif sys.argv[1] == "fresh-reps":
        src, reps = sys.argv[2], int(sys.argv[3])
        cols = {"configure + dmref_cli": [], "the rest": [], "whole tree": []}
        for r in range(reps):
            bdir = tempfile.mkdtemp(prefix="dmref-build-cost-")
            try:
                conf, conf_wall = configure(src, bdir, env)
                cli, cli_wall = build(["cmake", "--build", bdir, "-j2", "--target", "dmref_cli"], env)
                rest, rest_wall = build(["cmake", "--build", bdir, "-j2"], env)
            finally:
                shutil.rmtree(bdir, ignore_errors=True)
            for k, v in zip(cols, (conf + cli, rest, conf + cli + rest)):
                cols[k].append(v)
            print(f"  rep {r + 1}: configure + dmref_cli CPU {conf + cli:.0f} s (wall {conf_wall + cli_wall:.0f} s); "
                  f"the rest CPU {rest:.0f} s (wall {rest_wall:.0f} s); whole tree CPU {conf + cli + rest:.0f} s; "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
        for k, c in cols.items():
            c.sort()
            print(f"{k}: CPU min {c[0]:.0f} s, median {c[len(c) // 2]:.0f} s over {reps}")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    elif sys.argv[1] == "touch":  # one build, several files
        bdir, reps, target, paths = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
        rounds(reps, target, env, [(p, bdir, p) for p in paths])
    elif sys.argv[1] == "ab":  # one file, several builds
        bdirs, reps, target, path = sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4], sys.argv[5]
        rounds(reps, target, env, [(b, b, path) for b in bdirs])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
