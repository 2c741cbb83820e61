#!/usr/bin/env python3
"""What the default search gives on ordinary programs, on the GPU, beside PyTorch.

    # CPU machine (MLIR): the default search's picks (search_benchmarks.py --programs
    # --save PICKS) compiled to bundles, with the reference programs
    PYTHONPATH=python:examples python benchmarks/gpu_programs.py --build OUT --picks PICKS
    # GPU machine: check and time
    PYTHONPATH=python:examples python benchmarks/gpu_programs.py --run OUT [--out results.md]

For each program of examples/programs.py at decode size: the `search` bundle (the
search's own pick, compiled with the default options) and the `reference` bundle (the
program as written, one pre-defined kernel per op) are checked against float32 PyTorch
on fresh inputs (output NaN-poisoned first, launched twice; tolerance 5e-3 as
gpu_check.py) and timed replayed from CUDA graphs, beside PyTorch eager, torch.compile
and torch.compile in CUDA graphs, written as a user would (`TORCH` below). Inputs rotate
over sets spanning 4× the L2 cache; weights are scaled by 1/sqrt(fan-in).
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "python"), os.path.join(HERE, "..", "examples")]

EPS = 1e-5
TOL = 5e-3


def torch_programs():
    """The programs of examples/programs.py as a PyTorch user writes them."""
    import torch
    import torch.nn.functional as F

    def rms(x, g):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS) * g

    def ln(x, g, b):
        xc = x - x.mean(-1, keepdim=True)
        return xc * torch.rsqrt((xc * xc).mean(-1, keepdim=True) + EPS) * g + b

    return {
        "eltwise_chain": lambda x, a, b: F.gelu(x * a + b) * x,
        "softmax": lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True),
        "softmax_max": lambda x: torch.softmax(x, -1),
        "rmsnorm_linear": lambda x, g, w: rms(x, g) @ w,
        "layernorm_linear": lambda x, g, b, w: ln(x, g, b) @ w,
        "gated_mlp_silu": lambda x, w1, w2: F.silu(x @ w1) * (x @ w2),
        "gated_mlp_gelu": lambda x, w1, w2: F.gelu(x @ w1) * (x @ w2),
        "rmsnorm_gated_mlp_silu": lambda x, g, w1, w2: (lambda y: F.silu(y @ w1) * (y @ w2))(rms(x, g)),
        "mlp_relu": lambda x, w1, w2: torch.relu(x @ w1) @ w2,
        "linear_residual": lambda x, o, w: x + o @ w,
        "attention_scaled": lambda q, k, v: torch.softmax((q @ k) / q.shape[-1] ** 0.5, -1) @ v,
    }


def input_scales(shapes):
    """Matrices (2-D, or the last two dims of K and V) that a matmul reads as weights are
    scaled by 1/sqrt(rows) so activations keep unit size in fp16."""
    return [1.0 / np.sqrt(s[-2]) if len(s) >= 2 and s[-2] >= 128 else 1.0 for s in shapes]


def build(a) -> int:
    from build_bundles import save
    from mirage.mlir.importer import parse_mlir
    from mirage.lower import Options, compile as mirage_compile
    from programs import PROGRAMS

    failed = 0
    for name, p in PROGRAMS.items():
        ref = p.reference("decode")
        pick_path = os.path.join(a.picks, f"{name}.mlir")
        pick = parse_mlir(open(pick_path).read())[0] if os.path.isfile(pick_path) else None
        # search-smem: the pick with its rows in shared memory (Options.row_registers off), the A/B column
        for variant, g, opts in (("search", pick, Options()), ("search-smem", pick, Options(row_registers=False)),
                                 ("reference", ref, Options())):
            if g is None:
                print(f"skip  {name} {variant}: no pick at {pick_path}", flush=True)
                continue
            try:
                save(mirage_compile(g, target=a.target, options=opts), os.path.join(a.build, f"{name}_{variant}"))
                print(f"ok    {name} {variant}", flush=True)
            except Exception as e:
                failed += 1
                print(f"FAIL  {name} {variant}: {type(e).__name__}: {e}", flush=True)
    return 1 if failed else 0


def check_and_time(run_dir: str, name: str, variants, fn, inputs, in_bytes: int, steady: bool = False) -> dict:
    """Each bundle `<run_dir>/<name>_<variant>` there is, checked against fp32 `fn` on fresh
    `inputs()` (NaN-poisoned output, launched twice), then timed replayed from CUDA graphs
    with inputs rotating over sets spanning 4x the L2 cache; then PyTorch on the same sets:
    eager, torch.compile, torch.compile in a CUDA graph. Returns {"cols": {variant: us,
    err, chosen (a variant bundle's pick), kernels}, "eager", "compile", "compile_graph",
    "sets", "graphed", "out_numel"}; with `steady`, also back to back (`gpu_bench.steady_fn`:
    the faster of a graph and a loop for ours, a loop for eager and compile, a graph for
    compile+graph): each column's "steady" and "s_eager", "s_compile", "s_compile_graph",
    and "steadied" (as "graphed", back to back)."""
    import torch

    import mirage.runtime as rt
    from gpu_bench import bench_fn, graphed, steady_fn
    from gpu_check import rel_err

    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
    n_sets = max(1, min(16, int(np.ceil(4 * l2 / in_bytes))))
    sets = [inputs() for _ in range(n_sets)]
    ref0 = fn(*[x.float() for x in sets[0]])
    outs = [torch.empty(ref0.shape, dtype=torch.float16, device="cuda") for _ in range(n_sets)]
    r = {"name": name, "cols": {}, "sets": sets, "out_numel": ref0.numel(),
         "graphed": lambda f: bench_fn(graphed(lambda i: f(*sets[i]), n_sets), n_sets),
         "steadied": lambda f: steady_fn(lambda i: f(*sets[i]), n_sets)}
    for v in variants:
        path = os.path.join(run_dir, f"{name}_{v}")
        if not os.path.isdir(path):
            continue
        k = rt.load(path)
        xs = inputs()
        o = torch.full(ref0.shape, float("nan"), dtype=torch.float16, device="cuda")
        k(*xs, out=[o])
        k(*xs, out=[o])
        torch.cuda.synchronize()
        err = rel_err(o, fn(*[x.float() for x in xs]))
        us = bench_fn(graphed(lambda i: k(*sets[i], out=[outs[i]]), n_sets), n_sets)
        chosen = getattr(k, "report", {}).get("variant", "")
        kernels = len(rt.load_bundle(os.path.join(path, chosen) if chosen else path).manifest.kernels)
        r["cols"][v] = dict(us=us, err=err, chosen=chosen, kernels=kernels)
        if steady:
            r["cols"][v]["steady"] = min(steady_fn(lambda i: k(*sets[i], out=[outs[i]]), n_sets),
                                         steady_fn(lambda i: k(*sets[i]), n_sets, graph=False))
        print(f"{name:24s} {v:11s} {us:8.1f} µs  {kernels} kernel(s)" + (f" ({chosen})" if chosen else "")
              + (f", back to back {r['cols'][v]['steady']:.1f} µs" if steady else "") + f"  err {err:.1e}", flush=True)
    r["eager"] = bench_fn(lambda i: fn(*sets[i]), n_sets)
    cfn = torch.compile(fn, dynamic=False)
    r["compile"] = bench_fn(lambda i: cfn(*sets[i]), n_sets)
    r["compile_graph"] = r["graphed"](cfn)
    if steady:
        r["s_eager"] = steady_fn(lambda i: fn(*sets[i]), n_sets, graph=False)
        r["s_compile"] = steady_fn(lambda i: cfn(*sets[i]), n_sets, graph=False)
        r["s_compile_graph"] = r["steadied"](cfn)
    return r


def run(a) -> int:
    import torch

    from gpu_bench import copy_bandwidth, versions_line, _write_table
    from programs import PROGRAMS

    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
    defs = torch_programs()
    rng = np.random.default_rng()
    props = torch.cuda.get_device_properties(0)
    bw = copy_bandwidth()
    rows = []
    for name, p in PROGRAMS.items():
        fn = defs[name]
        shapes = p.input_shapes("decode")
        scales = input_scales(shapes)

        def inputs():
            return [torch.from_numpy(rng.standard_normal(s) * c).to("cuda", torch.float16)
                    for s, c in zip(shapes, scales)]

        in_bytes = sum(int(np.prod(s)) * 2 for s in shapes)
        r = check_and_time(a.run, name, ("search", "search-smem", "reference"), fn, inputs, in_bytes)
        r["best_torch"] = min(r["eager"], r["compile"], r["compile_graph"])
        r["floor"] = (in_bytes + r["out_numel"] * 2) / bw * 1e6
        rows.append(r)
        print(f"{name:24s} eager {r['eager']:.1f}  compile {r['compile']:.1f}  compile+graph "
              f"{r['compile_graph']:.1f}  floor {r['floor']:.1f} µs", flush=True)
    ok = [r for r in rows if "search" in r["cols"] and r["cols"]["search"]["err"] <= TOL]
    sp = [r["best_torch"] / r["cols"]["search"]["us"] for r in ok]
    geo = float(np.exp(np.mean(np.log(sp)))) if sp else float("nan")
    lines = ["# The default search's picks on the GPU: ordinary programs vs PyTorch", "",
             f"- device: {props.name} (measured copy bandwidth {bw / 1e12:.2f} TB/s)",
             f"- date: {datetime.datetime.now().isoformat(timespec='minutes')}",
             f"- versions: {versions_line()}",
             "- programs: examples/programs.py at decode size (8 tokens, hidden 4096); `search` = the pick of "
             "`superoptimize(g, \"auto\")` (benchmarks/results/search_default.md), `search-smem` = the same pick "
             "with its rows in shared memory (`Options(row_registers=False)`, the lowering before register rows), "
             "`reference` = the program as written (one pre-defined kernel per op); all replayed as CUDA graphs",
             "- µs: medians of triton.testing.do_bench, inputs rotating over sets spanning 4× L2; speedup = best "
             "PyTorch (eager, compile, compile+graph) / search; floor = inputs once + output once at the copy "
             "bandwidth",
             f"- every bundle checked first against fp32 PyTorch on fresh inputs (NaN-poisoned output, launched "
             f"twice), tolerance {TOL:g}; ✗ marks a failure (not counted in the geomean)", "",
             "| program | search µs | search-smem µs | reference µs | eager | compile | compile+graph | speedup "
             "| floor µs | rel. err |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def cell(v):
            c = r["cols"].get(v)
            return "-" if c is None else f"{c['us']:.1f} ({c['kernels']}k)" + ("" if c["err"] <= TOL else " ✗")
        s = r["cols"].get("search")
        lines.append(f"| {r['name']} | {cell('search')} | {cell('search-smem')} | {cell('reference')} | {r['eager']:.1f} | "
                     f"{r['compile']:.1f} | {r['compile_graph']:.1f} | "
                     + (f"{r['best_torch'] / s['us']:.2f}×" if s else "-")
                     + f" | {r['floor']:.1f} | " + (f"{s['err']:.1e}" if s else "-") + " |")
    lines += ["", f"geomean speedup {geo:.2f}× over {len(sp)} checked programs; {sum(x >= 1.0 for x in sp)} of "
              f"{len(sp)} at or above 1.0×; (Nk) = kernels launched"]
    _write_table(a.out, lines)
    return 0 if len(ok) == len(rows) else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", help="compile the picks and references into this folder (CPU machine)")
    ap.add_argument("--picks", default="picks_default")
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--run", help="check and time the bundles in this folder (GPU machine)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "gpu_programs.md"))
    a = ap.parse_args(argv)
    if bool(a.build) == bool(a.run):
        ap.error("give one of --build and --run")
    return build(a) if a.build else run(a)


if __name__ == "__main__":
    sys.exit(main())
