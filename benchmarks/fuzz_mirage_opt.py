#!/usr/bin/env python3
"""The long fuzz run of mirage-opt (issue 16): N mutated inputs through the five modes
(no pass, --mirage-superoptimize, --mirage-verify, --convert-mirage-to-gpu,
--mirage-smem-plan), with the fuzzer of `mirage.tools.fuzz` (the CI test runs a few
hundred of the same cases).

    python benchmarks/fuzz_mirage_opt.py [-n 10000] [--seed 0] [--jobs 2] [--timeout 30]
                                         [--time-budget SECONDS] [--markdown]

Prints the count of every outcome per mode, the superoptimize runs past their time
limit, and up to five examples of each bad outcome (case index, seed chunk, mutators,
message: `mirage.tools.fuzz.case(seeds(), seed, index)` rebuilds the input). With
`--time-budget` the run stops starting new cases after that many seconds and says how
many it ran. Exit status 1 if any run ended in an internal error, a crash, a hang or an
error without a location.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))


def main(argv=None) -> int:
    from mirage.tools import fuzz as F

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=10000, help="inputs (each runs in every mode)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes running cases")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per run before it counts as a hang")
    ap.add_argument("--time-budget", type=float, default=None, help="stop starting cases after this many seconds")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown only")
    a = ap.parse_args(argv)

    seed_list = F.seeds(os.path.join(HERE, ".."))  # this checkout's .mlir files
    t0 = time.monotonic()
    last = [t0]

    def progress(rep):
        now = time.monotonic()
        if now - last[0] >= 30:
            last[0] = now
            print(f"[fuzz] {rep.cases}/{a.n} cases, {now - t0:.0f} s, bad so far: {rep.bad() or 'none'}",
                  file=sys.stderr, flush=True)

    n = a.n
    rep = F.fuzz(n, seed=a.seed, seed_list=seed_list, timeout=a.timeout, jobs=a.jobs, progress=progress,
                 deadline=None if a.time_budget is None else t0 + a.time_budget)
    runs = sum(sum(c.values()) for c in rep.counts.values())
    print(f"mirage-opt fuzz: seed {a.seed}, {rep.cases} inputs of {n} asked for "
          f"({len(seed_list)} seed chunks), {runs} runs, {rep.seconds:.0f} s, jobs {a.jobs}, "
          f"per-run timeout {a.timeout:g} s, superoptimize time-limit {F.SUPER_TIME_LIMIT:g} s")
    print(rep.table())
    print(f"superoptimize runs past time-limit + {F.LATE_GRACE:g} s: {len(rep.late)}"
          + (f" {rep.late[:10]}" if rep.late else ""))
    if not a.markdown:
        for (mode, outcome), ex in sorted(rep.examples.items()):
            if outcome in ("internal", "unlocated", "crash", "hang"):
                print(f"\n{mode} / {outcome}:")
                for e in ex:
                    print("  ", e)
    return 1 if rep.bad() else 0


if __name__ == "__main__":
    sys.exit(main())
