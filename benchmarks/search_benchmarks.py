"""Full-size searches of the paper's benchmarks (shapes of DESIGN.md), or, with
`--programs`, the default search (no option but workers and the time limit) on the
ordinary programs of examples/programs.py at LLM decode sizes.

    PYTHONPATH=python python benchmarks/search_benchmarks.py [names...] [--workers 2]
    PYTHONPATH=python python benchmarks/search_benchmarks.py --programs [names...] [--time-limit 180]

Writes benchmarks/results/search_benchmarks.md (or search_default.md).
"""
import argparse
import datetime
import os
import platform
import sys

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "python"),
                os.path.join(os.path.dirname(__file__), "..", "examples")]

import mirage as mi  # noqa: E402
from benchmarks import BENCHMARKS, Benchmark, _rmsnorm_shapes, rmsnorm_numpy  # noqa: E402
from mirage.search import superoptimize  # noqa: E402
from mirage.search.cost import cost  # noqa: E402
from verify_time import cpu  # noqa: E402  (this folder is on the path: the script's own)


def rmsnorm_eps_reference(bs=1, eps=1e-6):
    """RMSNorm with eps as PyTorch modules write it (x * rsqrt(mean(x², -1) + eps) * g) + Linear."""
    g = mi.new_kernel_graph("rmsnorm_eps_linear")
    X, G, W = (g.new_input(s) for s in _rmsnorm_shapes(bs))
    ms = g.mul(g.reduction(g.square(X), 1), g.constant(1.0 / 4096, (1, 1)))
    r = g.rsqrt(g.add(ms, g.constant(eps, (1, 1))))
    g.mark_output(g.matmul(g.mul(g.mul(X, r), G), W))
    return g


def rmsnorm_eps_fused(bs=1, cols=64, krows=64, eps=1e-6):
    """The hand-written single kernel: sum of squares accumulated beside the matmul."""
    g = mi.new_kernel_graph("rmsnorm_eps_linear")
    X, G, W = (g.new_input(s) for s in _rmsnorm_shapes(bs))
    tb = mi.new_threadblock_graph(grid_dim=(6144 // cols, 1, 1), block_dim=(128, 1, 1),
                                  forloop_range=4096 // krows, reduction_dimx=64)
    tX = tb.new_input(X, input_map=(-1, -1, -1), forloop_dim=1)
    tG = tb.new_input(G, input_map=(-1, -1, -1), forloop_dim=0)
    tW = tb.new_input(W, input_map=(1, -1, -1), forloop_dim=0)
    tS = tb.forloop_accum(tb.matmul(tb.mul(tX, tG), tW))
    ss = tb.forloop_accum(tb.square(tX), "sum")
    r = tb.rsqrt(tb.add(tb.mul(ss, tb.constant(1.0 / 4096, (1, 1))), tb.constant(eps, (1, 1))))
    tb.new_output(tb.mul(tS, r), output_map=(1, -1, -1))
    g.mark_output(g.customized([X, G, W], tb)[0])
    return g


BENCHMARKS = dict(BENCHMARKS, rmsnorm_eps_linear=Benchmark(
    "rmsnorm_eps_linear", _rmsnorm_shapes, rmsnorm_eps_reference, rmsnorm_eps_fused, rmsnorm_numpy))

PRESET = {"rmsnorm_linear": ("mlp", {}), "rmsnorm_eps_linear": ("mlp", {}), "gated_mlp": ("mlp", {}), "lora": ("lora", {}),
          "gqa": ("attention", {}), "qknorm_attention": ("attention", {}),
          # one row-wise block graph of the element-wise chain (as the paper's nTrans kernel)
          "ntrans": (None, dict(max_kernel_ops=1, max_graph_defs=1, max_block_ops=9, max_block_outputs=1,
                                tile_sizes=(1,), franges=(1,), predefined_ops=False))}


def default_programs(a):
    """The default call on each ordinary program: time (with the load average), states,
    kernels before and after, the cost model's gain and how the best was verified."""
    from programs import PROGRAMS

    names = a.names or list(PROGRAMS)
    out = ["# The default search on ordinary programs", "",
           f"Machine: {platform.node()} ({cpu()}), {a.workers} worker "
           f"processes, {datetime.date.today()}.",
           f"Command: `PYTHONPATH=python python benchmarks/search_benchmarks.py --programs {' '.join(a.names)} "
           f"--workers {a.workers} --time-limit {a.time_limit:g}`", "",
           "Each program (examples/programs.py, size `decode`: 8 tokens, hidden 4096) is searched by "
           "`superoptimize(g, \"auto\", measure=False, workers=..., time_limit=...)`. Costs are the analytical "
           "cost model (H100 parameters). Load: the 1-minute load average before / after the search.", "",
           "| program | search time | load | states | kernels before → after | reference cost | best cost | gain "
           "| best verified by |",
           "|---|---|---|---|---|---|---|---|---|"]
    kernels = lambda g: len(g.ops) - sum(op.kind == "constant" for op in g.ops)
    for n in names:
        ref = PROGRAMS[n].reference("decode")
        load0 = os.getloadavg()[0]
        res = superoptimize(ref, "auto", verbose=True, measure=False, workers=a.workers, time_limit=a.time_limit)
        c = res.candidates[0]
        if a.save:
            os.makedirs(a.save, exist_ok=True)
            with open(os.path.join(a.save, f"{n}.mlir"), "w") as f:
                f.write(c.graph.to_mlir())
        how = "(reference)" if c.key == "reference" else c.verification.split(" (")[0]
        out.append(f"| {n} | {res.seconds:.1f} s{' (' + res.stats.stopped + ')' if res.stats.stopped else ''} | "
                   f"{load0:.1f} / {os.getloadavg()[0]:.1f} | {res.stats.states} | "
                   f"{kernels(ref)} → {kernels(c.graph)} | {res.reference_cost.time * 1e6:.2f} us | "
                   f"{c.time_us:.2f} us | {res.reference_cost.time / c.cost.time:.2f}× | {how} |")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--programs", action="store_true", help="the default search on examples/programs.py")
    ap.add_argument("--out")
    ap.add_argument("--save", help="with --programs: write each program's best μGraph to <dir>/<name>.mlir")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=600)
    ap.add_argument("--bs", type=int, default=1, help="batch size of the benchmarks (not --programs)")
    ap.add_argument("--auto", action="store_true", help="the default call (preset auto) instead of PRESET")
    a = ap.parse_args()
    results = os.path.join(os.path.dirname(__file__), "results")
    if a.programs:
        out = default_programs(a)
        with open(a.out or os.path.join(results, "search_default.md"), "w") as f:
            f.write("\n".join(out) + "\n")
        print("\n".join(out))
        return
    a.names = a.names or list(PRESET)
    a.out = a.out or os.path.join(results, "search_benchmarks.md")
    out = ["# Full-size searches", "",
           f"Machine: {platform.node()} ({cpu()}), {a.workers} worker "
           f"processes, {datetime.date.today()}.",
           f"Command: `PYTHONPATH=python python benchmarks/search_benchmarks.py {' '.join(a.names)} "
           f"--workers {a.workers} --time-limit {a.time_limit:g} --bs {a.bs}{' --auto' if a.auto else ''}`", "",
           "Load: the 1-minute load average before / after each search.", "",
           "Costs are the analytical cost model (H100 parameters). 'found' = the best candidate has the "
           "kernel structure of the paper's figure (one graph-defined kernel; GQA: a two-kernel split-KV "
           "candidate is among the verified ones or the ranked rest).", "",
           "| benchmark | bs | preset | search time | load | states | candidates | formally verified | best cost "
           "| kernels | hand-fused cost | reference cost | found |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in a.names:
        b = BENCHMARKS[n]
        preset, kw = ("auto", {}) if a.auto else PRESET.get(n, (None, {}))
        load0 = os.getloadavg()[0]
        res = superoptimize(b.reference(a.bs), preset, verbose=True, workers=a.workers, time_limit=a.time_limit,
                            measure=False, cache_dir=None, **kw)
        print(res.report(), file=sys.stderr)
        c = res.candidates[0]
        gds = lambda g: sum(op.kind == "graph_def" for op in g.ops)
        if n in ("gqa", "qknorm_attention"):
            two = [x for x in res.candidates + res.others if gds(x.graph) == 2 and len(x.graph.ops) == 2]
            found = f"two-kernel split-KV: {two[0].time_us:.2f} us" if two else "no"
        else:
            found = "yes" if len(c.graph.ops) == 1 and gds(c.graph) == 1 else "no"
        out.append(f"| {n} | {a.bs} | {preset} | {res.seconds:.1f} s{' (' + res.stats.stopped + ')' if res.stats.stopped else ''} | "
                   f"{load0:.1f} / {os.getloadavg()[0]:.1f} | {res.stats.states} | {res.stats.candidates} | {res.stats.formal - res.stats.formal_rejected} | "
                   f"{c.time_us:.2f} us | {c.cost.launches} | "
                   f"{cost(b.fused(a.bs)).time * 1e6:.2f} us | {res.reference_cost.time * 1e6:.2f} us | {found} |")
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
