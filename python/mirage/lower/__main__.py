"""`python -m mirage.lower FILE.mlir [--emit gpu|ptx|plan] [--target sm_90] [-o DIR]`:
lower every function of a kn/tb/th file; print the GPU-dialect module, the PTX, or
the launch plan (JSON); with `-o DIR`, write a kernel bundle per function under DIR."""
from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mirage.lower", description=__doc__)
    ap.add_argument("file")
    ap.add_argument("--emit", choices=("gpu", "ptx", "plan"), default="ptx")
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--split", type=int, default=0, help="for-loop split (0 = choose, 1 = never)")
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--no-tensor-cores", action="store_true")
    ap.add_argument("--no-async-copy", action="store_true")
    ap.add_argument("-o", "--out", default=None, help="write bundles under this directory")
    a = ap.parse_args(argv)
    from ..mlir.importer import load_mlir
    from . import Options, compile, convert_to_gpu
    from .pipeline import run_pipeline

    opts = lambda: Options(split=a.split, stages=a.stages, tensor_cores=not a.no_tensor_cores,  # noqa: E731
                           async_copy=not a.no_async_copy)
    try:
        graphs = load_mlir(a.file)
        for g in graphs:
            if a.out:
                cg = compile(g, a.target, out_dir=os.path.join(a.out, g.name), options=opts())
                print(cg.path)
                continue
            low = convert_to_gpu(g, opts())
            if a.emit == "gpu":
                sys.stdout.write(low.module)
            elif a.emit == "plan":
                print(json.dumps({"function": g.name, "buffers": low.buffers,
                                  "kernels": low.kernels}, indent=1))
            else:
                sys.stdout.write(run_pipeline(low.module, a.target))
    except Exception as e:  # one clear line, no traceback
        print(f"{a.file}: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
