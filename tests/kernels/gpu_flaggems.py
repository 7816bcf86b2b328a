#!/usr/bin/env python3
"""flag-gems' Triton mHC kernels compiled for a real GPU, gated by dmref
(docs/kernels.md, "On a GPU").  CTest `kernels` runs the same calls on the
Triton interpreter (test_flaggems.py, test_flaggems_ops.py); this runs them as
a GPU user does, the autotuner as shipped, and judges them with the same rule.

Three steps over one folder DIR, on two machines (the GPU machine needs
neither dmref nor its build: torch, triton and numpy):

  tests/kernels/gpu_flaggems.py inputs DIR      here: the inputs of test_flaggems.py's shapes
                                                (DIR/inputs.pt) and the two kernel files of the
                                                installed flag-gems wheel (DIR/mhc/), unchanged
  tests/kernels/gpu_flaggems.py device DIR OUT  on the GPU: every call of test_flaggems.py and of
                                                test_flaggems_ops.py, outputs to OUT/outputs.pt
  tests/kernels/gpu_flaggems.py judge DIR OUT   here: certify each shape (dmref run), judge every
                                                call at bf16 (the kernels' recipe) and by the
                                                public rule; exit 0 when the correct calls pass
                                                and every seeded bug fails

  TRITON_INTERPRET=1 tests/kernels/gpu_flaggems.py dry DIR
                                                the three steps on this machine, the device step
                                                on the Triton interpreter, at the n = 8 shape
                                                (DMREF_GPU_SHAPES to choose): CTest gpu_flaggems_dry

DIR is a scratch folder (the repository ignores .gpu/): the kernel files are
copied from the pinned wheel, never committed.
"""
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import thirdparty as tp  # noqa: E402
from test_flaggems import BUGS, SHAPES, sid  # noqa: E402
from test_flaggems_ops import MIXES, POST, PRE  # noqa: E402

DEEP = dict(T=128, n=4, C=4096, L=4, bugs=[b[0] for b in BUGS])  # test_flaggems.py's DMREF_KERNELS_DEEP shape
ALL = SHAPES + ([DEEP] if DEEP not in SHAPES else [])
BUG = {b[0]: b for b in BUGS}
OP_CALLS = [("pre", "correct", {}), ("pre", "hc_post_mult_value=1", {"hc_post_mult_value": 1.0}),
            ("pre", "hc_sinkhorn_eps=1e-3", {"hc_sinkhorn_eps": 1e-3}),
            ("post", "correct", {}), ("post", "comb transposed", {})]


def calls(s):
    """test_flaggems.py's calls at shape s: (name, mhc_pre overrides, comb transposed)."""
    out = [("correct", {}, False)]
    if s["n"] == 4:
        out.append(("sinkhorn_repeat=19", {"sinkhorn_repeat": 19}, False))
    return out + [BUG[b] for b in s["bugs"]]


def inputs(d):
    import torch
    os.makedirs(os.path.join(d, "mhc"), exist_ok=True)
    base = tp.importlib.metadata.distribution("flag-gems").locate_file("flag_gems/fused/mhc")
    for f in ("mhc_pre.py", "mhc_post.py"):
        shutil.copyfile(os.path.join(str(base), f), os.path.join(d, "mhc", f))
    torch.save({sid(**s): tp.flaggems_inputs(s["T"], s["n"], s["C"], s["L"], seed=1, comb_logits=10.0,
                                             act_scale=0.02) for s in ALL}, os.path.join(d, "inputs.pt"))
    print(f"wrote {d}/inputs.pt ({', '.join(sid(**s) for s in ALL)}) and {d}/mhc/ (flag-gems "
          f"{tp.importlib.metadata.version('flag-gems')})")


def device(d, out):
    import torch
    import triton
    interp = os.environ.get("TRITON_INTERPRET") == "1"  # a dry run of this step on the CPU (small shapes only)
    kernels = tp.flaggems_modules(os.path.join(d, "mhc"), interpreter=interp)
    mhc_pre, mhc_post = kernels
    dev = "cpu" if interp else "cuda"
    gpu = "Triton interpreter (CPU)" if interp else torch.cuda.get_device_name()
    results = {"env": f"{gpu}, torch {torch.__version__}, triton {triton.__version__}"}
    print(results["env"], flush=True)
    only = os.environ.get("DMREF_GPU_SHAPES", "").split(",")  # a comma-separated subset of the shapes, if set
    os.makedirs(out, exist_ok=True)
    save = lambda: torch.save(results, os.path.join(out, "outputs.pt"))  # noqa: E731  after every call
    for name, x in torch.load(os.path.join(d, "inputs.pt")).items():
        s = next(s for s in ALL if sid(**s) == name)
        if (interp and s is DEEP) or (only != [""] and name not in only):
            continue
        x = [t.to(dev) for t in x]
        for call, kw, transposed in calls(s):
            t0 = time.monotonic()
            o = tp.flaggems_stack(*x, pre_kw=kw, transpose_comb=transposed, kernels=kernels, raw=True)
            if not interp:
                torch.cuda.synchronize()
            results[(name, call)] = {k: v.detach().cpu() for k, v in o.items()}
            save()
            print(f"{name} {call}: {time.monotonic() - t0:.2f} s",
                  flush=True)
    root = os.path.join(tp.ROOT, "fixtures", "golden")
    for op, call, kw in OP_CALLS:
        c = tp.df.load_case(os.path.join(root, (PRE if op == "pre" else POST) + ".safetensors"))
        t = {k: torch.tensor(v, device=dev) for k, v in {**c.inputs, **c.params}.items()}
        if op == "pre":
            post, comb, h = mhc_pre(t["input.residual"].bfloat16(), t["param.fn"].float(), t["param.hc_scale"].float(),
                                    t["param.hc_base"].float(), **dict(tp.DSV4, **kw))
            o = {"post_mix": post, "comb_mix": comb, "layer_input": h}
        else:
            comb = t["input.comb_mix"].float()
            o = {"residual": mhc_post(t["input.x"].bfloat16(), t["input.residual"].bfloat16(),
                                      t["input.post_mix"].float().unsqueeze(-1),
                                      comb.mT.contiguous() if call == "comb transposed" else comb)}
        results[("op." + op, call)] = {k: v.detach().cpu() for k, v in o.items()}
        save()
    print(f"wrote {out}/outputs.pt: {len(results) - 1} calls")


def judge(d, out):
    import torch
    res = torch.load(os.path.join(out, "outputs.pt"))
    f64 = lambda t: t.to(torch.float64).numpy()  # noqa: E731
    print(f"GPU: {res['env']}")
    ok = True
    ins = torch.load(os.path.join(d, "inputs.pt"))
    for s in ALL:
        name = sid(**s)
        if (name, "correct") not in res:
            continue
        if s is DEEP and not os.environ.get("DMREF_KERNELS_DEEP"):
            print(f"{name}: not judged (DMREF_KERNELS_DEEP=1 certifies it)")
            continue
        t0 = time.monotonic()
        config, captured = tp.flaggems_problem(*ins[name])
        case = tp.certify(os.path.join(d, "work_" + name), "mhc", config, captured, "flaggems_gpu." + name)
        print(f"{name}: certified at {case.file.metadata.get('precision_bits', '?')} bits in {time.monotonic() - t0:.0f} s")
        for call, _, _ in calls(s):
            outs = {k: f64(v) for k, v in res[(name, call)].items()}
            v, each = tp.judge(outs, case, "bf16", list(outs))
            public, _ = tp.public_verdict(outs, case)
            worst = max(each, key=lambda k: each[k][0])
            print(f"  {call:22s} dmref {'PASS' if v.passed else 'FAIL'} ({v.failed} of {v.checked} out), worst "
                  f"err/tol {v.worst_ratio:.3g} ({worst}); public rule {'pass' if public else 'fail'}")
            ok &= v.passed == (call == "correct")
    root = os.path.join(tp.ROOT, "fixtures", "golden")
    for op, call, _ in OP_CALLS:
        c = tp.df.load_case(os.path.join(root, (PRE if op == "pre" else POST) + ".safetensors"))
        o = {k: f64(v) for k, v in res[("op." + op, call)].items()}
        if op == "pre":
            got, names = tp.df.mhc_ops_outputs("pre", c.config["n"], **o), MIXES
        else:
            got, names = tp.df.mhc_ops_outputs("post", c.config["n"], **o), ["output.residual"]
        v, _ = tp.judge(got, c, "bf16", names)
        print(f"  {c.id} {call:22s} dmref {'PASS' if v.passed else 'FAIL'} ({v.failed} of {v.checked} out), worst "
              f"err/tol {v.worst_ratio:.3g} ({', '.join(names)})")
        ok &= v.passed == (call == "correct")
        if op == "pre" and call == "correct":  # test_flaggems_ops.py's finding: the bf16 GEMM output
            lv, _ = tp.judge(got, c, "bf16", ["output.layer_input"])
            print(f"  {c.id} {call:22s} output.layer_input: dmref {'PASS' if lv.passed else 'FAIL'}, worst "
                  f"err/tol {lv.worst_ratio:.3g} (the interpreter's finding: rejected, bf16 GEMM output)")
    print("gpu flag-gems:", "every verdict as expected" if ok else "UNEXPECTED VERDICT")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("inputs", "device", "judge", "dry") or \
            (sys.argv[1] in ("device", "judge") and len(sys.argv) < 4):
        sys.exit(__doc__)
    step, d = sys.argv[1], sys.argv[2]
    if step == "inputs":
        inputs(d)
    elif step == "dry":
        if os.environ.get("TRITON_INTERPRET") != "1":
            sys.exit("gpu_flaggems.py dry: set TRITON_INTERPRET=1 (the device step runs on the interpreter)")
        os.environ.setdefault("DMREF_GPU_SHAPES", "T4_n8_C256_L2")
        inputs(d)
        device(d, os.path.join(d, "out"))
        sys.exit(judge(d, os.path.join(d, "out")))
    elif step == "device":
        device(d, sys.argv[3])
    else:
        sys.exit(judge(d, sys.argv[3]))
