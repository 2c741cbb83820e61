"""Selection by measured time: the verified candidates timed on the GPU, fastest first.

The cost model ranks candidates without running them; on the GPU its pick is not always
the fastest (benchmarks/results/profile_select.md). With a GPU present the search
compiles its verified top candidates and the reference program into one variant bundle
(`mirage.lower.compile_variants`) and lets the runtime's selection
(`mirage.runtime.select`) check each against the reference on random inputs and time
it; the candidates are then reordered by measured time. The runtime keeps the choice
in the user cache directory per device, so a repeated search does not time again.

How long each candidate runs comes from the search configuration: `warmup_iters` runs of
each variant before timing, `profile_iters` timed runs (Mirage's `superoptimize`
arguments of those names); the device is `mi.set_gpu_device_id`'s. A candidate that does
not lower is left out of the timing (a warning, silent after `mi.bypass_compile_errors()`).
"""
from __future__ import annotations

import math
import os
import tempfile
import warnings

import numpy as np

from .result import SearchResult


def gpu_available() -> bool:
    import sys

    if "torch" not in sys.modules and not _cuda_driver_present():
        return False  # without a driver torch sees no GPU either: skip its import (seconds)
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _cuda_driver_present() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


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


def timing_plan(profile_iters: int, inner: int = 10) -> tuple[int, int]:
    """(reps, inner) for the runtime's timing (`mirage.runtime.select.Selecting`: `reps`
    timed replays of a CUDA graph of `inner` runs) that times at least `profile_iters` runs."""
    inner = max(1, min(inner, int(profile_iters)))
    return max(1, -(-int(profile_iters) // inner)), inner


def variant_bundle(graphs, out_dir: str, reference: str, target: str = "sm_90",
                   progress=None) -> tuple[str, dict]:
    """Compile `graphs` ([(name, KNGraph)]) into one variant bundle at `out_dir`, leaving
    out a candidate that does not lower (the reference must). Returns (path, {name: why
    left out}). `progress` (`search.progress.Progress`) counts the compiled variants."""
    from .. import lower
    from ..runtime.select import write_variant_bundle

    parts, dropped = [], {}
    for k, (name, g) in enumerate(graphs):
        if progress is not None:
            progress.set_status(f"compiling {name} ({k + 1}/{len(graphs)})")
        try:
            cg = lower.compile(g, target, os.path.join(out_dir, name))
        except lower.LoweringError as e:
            if name == reference:
                raise
            dropped[name] = str(e)
            continue
        parts.append((name, cg.path))
    return write_variant_bundle(out_dir, parts, reference), dropped


def report_dropped(res: SearchResult, dropped: dict) -> None:
    """Note the candidates left out of the timing in `res.notes`, and warn about them
    unless `mi.bypass_compile_errors()` was called."""
    from ..global_config import global_config

    if not dropped:
        return
    msg = "left out of GPU timing, they do not lower: " + "; ".join(f"{n}: {w}" for n, w in dropped.items())
    res.notes.append(msg)
    if not global_config.bypass_compile_errors:
        warnings.warn(f"superoptimize: {msg} (mi.bypass_compile_errors() silences this)", stacklevel=3)


def measure_on_gpu(res: SearchResult, target: str = "sm_90", scale: float = 0.25,
                   progress=None) -> dict[int, float]:
    """Compile every candidate of `res` (the reference among them) into one variant bundle
    and let the runtime check and time them on the GPU chosen by `mi.set_gpu_device_id`, on
    random inputs of standard deviation `scale`. Returns {candidate index: µs} for those
    that passed. `progress` (`search.progress.Progress`) shows which step runs."""
    import torch

    from ..global_config import global_config
    from ..runtime import load

    cfg = res.config
    dev = global_config.gpu_device_id
    if dev >= torch.cuda.device_count():
        raise RuntimeError(f"mi.set_gpu_device_id({dev}): this machine has {torch.cuda.device_count()} CUDA device(s)")
    graphs = [(f"c{i}", c.graph) for i, c in enumerate(res.candidates)]
    ref = next((f"c{i}" for i, c in enumerate(res.candidates) if c.key == "reference"), None)
    if ref is None:  # the reference is always kept as a safe variant to check against
        graphs.append(("reference", res.reference))
        ref = "reference"
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
    reps, inner = timing_plan(cfg.profile_iters)
    with tempfile.TemporaryDirectory(prefix="mirage-measure-") as tmp:  # private and removed after use
        path, dropped = variant_bundle(graphs, tmp, ref, target, progress)
        report_dropped(res, dropped)
        if progress is not None:
            progress.set_status(f"checking and timing {len(graphs) - len(dropped)} variants on cuda:{dev}")
        k = load(path, reps=reps, inner=inner)
        xs = [(torch.randn(t.shape, device=f"cuda:{dev}") * scale).to(tdt[t.dtype.mlir]) for t in res.reference.inputs]
        for variant in k.kernels:  # warm-up runs of each variant (modules loaded, clocks up)
            for _ in range(cfg.warmup_iters):
                variant(*xs)
        k(*xs)
        torch.cuda.synchronize(dev)
        times = k.report.get("times_us", {})
    return {int(n[1:]): t for n, t in times.items() if n != "reference"}


# spill-store bytes per kernel, by (target, its MLIR with the name masked): the search checks
# the same kernels again and again (each Lax subprogram's candidates, then the stitched program
# of their picks), and one seen before is not run through the NVVM pipeline and ptxas again.
# Past the cap the oldest entries go first.
_KERNEL_SPILLS: dict[tuple, int] = {}
KERNEL_SPILLS_MAX = 4096


def _kernel_key(info, target: str) -> tuple:
    import hashlib

    # the emitted text, not the block graph: the operands' strides, the split, the options
    # and the recorded layouts shape the kernel too. The name is its place in the graph.
    text = info.text.replace(f"@{info.name}(", "@kernel(", 1)
    return target, hashlib.sha256(text.encode()).hexdigest()


def spills(graph, target: str = "sm_90") -> int | None:
    """Bytes of registers the kernels of `graph` spill (summed over its kernels) as ptxas
    assembles them for `target`; None where it does not lower or no ptxas is installed.
    A kernel checked before in this process is not assembled again (`_KERNEL_SPILLS`)."""
    from .. import lower
    from ..lower import ptxas
    from ..lower.pipeline import run_pipeline

    if ptxas.find() is None:
        return None
    try:
        low = lower.convert(graph, lower.target_options(target))
        keys = {info.name: _kernel_key(info, target) for info in low.infos}
        found = {n: _KERNEL_SPILLS[k] for n, k in keys.items() if k in _KERNEL_SPILLS}
        if len(found) < len(keys):
            # the module less the kernels seen: each kernel's text is self-contained and ptxas
            # reports each entry alone. A kernel without wgmma may then go to sm_90 where the
            # whole module went to sm_90a: its PTX differs only in .target, ptxas's report not at all
            module = low.module
            for info in low.infos:
                if info.name in found:
                    module = module.replace(info.text, "", 1)
            # not through the on-disk PTX cache: a search with cache_dir=None writes nothing
            ptx = run_pipeline(module, target)
    except Exception:  # does not lower (LoweringError, a pipeline's MLIRError): not known
        return None
    if len(found) < len(keys):
        use = ptxas.usage(ptx)  # for the PTX's own .target (sm_90a where it has wgmma)
        if use is None:
            return None
        for name, key in keys.items():
            if name not in found:
                found[name] = _KERNEL_SPILLS[key] = use.get(name, {}).get("spill_stores", 0)
        while len(_KERNEL_SPILLS) > KERNEL_SPILLS_MAX:
            del _KERNEL_SPILLS[next(iter(_KERNEL_SPILLS))]
    return sum(found.values())


# seconds one candidate's spill check may take (lowering, the NVVM pipeline, ptxas: 0.5-2 s
# on the 2-core VM); the check starts only with that much of the time limit left
SPILL_CHECK_S = 2.0


def demote_spilling(res: SearchResult, target: str = "sm_90", deadline: float | None = None) -> SearchResult:
    """Without a GPU to time them: the best candidates whose kernels spill registers (ptxas,
    where installed) move after the first that does not, which leads. The cost model
    does not count registers, and a kernel that spills runs several times slower than
    it says (`lower.ptxas`). Candidates are checked best first until one does not spill;
    the reference is not (its kernels are the pre-defined ones). Each check starts only
    with SPILL_CHECK_S before `deadline` (time.monotonic()) left; else the cost ranking stands."""
    import time

    from ..lower import ptxas

    if ptxas.find() is None or len(res.candidates) < 2:
        return res
    spilled = []
    for c in res.candidates:
        if deadline is not None and c.key != "reference" and time.monotonic() + SPILL_CHECK_S > deadline:
            res.notes.append("not checked for register spills (ptxas): the time limit")
            return res
        n = 0 if c.key == "reference" else spills(c.graph, target)
        if n is None:
            return res  # not known: keep the cost ranking
        if n == 0:
            break
        spilled.append((c, n))
    else:
        return res  # every candidate spills: the cost ranking stands
    if spilled:
        moved = {id(c) for c, _ in spilled}
        res.candidates = [c for c in res.candidates if id(c) not in moved] + [c for c, _ in spilled]
        res.notes.append("ranked after the others, their kernels spill registers (ptxas): " + ", ".join(
            f"{c.key[:8]} {n} bytes" for c, n in spilled))
    return res


def select_by_time(res: SearchResult, measure=None, progress=None, deadline: float | None = None) -> SearchResult:
    """Reorder `res` by measured time: `measure(res) -> {index: µs}` (default: on this
    machine's GPU). Without a GPU, `res` is returned with a note, candidates that spill
    registers demoted (`demote_spilling`, within `deadline`). `progress`
    (`search.progress.Progress`) shows the timing as a phase."""
    from .progress import Progress

    progress = progress or Progress(False)
    if measure is None and not gpu_available():
        res.notes.append("no GPU here: candidates ranked by the cost model")
        return demote_spilling(res, deadline=deadline)
    with progress.phase("GPU timing", len(res.candidates), "candidates",
                        f"{len(res.candidates)} candidates (the reference among them)"):
        if measure is None:
            try:
                times = measure_on_gpu(res, progress=progress)
            except Exception as e:  # e.g. no MLIR to compile with on this machine: keep the cost ranking
                res.notes.append(f"timing on the GPU failed ({type(e).__name__}: {e}); "
                                 f"candidates ranked by the cost model")
                progress.end("failed: ranked by the cost model")
                return res
        elif measure is measure_on_gpu:  # measure=True
            times = measure(res, progress=progress)
        else:
            times = measure(res)
        progress.advance(len(times), f"{len(times)} timed")
    costs = {i: c.time_us for i, c in enumerate(res.candidates)}
    rank_by_time(res, times)
    rho = spearman([costs[i] for i in times], [times[i] for i in times])
    if rho == rho:
        res.notes.append(f"cost model vs measured time: Spearman rank correlation {rho:.2f} over {len(times)} candidates")
    return res
