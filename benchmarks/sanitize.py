#!/usr/bin/env python3
"""Launch bundles once each, to run under NVIDIA compute-sanitizer (issue 16):

    compute-sanitizer --tool memcheck  python3 benchmarks/sanitize.py BUNDLE_DIR [--variants search,fused]
    compute-sanitizer --tool racecheck python3 benchmarks/sanitize.py BUNDLE_DIR ...
    compute-sanitizer --tool synccheck python3 benchmarks/sanitize.py BUNDLE_DIR ...

BUNDLE_DIR holds <benchmark>_<variant>_bs<bs>/ bundles (build_bundles.py). Each bundle
runs once on fresh random inputs (a variant bundle runs the variant the runtime chose
on this GPU, if gpu_bench.py or gpu_check.py ran first; otherwise it times them all
first, which is slow under the sanitizer). The sanitizer prints any error it finds
and its ERROR SUMMARY at exit; this script prints one line per bundle.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "python"), os.path.join(HERE, "..", "examples")]

from gpu_check import find_bundles, make_inputs  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundle_dir")
    ap.add_argument("--variants", default="", help="only these variants (default: all found)")
    a = ap.parse_args(argv)
    import torch

    import mirage.runtime as rt
    from benchmarks import BENCHMARKS

    want = {v for v in a.variants.split(",") if v}
    rng = np.random.default_rng()
    n = 0
    for name, variant, bs, path in find_bundles(a.bundle_dir):
        if want and variant not in want:
            continue
        k = rt.load(path)
        k(*make_inputs(BENCHMARKS[name], bs, rng))
        torch.cuda.synchronize()
        chosen = getattr(k, "report", {}).get("variant", "")
        print(f"ran {name} {variant} bs={bs}" + (f" (variant {chosen})" if chosen else ""), flush=True)
        n += 1
    print(f"{n} bundles launched")
    return 0 if n else 2


if __name__ == "__main__":
    sys.exit(main())
