#!/usr/bin/env python3
"""On the GPU machine: what the runtime measures for each variant bundle (`search-top`),
for comparing the search's cost model with measured times.

    PYTHONPATH=python:examples python3 benchmarks/select_report.py BUNDLE_DIR --out select.json

For every <benchmark>_search-top_bs<bs> bundle: loads it with a private choice store,
calls it once on fresh random inputs (the runtime checks and times every variant), and
writes {bundle: {"search": search.json, "report": the runtime's report}} to --out.
`--rank PATH` (here, on the CPU machine) prints the cost model's Spearman rank
correlation with the measured times of the candidates (default lowering options); with
`--recost PICKS_DIR` (search_picks.py's output the bundles were built from), the
estimates are recomputed by the current cost model from the candidates' MLIR (for the
target `--target`), so a change of the model is judged on the same measurements.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "python"), os.path.join(HERE, "..", "examples")]


def measure(bundle_dir: str, out: str) -> int:
    import numpy as np

    import mirage.runtime as rt
    from benchmarks import BENCHMARKS
    from gpu_check import find_bundles, make_inputs

    rng = np.random.default_rng()
    data = {}
    for name, variant, bs, path in find_bundles(bundle_dir):
        if variant != "search-top":
            continue
        k = rt.load(path, cache_dir=None)
        k(*make_inputs(BENCHMARKS[name], bs, rng))
        data[os.path.basename(path)] = {"search": json.load(open(os.path.join(path, "search.json"))),
                                        "report": k.report}
        print(os.path.basename(path), k.report["variant"], k.report["times_us"], flush=True)
    with open(out, "w") as f:
        json.dump(data, f, indent=1)
    return 0


def rank(path: str, recost: str = "", target: str = "H100-SXM") -> int:
    from mirage.search.measure import spearman

    data = json.load(open(path))
    xs, ys, rhos, top1 = [], [], [], 0
    print("| bundle | candidates (cost model µs → measured µs) | Spearman |")
    print("|---|---|---|")
    for name, d in sorted(data.items()):
        times = d["report"]["times_us"]
        pairs = [(_recost(recost, d["search"], c, target) if recost else c["cost_us"],
                  times.get("reference" if c["reference"] else f"rank{c['rank']}"))
                 for c in d["search"]["candidates"]]
        pairs = [(a, b) for a, b in pairs if b is not None]
        rho = spearman([a for a, _ in pairs], [b for _, b in pairs])
        rhos.append(rho)
        pick = next(b for a, b in pairs if a == min(x for x, _ in pairs))  # ties: the search's order
        top1 += pick == min(b for _, b in pairs)
        xs += [a for a, _ in pairs]
        ys += [b for _, b in pairs]
        cells = ", ".join(f"{a:g} → {b:g}" for a, b in pairs)
        print(f"| {name} | {cells} | {rho:.2f} |")
    print(f"\nall candidates pooled: Spearman {spearman(xs, ys):.2f} over {len(xs)}; mean per bundle "
          f"{sum(rhos) / len(rhos):.2f}; the model's pick measured fastest in {top1} of {len(rhos)}")
    return 0


def _recost(picks: str, search: dict, cand: dict, target: str) -> float:
    from mirage.mlir.importer import parse_mlir
    from mirage.search.cost import cost
    from mirage.target import TARGETS

    d = os.path.join(picks, f"{search['benchmark']}_bs{search['bs']}")
    f = "reference.mlir" if cand["reference"] else f"rank{cand['rank']}.mlir"
    return round(cost(parse_mlir(open(os.path.join(d, f)).read())[0], TARGETS[target]).time * 1e6, 2)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundle_dir", nargs="?")
    ap.add_argument("--out", default="select.json")
    ap.add_argument("--rank", default="")
    ap.add_argument("--recost", default="", help="with --rank: recompute the estimates from this picks folder")
    ap.add_argument("--target", default="H100-SXM", help="with --recost: the cost model's target")
    a = ap.parse_args()
    sys.exit(rank(a.rank, a.recost, a.target) if a.rank else measure(a.bundle_dir, a.out))
