#!/usr/bin/env python3
"""Profile the top-k candidates of a search on the GPU in one go and pick the fastest.

    PYTHONPATH=python:examples python benchmarks/profile_select.py build OUT [--only rmsnorm_linear,gated_mlp]
        [--top-k 8] [--bs 1] [--time-limit 120]                     # CPU machine: search + compile
    PYTHONPATH=python:examples python benchmarks/profile_select.py CAND_DIR [CAND_DIR ...]
        [--tol 5e-3] [--json result.json]                            # GPU machine

`build` runs `superoptimize` on each benchmark's reference program (preset `mlp`, or
`lora` / `attention` by name), compiles the top-k ranked candidates (the reference is
among them) to OUT/<benchmark>/c<rank>_<key>/ and writes OUT/<benchmark>/candidates.json
(cost-model rank, estimate, kernels). On the GPU the table shows the cost model's rank
next to the measured one.

Each CAND_DIR is a bundle directory, or a directory whose subdirectories are bundles
(one per candidate, compiled on the CPU machine). All candidates must take the same
inputs. Fresh random fp16 inputs (standard normal × 0.1) drive every candidate; each
output is poisoned first and compared with the first candidate's output (they compute
the same function: a difference above --tol marks the candidate WRONG and excludes it).
Times are do_bench medians of CUDA-graph replays over input sets spanning 4x L2. Prints a table sorted by time and the fastest bundle's path
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


def build(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", default="rmsnorm_linear,gated_mlp")
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--bs", type=int, default=1)
    ap.add_argument("--time-limit", type=float, default=120)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    import time

    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    from benchmarks import BENCHMARKS
    from mirage.lower import compile as mirage_compile

    preset = {"lora": "lora", "gqa": "attention", "qknorm_attention": "attention"}
    for name in a.only.split(","):
        t0 = time.time()
        res = BENCHMARKS[name].reference(a.bs).superoptimize(
            config=preset.get(name, "mlp"), workers=a.workers, time_limit=a.time_limit, top_k=a.top_k).search
        print(f"{name}: search {time.time() - t0:.1f} s, {len(res.candidates)} ranked candidates", flush=True)
        d = os.path.join(a.out, name)
        os.makedirs(d, exist_ok=True)
        index = []
        for rank, c in enumerate(res.candidates[:a.top_k]):
            sub = f"c{rank}_{c.key}"[:40]
            ent = {"rank": rank, "key": c.key, "bundle": sub,
                   "cost_us": c.cost.time * 1e6 if getattr(c, "cost", None) else None,
                   "cost": c.cost.summary() if getattr(c, "cost", None) else None}
            try:
                cg = mirage_compile(c.graph, out_dir=os.path.join(d, sub))
                ent["kernels"] = [{"name": k["name"], "grid": k["grid"], "block": k["block"],
                                   "smem_bytes": k["smem_bytes"]} for k in cg.lowered.kernels]
                print(f"  {sub}: {ent['cost']}  -> {[(k['grid'], k['smem_bytes']) for k in ent['kernels']]}",
                      flush=True)
            except Exception as e:  # report, keep the others
                ent["error"] = f"{type(e).__name__}: {e}"[:300]
                print(f"  {sub}: cannot compile: {ent['error']}", flush=True)
            index.append(ent)
        with open(os.path.join(d, "candidates.json"), "w") as f:
            json.dump({"benchmark": name, "bs": a.bs, "search_s": res.seconds, "candidates": index}, f, indent=1)
    return 0


def cost_ranks(d: str) -> dict:
    """bundle dir -> (cost-model rank, estimate) from a candidates.json beside it."""
    out = {}
    for p in {os.path.dirname(os.path.abspath(d))}:
        f = os.path.join(p, "candidates.json")
        if os.path.isfile(f):
            for c in json.load(open(f))["candidates"]:
                out[os.path.join(p, c["bundle"])] = (c["rank"], c.get("cost"))
    return out.get(os.path.abspath(d), (None, None))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "build":
        return build(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--tol", type=float, default=5e-3)
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import torch

    import mirage.runtime as rt
    from gpu_bench import bench_fn, graphed
    from gpu_check import rel_err

    dirs = bundle_dirs(a.paths)
    if not dirs:
        print("profile_select: no bundles found", file=sys.stderr)
        return 2
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
    rng = np.random.default_rng()
    first = rt.load(dirs[0]).manifest
    in_bytes = sum(int(np.prod(s.shape)) * 2 for s in first.inputs)
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
    n_sets = max(1, min(16, int(np.ceil(4 * l2 / in_bytes))))  # sets spanning 4x L2
    sets = [[torch.from_numpy(rng.standard_normal(s.shape) * a.scale).to("cuda", tdt[s.dtype])
             for s in first.inputs] for _ in range(n_sets)]
    xs = sets[0]
    results, ref = [], None
    for d in dirs:
        r = {"bundle": d}
        r["cost_rank"], r["cost"] = cost_ranks(d)
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
            so = [[torch.empty_like(o) for o in outs] for _ in range(n_sets)]
            r["us"] = bench_fn(graphed(lambda i: k(*sets[i], out=so[i]), n_sets), n_sets)
            r["kernels"] = len(k.manifest.kernels)
        except Exception as e:
            r.update(ok=False, err=float("nan"), us=float("inf"), error=f"{type(e).__name__}: {e}")
        results.append(r)
        print(f"{r['us']:9.1f} µs  err {r['err']:.1e}  {'ok' if r['ok'] else 'EXCLUDED'}  {d}", flush=True)
    results.sort(key=lambda r: (not r["ok"], r["us"]))
    print()
    print("| GPU rank | cost-model rank | bundle | µs | kernels | cost model | rel. err vs first | ok |")
    print("|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(results):
        print(f"| {i + 1} | {r['cost_rank'] if r['cost_rank'] is not None else '-'} | "
              f"{os.path.basename(r['bundle'])} | {r['us']:.1f} | {r.get('kernels', '-')} | {r['cost'] or '-'} | "
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
