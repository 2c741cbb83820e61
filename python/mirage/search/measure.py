"""Selection by measured time: the verified candidates timed on the GPU, fastest first.

The cost model ranks candidates without running them; on the GPU its pick is not always
the fastest (benchmarks/results/profile_select.md). With a GPU present the search
compiles its verified top candidates and the reference program into one variant bundle
(`mirage.lower.compile_variants`) and lets the runtime's selection
(`mirage.runtime.select`) check each against the reference on random inputs and time
it; the candidates are then reordered by measured time. The runtime keeps the choice
in the user cache directory per device, so a repeated search does not time again.
"""
from __future__ import annotations

import math
import tempfile

import numpy as np

from .result import SearchResult


def gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def rank_by_time(res: SearchResult, times_us: dict[int, float]) -> SearchResult:
    """Reorder `res.candidates` by measured µs (index -> time; a candidate without a time,
    or that failed its check, goes after the timed ones in cost order). Each candidate's
    `measured_us` is set (NaN where not timed). Returns `res`."""
    for i, c in enumerate(res.candidates):
        c.measured_us = times_us.get(i, math.nan)
    timed = sorted((c for c in res.candidates if c.measured_us == c.measured_us), key=lambda c: c.measured_us)
    rest = [c for c in res.candidates if c.measured_us != c.measured_us]
    res.candidates = timed + rest
    if timed:
        res.notes.append("ranked by measured time on the GPU: " + ", ".join(
            f"{'reference' if c.key == 'reference' else c.key[:8]} {c.measured_us:.1f} µs" for c in timed))
    return res


def spearman(xs, ys) -> float:
    """Spearman rank correlation of two equal-length sequences, NaN pairs dropped (NaN
    with fewer than two pairs or a constant side)."""
    from scipy.stats import rankdata

    pairs = [(x, y) for x, y in zip(xs, ys) if x == x and y == y]
    if len(pairs) < 2:
        return math.nan
    rx, ry = (rankdata([p[k] for p in pairs]) for k in (0, 1))
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def measure_on_gpu(res: SearchResult, target: str = "sm_90", scale: float = 0.25) -> dict[int, float]:
    """Compile every candidate of `res` (the reference among them) into one variant bundle
    and let the runtime check and time them on this machine's GPU, on random inputs of
    standard deviation `scale`. Returns {candidate index: µs} for those that passed."""
    import torch

    from ..lower import compile_variants
    from ..runtime import load

    graphs = [(f"c{i}", c.graph) for i, c in enumerate(res.candidates)]
    ref = next((f"c{i}" for i, c in enumerate(res.candidates) if c.key == "reference"), None)
    if ref is None:  # the reference is always kept as a safe variant to check against
        graphs.append(("reference", res.reference))
        ref = "reference"
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
    with tempfile.TemporaryDirectory(prefix="mirage-measure-") as tmp:
        k = load(compile_variants(graphs, tmp, ref, target))
        xs = [(torch.randn(t.shape, device="cuda") * scale).to(tdt[t.dtype.mlir]) for t in res.reference.inputs]
        k(*xs)
        torch.cuda.synchronize()
        times = k.report.get("times_us", {})
    return {int(n[1:]): t for n, t in times.items() if n != "reference"}


def select_by_time(res: SearchResult, measure=None) -> SearchResult:
    """Reorder `res` by measured time: `measure(res) -> {index: µs}` (default: on this
    machine's GPU). Without a GPU, `res` is returned unchanged with a note."""
    if measure is None:
        if not gpu_available():
            res.notes.append("no GPU here: candidates ranked by the cost model")
            return res
        try:
            times = measure_on_gpu(res)
        except Exception as e:  # e.g. no MLIR to compile with on this machine: keep the cost ranking
            res.notes.append(f"timing on the GPU failed ({type(e).__name__}: {e}); candidates ranked by the cost model")
            return res
    else:
        times = measure(res)
    costs = {i: c.time_us for i, c in enumerate(res.candidates)}
    rank_by_time(res, times)
    rho = spearman([costs[i] for i in times], [times[i] for i in times])
    if rho == rho:
        res.notes.append(f"cost model vs measured time: Spearman rank correlation {rho:.2f} over {len(times)} candidates")
    return res
