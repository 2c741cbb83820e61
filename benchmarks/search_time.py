"""Table 5 of the Mirage paper for RMSNorm+Linear: search time vs max block-graph ops,
with and without abstract-expression pruning (the latter capped), states explored.

    PYTHONPATH=python python benchmarks/search_time.py [--bs 1] [--cap 2000000] [--cap-seconds 120]
        [--workers 2] [--ops 5,6,7,8,9,10,11]

The state cap (`max_states`) applies per work item (one first kernel op with one
schedule); the runs without pruning also stop at `--cap-seconds`.

Writes benchmarks/results/search_time.md (machine and date included).
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bs", type=int, default=1)
    ap.add_argument("--cap", type=int, default=2_000_000, help="state cap of the runs without pruning")
    ap.add_argument("--cap-seconds", type=float, default=120.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ops", default="5,6,7,8,9,10,11")
    a = ap.parse_args()
    ref = BENCHMARKS["rmsnorm_linear"].reference(a.bs)
    rows = []
    for n in [int(x) for x in a.ops.split(",")]:
        r = []
        for prune in (True, False):
            res = superoptimize(ref, "mlp", workers=a.workers, max_block_ops=n, prune=prune,
                                max_states=None if prune else a.cap,
                                time_limit=a.cap_seconds)
            fused = len(res.best.ops) == 1 and res.best.ops[0].kind == "graph_def"
            r.append((res.seconds, res.stats.states, res.stats.stopped, fused, res.candidates[0].time_us))
            print(n, prune, r[-1], file=sys.stderr)
        rows.append((n, r))
    out = ["# Search time for RMSNorm+Linear (paper Table 5)", "",
           f"Machine: {platform.node()} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), "
           f"{a.workers} worker processes; date {datetime.date.today()}; bs={a.bs}, preset mlp.",
           f"Command: `PYTHONPATH=python python benchmarks/search_time.py --workers {a.workers} --ops {a.ops} "
           f"--cap {a.cap} --cap-seconds {a.cap_seconds:g}`", "",
           "| max block ops | with pruning: time | states | fused kernel found | best cost | "
           "without pruning: time | states | fused | best cost |",
           "|---|---|---|---|---|---|---|---|---|"]
    for n, ((t1, s1, st1, f1, c1), (t2, s2, st2, f2, c2)) in rows:
        cap = (f" (capped: {st2}{' + time limit' if t2 >= a.cap_seconds and st2 != 'time limit' else ''})"
               if st2 else "")
        out.append(f"| {n} | {t1:.1f} s | {s1} | {'yes' if f1 else 'no'} | {c1:.2f} us | {t2:.1f} s{cap} | {s2} | "
                   f"{'yes' if f2 else 'no'} | {c2:.2f} us |")
    out += ["", "Block-graph ops count input iterators, compute ops, accumulators and output savers.",
            "Times include ranking and the equivalence checks (float64 + formal verifier) of the best "
            "candidates. Without pruning the state cap applies per work item and the whole run stops at "
            f"{a.cap_seconds:g} s, so those rows are lower bounds on the time and the states."]
    path = os.path.join(os.path.dirname(__file__), "results", "search_time.md")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
