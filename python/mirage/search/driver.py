"""`superoptimize`: run the generator (in parallel), verify, dedupe, rank, report.

Work is split into items: the first kernel op of a candidate (a pre-defined op, or a
graph-defined kernel over one input set with one schedule), cut where that kernel
closes into several kernel states (`split`); each item runs the whole DFS below it in
one worker process, builds and costs its complete candidates, and returns them with
its statistics; units whose first kernel adds tensors of the same values go to one worker
(their block-graph DFSs are replayed there), those of one kind where they can (`_Lanes`).
Results are merged, deduplicated by canonical key and sorted by (cost, key), so the
outcome does not depend on which worker ran what; with a time limit, what finishes in
time does. The best candidates are then checked
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
from .cost import cost, read_bound
from .generator import Generator, Stats, Stop
from . import measure as M
from .partition import needs_partition, partitioned_search
from .progress import Progress, enumeration_status
from .result import Candidate, SearchResult, diverse, order as _order, reference_candidate
from .mbci import mbci_seeds
from .seed import attention_seeds, row_seeds, softmax_pv_seeds


# -- worker side -------------------------------------------------------------------------

_W: dict = {}


def _init_worker(deadline, stop_event, ref, cfg, pro=None, bound=None, device=DEFAULT, quiet=True, gen=None):
    if quiet:  # a worker process (quiet=False: the caller's own process, left as it is); the
        # executor runs it at one BLAS thread (one worker per core)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    # with input prologues the generator searches the core program; plans are folded
    # back (prologue.fold) before they are built against the reference. `gen`: the
    # driver's generator of the same program, config and bound, whose value memos
    # (tiles, block ops, schedules) `split` filled for every item's first kernel: a
    # forked worker starts from them instead of building its own (`_search`)
    if gen is None:
        gen = Generator(pro.core if pro is not None else ref, cfg, deadline, stop_event, bound, device)
    gen.deadline, gen.stop_flag = deadline, stop_event
    _W["gen"] = gen
    _W["ref"] = ref
    _W["fold"] = pro.variants if pro is not None else None  # a core plan -> the plans it stands for


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
        # complete candidates are built (every builder validity check runs), costed and
        # keyed here, so that the driver ranks them without building them again
        # (`_Checks.rank`); the equivalence checks run after ranking, on the best few (`_rank`)
        for plan in fold(plan) if fold is not None else [plan]:
            key = B.plan_key(plan)
            if key in found:
                continue
            try:
                g = B.build(ref, plan)
            except Exception:
                gen.stats.rejected += 1
                continue
            c = cost(g, gen.device)
            found[key] = (plan, c.time, (c, B.graph_key(g)))

    gen.on_candidate = on_candidate
    _walk(gen, item)
    gen.stats.expr_checks = gen.T.checks
    return found, gen.stats


def _run_units(units: list):
    """`_run_item` of each of `units` in turn, one after another on this worker's generator
    (whose value memos the later ones reuse); their results merged."""
    found, stats = {}, Stats()
    for u in units:
        f, s = _run_item(u)
        stats.merge(s)
        for k, v in f.items():
            found.setdefault(k, v)
    return found, stats


def _walk(gen: Generator, item, follow=None) -> None:
    """The DFS below work item `item` (its candidates go to `gen.on_candidate`);
    `follow(state)` replaces the search after each kernel state of its graph-defined kernel.
    A part ("graph_def", I, sched, j, n) of a graph-defined item (`split`) searches only
    after the kernel states whose `state_key` is the j-th distinct one of the n its
    block-graph DFS makes: states of one key stay in one part, so `search_kernel`'s memo
    hits, and with them the states and counts, are those of the whole item. Part 0
    counts that DFS (states, pruning); the others run it uncounted."""
    st = gen.initial()
    counted = gen.stats
    uncounted = counted if len(item) < 5 or item[3] == 0 else Stats()
    try:
        if item[0] == "op":
            nst = gen.apply_op(st, item)
            if nst is not None:
                gen.search_kernel(nst)
            return
        follow = follow or gen.search_kernel
        kernels = gen.graph_defs(st, item[1], [item[2]])
        if len(item) < 5:
            for nst in kernels:
                follow(nst)
            return
        keys: dict = {}
        while True:
            gen.stats = uncounted
            try:
                nst = next(kernels)
            except StopIteration:
                return
            finally:
                gen.stats = counted
            if keys.setdefault(gen.state_key(nst), len(keys)) == item[3]:
                follow(nst)
    except Stop:
        counted.stopped = counted.stopped or uncounted.stopped


def work_items(gen: Generator, device: Target = DEFAULT, bound: float | None = None) -> tuple[list, int]:
    """The first kernel op of every candidate, most promising first: graph-defined kernels
    over more inputs, then by `item_bound` (the time their blocks take to read their
    input tiles from device memory: replicated tiles are read once per block, few blocks
    use part of the bandwidth), then shorter loops. Items whose bound exceeds `bound`
    are left out; returns (items, how many were). `split` cuts them into the units that
    the workers run, `_Lanes` deals those."""
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


# `split` runs each item's first block-graph DFS in this process: at most this many of its
# block states per item (GQA's cut items: 13 at most), and this many for all items (the
# unrestricted space of a small RMSNorm program: 1.1 M states over 808 items, 11 s);
# an item past either limit stays whole
SPLIT_ITEM_STATES = 500
SPLIT_STATES = 10_000
# the time of a unit whose block-graph DFSs another unit of its group ran, as a share of
# that one's: GQA at max_block_ops=8, 0-25 %, mostly 5-10 % (`_Lanes`)
REPLAYED = 0.1


def split(gen: Generator, items: list) -> tuple[list, list]:
    """(units, meta): `items` with each graph-defined item whose kernel closes into n > 1
    distinct kernel states cut into its n parts (`_walk`), so that no item is a large
    share of the search (GQA at max_block_ops=8: one item was 7.6 % of the work, bounding
    16 workers to 0.82; its kernel closes into 8 states); per unit (weight, outputs):
    weight 1 for a unit whose kernel closes into a state (what follows is searched), 0.01
    for one that closes into none (only its block-graph DFS runs), 1 for an item not
    probed; outputs: the values of the tensors its kernel adds (one state), else None.
    Units of the same outputs search below tensors of the same values, whose block-graph
    DFSs the generator replays in a process that ran them once (`_BlockCtx.run`): `_Lanes`
    deals them to one worker. The cut is the block-graph DFS of each item's first kernel
    (within SPLIT_ITEM_STATES and SPLIT_STATES: GQA 0.1-0.2 s for 373 items), nothing
    after it. Deterministic, and the same states and counts as the whole items; with a
    state cap (`max_states`, per work item) nothing is cut, so that the cap keeps its
    meaning."""
    if gen.cfg.max_states is not None:
        return list(items), [(1.0, None)] * len(items)
    saved = gen.stats, gen._memo, gen.on_candidate, gen.cfg
    n_in = len(gen.ref.inputs)
    units, meta = [], []
    budget = SPLIT_STATES
    try:
        for it in items:
            keys: dict = {}  # in `_walk`'s order of the parts
            if it[0] == "op":
                keys[None] = 0
            elif budget > 0:
                gen.cfg = saved[3].with_(max_states=min(SPLIT_ITEM_STATES, budget))
                gen.stats, gen._memo, gen.on_candidate = Stats(), {}, lambda plan: None
                _walk(gen, it, lambda st: keys.setdefault(gen.state_key(st), len(keys)))
                budget -= gen.stats.states
                if gen.stats.stopped:  # cut short: not known, left whole
                    keys = {None: 0}
            else:
                keys[None] = 0
            n = len(keys)
            units += [it] if n <= 1 else [it + (j, n) for j in range(n)]
            # a state key's tensors: (expr, shape, classes, consumed), the program's inputs first
            meta += [(1.0, None if k is None else tuple(t[:3] for t in k[0][n_in:])) for k in keys] or [(0.01, None)]
    finally:
        gen.stats, gen._memo, gen.on_candidate, gen.cfg = saved
    return units, meta


def _kind(unit) -> tuple:
    """Units of one kind share most of the generator's value memos (the same inputs and
    loop, so the same tiles, shapes and schedules below): `_Lanes` keeps them together.
    First kernels over more inputs come first: they hold most of the work and the largest
    units (GQA at max_block_ops=11: those over 3 inputs 25.9 of 40.6 s, up to 2.6 s a
    unit, where 16 workers' share is 2.5 s), which should not start last."""
    if unit[0] == "op":
        return (0, repr(unit))
    s = unit[2]
    return (1, -len(unit[1]), unit[1], s.forloop, s.grid, s.maps) + tuple(unit[3:4])


class _Lanes:
    """Which unit a worker runs next. A worker builds its generator's value memos (tiles,
    block ops, schedules: generator.py) and its record of block-graph DFSs, replayed for
    later kernel states over tensors of the same values (`_BlockCtx.run`), for the units it
    runs: GQA's units dealt in turn to 16 fresh generators took twice the CPU time of one
    generator running them all (21.1 against 10.3 s, max_block_ops=7, in one process),
    and 16 contiguous runs of them in `_kind` order 10.5 s. After the replay, 72 % of
    GQA's block-DFS time (max_block_ops=8) was in DFSs that other units of the same
    outputs (`split`) repeat, and 16 workers dealt runs of one kind ran 559k block DFS
    steps where one worker runs 309k (max_block_ops=9). So units of the same outputs form
    a group, run in one call (the first pays the DFSs, the others replay them). The
    groups, in `_kind` order of their first unit, are cut into lanes, each run front to
    back by one worker (`_run_units`), a group a call: the next call of a lane is
    submitted as its last returns, when the worker that ran it is likely the one idle. A
    worker without a lane (at the start, after a check, or at its lane's end) adopts a
    lane nobody runs, else takes the back half of the lane with the most work left. Work
    is estimated from the times of the calls seen so far, per kind of group (per the
    weights until then). Calls of several groups (up to 1/(2 x workers) of the work left,
    as before the groups) put GQA's largest groups (1-2.7 s at max_block_ops=10, where
    16 workers' share is 2.3 s) beside others in one call: 16 virtual workers
    (results/search_scaling.md, 2026-11-25) took 2.9 and 4.1 s, a group a call 3.0 and
    3.1 s. Which worker runs what changes no result: the units are independent."""

    def __init__(self, units: list, meta: list, workers: int = 1):
        self.workers = workers
        groups, of_outs = [], {}
        for k in sorted(range(len(units)), key=lambda k: (_kind(units[k]), k)):
            outs = meta[k][1]
            if outs is None:
                groups.append([k])
            elif outs not in of_outs:
                of_outs[outs] = [k]
                groups.append(of_outs[outs])
            else:
                of_outs[outs].append(k)
        self.groups = groups
        self.group_of = {k: j for j, g in enumerate(groups) for k in g}
        self.order = [k for g in groups for k in g]
        self.lanes = [list(range(len(groups)))]  # per lane: its groups left, front first
        self.busy = [False]  # per lane: one of its calls in flight
        self.left = len(units)
        # a group's weight: its first unit's, and REPLAYED of the others'
        self.weights = [meta[g[0]][0] + REPLAYED * sum(meta[k][0] for k in g[1:]) for g in groups]
        # time seen per kind prefix of a group's first unit: (has a state, inputs, loop length)
        self.keys = [(meta[g[0]][0] >= 1.0,) + (("op",) if units[g[0]][0] == "op" else
                                                 (units[g[0]][1], units[g[0]][2].forloop)) for g in groups]
        self.seen_time: dict = {}

    def seen(self, j: int, seconds: float) -> None:
        key = self.keys[j]
        for d in range(len(key) + 1):
            t, n = self.seen_time.get(key[:d], (0.0, 0))
            self.seen_time[key[:d]] = (t + seconds, n + 1)

    def estimate(self, j: int) -> float:
        key = self.keys[j]
        for d in range(len(key), 0, -1):
            hit = self.seen_time.get(key[:d])
            if hit is not None:
                return hit[0] / hit[1]
        t, n = self.seen_time.get((), (0.0, 0))
        return self.weights[j] * (t / n if n else 1.0)

    def take(self, lane: int | None = None):
        """(lane, unit indices): the next call of `lane` (whose last call just returned), or
        of a lane for a worker without one; None when no unit is left."""
        if lane is not None:
            self.busy[lane] = False
            if not self.lanes[lane]:
                lane = None
        if lane is None:
            lane = self._new()
            if lane is None:
                return None
        j, self.lanes[lane] = self.lanes[lane][0], self.lanes[lane][1:]
        call = list(self.groups[j])
        self.busy[lane] = True
        self.left -= len(call)
        return lane, call

    def seen_call(self, call: list, seconds: float) -> None:
        """A call's time (a call is a group)."""
        self.seen(self.group_of[call[0]], seconds)

    def release(self, lane: int) -> None:
        """`lane`'s unit returned and its worker runs something else: the lane waits for another."""
        self.busy[lane] = False

    def _new(self):
        for j, lane in enumerate(self.lanes):
            if lane and not self.busy[j]:
                return j
        work = [sum(self.estimate(k) for k in lane) for lane in self.lanes]
        j = max(range(len(self.lanes)), key=lambda j: (work[j], -j))
        lane = self.lanes[j]
        if not lane:
            return None
        cut, back = len(lane), 0.0  # the back half of its work, one group at least
        while cut > 1 and back + self.estimate(lane[cut - 1]) <= work[j] / 2:
            cut -= 1
            back += self.estimate(lane[cut])
        if cut == len(lane):
            cut -= 1
        self.lanes[j], new = lane[:cut], lane[cut:]
        self.lanes.append(new)
        self.busy.append(False)
        return len(self.lanes) - 1


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
        return _measured(res, measure, verbose, t0 + cfg.time_limit)
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
    res = _measured(res, measure, verbose, t0 + cfg.time_limit)
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
        # what is left of the limit (not a floor of 1 s: a 0.3 s call ran 1 s over it)
        cfg_whole = cfg.with_(time_limit=max(0.0, cfg.time_limit - (time.monotonic() - t0)))
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

    for seed in (row_seeds(core, cfg) + attention_seeds(core, cfg) + softmax_pv_seeds(core, cfg)
                 + mbci_seeds(core, cfg, core_cost, pruned, device)):
        for plan in pro.variants(seed) if pro is not None else [seed]:
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


def _measured(res: SearchResult, measure, verbose: bool = False, deadline: float | None = None) -> SearchResult:
    if measure is False:
        return res
    if measure is True:  # required: errors surface
        if not M.gpu_available():
            raise RuntimeError("superoptimize(measure=True): no CUDA GPU is available to time the candidates "
                               "(measure=None times them only where a GPU is present)")
        measure = M.measure_on_gpu
    return M.select_by_time(res, measure, Progress(verbose), deadline)


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
    units, meta = split(gen, items)
    workers = cfg.workers or (X.ray_workers() if cfg.executor == "ray" else os.cpu_count() or 1)
    workers = max(1, min(workers, len(units) or 1))
    lanes = _Lanes(units, meta, workers)
    if skipped:
        stats.pruned["bound"] += skipped
    progress = Progress(verbose)  # its phase starts after the workers are forked (it runs a thread)
    enumeration = ("enumeration", len(units), "items", f"{len(units)} work items, {workers} worker(s)")

    def absorb(res, n=1):  # n: the units the call ran
        f, s = res
        stats.merge(s)
        for k, v in f.items():
            found.setdefault(k, v)
        progress.advance(n, status=enumeration_status(stats, found))

    checks = _Checks(ref, cfg, device)
    if workers == 1 and cfg.executor == "local":
        _init_worker(enumeration_deadline, None, ref, cfg, pro, bound, device, quiet=False, gen=gen)
        try:
            progress.phase(*enumeration)  # in the try: Ctrl-C right after its line is handled
            for k in lanes.order:
                absorb(_run_item(units[k]))
                if _W["gen"].stats.stopped and _W["gen"].stats.stopped != "state cap":
                    break
        except KeyboardInterrupt:
            stats.stopped = "interrupted"
            deadline = min(deadline, time.monotonic() + INTERRUPT_GRACE)
        finally:
            progress.end()
        return _rank(ref, cfg, stats, found, device, time.monotonic() - t0, checks, deadline, progress)
    # the local pool's workers are forked: they start from `gen`'s memos at no cost; a
    # Ray worker builds its own (they would travel pickled)
    warm = gen if cfg.executor == "local" else None
    pool = checks.pool = X.make(cfg.executor, workers, _init_worker, (ref, cfg, pro, bound, device, True, warm),
                                enumeration_deadline)
    running: dict = {}  # the calls of work items in flight: pool handle -> (lane, units, start)
    ranked = (-1, [])  # (len(found), its ranking)

    def deal(lane=None):
        # the checks that the ranking so far wants go first, beside the items, so that the
        # search does not end waiting for them (the seeds alone rank GQA's and QKNorm's
        # final best 3 first); a check whose candidate a later item displaces is wasted,
        # never wrong: what is checked, and in which order, still follows from the final
        # ranking alone (`_verify_ranked`). Checks take half the workers at most, the items
        # the others. No call is queued behind the running ones: the worker that just
        # returned `lane`'s call is likely the one idle, and takes that lane's next (`_Lanes`)
        nonlocal ranked
        if cfg.verify:
            if ranked[0] != len(found):  # found only grows
                ranked = (len(found), checks.rank(found)[0])
            checks.start(ranked[1], min(workers // 2 - len(checks.running), workers - len(pool.running)))
        while stats.stopped != "interrupted" and lanes.left and len(pool.running) < workers:
            nxt, lane = lanes.take(lane), None
            if nxt is None:
                break
            running[pool.submit(_run_units, [units[k] for k in nxt[1]])] = nxt + (time.monotonic(),)
        if lane is not None:
            lanes.release(lane)

    def collect():
        """The lane whose call returned (its worker is idle), or None after a check."""
        h, out = pool.next_done()
        if h not in running:
            checks.record(h, out)
            return None
        lane, call, start = running.pop(h)
        lanes.seen_call(call, time.monotonic() - start)
        absorb(out, len(call))
        return lane

    try:
        try:
            progress.phase(*enumeration)  # in the try: Ctrl-C right after its line is handled
            deal()
            while running:
                deal(collect())
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


class _Found(Candidate):
    """A candidate found by a worker, which sent its cost and graph key (`_run_item`): its
    graph is built from its plan when first asked for (`diverse` asks for those near the
    best; a caller for those it looks at). The driver built every candidate while ranking
    (the final ranking, and each ranking that picks the checks during the enumeration):
    QKNorm at max_block_ops=11, 4514 candidates, 8.4 s of the driver's CPU (2-core VM), and
    with 16 workers the driver, busy ranking, left workers idle (results/search_scaling.md)."""

    def __init__(self, ref: KNGraph, plan, c, key: str):
        self._ref, self._graph = ref, None
        self.cost, self.key, self.plan = c, key, plan
        self.verification, self.measured_us = "", float("nan")

    @property
    def graph(self) -> KNGraph:
        if self._graph is None:
            self._graph = B.build(self._ref, self.plan)
        return self._graph

    @graph.setter
    def graph(self, g: KNGraph) -> None:
        self._graph = g


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
        for key, got in sorted(found.items(), key=lambda kv: (kv[1][1], kv[0])):
            if key not in self._built:
                if len(got) > 2:  # a worker's: its cost and graph key, the graph built when asked for
                    c, gk = got[2]
                    self._built[key] = (_Found(self.ref, got[0], c, key), gk)
                else:  # a seed's
                    g = B.build(self.ref, got[0])
                    self._built[key] = (Candidate(g, cost(g, self.device), key, got[0]), B.graph_key(g))
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

