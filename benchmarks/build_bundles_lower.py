"""Compile the six benchmarks' μGraphs to kernel bundles (CPU machine; needs MLIR).

    PYTHONPATH=python python benchmarks/build_bundles_lower.py OUT_DIR [--bs 1 8] [--only NAME ...]

Writes OUT_DIR/<bench>-bs<bs>-<variant>/ (manifest.json + PTX) and OUT_DIR/index.json
listing them. Variants: `fused` (the hand-written fused μGraph, default lowering:
tensor cores, cp.async ring), `generic` (the same μGraph with the simple lowering: no
tensor cores, element copies), `reference` (the reference program, pre-defined ops),
`nosplit` (the for-loop
not split across blocks), and `fused-k<K>s<S>` (split K, ring depth S) for the two
benchmarks we tune. The GPU scripts
`benchmarks/gpu_check_lower.py` and `gpu_bench_lower.py` read the index.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

from benchmarks import BENCHMARKS  # noqa: E402

from mirage.lower import Options, compile  # noqa: E402


def variants(name: str):
    yield "fused", "fused", Options()
    yield "generic", "fused", Options(tensor_cores=False, async_copy=False)
    yield "reference", "reference", Options()
    yield "nosplit", "fused", Options(split=1)
    if name in ("rmsnorm_linear", "gated_mlp"):
        for k in (2, 4, 8):
            for s in (2, 3, 4):
                yield f"fused-k{k}s{s}", "fused", Options(split=k, stages=s)


def diag_graph(cols: int, threads: int):
    """Diagnostic: the matmul of RMSNorm+Linear alone (X(2,4096) @ W(4096,6144)), W split
    by `cols` columns per block, for-loop over the hidden dim in 64-row steps."""
    import mirage as mi

    g = mi.new_kernel_graph(f"diag_mm_c{cols}_t{threads}")
    X, W = g.new_input((2, 4096)), g.new_input((4096, 6144))
    tb = mi.new_threadblock_graph(grid_dim=(6144 // cols, 1, 1), block_dim=(threads, 1, 1), forloop_range=64)
    tX = tb.new_input(X, input_map=(-1, -1, -1), forloop_dim=1)
    tW = tb.new_input(W, input_map=(1, -1, -1), forloop_dim=0)
    tb.new_output(tb.forloop_accum(tb.matmul(tX, tW)), output_map=(1, -1, -1))
    g.mark_output(g.customized([X, W], tb)[0])
    return g


def diag_variants():
    for cols, threads in ((64, 128), (64, 256), (128, 128), (128, 256)):
        for k in (1, 4, 8):
            yield f"c{cols}t{threads}", f"k{k}", diag_graph(cols, threads), Options(split=k, stages=4 if k == 1 else 3)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--bs", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--only", nargs="*", default=None)
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    index = []
    for name, b in BENCHMARKS.items():
        if a.only and name not in a.only:
            continue
        for bs in a.bs:
            for var, which, opts in variants(name):
                g = getattr(b, which)(bs)
                d = os.path.join(a.out, f"{name}-bs{bs}-{var}")
                t = time.time()
                try:
                    cg = compile(g, "sm_90", out_dir=d, options=opts)
                except Exception as e:  # keep going: report the failure in the index
                    print(f"{name} bs={bs} {var}: FAILED {type(e).__name__}: {e}")
                    index.append({"bench": name, "bs": bs, "variant": var, "dir": None, "error": str(e)})
                    continue
                ks = cg.lowered.kernels
                print(f"{name} bs={bs} {var}: {len(ks)} kernels, {time.time() - t:.2f}s, "
                      f"smem {[k['smem_bytes'] for k in ks]}")
                index.append({"bench": name, "bs": bs, "variant": var, "dir": os.path.basename(d),
                              "kernels": [{"name": k["name"], "grid": k["grid"], "block": k["block"],
                                           "smem_bytes": k["smem_bytes"], "notes": k["notes"]} for k in ks]})
    if a.only is None:
        for gname, var, g, opts in diag_variants():
            d = os.path.join(a.out, f"diag-{gname}-{var}")
            compile(g, "sm_90", out_dir=d, options=opts)
            index.append({"bench": "diag_" + gname, "bs": 1, "variant": var, "dir": os.path.basename(d)})
    with open(os.path.join(a.out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)


if __name__ == "__main__":
    main()
