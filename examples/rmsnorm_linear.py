"""Main job: superoptimize RMSNorm+Linear end to end, on a machine without a GPU.

1. the reference program (rms_norm, mul, matmul: three kernels) from examples/benchmarks.py;
2. the search finds μGraphs and ranks them with the cost model;
3. the best is proved equivalent to the reference by finite-field random testing
   (with its failure bound) and checked against numpy float64 by the interpreter;
4. it is lowered to PTX (sm_90) as a kernel bundle;
5. its MLIR is printed.

    python examples/rmsnorm_linear.py [--bs 1] [--out bundle-dir]
"""
import argparse
import os
import sys

import numpy as np

import mirage as mi

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchmarks import BENCHMARKS  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bs", type=int, default=1, help="batch size (X has 2*bs rows)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="directory for the PTX bundle (default: the bundle cache)")
    args = ap.parse_args()
    bench = BENCHMARKS["rmsnorm_linear"]
    reference = bench.reference(args.bs)

    best = reference.superoptimize(verbose=True)  # the default call: limits fitted to the program
    kernels = sum(op.kind == "graph_def" for op in best.ops)
    print(f"// best μGraph: {len(best.ops)} kernel op(s), {kernels} graph-defined", file=sys.stderr)

    proof = mi.check_equivalence(reference, best, delta=1e-9)
    print(f"// equivalence: {proof.equivalent}, {proof.trials} trials, failure bound {proof.error_bound:.1e}, "
          f"fp16 error {proof.max_fp_error:.1e}", file=sys.stderr)

    xs = bench.random_inputs(args.bs, np.random.default_rng(args.seed))
    want = bench.numpy(*xs)
    err = np.abs(best.evaluate(xs)[0] - want).max() / np.abs(want).max()
    print(f"// interpreter vs numpy float64: relative error {err:.1e}", file=sys.stderr)

    bundle = best.compile(target="sm_90", out_dir=args.out)
    print(f"// PTX bundle ({len(bundle.lowered.kernels)} kernel(s)): {bundle.path}", file=sys.stderr)

    print(best.to_mlir(), end="")
    if not (proof.equivalent and err < 1e-10):
        sys.exit("error: the superoptimized μGraph is not equivalent to the reference")


if __name__ == "__main__":
    main()
