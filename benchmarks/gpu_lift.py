#!/usr/bin/env python3
"""Lift → search → PTX → run: a Triton kernel of the corpus, lifted to a verified `kn`
program, superoptimized by the default search, compiled, and run on the GPU beside the
original Triton kernel on the same inputs.

    # CPU machine (MLIR, triton and egglog installed; no GPU):
    PYTHONPATH=python python benchmarks/gpu_lift.py --build bundles_lift [--kernel rmsnorm|softmax]
    # GPU machine (torch + triton + CUDA; no MLIR):
    PYTHONPATH=python:benchmarks python benchmarks/gpu_lift.py --run bundles_lift [--out benchmarks/results/gpu_lift.md]

--build: (1) lifts the kernel at small sizes with the Z3 proofs (`verified` for those
sizes; for RMSNorm also for all row counts and row lengths <= BLOCK by Hoare logic);
(2) lifts it again at the GPU size without Z3 (too large for it) and requires the same
`kn` program, op for op, with a float64 cross-check against the kernel's symbolic effect
at that size; (3) runs the default search on that graph; (4) compiles the pick
(`search`) and the lifted graph as it is (`lifted`, one pre-defined kernel per op) to
PTX bundles for sm_90 under OUT, with `lift.json` describing the launch.
--run: launches the original Triton kernel and both bundles on the same fp16 inputs,
checks each against float32 PyTorch of the textbook formula (relative L2 error, 5e-3 as
gpu_check.py) and against each other, and times them (do_bench medians, CUDA graphs for
the bundles and for Triton alike).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "python")]

TOL = 5e-3
EPS = 1e-5
# kernel -> (corpus case at small size, launch at GPU size: rows, cols, BLOCK)
SIZES = {"rmsnorm": (8, 4096, 4096), "softmax": (8, 4096, 4096)}


def launch_args(name, x, w, out, rows, cols):
    """The Triton kernel's arguments, in its order, for arrays/tensors x, w, out."""
    if name == "rmsnorm":
        return [x, w, out, cols, cols, EPS]
    return [out, x, cols, cols, cols]


def build(a) -> int:
    from build_bundles import save
    from mirage.lift import lift_triton
    from mirage.lift.corpus import case
    from mirage.lower import Options, compile as mirage_compile

    c = case(a.kernel)
    small = lift_triton(c.kernel, c.grid, *c.make(np.random.default_rng(0)), **c.constexprs)
    print(small.report(), flush=True)
    if not small.verified:
        print("FAIL: not verified at the small size", flush=True)
        return 1
    rows, cols, block = SIZES[a.kernel]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols)).astype(np.float16)
    w = rng.standard_normal(cols).astype(np.float16)
    out = np.zeros((rows, cols), np.float16)
    t0 = time.perf_counter()
    big = lift_triton(c.kernel, (rows,), *launch_args(a.kernel, x, w, out, rows, cols), prove=False, BLOCK=block)
    print(big.report(), flush=True)
    same = [op.kind for op in big.graph.ops] == [op.kind for op in small.graph.ops] and big.formula == small.formula
    if not same or next(p for p in big.proofs if p.method == "numeric").status != "passed":
        print("FAIL: the program lifted at the GPU size differs from the one verified at the small size", flush=True)
        return 1
    print(f"lifted at {rows}x{cols} in {time.perf_counter() - t0:.1f} s; same kn program as the verified one",
          flush=True)
    t0 = time.perf_counter()
    best = big.graph.superoptimize()
    t_search = time.perf_counter() - t0
    report = best.search.report() if getattr(best, "search", None) is not None else ""
    print(report, flush=True)
    os.makedirs(a.build, exist_ok=True)
    for variant, g in (("search", best), ("lifted", big.graph)):
        save(mirage_compile(g, target=a.target, options=Options()), os.path.join(a.build, f"{a.kernel}_{variant}"))
        print(f"ok    {a.kernel} {variant}", flush=True)
    with open(os.path.join(a.build, "lift.json"), "w") as f:
        json.dump({"kernel": a.kernel, "rows": rows, "cols": cols, "block": block, "formula": big.formula,
                   "small_proof": small.proofs[0].detail + " at " + small.proofs[0].scope,
                   "all_sizes_proof": next(f"{p.status}: {p.scope if p.status == 'proved' else p.detail}"
                                           for p in small.proofs if p.method == "hoare"),
                   "search_seconds": round(t_search, 1), "search_kernels": len(best.ops),
                   "times": {k: round(v, 3) for k, v in big.times.items()}}, f, indent=1)
    return 0


def run(a) -> int:
    import torch

    import mirage.runtime as rt
    from gpu_bench import bench_fn, graphed, versions_line, _write_table
    from gpu_check import rel_err
    from mirage.lift.corpus import case

    info = json.load(open(os.path.join(a.run, "lift.json")))
    name, rows, cols, block = info["kernel"], info["rows"], info["cols"], info["block"]
    kern = case(name).kernel
    dev = "cuda"
    x = torch.randn(rows, cols, device=dev, dtype=torch.float16)
    w = torch.randn(cols, device=dev, dtype=torch.float16)
    xf, wf = x.float(), w.float()
    ref = xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + EPS) * wf if name == "rmsnorm" else torch.softmax(xf, -1)
    ins = [x, w] if name == "rmsnorm" else [x]

    tri_out = torch.full((rows, cols), float("nan"), device=dev, dtype=torch.float16)

    def triton_call():
        kern[(rows,)](*launch_args(name, x, w, tri_out, rows, cols), BLOCK=block)

    triton_call()
    torch.cuda.synchronize()
    res = {"triton": {"err": rel_err(tri_out, ref), "us": bench_fn(graphed(lambda i: triton_call(), 1), 1)}}
    outs = {"triton": tri_out.clone()}
    for variant in ("search", "lifted"):
        path = os.path.join(a.run, f"{name}_{variant}")
        k = rt.load(path)
        o = torch.full((rows, cols), float("nan"), device=dev, dtype=torch.float16)
        k(*ins, out=[o])
        k(*ins, out=[o])
        torch.cuda.synchronize()
        outs[variant] = o.clone()
        res[variant] = {"err": rel_err(o, ref), "us": bench_fn(graphed(lambda i: k(*ins, out=[o]), 1), 1),
                        "kernels": len(rt.load_bundle(path).manifest.kernels)}
    agree = rel_err(outs["search"], outs["triton"])
    for v, r in res.items():
        print(f"{v:8s} {r['us']:8.2f} µs  err vs fp32 torch {r['err']:.1e}", flush=True)
    props = torch.cuda.get_device_properties(0)
    lines = [f"# Lift → search → PTX → run: the corpus's {name} kernel on the GPU", "",
             f"- device: {props.name}; date: {datetime.datetime.now().isoformat(timespec='minutes')}; "
             f"versions: {versions_line()}",
             f"- size: {rows} x {cols} fp16, Triton BLOCK={block}; lifted formula `{info['formula']}`",
             f"- proof: Z3 at the small launch ({info['small_proof']}); Hoare logic over the grid: "
             f"{info['all_sizes_proof']}; at {rows}x{cols} the same kn program, cross-checked in float64",
             f"- search: default `superoptimize()`, {info['search_seconds']} s on the CPU machine",
             "- µs: do_bench medians, each replayed from a CUDA graph; err: relative L2 error against float32 "
             f"PyTorch of the textbook formula (tolerance {TOL:g})", "",
             "| variant | µs | kernels | rel. err |", "|---|---|---|---|"]
    for v, r in res.items():
        lines.append(f"| {v} | {r['us']:.2f} | {r.get('kernels', 1)} | {r['err']:.1e}"
                     f"{'' if r['err'] <= TOL else ' ✗'} |")
    lines += ["", f"search vs Triton output: relative L2 difference {agree:.1e}; "
              f"speedup of the search's pick over the Triton kernel: {res['triton']['us'] / res['search']['us']:.2f}×"]
    _write_table(a.out, lines)
    return 0 if all(r["err"] <= TOL for r in res.values()) else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", help="lift, search and compile into this folder (CPU machine)")
    ap.add_argument("--kernel", default="rmsnorm", choices=sorted(SIZES))
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--run", help="run and time the bundles in this folder beside Triton (GPU machine)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "gpu_lift.md"))
    a = ap.parse_args(argv)
    if bool(a.build) == bool(a.run):
        ap.error("give one of --build and --run")
    return build(a) if a.build else run(a)


if __name__ == "__main__":
    sys.exit(main())
