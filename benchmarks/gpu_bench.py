#!/usr/bin/env python3
"""Time our compiled bundles against PyTorch on the GPU, side by side in one run.

    PYTHONPATH=python:examples python benchmarks/gpu_bench.py BUNDLE_DIR
        [--only name,...] [--variant fused] [--out benchmarks/results/gpu_bench.md]
    PYTHONPATH=python:examples python benchmarks/gpu_bench.py BUNDLE_DIR --table
        [--bs 1] [--variants fused,fused-nolayout,...] [--out benchmarks/results/gpu_ablation.md]

`--table` (the Figure-12 ablation of build_bundles.py --ablation, or its --sweep): every
variant found for each benchmark and batch size, each checked first (poisoned output,
launched twice: counters reset) and timed replayed from CUDA graphs, one column per
variant with the slowdown against `fused` (all optimizations on), next to
torch.compile + CUDA graphs.

Default mode, for each benchmark and batch size (bundles <benchmark>_<variant>_bs<bs>/
from build_bundles.py): each `--variant` column (the first is "ours": what a user gets,
e.g. `search-top`, the search's verified top candidates chosen on this GPU), replayed
in CUDA graphs and called plainly (the faster counts, as PyTorch's best variant does);
torch eager; F.rms_norm / scaled_dot_product_attention where they apply; torch.compile;
torch.compile replayed in CUDA graphs. Two timings of each, in one run: each call alone
(medians of `triton.testing.do_bench`: L2 flushed and CUDA events around every call)
and back to back (`steady_fn`: many calls in one graph or loop, as in a model). Inputs
rotate over several fresh random sets so that together they exceed the L2 cache
(METHOD.md). Reports µs, the speedup of ours over the best PyTorch variant and their
geomean (per timing), and the fraction of
the memory floor reached (minimal bytes, inputs read once + output written once, at
the measured device-to-device copy bandwidth). Checks every column first. Writes a
markdown table with device, date and versions to --out.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "python"), os.path.join(HERE, "..", "examples")]

from _cuda_graph import capture_graphs  # noqa: E402
from gpu_check import find_bundles, make_inputs, rel_err, torch_defs, torch_library_defs  # noqa: E402



def _write_table(path: str, lines: list) -> None:
    """Write the markdown table to `path` and print it."""
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    print()
    print(text)

def bench_fn(fn, n_sets):
    """do_bench median (µs) of fn(i) cycling i over the input sets."""
    import torch

    state = {"i": 0}

    def step():
        fn(state["i"] % n_sets)
        state["i"] += 1
    try:
        from triton.testing import do_bench
        return 1000.0 * do_bench(step, warmup=50, rep=300, return_mode="median")
    except ImportError:  # CUDA events
        for _ in range(20):
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(200):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            step()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        return 1000.0 * float(np.median(times))


def steady_fn(fn_i, n_sets, graph=True, min_calls=48):
    """µs a call when calls run back to back, as in a model: `fn_i(i)` called for i
    cycling over the input sets (they span several L2 sizes, so each call reads cold
    data), >= `min_calls` calls in one CUDA graph (`graph`) or one Python loop (eager,
    whose launches are part of its cost), timed whole and divided by the calls. Unlike
    `bench_fn` no event pair and no L2 flush sits around each call: a one-element
    kernel replayed alone measures ~5 µs there, which a call inside a model's graph does
    not pay."""
    calls = n_sets * -(-min_calls // n_sets)

    def run_all():
        for c in range(calls):
            fn_i(c % n_sets)
    run = capture_graphs([run_all])[0][0].replay if graph else run_all
    return bench_fn(lambda i: run(), 1) / calls


def poisoned_check(k, bench, bs, rng, fn, shape) -> float:
    """Relative error of bundle `k` against fp32 PyTorch on fresh inputs, its output
    NaN-poisoned first and the bundle launched twice (split loops reset their counters)."""
    import torch

    xs = make_inputs(bench, bs, rng)
    o = torch.full(shape, float("nan"), dtype=torch.float16, device="cuda")
    k(*xs, out=[o])
    k(*xs, out=[o])
    torch.cuda.synchronize()
    return rel_err(o, fn(*[x.float() for x in xs]))


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in bytes/s (bytes read + written)."""
    import torch

    n = 1 << 28  # 512 MiB of fp16
    a = torch.empty(n, dtype=torch.float16, device="cuda").normal_()
    b = torch.empty_like(a)
    us = bench_fn(lambda i: b.copy_(a), 1)
    return 2 * a.numel() * 2 / (us * 1e-6)


def graphed(fn_i, n_sets):
    """Capture fn_i(i) into one CUDA graph per input set; returns replay(i)."""
    graphs = [g for g, _ in capture_graphs([lambda i=i: fn_i(i) for i in range(n_sets)])]
    return lambda i: graphs[i].replay()


def versions_line() -> str:
    import torch

    v = f"torch {torch.__version__}, CUDA {torch.version.cuda}, Python {platform.python_version()}"
    try:
        import triton
        v += f", triton {triton.__version__}"
    except ImportError:
        pass
    return v


def table(a) -> int:
    """One row per (benchmark, bs), one column per variant: graph-replay µs."""
    import torch

    import mirage.runtime as rt
    from benchmarks import BENCHMARKS

    defs = torch_defs()
    rng = np.random.default_rng()
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    want_bs = {int(x) for x in a.bs.split(",") if x}
    want_v = [v for v in a.variants.split(",") if v]
    groups: dict = {}
    for name, variant, bs, path in find_bundles(a.bundle_dir, tuple(x for x in a.only.split(",") if x)):
        if (want_bs and bs not in want_bs) or (want_v and variant not in want_v):
            continue
        groups.setdefault((name, bs), {})[variant] = path
    allv = sorted({v for g in groups.values() for v in g}, key=lambda v: (v != "fused", v))
    rows, bad = [], 0
    for (name, bs), paths in sorted(groups.items()):
        bench, fn = BENCHMARKS[name], defs[name]
        in_bytes = sum(int(np.prod(s)) * 2 for s in bench.input_shapes(bs))
        n_sets = max(1, min(16, int(np.ceil(a.l2_multiple * l2 / in_bytes))))
        sets = [make_inputs(bench, bs, rng) for _ in range(n_sets)]
        ref0 = fn(*[x.float() for x in sets[0]])
        outs = [torch.empty(ref0.shape, dtype=torch.float16, device="cuda") for _ in range(n_sets)]
        r = {}
        for variant in allv:
            if variant not in paths:
                continue
            try:
                k = rt.load(paths[variant])
                err = poisoned_check(k, bench, bs, rng, fn, ref0.shape)
                t = bench_fn(graphed(lambda i: k(*sets[i], out=[outs[i]]), n_sets), n_sets)
                ts = steady_fn(lambda i: k(*sets[i], out=[outs[i]]), n_sets)
                outs[0].fill_(float("nan"))
                k(*sets[0], out=[outs[0]])
                torch.cuda.synchronize()
                err = max(err, rel_err(outs[0], ref0)) if err == err else err
            except Exception as ex:  # report, go on
                print(f"{name} bs={bs} {variant}: ERROR {type(ex).__name__}: {ex}", flush=True)
                t, ts, err = float("nan"), float("nan"), float("nan")
            ok = err == err and err <= a.tol
            bad += not ok
            r[variant] = (t, ts, err, ok)
            print(f"{name:18s} bs={bs} {variant:24s} {t:7.1f} µs, back to back {ts:7.1f} µs  err {err:.1e} "
                  f"{'ok' if ok else 'WRONG'}", flush=True)
        cg = None
        if not a.no_compile:
            cfn = torch.compile(fn, dynamic=False)
            cg = (bench_fn(graphed(lambda i: cfn(*sets[i]), n_sets), n_sets), steady_fn(lambda i: cfn(*sets[i]), n_sets))
        rows.append((name, bs, r, cg))
    lines = [f"# {a.title}", "",
             f"- device: {props.name}",
             f"- date: {datetime.datetime.now().isoformat(timespec='minutes')}",
             f"- versions: {versions_line()}",
             "- µs: medians of triton.testing.do_bench, replayed CUDA graphs (one per input set, sets "
             f"spanning {a.l2_multiple:g}× L2), each call alone / back to back (`steady_fn`); (×) = time / time "
             "of `fused` (all on), each call alone; every bundle checked "
             f"first (NaN-poisoned output, launched twice, tolerance {a.tol:g}): ✗ marks a wrong result", "",
             "| benchmark | bs | " + " | ".join(allv) + " | compile+graph |",
             "|---|---|" + "---|" * (len(allv) + 1)]
    for name, bs, r, cg in rows:
        base = r.get("fused", (float("nan"),))[0]
        cells = []
        for v in allv:
            if v not in r:
                cells.append("-")
                continue
            t, ts, err, ok = r[v]
            cells.append(f"{t:.1f} / {ts:.1f}" + ("" if v == "fused" else f" ({t / base:.2f}×)") + ("" if ok else " ✗"))
        lines.append(f"| {name} | {bs} | " + " | ".join(cells) + (f" | {cg[0]:.1f} / {cg[1]:.1f} |" if cg else " | - |"))
    _write_table(a.out, lines)
    print(f"{bad} wrong")
    return 1 if bad else (0 if rows else 2)


TORCH_KEYS = ("eager", "library", "compile", "compile_graph")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundle_dir")
    ap.add_argument("--only", default="")
    ap.add_argument("--variant", default="fused",
                    help="bundle variants to time, comma-separated; the first is 'ours' (search-top, fused, ...)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "gpu_bench.md"))
    ap.add_argument("--l2-multiple", type=float, default=4.0, help="input sets span this many L2 sizes")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile variants")
    ap.add_argument("--table", action="store_true", help="one column per variant (ablation / sweep)")
    ap.add_argument("--bs", default="", help="--table: batch sizes (default all)")
    ap.add_argument("--variants", default="", help="--table: variants (default all)")
    ap.add_argument("--tol", type=float, default=5e-3)
    ap.add_argument("--title", default="Ablation on the GPU: time with each optimization off")
    a = ap.parse_args(argv)
    import torch

    if a.table:
        return table(a)

    import mirage.runtime as rt
    from benchmarks import BENCHMARKS

    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
    defs, lib = torch_defs(), torch_library_defs()
    rng = np.random.default_rng()
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    bw = copy_bandwidth()
    print(f"device {props.name}, copy bandwidth {bw / 1e12:.2f} TB/s, L2 {l2 >> 20} MiB", flush=True)
    variants = [v for v in a.variant.split(",") if v]
    found = {}
    for name, variant, bs, path in find_bundles(a.bundle_dir, tuple(x for x in a.only.split(",") if x)):
        found.setdefault((name, bs), {})[variant] = path
    rows = []
    for (name, bs), paths in sorted(found.items()):
        if variants[0] not in paths:
            continue
        bench, fn = BENCHMARKS[name], defs[name]
        in_bytes = sum(int(np.prod(s)) * 2 for s in bench.input_shapes(bs))
        n_sets = max(1, min(16, int(np.ceil(a.l2_multiple * l2 / in_bytes))))
        sets = [make_inputs(bench, bs, rng) for _ in range(n_sets)]
        ref0 = fn(*[x.float() for x in sets[0]])
        out_bytes = ref0.numel() * 2
        outs = [torch.empty(ref0.shape, dtype=torch.float16, device="cuda") for _ in range(n_sets)]
        r = {"name": name, "bs": bs, "cols": {}}
        for v in variants:
            if v not in paths:
                continue
            k = rt.load(paths[v])
            err = poisoned_check(k, bench, bs, rng, fn, ref0.shape)  # a variant bundle chooses here
            # two ways to run it, as PyTorch's compile and compile+graph: a CUDA graph, and
            # plain calls on the runtime's fast path (outputs from torch's allocator); the
            # faster of each timing is what a user gets
            t_graph = bench_fn(graphed(lambda i: k(*sets[i], out=[outs[i]]), n_sets), n_sets)
            t_plain = bench_fn(lambda i: k(*sets[i]), n_sets)
            t_steady = min(steady_fn(lambda i: k(*sets[i], out=[outs[i]]), n_sets),
                           steady_fn(lambda i: k(*sets[i]), n_sets, graph=False))
            chosen = getattr(k, "report", {}).get("variant", "")
            kernels = len(rt.load_bundle(os.path.join(paths[v], chosen) if chosen else paths[v]).manifest.kernels)
            r["cols"][v] = dict(graph=t_graph, plain=t_plain, steady=t_steady, err=err, chosen=chosen, kernels=kernels,
                                times=getattr(k, "report", {}).get("times_us"))
            print(f"{name:18s} bs={bs} {v:12s} plain {t_plain:7.1f} / graph {t_graph:7.1f} / back to back {t_steady:7.1f} µs  "
                  f"{kernels} kernel(s)"
                  + (f"  chose {chosen} of {r['cols'][v]['times']}" if chosen else "") + f"  err {err:.1e}", flush=True)
        eager = lambda i: fn(*sets[i])
        r["eager"], r["s_eager"] = bench_fn(eager, n_sets), steady_fn(eager, n_sets, graph=False)
        if name in lib:
            lf = lambda i: lib[name](*sets[i])
            ok = rel_err(lf(0), ref0) < 1e-2
            r["library"] = bench_fn(graphed(lf, n_sets), n_sets) if ok else float("nan")
            r["s_library"] = steady_fn(lf, n_sets) if ok else float("nan")
        if not a.no_compile:
            cfn = torch.compile(fn, dynamic=False)
            comp = lambda i: cfn(*sets[i])
            r["compile"], r["s_compile"] = bench_fn(comp, n_sets), steady_fn(comp, n_sets, graph=False)
            r["compile_graph"], r["s_compile_graph"] = bench_fn(graphed(comp, n_sets), n_sets), steady_fn(comp, n_sets)
        r["floor"] = (in_bytes + out_bytes) / bw * 1e6
        c0 = r["cols"][variants[0]]
        for p, ours in (("", min(c0["graph"], c0["plain"])), ("s_", c0["steady"])):
            r[p + "best_torch"] = min(r[p + key] for key in TORCH_KEYS if p + key in r and r[p + key] == r[p + key])
            r[p + "speedup"], r[p + "frac"] = r[p + "best_torch"] / ours, r["floor"] / ours
        rows.append(r)
        print(f"{name:18s} bs={bs} eager {r['eager']:.1f}  library+graph {r.get('library', float('nan')):.1f}  "
              f"compile {r.get('compile', float('nan')):.1f}  compile+graph {r.get('compile_graph', float('nan')):.1f}  "
              f"=> {r['speedup']:.2f}x, floor {r['floor']:.1f} µs ({r['frac']:.2f}); back to back "
              f"{r['s_speedup']:.2f}x ({r['s_frac']:.2f})", flush=True)
    lines = [f"# GPU benchmark: `{variants[0]}` bundles vs PyTorch", "",
             f"- device: {props.name} (measured copy bandwidth {bw / 1e12:.2f} TB/s)",
             f"- date: {datetime.datetime.now().isoformat(timespec='minutes')}",
             f"- versions: {versions_line()}",
             f"- inputs rotate over sets spanning {a.l2_multiple:g}× L2; 'library' = F.rms_norm / "
             "scaled_dot_product_attention where they apply, replayed as a CUDA graph",
             f"- speedup = best PyTorch (eager, library, compile, compile+graph) / `{variants[0]}`; floor = minimal "
             "bytes (inputs once + output once) at the copy bandwidth; fraction = floor / our time",
             f"- every column checked first against fp32 PyTorch on fresh inputs (NaN-poisoned output); rel. err of "
             f"`{variants[0]}` shown"]
    for p, title in (("", "Each call alone: medians of triton.testing.do_bench (L2 flushed and an event pair "
                          "around every call); our columns: the faster of a CUDA-graph replay (one graph per "
                          "input set) and a plain call"),
                     ("s_", "Back to back: >= 48 calls rotating over the input sets in one CUDA graph (ours, "
                            "library, compile+graph) or one Python loop (ours, eager, compile), timed whole "
                            "(do_bench median) / calls; our columns: the faster of graph and loop")):
        sp = [r[p + "speedup"] for r in rows]
        geo = float(np.exp(np.mean(np.log(sp)))) if sp else float("nan")
        lines += ["", f"## {title}", "",
                  "| benchmark | bs | " + " | ".join(f"{v} µs" for v in variants) + " | eager | library | compile | "
                  "compile+graph | speedup | floor µs | fraction of floor | rel. err |",
                  "|---|---|" + "---|" * (len(variants) + 8)]
        for r in rows:
            cells = []
            for v in variants:
                c = r["cols"].get(v)
                cells.append("-" if c is None else f"{min(c['graph'], c['plain']) if not p else c['steady']:.1f} ({c['kernels']}k"
                             + (f", {c['chosen']}" if c["chosen"] else "") + ")" + ("" if c["err"] <= a.tol else " ✗"))
            f = lambda key: f"{r[p + key]:.1f}" if p + key in r and r[p + key] == r[p + key] else "-"
            lines.append(f"| {r['name']} | {r['bs']} | " + " | ".join(cells) + f" | {f('eager')} | {f('library')} | "
                         f"{f('compile')} | {f('compile_graph')} | {r[p + 'speedup']:.2f}× | {r['floor']:.1f} | "
                         f"{r[p + 'frac']:.2f} | {r['cols'][variants[0]]['err']:.1e} |")
        lines += ["", f"geomean speedup {geo:.2f}×; {sum(x >= 1.0 for x in sp)} of {len(sp)} rows at or above 1.0×; "
                  "(Nk) = kernels launched, and for a variant bundle the variant the runtime chose"]
    _write_table(a.out, lines)
    return 0 if rows else 2


if __name__ == "__main__":
    sys.exit(main())
