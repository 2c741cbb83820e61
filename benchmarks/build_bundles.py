#!/usr/bin/env python3
"""Compile the six benchmarks' μGraphs (reference and fused, bs 1 and 8) to kernel
bundles, on the CPU machine (needs MLIR and the lowering):

    PYTHONPATH=python:examples python benchmarks/build_bundles.py OUT_DIR [--target sm_90]
        [--only rmsnorm_linear,gated_mlp] [--variants reference,fused] [--bs 1,8]

Writes OUT_DIR/<benchmark>_<variant>_bs<bs>/ (manifest.json + PTX), then copy OUT_DIR to
the GPU machine and run benchmarks/gpu_check.py and gpu_bench.py on it. A μGraph that
does not compile is reported and skipped; the exit code is 1 if any failed.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "python"), os.path.join(HERE, "..", "examples")]


def bundle_name(bench: str, variant: str, bs: int) -> str:
    return f"{bench}_{variant}_bs{bs}"


def save(result, dest: str) -> None:
    """Store what mirage.lower.compile returned as a bundle directory at `dest`."""
    from mirage.runtime import Manifest, load_bundle, write_bundle
    from mirage.runtime.bundle import Bundle

    if os.path.isdir(dest):
        shutil.rmtree(dest)
    if isinstance(result, (str, os.PathLike)) and os.path.isdir(result):
        shutil.copytree(result, dest)
    elif isinstance(result, Bundle):
        write_bundle(dest, result.manifest, result.ptx)
    elif hasattr(result, "write"):
        result.write(dest)
    elif isinstance(result, tuple) and len(result) == 2:
        manifest, ptx = result
        write_bundle(dest, manifest if isinstance(manifest, Manifest) else Manifest.from_json(manifest), ptx)
    else:
        raise TypeError(f"mirage.lower.compile returned {type(result).__name__}; expected a bundle "
                        f"directory, a Bundle, an object with .write(dir) or (manifest, ptx_texts)")
    load_bundle(dest)  # validate what was written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--only", default="", help="comma-separated benchmark names")
    ap.add_argument("--variants", default="reference,fused")
    ap.add_argument("--bs", default="1,8")
    a = ap.parse_args(argv)
    from benchmarks import BENCHMARKS
    from mirage.lower import compile as mirage_compile

    names = [n for n in BENCHMARKS if not a.only or n in a.only.split(",")]
    os.makedirs(a.out_dir, exist_ok=True)
    failed = []
    for name in names:
        b = BENCHMARKS[name]
        for variant in a.variants.split(","):
            for bs in (int(x) for x in a.bs.split(",")):
                tag = bundle_name(name, variant, bs)
                t0 = time.time()
                try:
                    g = getattr(b, variant)(bs)
                    save(mirage_compile(g, target=a.target), os.path.join(a.out_dir, tag))
                    print(f"ok    {tag:40s} {time.time() - t0:6.1f} s", flush=True)
                except KeyboardInterrupt:
                    print("interrupted; bundles built so far are kept", file=sys.stderr)
                    return 130
                except Exception as e:
                    failed.append(tag)
                    print(f"FAIL  {tag:40s} {type(e).__name__}: {e}", flush=True)
                    if os.environ.get("MIRAGE_DEBUG"):
                        traceback.print_exc()
    print(f"{len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
