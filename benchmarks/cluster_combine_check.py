#!/usr/bin/env python3
"""GPU check of the cluster combine's two kinds of partials (`KernelPlan.place_parts`): a
split loop with a register accumulator (X @ W, the mma fragments' padded f32 copy laid
over the loop's tiles) and a shared-memory one (X's 64-column chunks summed: its scratch
tile is its partial), each block's partials read by the others through distributed shared
memory. The GEMM chains of benchmarks/mbci.py only have the first kind.

    PYTHONPATH=python python benchmarks/cluster_combine_check.py --build DIR     # CPU (MLIR)
    python3 benchmarks/cluster_combine_check.py --run DIR                         # GPU

Each split (4, 8: one cluster of that many blocks) on fresh random inputs, three trials,
against float32 PyTorch, max |out - ref| / max |ref| < 5e-3 (fp16 outputs). Exits 1 on a
failure. H100, 2026-11-25 (000abbc): rel. err. 2.4e-4 to 3.3e-4, all pass.
"""
import argparse
import os
import sys

sys.path[:0] = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")]
SPLITS = (4, 8)


def graph():
    import mirage as mi
    from mirage.core.graph import TBGraph

    g = mi.new_kernel_graph("two_accs")
    X, W = g.new_input((64, 1024)), g.new_input((1024, 64))
    tb = TBGraph(grid_dim=[1, 1, 1], block_dim=(128, 1, 1), forloop_range=16, reduction_dimx=64)
    x = tb.new_input(X, input_map=(-1, -1, -1), forloop_dim=1)
    w = tb.new_input(W, input_map=(-1, -1, -1), forloop_dim=0)
    tb.new_output(tb.forloop_accum(tb.matmul(x, w)), output_map=(-1, -1, -1))
    tb.new_output(tb.forloop_accum(x), output_map=(-1, -1, -1))
    for t in g.customized([X, W], tb):
        g.mark_output(t)
    return g


def build(out: str) -> int:
    from mirage.lower import Options, compile as mirage_compile

    for s in SPLITS:
        low = mirage_compile(graph(), "sm_90", os.path.join(out, f"split{s}"), Options(split=s)).lowered
        (k,) = low.kernels
        assert k["notes"].get("cluster") == s and not low.buffers, (k["notes"], low.buffers)
        print(f"split {s}: grid {k['grid']}, a cluster of {s} blocks, no workspace")
    return 0


def run(out: str) -> int:
    import torch
    from mirage.runtime import load

    bad = 0
    for s in SPLITS:
        k = load(os.path.join(out, f"split{s}"))
        for trial in range(3):
            X = torch.randn(64, 1024, device="cuda").half()
            W = (torch.randn(1024, 64, device="cuda") * 0.05).half()
            Y, Z = k(X, W)
            torch.cuda.synchronize()
            ry, rz = X.float() @ W.float(), X.float().view(64, 16, 64).sum(1)
            ey = ((Y.float() - ry).abs().max() / ry.abs().max()).item()
            ez = ((Z.float() - rz).abs().max() / rz.abs().max()).item()
            ok = ey < 5e-3 and ez < 5e-3  # NaN fails
            bad += not ok
            print(f"split {s} trial {trial}: rel. err. X @ W {ey:.2e}, chunk sum {ez:.2e}  {'ok' if ok else 'FAIL'}")
    return 1 if bad else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", metavar="DIR")
    ap.add_argument("--run", metavar="DIR")
    a = ap.parse_args()
    if not (a.build or a.run):
        ap.error("give --build DIR (CPU) or --run DIR (GPU)")
    sys.exit(build(a.build) if a.build else run(a.run))
