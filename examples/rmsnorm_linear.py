"""Main job: build the RMSNorm+Linear program and its fused single-kernel μGraph,
check the μGraph against numpy float64 with the reference interpreter, and print its
MLIR. Runs on a machine without a GPU.

    python examples/rmsnorm_linear.py [--bs 1]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchmarks import BENCHMARKS  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bs", type=int, default=1, help="batch size (X has 2*bs rows)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    bench = BENCHMARKS["rmsnorm_linear"]
    fused = bench.fused(args.bs)
    xs = bench.random_inputs(args.bs, np.random.default_rng(args.seed))
    want = bench.numpy(*xs)
    got = fused.evaluate(xs)[0]
    err = np.abs(got - want).max() / np.abs(want).max()
    print(f"// fused RMSNorm+Linear, shapes {[x.shape for x in xs]}: relative error vs numpy float64 = {err:.2e}")
    print(fused.to_mlir(), end="")
    if not err < 1e-10:
        sys.exit("error: the fused μGraph does not match numpy")


if __name__ == "__main__":
    main()
