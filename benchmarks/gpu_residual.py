#!/usr/bin/env python3
"""A residual of the matmul's own input, `x @ W + x`, through the default search, then on
the GPU beside PyTorch (the fused kernel reads x twice: as the matmul's operand and for
the add; issue 14).

    PYTHONPATH=python python benchmarks/gpu_residual.py --build OUT      # CPU machine (MLIR)
    PYTHONPATH=python python3 benchmarks/gpu_residual.py --run OUT       # GPU machine

Decode size: x 8x4096, W 4096x4096, fp16 (W scaled by 1/64). Checked and timed with
gpu_programs.check_and_time (fp32 PyTorch reference, NaN-poisoned output, CUDA-graph
replays over inputs spanning 4x L2).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "python")]
M, K = 8, 4096


def build(out: str) -> None:
    import mirage as mi
    from build_bundles import save
    from mirage.lower import compile as mirage_compile
    from mirage.search import superoptimize

    g = mi.new_kernel_graph("self_residual")
    x, w = g.new_input((M, K), dtype=mi.float16), g.new_input((K, K), dtype=mi.float16)
    g.mark_output(g.add(g.matmul(x, w), x))
    load, t = os.getloadavg()[0], time.monotonic()
    res = superoptimize(g, "auto", measure=False, cache_dir=None, verbose=False)
    best = res.candidates[0]
    print(f"search {time.monotonic() - t:.1f} s (load {load:.1f}): {best.key}, {len(best.graph.ops)} kernel(s), "
          f"x read {sum(t is best.graph.inputs[0] for t in best.graph.ops[0].inputs)}x, {best.verification}")
    save(mirage_compile(best.graph), os.path.join(out, "self_residual_search"))
    save(mirage_compile(g), os.path.join(out, "self_residual_reference"))


def run(out: str) -> None:
    import torch
    from gpu_programs import check_and_time

    def inputs():
        return [torch.randn(M, K, device="cuda", dtype=torch.float16), (torch.randn(K, K, device="cuda") / 64).half()]

    r = check_and_time(out, "self_residual", ["search", "reference"], lambda x, w: x @ w + x, inputs, 2 * (M * K + K * K))
    best = min(r["eager"], r["compile"], r["compile_graph"])
    print(f"{torch.cuda.get_device_name()}: search {r['cols']['search']['us']:.1f} us "
          f"({r['cols']['search']['kernels']} kernel, rel. err {r['cols']['search']['err']:.1e}), reference "
          f"{r['cols']['reference']['us']:.1f} us; eager {r['eager']:.1f}, compile {r['compile']:.1f}, "
          f"compile+graph {r['compile_graph']:.1f}; speedup over the best {best / r['cols']['search']['us']:.2f}x")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build")
    ap.add_argument("--run")
    a = ap.parse_args()
    if bool(a.build) == bool(a.run):
        ap.error("give one of --build and --run")
    build(a.build) if a.build else run(a.run)
