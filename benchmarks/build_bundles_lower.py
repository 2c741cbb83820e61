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
    with open(os.path.join(a.out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)


if __name__ == "__main__":
    main()
