#!/usr/bin/env python3
"""Pre-defined matmuls one at a time: tile shapes, split rules and the FMA path, side by side.

    PYTHONPATH=python python benchmarks/matmul_sweep.py --build DIR [--set tiles|fma]   # CPU machine
    PYTHONPATH=python python3 benchmarks/matmul_sweep.py --run DIR                      # GPU machine

`tiles` (results: `predefined.MM_TILE`'s comment, lowering_history.md): the decode-layer
projections and the six benchmarks' matmul shapes under four tile shapes (BN x BK: 64x64,
32x128, 64x128) and two split rules (as chosen; until about two blocks an SM), beside
torch's own `x @ W` (cuBLAS). `fma`: matmuls without tensor cores (a 4097-key dim, odd K)
at 128 and 256 threads, for the K-split lanes of `kernel_plan.k_lanes`. Each bundle is
checked against torch fp32 on fresh inputs (NaN-poisoned output, launched twice), then
timed as gpu_bench.py times (do_bench medians, CUDA graphs over input sets spanning 4x L2,
the L2 flushed between calls). Another tree's lowering: build with its python/ first on
PYTHONPATH into another DIR and run both.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from math import prod

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "python")]

TILE_SHAPES = [(1, 4096, 14336), (1, 14336, 4096), (8, 4096, 14336), (8, 14336, 4096), (1, 4096, 4096),
               (1, 4096, 1024), (8, 4096, 4096), (8, 4096, 1024), (2, 4096, 6144), (64, 4096, 4096), (16, 4096, 6144)]
FMA_SHAPES = [((8, 4, 4097), (8, 4097, 128)), ((4, 7, 4097), (4, 4097, 128)), ((3, 20), (20, 12)),
              ((2, 100), (100, 50)), ((16, 1, 4097), (16, 4097, 64)), ((64, 20), (20, 24)),
              ((8, 4, 128), (8, 128, 4097))]


def _split_2x(orig):
    """choose_split, but splitting until about two blocks an SM"""
    import mirage.lower.kernel_plan as kp

    def split(tb, opts):
        if opts.split or not kp.split_ok(tb):
            return orig(tb, opts)
        blocks, best = prod(tb.grid_dim), 1
        if blocks >= 2 * opts.sms:
            return 1
        for s in range(2, tb.forloop_range + 1):
            if tb.forloop_range % s == 0 and blocks * s <= 4 * opts.sms and tb.forloop_range // s >= 2:
                best = s
                if blocks * s >= 2 * opts.sms:
                    break
        return best
    return split


def build(out: str, which: str) -> None:
    import mirage as mi
    import mirage.lower as ml
    import mirage.lower.predefined as pd
    from build_bundles import save
    from mirage.lower import Options, compile as mirage_compile

    conv = sys.modules["mirage.lower.convert"]  # (mirage.lower.convert is also a function's name)
    orig = conv.choose_split
    jobs = []
    if which == "tiles":
        configs = {"n64k64": ((64, 64, 64), orig), "n32k128": ((64, 32, 128), orig),
                   "n32k128s2x": ((64, 32, 128), _split_2x(orig)), "n64k128": ((64, 64, 128), orig),
                   "n64k64s2x": ((64, 64, 64), _split_2x(orig))}
        for M, K, N in TILE_SHAPES:
            for tag, (tile, split) in configs.items():
                jobs.append(((M, K), (K, N), tag, tile, split, 0))
    else:
        for sa, sb in FMA_SHAPES:
            for th in (0, 256):
                jobs.append((sa, sb, f"t{th or 128}", None, orig, th))
    index = []
    for sa, sb, tag, tile, split, threads in jobs:
        keep = (pd.MM_TILE, pd.MM_TILE_WIDE)
        if tile is not None:  # a fixed tile for every shape
            pd.MM_TILE = pd.MM_TILE_WIDE = tile
        conv.choose_split = split
        ml._CACHE.clear()
        try:
            g = mi.new_kernel_graph("mm")
            a, b = g.new_input(sa, dtype=mi.float16), g.new_input(sb, dtype=mi.float16)
            g.mark_output(g.matmul(a, b))
            name = "mm_" + "x".join(map(str, sa)) + "_" + "x".join(map(str, sb)) + "_" + tag
            cg = mirage_compile(g, target="sm_90", options=Options(threads=threads))
            save(cg, os.path.join(out, name))
        finally:
            pd.MM_TILE, pd.MM_TILE_WIDE = keep
            conv.choose_split = orig
        index.append({"name": name, "a": list(sa), "b": list(sb), "config": tag,
                      "grids": [k["grid"] for k in cg.lowered.kernels]})
        print(name, index[-1]["grids"], flush=True)
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)


def run(out: str) -> int:
    import torch

    import mirage.runtime as rt
    from gpu_bench import bench_fn, graphed

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    index = json.load(open(os.path.join(out, "index.json")))
    by_shape: dict = {}
    for e in index:
        by_shape.setdefault((tuple(e["a"]), tuple(e["b"])), []).append(e)
    bad = 0
    print(f"device {torch.cuda.get_device_name()}")
    for (sa, sb), es in by_shape.items():
        n = max(1, min(16, -(-4 * l2 // ((prod(sa) + prod(sb)) * 2))))
        sets = [(torch.randn(*sa, device="cuda", dtype=torch.float16) * 0.1,
                 torch.randn(*sb, device="cuda", dtype=torch.float16) * 0.1) for _ in range(n)]
        ref = sets[0][0].float() @ sets[0][1].float()
        outs = [torch.empty(ref.shape, device="cuda", dtype=torch.float16) for _ in range(n)]
        cells = [f"torch {bench_fn(graphed(lambda i: torch.matmul(*sets[i], out=outs[i]), n), n):.1f}"]
        for e in es:
            k = rt.load(os.path.join(out, e["name"]))
            outs[0].fill_(float("nan"))
            k(*sets[0], out=[outs[0]])
            k(*sets[0], out=[outs[0]])
            torch.cuda.synchronize()
            err = float((outs[0].float() - ref).norm() / ref.norm())
            if not err < 5e-3:  # NaN too
                bad += 1
                cells.append(f"{e['config']} WRONG ({err:.1e})")
                continue
            cells.append(f"{e['config']} {bench_fn(graphed(lambda i: k(*sets[i], out=[outs[i]]), n), n):.1f}")
        print(f"{'x'.join(map(str, sa))} @ {'x'.join(map(str, sb))} (us): " + "  ".join(cells), flush=True)
    print(f"{bad} wrong")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--build", metavar="DIR")
    g.add_argument("--run", metavar="DIR")
    ap.add_argument("--set", choices=("tiles", "fma"), default="tiles")
    a = ap.parse_args(argv)
    if a.build:
        os.makedirs(a.build, exist_ok=True)
        build(a.build, a.set)
        return 0
    return run(a.run)


if __name__ == "__main__":
    sys.exit(main())
