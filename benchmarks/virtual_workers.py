#!/usr/bin/env python3
"""Virtual workers: what a multi-worker search's lanes cost without the machine's contention.

    PYTHONPATH=python:examples:benchmarks python benchmarks/search_scaling.py --max-block-ops 11 \\
        --executor local gqa --workers 1 16 --trace /tmp/tra --out /tmp/scaling.md
    PYTHONPATH=python:examples:benchmarks python benchmarks/virtual_workers.py gqa --max-block-ops 11 \\
        --trace /tmp/tra --pids 3280,3281,...     # the pool processes of the 16-worker run (ls /tmp/tra)

Each pool process's units, in the order its trace lists them (a unit cut into pieces goes to
the first process that ran a piece of it, whole), are run again one process at a time, each
process forked from the driver's generator right after `work_items`, as the local pool's
workers are: their CPU against the same units run by one process, forked the same way.
What is left is the cost of the workers' separate value memos and block-graph DFS records
(driver._Lanes), not of the CPUs slowing each other down (search_scaling.py's
`--independent` measures that). With `--counts`, also the block-graph DFS states run fresh
and replayed, and the tiles made (`_BlockCtx._new_tile`), summed over the lanes.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "python"), HERE]


def _in_child(fn):
    """fn() in a forked child (this process's memory as it is now, out of the garbage
    collector's reach as in the pool's workers: `executor._local_init`); its result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        gc.freeze()
        out = fn()
        with os.fdopen(w, "wb") as f:
            pickle.dump(out, f)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = pickle.load(f)
    os.waitpid(pid, 0)
    return out


def _counting():
    """Counters of fresh and replayed block-graph DFS states and of tiles made."""
    from mirage.search import generator as G

    cnt = {"fresh states": 0, "replayed states": 0, "tiles made": 0}
    run, new = G._BlockCtx.run, G._BlockCtx._new_tile

    def counted_run(self, key):
        rep = key in self.g._roots
        b0 = self.g.stats.block_states
        yield from run(self, key)
        cnt["replayed states" if rep else "fresh states"] += self.g.stats.block_states - b0

    def counted_new(self, *a):
        cnt["tiles made"] += 1
        return new(self, *a)

    G._BlockCtx.run, G._BlockCtx._new_tile = counted_run, counted_new
    return cnt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name")
    ap.add_argument("--max-block-ops", type=int, default=7)
    ap.add_argument("--trace", required=True, help="search_scaling.py's --trace folder")
    ap.add_argument("--pids", required=True, help="comma-separated pool processes of the run to replay")
    ap.add_argument("--counts", action="store_true")
    ap.add_argument("--rounds", type=int, default=1, help="one process and the lanes, this many times in turn")
    a = ap.parse_args(argv)

    from search_benchmarks import BENCHMARKS
    from mirage.search import driver as D
    from mirage.search.config import make_config
    from mirage.target import DEFAULT

    ref = BENCHMARKS[a.name].reference(1)
    cfg = make_config("attention", max_block_ops=a.max_block_ops)  # as search_scaling.py
    pro, _, bound, gen, items, _ = D._start(ref, cfg, DEFAULT, {})
    units, meta = _in_child(lambda: D.split(gen, items))  # as the pool's workers cut them: gen stays as it is
    by_repr = {repr(u): u for u in units}
    lanes, taken = [], set()
    for pid in a.pids.split(","):
        lane = []
        with open(os.path.join(a.trace, f"{pid}.jsonl")) as f:
            for line in f:
                rec = json.loads(line)
                if rec[0] == "unit" and rec[1] in by_repr and rec[1] not in taken:
                    taken.add(rec[1])
                    lane.append(rec[1])
        lanes.append(lane)
    missing = len(units) - len(taken)

    def run(seq):
        def child():
            cnt = _counting() if a.counts else {}
            D._init_worker(None, None, ref, cfg, pro, bound, DEFAULT, True, gen)
            per = {}
            for r in seq:
                c = time.process_time()
                D._run_item(by_repr[r])
                per[r] = time.process_time() - c
            return per, cnt
        return _in_child(child)

    print(f"{a.name}, max_block_ops {a.max_block_ops}: {len(taken)} units in {len(lanes)} lanes"
          + (f" ({missing} units not in the trace, left out)" if missing else ""), flush=True)
    order = [repr(units[k]) for k in D._Lanes(units, meta, 1).order if repr(units[k]) in taken]
    for r in range(a.rounds):  # one process, then the lanes: a machine whose speed drifts moves both
        one, cnt1 = run(order)
        total, cnt = 0.0, {}
        for lane in lanes:
            per, c = run(lane)
            total += sum(per.values())
            for k, v in c.items():
                cnt[k] = cnt.get(k, 0) + v
        base = sum(one.values())
        print(f"round {r + 1}: one process {base:.2f} s of CPU; {len(lanes)} lanes, one at a time: {total:.2f} s "
              f"(x{total / base:.3f})", flush=True)
        if a.counts:
            print("  one process: " + ", ".join(f"{k} {v}" for k, v in cnt1.items()))
            print("  the lanes:   " + ", ".join(f"{k} {v}" for k, v in cnt.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
