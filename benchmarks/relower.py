#!/usr/bin/env python3
"""A lowering change against the one before it, on the same search picks: lower each
row's pick (the `.mlir` that `mbci.py --build` saved) with this tree into sweep bundles
named `<row>__<tag>`, beside those another tree wrote there, the rows' bundles kept
together in meta.json so that `--run-sweep` times them interleaved.

    # in each tree's environment (mirage imported from the installed package: a git
    # worktree of the older commit, installed in its own virtual environment), one tag each
    python benchmarks/relower.py exp_rt/mbci29 OUT --tag old
    python benchmarks/relower.py exp_rt/mbci29 OUT --tag new [--rows G9,S2]
    # GPU machine: each bundle checked against fp32 PyTorch, then timed (run it twice or more)
    PYTHONPATH=python:examples:benchmarks python3 benchmarks/mbci.py --run-sweep OUT
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # mbci.py; mirage is the environment's (not this tree's python/)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("picks", help="a `mbci.py --build` folder (its <row>.mlir files)")
    ap.add_argument("out", help="the sweep folder to add the bundles to")
    ap.add_argument("--tag", required=True, help="this tree's name in the bundles' names")
    ap.add_argument("--rows", default="", help="comma-separated rows (default: every .mlir there)")
    a = ap.parse_args()
    from mirage.mlir.importer import load_mlir  # first: mbci.py puts this tree's python/ on the path

    from mbci import ROWS, sweep_bundle

    rows = [r for r in a.rows.split(",") if r] or sorted(
        (os.path.basename(f)[:-5] for f in glob.glob(os.path.join(a.picks, "*.mlir"))), key=list(ROWS).index)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "meta.json")
    meta = json.load(open(path)) if os.path.exists(path) else {}
    failed = 0
    for row in rows:
        entry = sweep_bundle(a.out, f"{row}__{a.tag}", row, "chain", load_mlir(os.path.join(a.picks, row + ".mlir"))[0])
        failed += entry is None
        if entry is not None:
            meta[f"{row}__{a.tag}"] = entry
    order = list(ROWS)  # a row's bundles together, in the order the trees wrote them
    meta = dict(sorted(meta.items(), key=lambda kv: order.index(kv[1]["row"])))
    with open(path, "w") as f:
        json.dump(meta, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
