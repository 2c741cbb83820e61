"""`superoptimize`: run the generator (in parallel), verify, dedupe, rank, report.

Work is split into items: the first kernel op of a candidate (a pre-defined op, or a
graph-defined kernel over one input set with one schedule); each item runs the whole
DFS below it in one worker process, builds and costs its complete candidates, and
returns them with its statistics. Results are merged, deduplicated by canonical key
and sorted by (cost, key), so the outcome does not depend on which worker ran what;
with a time limit, what finishes in time does. The best candidates are then checked
(float64, then the formal verifier) on the same workers, in rank order until `top_k`
pass; those checks start while items still run, on the ranking so far (`_Checks`), and
the final ranking takes their outcomes. Ctrl-C (or the time limit) stops the workers,
which return what they found so far.
"""
from __future__ import annotations

import os
import signal
import sys
import time

from ..core.graph import KNGraph
from . import build as B
from . import check as CHK
from . import executor as X
from .config import INTERRUPT_GRACE, SearchConfig, make_config
from ..target import DEFAULT, Target
from ..verify.blas import set_threads as set_blas_threads
from .cost import cost, read_bound
from .generator import Generator, Stats, Stop
from . import measure as M
from .partition import needs_partition, partitioned_search
from .progress import Progress, enumeration_status
from .result import Candidate, SearchResult, diverse, order as _order, reference_candidate
from .mbci import mbci_seeds
from .seed import attention_seeds, row_seeds


# -- worker side -------------------------------------------------------------------------

_W: dict = {}


def _init_worker(deadline, stop_event, ref, cfg, pro=None, bound=None, device=DEFAULT, quiet=True):
    if quiet:  # a worker process (quiet=False: the caller's own process, left as it is)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        set_blas_threads(1)  # one worker per core: BLAS threads on top oversubscribe them
    # with input prologues the generator searches the core program; plans are folded
    # back (prologue.fold) before they are built against the reference
    _W["gen"] = Generator(pro.core if pro is not None else ref, cfg, deadline, stop_event, bound, device)
    _W["ref"] = ref
    _W["fold"] = pro.fold if pro is not None else None


def _run_item(item):
    gen: Generator = _W["gen"]
    ref = _W["ref"]
    gen.stats = Stats()
    gen._memo = {}  # per item: what a worker ran before must not change what this item visits
    fold = _W.get("fold")
    found = {}
    # the generator looks at the clock and the stop flag every 256 states only: each of
    # hundreds of items left would run up to that many before stopping (20 s past a 2 s limit)
    if gen.deadline is not None and time.monotonic() > gen.deadline:
        gen.stats.stopped = "time limit"
        return found, gen.stats
    if gen.stop_flag is not None and gen.stop_flag.is_set():
        gen.stats.stopped = "interrupted"
        return found, gen.stats

    def on_candidate(plan):
        # complete candidates are built (every builder validity check runs) and costed
        # here; the equivalence checks run after ranking, on the best few (`_rank`)
        if fold is not None:
            plan = fold(plan)
        key = B.plan_key(plan)
        if key in found:
            return
        try:
            g = B.build(ref, plan)
        except Exception:
            gen.stats.rejected += 1
            return
        found[key] = (plan, cost(g).time)

    gen.on_candidate = on_candidate
    _walk(gen, item)
    gen.stats.expr_checks = gen.T.checks
    return found, gen.stats


def _walk(gen: Generator, item, follow=None) -> None:
    """The DFS below work item `item` (its candidates go to `gen.on_candidate`);
    `follow(state)` replaces the search after each kernel state of its graph-defined kernel."""
    st = gen.initial()
    try:
        if item[0] == "op":
            nst = gen.apply_op(st, item)
            if nst is not None:
                gen.search_kernel(nst)
        else:
            _, I, sched = item
            for nst in gen.graph_defs(st, I, [sched]):
                (follow or gen.search_kernel)(nst)
    except Stop:
        pass


def work_items(gen: Generator, device: Target = DEFAULT, bound: float | None = None) -> tuple[list, int]:
    """The first kernel op of every candidate, most promising first: graph-defined kernels
    over more inputs, then by `item_bound` (the time their blocks take to read their
    input tiles from device memory: replicated tiles are read once per block, few blocks
    use part of the bandwidth), then shorter loops (`by_size` then deals them largest
    first, in this order where its estimates tie). Items whose bound exceeds `bound` are
    left out; returns (items, how many were)."""
    st = gen.initial()
    items = []
    for c in gen.kernel_choices(st):
        if c[0] == "op":
            items.append(((1, 0, 0.0, 0), c))
        else:
            for s in gen.schedules_for(st, c[1]):
                it = ("graph_def", c[1], s)
                items.append(((0, -len(c[1]), item_bound(gen, it, device), s.forloop), it))
    kept = [(p, it) for p, it in items if bound is None or p[2] <= bound]
    order = sorted(range(len(kept)), key=lambda k: (kept[k][0], k))
    return [kept[k][1] for k in order], len(items) - len(kept)


def by_size(gen: Generator, items: list) -> list:
    """`items` largest first (ties in their given order), so that no long item starts
    late and runs alone at the end: in the order of `work_items`, GQA's longest item
    (6 % of the work) started more than half-way through, which bounded 16 workers to a
    parallel efficiency of 0.66 (benchmarks/results/search_scaling.md). The size estimate
    is a shallow probe of the item's search: its block graphs cut after one op
    (`Generator.probe_ops`), the kernel states that its graph-defined kernel closes
    counted but not searched (GQA's 373 items: 0.07 s). Deterministic; the order only
    decides which items finish first: every item runs, and the results are merged and
    ranked independently of it."""
    def count(st):
        gen.stats.kernel_states += 1

    saved = gen.stats, gen._memo, gen.on_candidate
    gen.probe_ops, gen.on_candidate = 1, lambda plan: None
    sizes = []
    try:
        for it in items:
            gen.stats, gen._memo = Stats(), {}
            _walk(gen, it, count)
            sizes.append(gen.stats.states)
    finally:
        gen.probe_ops = None
        gen.stats, gen._memo, gen.on_candidate = saved
    order = sorted(range(len(items)), key=lambda k: (-sizes[k], k))
    return [items[k] for k in order]


def item_bound(gen: Generator, item, device: Target = DEFAULT) -> float:
    """A lower bound of the cost of every candidate whose first kernel is the graph-defined
    `item`: that kernel's launch and input reads (cost.read_bound); 0 for a pre-defined op."""
    from math import prod

    if item[0] == "op":
        return 0.0
    _, I, s = item
    xs = gen.ref.inputs  # the first kernel reads program inputs only
    blocks = prod(s.grid)
    size = [prod(x.shape) * x.dtype.itemsize for x in xs]
    reads = [(size[i] // prod(n for n, d in zip(s.grid, imap) if d != -1) * blocks, size[i])
             for i, (imap, _) in zip(I, s.maps)]
    return read_bound(blocks, reads, device)


# -- driver --------------------------------------------------------------------------------

# the enumeration stops at this share of the time limit; the checks of the best candidates
# (float64, then the formal verifier: seconds each at full size) take the rest
ENUMERATION_SHARE = 0.5
# work items whose lower bound exceeds this many times the best seed's cost are not
# searched: their candidates could not enter the top-k window of `result.diverse`
BOUND_WINDOW = 2.0
# share of the time limit for the default's split search (partition="split"), run first
SPLIT_SHARE = 0.3


def superoptimize(ref: KNGraph, config="auto", verbose: bool = False, device: Target = DEFAULT,
                  cache_dir: str | None = None, measure=None, checkpoint: str | None = None,
                  **overrides) -> SearchResult:
    """Search μGraphs equivalent to `ref`; returns the ranked, verified candidates.

    `config`: "auto" (default, as `g.superoptimize()` and the pass: a preset chosen from
    the program), a preset name, None or "generic" (the unrestricted space), or a
    `SearchConfig`; keyword overrides adjust it.

    `measure`: rank the verified candidates by their time on the GPU (`search.measure`):
    None (default) where this machine has one, True to require it, False for the cost
    model only, or a function `res -> {candidate index: µs}`.
    `checkpoint`: a JSON file of results (Mirage's `previous_checkpoint`): used instead of
    searching when it holds verified results for `ref`, written after the search when it
    does not exist; `cache_dir` is not used then."""
    from .cache import load as cache_load, load_checkpoint, store as cache_store, store_checkpoint

    preset = config
    if config == "auto":
        from .config import auto_config

        config, adapted = auto_config(ref)
        for k, v in adapted.items():
            overrides.setdefault(k, v)
    cfg = make_config(config, **overrides)
    if not cfg.verify:
        import warnings

        warnings.warn("superoptimize(verify=False): the candidates returned are NOT checked against the program "
                      "(no float64 check, no formal verifier); use them to study the search, not to run",
                      stacklevel=2)
    for g in cfg.griddims or ():  # a grid that fits nothing would be dropped silently
        shapes = [tuple(t.shape) for t in ref.inputs]
        for x in g:
            if x > 1 and not any(d % x == 0 for sh in shapes for d in sh):
                raise ValueError(f"griddims {tuple(g)}: {x} divides no dim of the program's inputs {shapes}")
    t0 = time.monotonic()
    ref_cost = cost(ref, device)
    if checkpoint is not None:
        cache_dir = None
        new_checkpoint = not os.path.exists(checkpoint)  # an existing file is never overwritten
        hit = None if new_checkpoint else load_checkpoint(checkpoint, ref)
    else:
        hit = cache_load(cache_dir, ref, cfg) if cache_dir else None
    if hit is not None:  # earlier results, checked against `ref` by the loader
        cands = [Candidate(g, cost(g, device), B.graph_key(g)) for g in hit]
        res = SearchResult(ref, cands, Stats(), time.monotonic() - t0, cfg, ref_cost, from_cache=True)
        return _measured(res, measure, verbose)
    try:
        res = _strategy(ref, cfg, verbose, device, preset, config, t0)
    except KeyboardInterrupt:  # between the phases that handle it themselves: the reference
        res = SearchResult(ref, [reference_candidate(ref, device)], Stats(stopped="interrupted"), 0.0, cfg,
                           notes=["Ctrl-C: stopped before any candidate was verified"])
    res.config = cfg
    res.seconds = time.monotonic() - t0
    res.reference_cost = ref_cost
    if res.candidates[0].key == "reference":
        res.notes.append(_why_nothing(res))
    if cache_dir and res.stats.stopped != "interrupted":  # a time-limited entry records its limit
        cache_store(cache_dir, ref, cfg, [c.graph for c in res.candidates[:cfg.top_k]], res.stats.stopped)
    if checkpoint is not None and new_checkpoint and not res.stats.stopped:
        store_checkpoint(checkpoint, ref, [c.graph for c in res.candidates[:cfg.top_k]])
    res = _measured(res, measure, verbose)
    if verbose:
        print(res.report(), file=sys.stderr)
    return res


def _why_nothing(res: SearchResult) -> str:
    """What bound a search that found nothing better than the reference, and what to try."""
    s, cfg = res.stats, res.config
    if s.stopped == "interrupted":
        return "nothing better than the reference was verified before Ctrl-C"
    if s.stopped == "time limit":
        return (f"nothing better than the reference within time_limit={cfg.time_limit:g} s (it stopped the "
                f"search after {s.states} states): try a longer time_limit")
    bound = [f"max_block_ops={cfg.max_block_ops} (it cut {s.pruned['budget']} block graphs)"] \
        if s.pruned.get("budget") else []
    bound += [f"max_kernel_ops={cfg.max_kernel_ops}", f"max_graph_defs={cfg.max_graph_defs}",
              f"tile_sizes={cfg.tile_sizes}"]
    return ("the search finished and found nothing better than the reference under " + ", ".join(bound)
            + ": try larger limits (e.g. max_block_ops=" + str(cfg.max_block_ops + 4)
            + ", max_kernel_ops=" + str(cfg.max_kernel_ops + 1) + ") or config='generic' with a time_limit")


def _strategy(ref, cfg, verbose, device, preset, config, t0) -> SearchResult:
    """The searches of one call: the split baseline (default call, matmul programs), the
    whole program (Lax-partitioned where it has barriers), the row seeds of a partitioned
    row program; their candidates ranked together."""
    # (not for attention: its exp feeds a matmul, and the whole search fuses the two)
    split = preset == "auto" and config in ("mlp", "lora") and cfg.partition == "auto" \
        and needs_partition(ref, "split")
    if split:
        # the default's baseline: the program cut where computed tensors enter matmuls,
        # each side searched alone (fast); the whole-program search then has to beat it
        base = partitioned_search(ref, cfg.with_(partition="split", time_limit=SPLIT_SHARE * cfg.time_limit),
                                  verbose, device, preset, _search)
        cfg_whole = cfg.with_(time_limit=max(1.0, cfg.time_limit - (time.monotonic() - t0)))
    else:
        cfg_whole = cfg
    if split and base.stats.stopped == "interrupted":
        res = base
    elif needs_partition(ref, cfg.partition):
        res = partitioned_search(ref, cfg_whole, verbose, device, preset, _search)
        # a row program may fuse whole although a barrier split it (softmax's reduce_max)
        seeds = _seeds(ref, cfg, device)
        if seeds and res.stats.stopped != "interrupted":
            res = _merged(res, _rank(ref, cfg, Stats(), seeds, device, 0.0,
                                     deadline=t0 + cfg.time_limit))
    else:
        res = _search(ref, cfg_whole, verbose, device)
    if split:
        res = _merged(res, base)
    return res


def _seeds(ref, cfg, device, pro=None, pruned=None) -> dict:
    """The seeds of `ref` (search/seed.py, search/mbci.py; of its core program, folded back,
    where it has input prologues) that build (fit in shared memory, ...), as the search's
    found candidates: key -> (plan, cost). `pruned` counts the chain search's pruning."""
    out = {}
    core = pro.core if pro is not None else ref

    def core_cost(plan) -> float:
        try:
            return cost(B.build(core, plan), device).time
        except Exception:  # the builder's checks reject it
            return float("inf")

    for plan in row_seeds(core, cfg) + attention_seeds(core, cfg) + mbci_seeds(core, cfg, core_cost, pruned, device):
        if pro is not None:
            plan = pro.fold(plan)
        try:
            out[B.plan_key(plan)] = (plan, cost(B.build(ref, plan), device).time)
        except Exception:  # the builder's checks reject it: not a candidate
            continue
    return out


def _merged(res: SearchResult, base: SearchResult) -> SearchResult:
    """`res` with the verified candidates of `base` (the split search, seeds) ranked among its own."""
    keys = {B.graph_key(c.graph) for c in res.candidates}
    extra = [c for c in base.candidates if c.key != "reference" and B.graph_key(c.graph) not in keys]
    res.candidates = sorted(res.candidates + extra, key=_order)
    res.stats.merge(base.stats)
    res.notes = res.notes + base.notes
    return res


def _measured(res: SearchResult, measure, verbose: bool = False) -> SearchResult:
    if measure is False:
        return res
    if measure is True:  # required: errors surface
        if not M.gpu_available():
            raise RuntimeError("superoptimize(measure=True): no CUDA GPU is available to time the candidates "
                               "(measure=None times them only where a GPU is present)")
        measure = M.measure_on_gpu
    return M.select_by_time(res, measure, Progress(verbose))


def _search(ref: KNGraph, cfg: SearchConfig, verbose: bool, device: Target) -> SearchResult:
    t0 = time.monotonic()
    deadline = t0 + cfg.time_limit
    enumeration_deadline = t0 + ENUMERATION_SHARE * cfg.time_limit
    from .prologue import aliased, analyze

    pro = analyze(ref) if cfg.prologues else None
    pro = pro or aliased(ref)  # a residual x @ W + x: the add reads an alias of x
    stats = Stats()
    found = _seeds(ref, cfg, device, pro, stats.pruned)
    # branch and bound: items (and kernel states) whose every candidate costs more than
    # the seeds' top-k window are not searched
    bound = BOUND_WINDOW * min(c for _, c in found.values()) if found else None
    gen = Generator(pro.core if pro is not None else ref, cfg, bound=bound, device=device)
    items, skipped = work_items(gen, device, bound)
    items = by_size(gen, items)
    workers = cfg.workers or (X.ray_workers() if cfg.executor == "ray" else os.cpu_count() or 1)
    workers = max(1, min(workers, len(items) or 1))
    if skipped:
        stats.pruned["bound"] += skipped
    progress = Progress(verbose)  # its phase starts after the workers are forked (it runs a thread)
    enumeration = ("enumeration", len(items), "items", f"{len(items)} work items, {workers} worker(s)")

    def absorb(res):
        f, s = res
        stats.merge(s)
        for k, v in f.items():
            found.setdefault(k, v)
        progress.advance(status=enumeration_status(stats, found))

    checks = _Checks(ref, cfg, device)
    if workers == 1 and cfg.executor == "local":
        _init_worker(enumeration_deadline, None, ref, cfg, pro, bound, device, quiet=False)
        try:
            progress.phase(*enumeration)  # in the try: Ctrl-C right after its line is handled
            for it in items:
                absorb(_run_item(it))
                if _W["gen"].stats.stopped and _W["gen"].stats.stopped != "state cap":
                    break
        except KeyboardInterrupt:
            stats.stopped = "interrupted"
            deadline = min(deadline, time.monotonic() + INTERRUPT_GRACE)
        finally:
            progress.end()
        return _rank(ref, cfg, stats, found, device, time.monotonic() - t0, checks, deadline, progress)
    pool = checks.pool = X.make(cfg.executor, workers, _init_worker, (ref, cfg, pro, bound, device),
                                enumeration_deadline)
    running = set()  # the work items in flight
    nxt = 0
    ranked = (-1, [])  # (len(found), its ranking)

    def deal():
        # the checks that the ranking so far wants go first, beside the items, so that the
        # search does not end waiting for them (the seeds alone rank GQA's and QKNorm's
        # final best 3 first); a check whose candidate a later item displaces is wasted,
        # never wrong: what is checked, and in which order, still follows from the final
        # ranking alone (`_verify_ranked`). Checks take half the workers at most, the items
        # the others. One item queued per worker beyond those running: a worker that ends
        # one starts the next without waiting for this process to answer (which doubled
        # the gaps between a worker's calls: median 1.8 ms against 0.9, load 4), and a check
        # started later waits for a queued item at most
        nonlocal nxt, ranked
        if cfg.verify:
            if ranked[0] != len(found):  # found only grows
                ranked = (len(found), checks.rank(found)[0])
            checks.start(ranked[1], workers // 2 - len(checks.running))
        while stats.stopped != "interrupted" and nxt < len(items) and len(pool.running) < 2 * workers:
            running.add(pool.submit(_run_item, items[nxt]))
            nxt += 1

    def collect():
        h, out = pool.next_done()
        if h in running:
            running.discard(h)
            absorb(out)
        else:
            checks.record(h, out)

    try:
        try:
            progress.phase(*enumeration)  # in the try: Ctrl-C right after its line is handled
            deal()
            while running:
                collect()
                deal()
        except KeyboardInterrupt:
            pool.stop()
            stats.stopped = "interrupted"
            deadline = min(deadline, time.monotonic() + INTERRUPT_GRACE)
            while running:  # the items in flight return what they found so far
                collect()
        progress.end()
        return _rank(ref, cfg, stats, found, device, time.monotonic() - t0, checks, deadline, progress)
    finally:
        progress.end()
        pool.close()  # checks still running (no longer wanted) are abandoned


class _Checks:
    """The checks of the best candidates (`_check_item`, on `pool`; in this process without
    one) and their outcomes by plan key. Which candidates are checked follows from the
    ranking alone (`wanted`), so the driver can start them while work items still run
    (`_search`) and reuse what they found once the ranking is final: the same candidates
    are checked, in the same order, as when every check waits for the end."""

    def __init__(self, ref, cfg, device, pool=None):
        self.ref, self.cfg, self.device, self.pool = ref, cfg, device, pool
        self.base = reference_candidate(ref, device)
        self.outcomes: dict = {}  # plan key -> (stage, ok, note)
        self.running: dict = {}  # pool handle -> plan key
        self._built: dict = {}  # plan key -> (Candidate, canonical graph key): built once

    def rank(self, found: dict) -> tuple[list, list]:
        """(ranked, slow): `found`'s distinct graphs (by canonical key) by cost, each main-kernel
        schedule's best first (`diverse`); `slow`: those costing over BOUND_WINDOW x the
        reference, which are not checked (at full size their float64 run alone can take a minute)."""
        ranked, seen = [], set()
        for key, (plan, _) in sorted(found.items(), key=lambda kv: (kv[1][1], kv[0])):
            if key not in self._built:
                g = B.build(self.ref, plan)
                self._built[key] = (Candidate(g, cost(g, self.device), key, plan), B.graph_key(g))
            c, gk = self._built[key]
            if gk not in seen:
                seen.add(gk)
                ranked.append(c)
        ranked = diverse(sorted(ranked, key=_order))
        limit = BOUND_WINDOW * self.base.cost.time
        return [c for c in ranked if c.cost.time <= limit], [c for c in ranked if c.cost.time > limit]

    def wanted(self, ranked: list) -> list:
        """The candidates of `ranked` whose checks are needed and not started: in rank order,
        as many as could still be among the first `top_k` that pass, a check not yet known
        counting as passing."""
        out, passes, busy = [], 0, set(self.running.values())
        for c in ranked:
            if passes >= self.cfg.top_k:
                break
            known = self.outcomes.get(c.key)
            if known is None:
                passes += 1
                if c.key not in busy:
                    out.append(c)
            else:
                passes += bool(known[1])
        return out

    def start(self, ranked: list, room: int) -> None:
        for c in self.wanted(ranked)[:max(0, room)]:
            self.running[self.pool.submit(_check_item, (c.plan, self.cfg.seed))] = c.key

    def record(self, handle, out) -> None:
        self.outcomes[self.running.pop(handle)] = out


def _rank(ref, cfg, stats, found: dict, device, seconds, checks=None, deadline=None, progress=None) -> SearchResult:
    """Dedupe by canonical graph key, sort by cost (each main-kernel schedule's best
    first: `diverse`), then run the formal verifier on the candidates in that order until
    `top_k` have passed (in parallel on `checks.pool`) or `deadline` (time.monotonic)
    passes: then the checks in flight are abandoned and what passed is kept."""
    checks = checks or _Checks(ref, cfg, device)
    ranked, slow = checks.rank(found)
    cands = []
    others = []
    notes = [f"{len(slow)} candidate(s) costing over {BOUND_WINDOW:g}x the reference were not checked"] \
        if slow and cfg.verify else []
    own_pool = None
    if cfg.verify and checks.pool is None and deadline is not None and ranked:
        # a check running in this process could not be abandoned at the deadline (one
        # float64 check of a full-size program takes seconds): run them in a child
        _W["ref"] = ref
        own_pool = checks.pool = X.make("local", 1, _ignore_sigint, (), None)
    try:
        pos = _verify_ranked(checks, stats, ranked, cands, notes, deadline, progress) if cfg.verify else 0
    finally:
        if own_pool is not None:
            own_pool.terminate()
            checks.pool = None
        if progress is not None:
            progress.end()
    if cfg.verify:
        others = sorted(ranked[pos:] + slow, key=_order)
    else:
        cands = ranked + slow
        for c in cands:
            c.verification = "unverified (verify=False)"
    cands.append(checks.base)
    cands.sort(key=_order)
    return SearchResult(ref, cands, stats, seconds, cfg, notes=notes, others=others)


def _ignore_sigint(deadline, stop_flag):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_blas_threads(1)


def _verify_ranked(checks: _Checks, stats, ranked, cands, notes, deadline, progress=None) -> int:
    """Take the outcomes of the checks of `ranked` in rank order, appending what passes to
    `cands`, until `top_k` passed or `deadline`; returns how many were taken. Checks run
    in parallel on `checks.pool` (those that `checks.wanted` names: as many as are still
    needed; some may have run beside the work items), one at a time in this process
    without a pool. At the deadline or Ctrl-C, the checks in flight are abandoned, and an
    outcome is taken only when all better-ranked ones are known."""
    cfg, pool = checks.cfg, checks.pool
    progress = progress or Progress(False)
    progress.phase("checks", min(cfg.top_k, len(ranked)), "verified",
                   f"the best of {len(ranked)} distinct candidates until {cfg.top_k} pass "
                   f"(float64, then the formal verifier)")
    pos = 0
    interrupted = False
    while pos < len(ranked) and len(cands) < cfg.top_k:
        c = ranked[pos]
        out = checks.outcomes.get(c.key)
        if out is not None:
            pos += 1
            stage, ok, note = out
            if stage == "float":
                stats.rejected += 1
            else:
                stats.verified += 1
                stats.formal += stage == "formal"
                if ok:
                    c.verification = note
                    cands.append(c)
                else:
                    stats.rejected += 1
                    stats.formal_rejected += 1
            progress.advance(int(bool(ok)), f"{pos} checked, {pos - len(cands)} rejected")
            continue
        if deadline is not None and time.monotonic() >= deadline:
            stats.stopped = stats.stopped or "time limit"
            why = "Ctrl-C" if stats.stopped == "interrupted" else "the time limit"
            notes.append(f"{why} stopped the checks: {len(cands)} candidate(s) verified of the {cfg.top_k} asked for")
            break
        try:
            if pool is None:
                _W["ref"] = checks.ref
                checks.outcomes[c.key] = _check_item((c.plan, cfg.seed))
                continue
            checks.start(ranked, pool.workers - len(pool.running))
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            checks.record(*pool.next_done(timeout=left))
        except TimeoutError:  # the deadline: the loop's next round says so
            continue
        except KeyboardInterrupt:  # keep what passed; the checks in flight are abandoned
            interrupted = True
            break
    if interrupted:
        stats.stopped = "interrupted"
        notes.append(f"Ctrl-C stopped the checks: {len(cands)} candidate(s) verified of the {cfg.top_k} asked for")
    return pos


def _check_item(arg):
    """(stage, ok, note): the float64 pre-filter, then the formal verifier."""
    plan, seed = arg
    ref = _W["ref"]
    g = B.build(ref, plan)
    # a pre-filter where the formal verifier decides: one float64 trial tells a wrong
    # candidate apart (the verifier's trials are the check); two where it decides alone
    if not CHK.float_equivalent(ref, g, seed, trials=1 if CHK.USE_FORMAL_VERIFIER else CHK.TRIALS):
        return "float", False, "float64 check failed"
    if not CHK.USE_FORMAL_VERIFIER:
        return "float-only", True, "float64 check"
    try:
        r = CHK.formal_equivalent(ref, g, seed)
    except Exception as e:  # a verifier failure is a rejection, with the reason
        return "formal", False, f"verifier error: {e}"
    return "formal", bool(r), r.summary()

