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
          "gqa": ("attention", {"tile_sizes": (1, 16, 64)})}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*", default=list(PRESET))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=600)
    a = ap.parse_args()
    out = ["# Full-size searches", "",
           f"Machine: {platform.node()} ({os.cpu_count()} cores), {a.workers} workers, {datetime.date.today()}", "",
           "| benchmark | preset | search time | states | verified | best cost | kernels | hand-fused cost | reference cost |",
           "|---|---|---|---|---|---|---|---|---|"]
    for n in a.names:
        b = BENCHMARKS[n]
        preset, kw = PRESET.get(n, (None, {}))
        res = superoptimize(b.reference(1), preset, workers=a.workers, time_limit=a.time_limit, **kw)
        print(res.report(), file=sys.stderr)
        c = res.candidates[0]
        out.append(f"| {n} | {preset} | {res.seconds:.1f} s{' (limit)' if res.stats.stopped else ''} | "
                   f"{res.stats.states} | {res.stats.verified} | {c.time_us:.2f} us | {c.cost.launches} | "
                   f"{cost(b.fused(1)).time * 1e6:.2f} us | {res.reference_cost.time * 1e6:.2f} us |")
    path = os.path.join(os.path.dirname(__file__), "results", "search_benchmarks.md")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
