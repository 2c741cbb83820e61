"""Calibration of the loop split of MCFuser's GEMM chains (the rule of
`lower.kernel_plan.default_split` for cluster-combined loops): for each GEMM row, the
reference and the warp-resident tilings tm x tl x th (tm in --tm, tl in --tl, th 64 / 128 /
256; 16 rows a warp: a 128-row tiling runs 8 warps, two warpgroups), each
lowered with the default split (`-s0`) and forced to 1, 2, 4, 8 (`Options(split=s)`), and
for G4 and G10 also split 8 with the last-block combine (`-s8fold`). `--form k`: the loop over
K instead (the μGraph's threads); `--kc 64`: A and B staged in chunks of 64 of K (`-kc64`);
`--ring 6`: the loop's cp.async ring up to 6 slots deep (`-r6`).
Writes the bundles and meta.json in `mbci.py --sweep`'s format, so `mbci.py --run-sweep DIR`
checks and times them.

    PYTHONPATH=python:examples python benchmarks/mbci_splits.py exp_rt/cl1 G4,G7,G10
    PYTHONPATH=python:examples:benchmarks python3 benchmarks/mbci.py --run-sweep exp_rt/cl1   # GPU
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mbci  # noqa: E402
from mirage.lower import Options  # noqa: E402
from mirage.search.build import build as build_plan  # noqa: E402
from mirage.search.config import SearchConfig  # noqa: E402
from mirage.search.mbci import Tiling, find_chain, plan_of  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("rows", help="comma-separated rows (G1-G12, S1-S9)")
    ap.add_argument("--tl", default="64,128", help="loop tiles (comma-separated)")
    ap.add_argument("--tm", default="64", help="row tiles (comma-separated; 16 rows a warp)")
    ap.add_argument("--splits", default="0,1,2,4,8", help="split factors (0: the lowering's choice)")
    ap.add_argument("--kc", type=int, default=0,
                    help="form n: A and B staged in chunks of this many K ([stage]; 0: whole)")
    ap.add_argument("--stages", type=int, default=0,
                    help="the deepest ring of the staged chunks (`Options.kstages`; 0: the lowering's default), "
                    "named -st<n>")
    ap.add_argument("--ring", type=int, default=0,
                    help="the deepest cp.async ring of the loop's inputs (`Options.stages`; 0: the lowering's "
                    "default), named -r<n>")
    ap.add_argument("--form", default="n", choices=("n", "k"),
                    help="n: loop over N, warp-resident (16 rows a warp); k: loop over K, n whole (default threads)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    meta = {}

    def put(name, row, kind, g, opts, tiling=None):
        entry = mbci.sweep_bundle(a.out, name, row, kind, g, opts, tiling)
        if entry is not None:
            meta[name] = entry

    for row in a.rows.split(","):
        ref = mbci.program(row)
        put(f"{row}__ref", row, "ref", ref, Options())
        _, M, N, K, H = mbci.ROWS[row]
        c = find_chain(ref)
        for tm, tl, th in ((tm, tl, th) for tm in (int(x) for x in a.tm.split(","))
                           for tl in (int(x) for x in a.tl.split(",")) for th in sorted({64, 128, 256, H})):
            if th > H or H % th or M % tm:
                continue
            t = Tiling(a.form, tm, tl, th, a.kc if a.form == "n" else 0)
            threads = 2 * tm if a.form == "n" else 0  # n: 16 rows a warp; 0: the μGraph's block
            try:
                g = build_plan(ref, plan_of(c, t, SearchConfig()))
            except Exception as e:  # shared memory: eq. (1) admits more than fits
                print(f"SKIP  {row} {t}: {e}", flush=True)
                continue
            for s in (int(x) for x in a.splits.split(",")):
                if not s or ((N if a.form == "n" else K) // tl) % s == 0:
                    extra = ({"kstages": a.stages} if a.stages else {}) | ({"stages": a.ring} if a.ring else {})
                    put(f"{row}__{a.form}{tm}x{tl}x{th}-s{s}" + (f"-kc{t.kc}" if t.kc else "")
                        + (f"-st{a.stages}" if a.stages else "") + (f"-r{a.ring}" if a.ring else ""), row, "chain", g,
                        Options(split=s, threads=threads, **extra), [a.form, tm, tl, th])
            if a.form == "n" and row in ("G4", "G10") and (N // tl) % 8 == 0 and tm == 64:
                put(f"{row}__n64x{tl}x{th}-s8fold", row, "chain", g, Options(split=8, clusters=False),
                    ["n", 64, tl, th])
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
