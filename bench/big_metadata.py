#!/usr/bin/python3
"""Time of dmref_fixtures.read on a fixture whose metadata holds one 32 MiB
string (docs/hardening.md, issue 24), for two copies of the package side by
side, interleaved, 5 repetitions each: min and median per string.

    bench/big_metadata.py OLD_PYTHON_DIR NEW_PYTHON_DIR   (each holding dmref_fixtures/)
"""
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
import dmref_fixtures as df
t = time.perf_counter()
df.read(sys.argv[2])
print(time.perf_counter() - t)
"""


def main(old, new):
    sys.path.insert(0, new)
    import numpy as np
    import dmref_fixtures as df
    strings = {"a x 32 Mi": "a" * (32 << 20), "backslash x 16 Mi (32 MiB escaped)": "\\" * (16 << 20),
               "quote x 8 Mi (16 MiB escaped)": '"' * (8 << 20)}
    for label, big in strings.items():
        with tempfile.NamedTemporaryFile(suffix=".safetensors") as f:
            df.write(f.name, {"output.x": np.zeros(2)}, {"case": "big", "note": big})
            times = {"old": [], "new": []}
            for _ in range(5):
                for which, root in (("old", old), ("new", new)):
                    out = subprocess.run([sys.executable, "-c", CHILD, root, f.name], capture_output=True, text=True,
                                         check=True).stdout
                    times[which].append(float(out))
            print(label + ": " + "; ".join(f"{w} min {min(t):.2f} s median {statistics.median(t):.2f} s"
                                           for w, t in times.items()))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
