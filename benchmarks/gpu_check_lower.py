"""GPU correctness check of compiled bundles (GPU machine: torch, numpy, cuda-bindings).

    python benchmarks/gpu_check_lower.py BUNDLE_DIR [--trials 2]

For every bundle in BUNDLE_DIR/index.json (from build_bundles_lower.py): fresh random
inputs (the benchmark's scales), rounded to fp16; outputs poisoned with NaN before each
run; result compared with the benchmark's numpy float64 definition evaluated on the
same fp16-rounded inputs, by ||out - ref|| / ||ref||. Tolerance 1e-2 for these fp16
outputs: fp16 rounding of the output alone is ~3e-4, fp16 intermediates (tiles are
stored in fp16, as the μGraph's types say) add a few 1e-3 (METHOD.md). NaN or an
unwritten element fails. Prints one line per bundle and a summary; exit code 1 on
any failure.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

TOL = 1e-2


def main(argv=None):
    import torch

    from benchmarks import BENCHMARKS
    from mirage import runtime

    ap = argparse.ArgumentParser()
    ap.add_argument("bundles")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    index = json.load(open(os.path.join(a.bundles, "index.json")))
    rng = np.random.default_rng(int(time.time()))
    results, bad = [], 0
    for ent in index:
        name, bs, var = ent["bench"], ent["bs"], ent["variant"]
        if name not in BENCHMARKS:
            continue  # diagnostics: timed only
        if not ent.get("dir"):
            print(f"{name:18s} bs={bs} {var:10s} COMPILE-FAILED {ent.get('error')}")
            bad += 1
            continue
        b = BENCHMARKS[name]
        try:
            k = runtime.load(os.path.join(a.bundles, ent["dir"]))
            errs = []
            for _ in range(a.trials):
                xs = [x.astype(np.float16) for x in b.random_inputs(bs, rng)]
                ref = b.numpy(*[x.astype(np.float64) for x in xs])
                ts = [torch.from_numpy(x).cuda() for x in xs]
                out = torch.full(tuple(ref.shape), float("nan"), dtype=torch.float16, device="cuda")
                k(*ts, out=[out])
                torch.cuda.synchronize()
                o = out.double().cpu().numpy()
                if not np.isfinite(o).all():
                    errs.append(float("nan"))
                    continue
                errs.append(float(np.linalg.norm(o - ref) / np.linalg.norm(ref)))
            ok = all(np.isfinite(e) and e < TOL for e in errs)
        except Exception as e:  # report and go on
            errs, ok = [repr(e)[:300]], False
        bad += not ok
        results.append({"bench": name, "bs": bs, "variant": var, "rel_err": errs, "ok": ok})
        print(f"{name:18s} bs={bs} {var:10s} {'PASS' if ok else 'FAIL'} rel_err={errs}", flush=True)
    print(f"\n{len(results) - bad}/{len(results)} passed (tolerance {TOL})")
    if a.json:
        json.dump(results, open(a.json, "w"), indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
