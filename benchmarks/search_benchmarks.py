"""Full-size searches of the paper's benchmarks (shapes of DESIGN.md).

    PYTHONPATH=python python benchmarks/search_benchmarks.py [names...] [--workers 2]

Writes benchmarks/results/search_benchmarks.md.
"""
import argparse
import datetime
import os
import platform
import sys

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "python"),
                os.path.join(os.path.dirname(__file__), "..", "examples")]

from benchmarks import BENCHMARKS  # noqa: E402
from mirage.search import superoptimize  # noqa: E402
from mirage.search.cost import cost  # noqa: E402

PRESET = {"rmsnorm_linear": ("mlp", {}), "gated_mlp": ("mlp", {}), "lora": ("lora", {}),
          "gqa": ("attention", {}), "qknorm_attention": ("attention", {}),
          # one row-wise block graph of the element-wise chain (as the paper's nTrans kernel)
          "ntrans": (None, dict(max_kernel_ops=1, max_graph_defs=1, max_block_ops=9, max_block_outputs=1,
                                tile_sizes=(1,), franges=(1,), predefined_ops=False))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*", default=list(PRESET))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=600)
    a = ap.parse_args()
    out = ["# Full-size searches", "",
           f"Machine: {platform.node()} ({platform.machine()}, {os.cpu_count()} cores), {a.workers} worker "
           f"processes, {datetime.date.today()}.",
           f"Command: `PYTHONPATH=python python benchmarks/search_benchmarks.py {' '.join(a.names)} "
           f"--workers {a.workers} --time-limit {a.time_limit:g}`", "",
           "Costs are the analytical cost model (H100 parameters). 'found' = the best candidate has the "
           "kernel structure of the paper's figure (one graph-defined kernel; GQA: a two-kernel split-KV "
           "candidate is among the verified ones or the ranked rest).", "",
           "| benchmark | preset | search time | states | candidates | formally verified | best cost | kernels "
           "| hand-fused cost | reference cost | found |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in a.names:
        b = BENCHMARKS[n]
        preset, kw = PRESET.get(n, (None, {}))
        res = superoptimize(b.reference(1), preset, verbose=True, workers=a.workers, time_limit=a.time_limit, **kw)
        print(res.report(), file=sys.stderr)
        c = res.candidates[0]
        gds = lambda g: sum(op.kind == "graph_def" for op in g.ops)
        if n in ("gqa", "qknorm_attention"):
            two = [x for x in res.candidates + res.others if gds(x.graph) == 2 and len(x.graph.ops) == 2]
            found = f"two-kernel split-KV: {two[0].time_us:.2f} us" if two else "no"
        else:
            found = "yes" if len(c.graph.ops) == 1 and gds(c.graph) == 1 else "no"
        out.append(f"| {n} | {preset} | {res.seconds:.1f} s{' (' + res.stats.stopped + ')' if res.stats.stopped else ''} | "
                   f"{res.stats.states} | {res.stats.candidates} | {res.stats.formal - res.stats.formal_rejected} | "
                   f"{c.time_us:.2f} us | {c.cost.launches} | "
                   f"{cost(b.fused(1)).time * 1e6:.2f} us | {res.reference_cost.time * 1e6:.2f} us | {found} |")
    path = os.path.join(os.path.dirname(__file__), "results", "search_benchmarks.md")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
