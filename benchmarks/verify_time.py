"""Time check_equivalence on the six benchmark pairs (reference vs hand-written fused
μGraph) at full size and add a section to benchmarks/results/verify_time.md (the newest
first; older sections are kept).

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=python python benchmarks/verify_time.py [--bs 1 8] [--names gqa ...] [--out FILE]

Each row has the call's CPU time (process_time: this process's cores, BLAS threads
included) beside its wall time and the 1-minute load average when it started: on a shared
machine the wall time says more about the neighbours than about the verifier.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "python"))

from benchmarks import BENCHMARKS  # noqa: E402

from mirage.verify import check_equivalence  # noqa: E402

TITLE = "# Verification time of the six benchmark pairs"


def cpu() -> str:
    """The cores this process may run on (taskset), of which CPU model."""
    model = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), model)
    except OSError:
        pass
    return f"{len(os.sched_getaffinity(0))} of {os.cpu_count()} cores of {model}"


def commit() -> str:
    """The commit checked out, '+' where python/mirage/verify differs from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "python/mirage/verify"], cwd=ROOT).returncode
        return head + ("+ (uncommitted changes to python/mirage/verify)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bs", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--names", nargs="+", default=list(BENCHMARKS))
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "verify_time.md"))
    a = ap.parse_args()
    rows = []
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    for bs in a.bs:
        for name in a.names:
            b = BENCHMARKS[name]
            ref, fused = b.reference(bs), b.fused(bs)
            load = os.getloadavg()[0]
            t, c = time.perf_counter(), time.process_time()
            r = check_equivalence(ref, fused, delta=1e-9, input_scales=b.scales)
            dc, dt = time.process_time() - c, time.perf_counter() - t
            shapes = " ".join("x".join(map(str, s.shape)) for s in ref.inputs)
            bound = f"{r.error_bound:.2g}" if r.bound_met else "none"
            model = "random-function" if r.model == "random" else "ω^x (Thm 2)"
            tr = f"{r.trials - r.random_trials} + {r.random_trials}" if r.random_trials else f"{r.trials}"
            rows.append((name, bs, shapes, r.equivalent, tr, model, bound, r.max_fp_error, dc, dt, load))
            print(f"{name} bs={bs}: {r.summary()} [{dc:.2f} s CPU, {dt:.2f} s wall, load {load:.2f}]", flush=True)
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "unset")
    lines = [
        f"## {started}, commit {commit()}",
        "",
        f"Machine: {platform.node()} ({cpu()}), Python {platform.python_version()}; "
        f"`OPENBLAS_NUM_THREADS={threads}`; 1-minute load average per row (other processes on the same cores).",
        f"Command: `OPENBLAS_NUM_THREADS={threads} PYTHONPATH=python python benchmarks/verify_time.py "
        f"--bs {' '.join(map(str, a.bs))}" + (f" --names {' '.join(a.names)}`" if a.names != list(BENCHMARKS) else "`"),
        "",
        "check_equivalence(reference, fused, delta=1e-9) with default options: finite-field trials",
        "(p, q < 2^31) plus the fp16 stability filter; times are the whole call (analysis, trials, filter).",
        "`bound from`: ω^x (Theorem 2, exp = ω^x over Z_p x Z_q) or, where Theorem 2 is vacuous",
        "(softmax over 4096 keys: k ~ 2*4096^2 exp terms), the random-function model (exp, sqrt",
        "keyed random functions over Z_p x Z_p2; docs/verify.md). `trials` for the latter:",
        "ω^x trials (no bound; one where the random-function model gives the bound) + random-model trials.",
        "",
        "| benchmark | bs | inputs | equivalent | trials | bound from | error bound | fp16 error | CPU (s) | wall (s) | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, bs, shapes, eq, tr, model, bound, fp, dc, dt, load in rows:
        lines.append(f"| {name} | {bs} | {shapes} | {eq} | {tr} | {model} | {bound} | {fp:.2g} | {dc:.2f} | {dt:.2f} "
                     f"| {load:.2f} |")
    old = ""
    if os.path.exists(a.out):
        with open(a.out) as f:
            old = f.read()
        old = old[len(TITLE):].lstrip("\n") if old.startswith(TITLE) else old
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write("\n".join([TITLE, ""] + lines) + "\n" + ("\n" + old if old else ""))
    print(a.out)


if __name__ == "__main__":
    main()
