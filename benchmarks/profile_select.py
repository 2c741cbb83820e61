#!/usr/bin/env python3
"""Profile the top-k candidates of a search on the GPU in one go and pick the fastest.

    PYTHONPATH=python:examples python benchmarks/profile_select.py CAND_DIR [CAND_DIR ...]
        [--tol 5e-3] [--json result.json]

Each CAND_DIR is a bundle directory, or a directory whose subdirectories are bundles
(one per candidate, compiled on the CPU machine). All candidates must take the same
inputs. Fresh random fp16 inputs (standard normal × 0.1) drive every candidate; each
output is poisoned first and compared with the first candidate's output (they compute
the same function: a difference above --tol marks the candidate WRONG and excludes it).
Times are do_bench medians. Prints a table sorted by time and the fastest bundle's path
(last line), and writes all numbers to --json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "python")]


def bundle_dirs(paths):
    out = []
    for p in paths:
        if os.path.isfile(os.path.join(p, "manifest.json")):
            out.append(p)
        else:
            out += sorted(os.path.join(p, d) for d in os.listdir(p)
                          if os.path.isfile(os.path.join(p, d, "manifest.json")))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--tol", type=float, default=5e-3)
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import torch

    import mirage.runtime as rt
    from gpu_bench import bench_fn
    from gpu_check import rel_err

    dirs = bundle_dirs(a.paths)
    if not dirs:
        print("profile_select: no bundles found", file=sys.stderr)
        return 2
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
    rng = np.random.default_rng()
    first = rt.load(dirs[0]).manifest
    xs = [torch.from_numpy(rng.standard_normal(s.shape) * a.scale).to("cuda", tdt[s.dtype])
          for s in first.inputs]
    results, ref = [], None
    for d in dirs:
        r = {"bundle": d}
        try:
            k = rt.load(d)
            outs = [torch.full(s.shape, float("nan"), dtype=tdt[s.dtype], device="cuda")
                    for s in k.manifest.outputs]
            k(*xs, out=outs)
            torch.cuda.synchronize()
            if ref is None:
                ref = [o.clone() for o in outs]
                r["err"] = 0.0 if all(torch.isfinite(o).all() for o in outs) else float("nan")
            else:
                r["err"] = max(rel_err(o, q) for o, q in zip(outs, ref))
            r["ok"] = r["err"] == r["err"] and r["err"] <= a.tol
            r["us"] = bench_fn(lambda i: k(*xs, out=outs), 1)
            r["kernels"] = len(k.manifest.kernels)
        except Exception as e:
            r.update(ok=False, err=float("nan"), us=float("inf"), error=f"{type(e).__name__}: {e}")
        results.append(r)
        print(f"{r['us']:9.1f} µs  err {r['err']:.1e}  {'ok' if r['ok'] else 'EXCLUDED'}  {d}", flush=True)
    results.sort(key=lambda r: (not r["ok"], r["us"]))
    print()
    print("| rank | bundle | µs | kernels | rel. err vs first | ok |")
    print("|---|---|---|---|---|---|")
    for i, r in enumerate(results):
        print(f"| {i + 1} | {os.path.basename(r['bundle'])} | {r['us']:.1f} | {r.get('kernels', '-')} | "
              f"{r['err']:.1e} | {'yes' if r['ok'] else 'no: ' + r.get('error', 'mismatch')} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "results": results}, f, indent=1)
    best = results[0]
    if not best["ok"]:
        print("profile_select: no candidate passed", file=sys.stderr)
        return 1
    print(f"\nfastest: {best['bundle']} ({best['us']:.1f} µs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
