"""The "Faithful variants" tables of docs/fixtures.md, generated from the JSON of run.py
(between the markers <!-- faithful:begin --> and <!-- faithful:end -->).

    table.py --json build/tests/faithful.json --docs docs/fixtures.md     # rewrite the tables
    table.py --json build/tests/faithful.json --check docs/fixtures.md    # exit 1 if stale
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

BEGIN, END = "<!-- faithful:begin -->\n", "<!-- faithful:end -->"
DTYPES = ["f32", "bf16", "f16", "f64"]
KINDS = ["fwd", "grad"]


def cell(s):
    if s is None:
        return "-"
    mark = "" if s["passed"] == s["runs"] else " **rejected**"
    return f"{s['passed']}/{s['runs']}, {s['worst']:.2g}{mark}"


def tables(res):
    cols = [f"{k} {d}" for k in KINDS for d in DTYPES]
    head = "| {} | {} |\n| {} |\n"
    pv = {tuple(s["key"]): s for s in res["per_variant"]}
    ps = {tuple(s["key"]): s for s in res["per_scheme"]}
    out = [f"{res['runs']} runs ({'every file' if res['full'] else 'covering subset'}), "
           f"{res['rejected']} rejected by the current rule. Cell: runs passed / runs, worst err/tol "
           f"(err/tol > 1 is a reject; `-`: not applicable).\n\n"]
    out.append(head.format("scheme", " | ".join(cols), " | ".join(["---"] * (len(cols) + 1))))
    for sch in sorted({k[0] for k in ps}):
        out.append(f"| `{sch}` | " + " | ".join(cell(ps.get((sch, d, k))) for k in KINDS for d in DTYPES) + " |\n")
    out.append("\n")
    from tests.faithful.variants import family
    fams = {}
    for s in res["per_variant"]:
        f = fams.setdefault((family(s["key"][0]), s["key"][1], s["key"][2]), {"runs": 0, "passed": 0, "worst": 0.0})
        f["runs"] += s["runs"]
        f["passed"] += s["passed"]
        f["worst"] = max(f["worst"], s["worst"])
    out.append(head.format("variant family", " | ".join(cols), " | ".join(["---"] * (len(cols) + 1))))
    for fam in sorted({k[0] for k in fams}):
        out.append(f"| {fam} | " + " | ".join(cell(fams.get((fam, d, k))) for k in KINDS for d in DTYPES) + " |\n")
    out.append("\n")
    out.append(head.format("variant | what it does", " | ".join(cols), " | ".join(["---"] * (len(cols) + 2))))
    for v in res["variants"]:
        n = v["name"]
        out.append(f"| `{n}` | {v['what']} | " +
                   " | ".join(cell(pv.get((n, d, k))) for k in KINDS for d in DTYPES) + " |\n")
    return "".join(out)


def splice(text, body, path):
    a, b = text.find(BEGIN), text.find(END)
    if a < 0 or b < a:
        raise SystemExit(f"{path}: no {BEGIN.strip()} / {END} markers")
    return text[:a + len(BEGIN)] + body + text[b:]


def update(res, path, check):
    """Rewrite (check=False) or compare (check=True) the tables in `path`; True when current."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    new = splice(text, tables(res), path)
    if check:
        return new == text
    if new != text:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(new)
        os.replace(path + ".tmp", path)
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--docs")
    g.add_argument("--check")
    a = ap.parse_args(argv)
    with open(a.json) as f:
        res = json.load(f)
    ok = update(res, a.docs or a.check, bool(a.check))
    if not ok:
        print(f"{a.check}: the faithful tables are stale; regenerate with: "
              f"tests/faithful/run.py --docs {a.check}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
