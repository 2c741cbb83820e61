#!/usr/bin/env python3
"""Run the search as a user would (the default call) on every benchmark's reference
program and keep what it returns, for the GPU benchmarks of what a user gets:

    PYTHONPATH=python:examples python benchmarks/search_picks.py PICKS_DIR
        [--only gqa,...] [--bs 1,8] [--time-limit 300] [--top 3]

Writes PICKS_DIR/<benchmark>_bs<bs>/: `rank<k>.mlir` for the verified candidates in the
search's rank order (rank0 is its pick; the reference program is among them when ranked
there), `reference.mlir`, and `search.json` (seconds, states, stop reason, each
candidate's kernels and cost-model time, and the machine's load average). A directory
that already has `search.json` is kept (delete it to search again).
`build_bundles.py --picks PICKS_DIR` turns them into bundles: `search` (the pick alone)
and `search-top` (every rank plus the reference, chosen on the GPU at first use).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "python"), os.path.join(HERE, "..", "examples")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--only", default="")
    ap.add_argument("--bs", default="1,8")
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--top", type=int, default=3, help="verified candidates kept besides the reference")
    a = ap.parse_args(argv)
    from benchmarks import BENCHMARKS
    from mirage.search import superoptimize

    names = [n for n in BENCHMARKS if not a.only or n in a.only.split(",")]
    for name in names:
        for bs in (int(x) for x in a.bs.split(",")):
            d = os.path.join(a.out_dir, f"{name}_bs{bs}")
            if os.path.exists(os.path.join(d, "search.json")):
                print(f"kept  {d}", flush=True)
                continue
            os.makedirs(d, exist_ok=True)
            ref = BENCHMARKS[name].reference(bs)
            load0 = os.getloadavg()
            t0 = time.time()
            res = superoptimize(ref, "auto", time_limit=a.time_limit)
            secs = time.time() - t0
            cands = []
            for k, c in enumerate(res.candidates[:a.top + 1]):
                with open(os.path.join(d, f"rank{k}.mlir"), "w") as f:
                    f.write(c.graph.to_mlir())
                cands.append({"rank": k, "reference": c.key == "reference", "kernels": len(c.graph.ops),
                              "cost_us": round(c.time_us, 2)})
            with open(os.path.join(d, "reference.mlir"), "w") as f:
                f.write(ref.to_mlir())
            info = {"benchmark": name, "bs": bs, "call": f"superoptimize(config='auto', time_limit={a.time_limit:g})",
                    "seconds": round(secs, 1), "states": res.stats.states, "stopped": res.stats.stopped or "",
                    "load_before": [round(x, 2) for x in load0], "load_after": [round(x, 2) for x in os.getloadavg()],
                    "candidates": cands, "date": time.strftime("%Y-%m-%dT%H:%M")}
            with open(os.path.join(d, "search.json"), "w") as f:
                json.dump(info, f, indent=1)
            pick = cands[0]
            print(f"done  {name} bs={bs}: {secs:.0f} s, pick {'reference' if pick['reference'] else 'rank0'} "
                  f"({pick['kernels']} kernels, cost {pick['cost_us']} µs), {len(cands)} kept", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
