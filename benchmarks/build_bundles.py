#!/usr/bin/env python3
"""Compile the six benchmarks' μGraphs (reference and fused, bs 1 and 8) to kernel
bundles, on the CPU machine (needs MLIR and the lowering):

    PYTHONPATH=python:examples python benchmarks/build_bundles.py OUT_DIR [--target sm_90]
        [--only rmsnorm_linear,gated_mlp] [--variants reference,fused,bf16] [--bs 1,8]
        [--options k=v,...] [--ablation] [--sweep]

Writes OUT_DIR/<benchmark>_<variant>_bs<bs>/ (manifest.json + PTX), then copy OUT_DIR to
the GPU machine and run benchmarks/gpu_check.py and gpu_bench.py on it. A μGraph that
does not compile is reported and skipped; the exit code is 1 if any failed.

Variants: `reference` (the reference program: pre-defined ops), `fused` (the hand-written
fused μGraph), `bf16` (the fused μGraph with every f16 tensor bf16: bf16 tensor cores).
With `--picks PICKS_DIR` (from search_picks.py, the search's default call): `search` (the
search's pick alone, what its cost model chose) and `search-top` (a variant bundle of its
verified top candidates plus the reference program, each also with the other split
factors of its for-loops: the runtime times them on the GPU at first use and keeps the
fastest, `mirage.runtime.select`).
`--options` passes `mirage.lower.Options` fields to every bundle (e.g. `stages=2,split=1`).
`--ablation` adds, for the fused μGraphs, one variant `fused-no<opt>` per optimization
switched off (the paper's Figure 12; `ABLATION` below) and `fused-noopt` (the three
optimizer passes off); `gpu_bench.py --table` times them side by side. `--sweep` adds
the schedule sweep of RMSNorm+Linear / GatedMLP (tile width, threads, rows per step,
split, ring depth, folded combine, evict_first: `SWEEP`), named `fused-<tag>`.
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


# Figure-12 ablation: each optimization off alone (variant name -> Options fields)
ABLATION = {
    "fused-nolayout": {"layout": False},          # optimizer: row-major tiles, padded ldmatrix rows
    "fused-noschedule": {"schedule": False},      # optimizer: program order, a barrier after every op
    "fused-nosmemplan": {"smem_plan": False},     # optimizer: one shared-memory range per tile
    "fused-noopt": {"layout": False, "schedule": False, "smem_plan": False},
    "fused-noasync": {"async_copy": False},       # lowering: element copies, no cp.async ring
    "fused-notc": {"tensor_cores": False},        # lowering: f32 FMA matmuls
    "fused-noevict": {"evict_first": False},      # lowering: no L2 evict_first on inputs read once
    "fused-nofold": {"fold_combine": False},      # lowering: split for-loop as two kernels
    "fused-novec": {"vectorize": False},          # lowering: element loops one element a thread
}

# schedule sweep (from the former sweep_rmsnorm.py): RMSNorm+Linear tiles
# (cols, threads, rows of W per step) with (split (0 = auto), stages, fold, evict_first)
SWEEP_RMS = {1: [(64, 128, 64, 0, 4, True, True), (64, 128, 64, 8, 4, True, True), (64, 128, 128, 0, 4, True, True),
                 (128, 128, 64, 0, 4, True, True), (128, 256, 64, 0, 4, True, True), (256, 256, 32, 0, 4, True, True)],
             8: [(64, 128, 64, 0, 4, True, True), (64, 128, 64, 8, 4, True, True), (128, 256, 64, 0, 4, True, True),
                 (128, 128, 64, 0, 4, True, True)]}
SWEEP_MLP = [("nosplit", 1, 4), ("k2", 2, 3), ("k4", 4, 3)]


def sweep_jobs(names, bss):
    """(bench, variant, bs, graph builder, Options fields) of the schedule sweep."""
    from benchmarks import gated_mlp_fused, rmsnorm_fused

    jobs = []
    for bs in bss:
        if "rmsnorm_linear" in names:
            for c, t, r, k, st, fold, ev in SWEEP_RMS.get(bs, []):
                tag = f"fused-c{c}t{t}r{r}k{k or 'A'}s{st}" + ("" if fold else "two") + ("" if ev else "noev")
                jobs.append(("rmsnorm_linear", tag, bs, (lambda bs=bs, c=c, t=t, r=r: rmsnorm_fused(bs, c, t, r)),
                             {"split": k, "stages": st, "fold_combine": fold, "evict_first": ev}))
        if "gated_mlp" in names:
            for tag, k, st in SWEEP_MLP:
                jobs.append(("gated_mlp", f"fused-{tag}", bs, (lambda bs=bs: gated_mlp_fused(bs)),
                             {"split": k, "stages": st}))
    return jobs


def to_bf16(g):
    """The μGraph `g` with every f16 tensor bf16 (through its MLIR text)."""
    from mirage.mlir.importer import parse_mlir

    return parse_mlir(g.to_mlir().replace("xf16>", "xbf16>"))[0]


def build_graph(bench, variant: str, bs: int):
    base = variant.split("-")[0]
    if base == "bf16":
        return to_bf16(bench.fused(bs))
    return getattr(bench, base)(bs)


def parse_options(text: str) -> dict:
    out = {}
    for item in filter(None, text.split(",")):
        k, _, v = item.partition("=")
        v = v.strip()
        out[k.strip().replace("-", "_")] = (v.lower() in ("1", "true", "on")) if v.lower() in (
            "0", "1", "true", "false", "on", "off") else int(v)
    return out


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


def build_picks(a, names, bss, options) -> list:
    """The `search` and `search-top` bundles from search_picks.py's directories."""
    import glob
    import json

    from mirage.mlir.importer import parse_mlir
    from mirage.lower import compile as mirage_compile
    from mirage.lower import compile_variants

    failed = []
    for name in names:
        for bs in bss:
            src = os.path.join(a.picks, f"{name}_bs{bs}")
            if not os.path.isfile(os.path.join(src, "search.json")):
                print(f"skip  {name} bs={bs}: no search pick in {a.picks}", flush=True)
                continue
            info = json.load(open(os.path.join(src, "search.json")))
            ranks = sorted(glob.glob(os.path.join(src, "rank*.mlir")), key=lambda p: int(p[p.rindex("rank") + 4:-5]))
            graphs = [(os.path.basename(p)[:-5], parse_mlir(open(p).read())[0]) for p in ranks]
            ref = parse_mlir(open(os.path.join(src, "reference.mlir")).read())[0]
            t0 = time.time()
            for variant in ("search", "search-top"):
                tag = bundle_name(name, variant, bs)
                dest = os.path.join(a.out_dir, tag)
                try:
                    if variant == "search":
                        save(mirage_compile(graphs[0][1], target=a.target, options=options), dest)
                    else:
                        # the reference program is a variant too (also where it ranks among the top)
                        pool = [(n, g) for (n, g), c in zip(graphs, info["candidates"]) if not c["reference"]]
                        if os.path.isdir(dest):
                            shutil.rmtree(dest)
                        compile_variants(pool + [("reference", ref)], dest, "reference", a.target, options, tune=True)
                    with open(os.path.join(dest, "search.json"), "w") as f:
                        json.dump(info, f, indent=1)
                    print(f"ok    {tag:44s} {time.time() - t0:6.1f} s", flush=True)
                except Exception as e:
                    failed.append(tag)
                    print(f"FAIL  {tag:40s} {type(e).__name__}: {e}", flush=True)
    return failed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--only", default="", help="comma-separated benchmark names")
    ap.add_argument("--variants", default="reference,fused")
    ap.add_argument("--bs", default="1,8")
    ap.add_argument("--options", default="", help="mirage.lower.Options fields for every bundle, k=v,...")
    ap.add_argument("--ablation", action="store_true", help="add the fused-no<opt> variants (ABLATION)")
    ap.add_argument("--sweep", action="store_true", help="add the RMSNorm+Linear / GatedMLP schedule sweep")
    ap.add_argument("--picks", default="", help="search_picks.py output: add the search and search-top variants")
    a = ap.parse_args(argv)
    from benchmarks import BENCHMARKS
    from mirage.lower import Options
    from mirage.lower import compile as mirage_compile

    names = [n for n in BENCHMARKS if not a.only or n in a.only.split(",")]
    bss = [int(x) for x in a.bs.split(",")]
    common = parse_options(a.options)
    jobs = []
    for name in names:
        b = BENCHMARKS[name]
        variants = [(v, ABLATION.get(v, {})) for v in a.variants.split(",") if v]
        if a.ablation:
            variants += list(ABLATION.items())
        for variant, opts in variants:
            for bs in bss:
                jobs.append((name, variant, bs, (lambda b=b, v=variant, bs=bs: build_graph(b, v, bs)), opts))
    if a.sweep:
        jobs += sweep_jobs(names, bss)
    os.makedirs(a.out_dir, exist_ok=True)
    failed = []
    if a.picks:
        failed += build_picks(a, names, bss, Options(**common))
    for name, variant, bs, make, opts in jobs:
        tag = bundle_name(name, variant, bs)
        t0 = time.time()
        try:
            g = make()
            cg = mirage_compile(g, target=a.target, options=Options(**{**common, **opts}))
            save(cg, os.path.join(a.out_dir, tag))
            ks = cg.lowered.kernels
            print(f"ok    {tag:44s} {time.time() - t0:6.1f} s  smem {[k['smem_bytes'] for k in ks]} "
                  f"grid {[k['grid'] for k in ks]}", flush=True)
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
