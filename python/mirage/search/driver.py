"""`superoptimize`: run the generator (in parallel), verify, dedupe, rank, report.

Work is split into items: the first kernel op of a candidate (a pre-defined op, or a
graph-defined kernel over one input set with one schedule), cut where that kernel
closes into several kernel states (`split`); each item runs the whole DFS below it in
one worker process, builds and costs its complete candidates, and returns them with
its statistics; units whose first kernel adds tensors of the same values go to one worker
(their block-graph DFSs are replayed there), those of one kind where they can (`_Lanes`);
once nothing is left to deal, a unit still running hands the rest of its work to the
idle workers (`_Piece`, `_Donated`).
Results are merged, deduplicated by canonical key and sorted by (cost, key), so the
outcome does not depend on which worker ran what; with a time limit, what finishes in
time does. The best candidates are then checked
(float64, then the formal verifier) on the same workers, in rank order until `top_k`
pass; those checks start while items still run, on the ranking so far (`_Checks`), and
the final ranking takes their outcomes. Ctrl-C (or the time limit) stops the workers,
which return what they found so far.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import signal
import sys
import time
from collections import deque

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
from .result import Candidate, SearchResult, diverse, diversity, order as _order, reference_candidate
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
    # (tiles, block ops, schedules) `work_items` filled: a forked worker starts from them
    # instead of building its own (`_search`)
    if gen is None:
        gen = Generator(pro.core if pro is not None else ref, cfg, deadline, stop_event, bound, device)
    gen.deadline, gen.stop_flag = deadline, stop_event
    _W["gen"] = gen
    _W["ref"] = ref
    _W["fold"] = pro.variants if pro is not None else None  # a core plan -> the plans it stands for


def _run_item(item, piece=None):
    """(found, stats) of work item (unit) `item`: its candidates (plan key -> (plan, cost
    time, (Cost, graph key))) and its statistics. With `piece` = (lo, hi, budget), only the
    pairs lo..hi of its kernel states (`_Piece`), stopping after `budget` seconds: returns
    (found, stats, stop, pairs, keys) (`_Piece.result`)."""
    gen: Generator = _W["gen"]
    ref = _W["ref"]
    gen.stats = Stats()
    gen._memo = {}  # per item: what a worker ran before must not change what this item visits
    fold = _W.get("fold")
    found = {}
    cut = None if piece is None else _Piece(gen, *piece)
    # the generator looks at the clock and the stop flag every 256 states only: each of
    # hundreds of items left would run up to that many before stopping (20 s past a 2 s limit)
    if gen.deadline is not None and time.monotonic() > gen.deadline:
        gen.stats.stopped = "time limit"
        return (found, gen.stats) if cut is None else cut.result(found)
    if gen.stop_flag is not None and gen.stop_flag.is_set():
        gen.stats.stopped = "interrupted"
        return (found, gen.stats) if cut is None else cut.result(found)

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
            found[key] = _found_entry(plan, g, gen.device)

    gen.on_candidate = on_candidate
    if cut is None:
        _walk(gen, item)
    else:
        _walk(gen, item, cut.follow, count_prefix=cut.lo == 0)
    gen.stats.expr_checks = gen.T.checks
    return (found, gen.stats) if cut is None else cut.result(found)


def _found_entry(plan, g: KNGraph, device: Target) -> tuple:
    """A found candidate (plan, cost time, (Cost, canonical graph key, `diversity`)) of built
    graph `g`: what the driver ranks without building the graph again (`_Checks.rank`)."""
    c = cost(g, device)
    return plan, c.time, (c, B.graph_key(g), diversity(g, c))


def _run_units(tasks: list):
    """`_run_item` of each of `tasks` in turn, one after another on this worker's generator
    (whose value memos the later ones reuse). A task is a unit, or (unit, lo, hi, budget):
    a piece of it (`_Piece`; only the first of a call may stop early). Returns (found,
    stats, pieces): the results of the whole units merged; per task that is a piece or
    stopped, (its index, found, stats, stop, pairs, keys), kept apart: the driver merges a
    unit's pieces once all have returned and their kernel states are disjoint (`_Donated`)."""
    found, stats, pieces = {}, Stats(), []
    cut = None  # where the first task stopped: the later ones (a group: `_Lanes`) stop there too,
    # so that the rest of the group's pairs go into one call again, whose later units replay
    # the first's block-graph DFSs
    for i, t in enumerate(tasks):
        if t[0] in ("op", "graph_def"):
            f, s = _run_item(t)
        else:
            unit, lo, hi, budget = t
            if i > 0:  # it replays the first's block-graph DFSs: its pairs cut off would run them anew
                budget = float("inf")
            if cut is not None:
                hi = cut if hi is None else min(hi, cut)
            f, s, stop, n, keys = _run_item(unit, (lo, hi, budget))
            if cut is not None and n is not None and n > cut:
                stop = cut
            cut = stop if stop is not None else cut
            if lo > 0 or t[2] is not None or stop is not None:
                pieces.append((i, f, s, stop, n, keys))
                continue
        stats.merge(s)
        for k, v in f.items():
            found.setdefault(k, v)
    return found, stats, pieces


class _Piece:
    """A unit's search after its kernel states restricted to the pairs lo..hi (hi None:
    to the end) of their next kernel: (pre-defined op, None) or (graph-defined kernel's
    inputs, one of its schedules), in `search_kernel`'s order. A unit of one state key
    (`split`) expands one kernel state (the others of its key hit `search_kernel`'s memo),
    so its pieces together run what it runs: GQA's largest unit at max_block_ops=11 is
    7 such kernels and 1,547 pairs, none of whose kernel states passes the bound (the
    second kernel's block-graph DFSs are all of its 2.9 s). The piece with lo == 0 counts
    what the unit's first kernel and its kernel states count; each piece counts its
    pairs' states and candidates. It stops before a pair, where an idle worker waits
    (`executor.steal`, after DONATE_MIN seconds) or past `budget` seconds (inf: never):
    `stop` is the first pair it did not run, which the driver hands to other pieces.
    Pieces are the whole unit's run only where no kernel state below is expanded in two
    of them (in one run the second would hit the memo): `keys` are their state keys
    (`_state_digest`), which the driver compares (`_Donated`)."""

    def __init__(self, gen: Generator, lo: int, hi: int | None, budget: float | None):
        self.g, self.lo, self.hi, self.budget = gen, lo, hi, budget
        self.stop = self.pairs = None
        self.t0 = time.monotonic()

    def follow(self, st) -> None:
        """`search_kernel(st)` for a kernel state of the unit's first kernel, its expansion
        restricted to the piece's pairs; the arrivals at the unit's kernel states (their
        checks, candidates and memo hits) count in piece 0 only."""
        self.g.search_kernel(st, part=self._run, arrival=Stats() if self.lo > 0 else None)

    def _run(self, st, pairs) -> None:
        self.pairs = len(pairs)
        for i in range(self.lo, len(pairs) if self.hi is None else min(self.hi, len(pairs))):
            if i > self.lo and self._stop():
                self.stop = i
                break
            self.g.run_pair(st, *pairs[i])

    def _stop(self) -> bool:
        """Whether to stop before the next pair: past the budget, or, past DONATE_MIN
        seconds, where an idle worker waits for work (`executor.steal`)."""
        t = time.monotonic() - self.t0
        if self.budget is not None:
            return t > self.budget
        return t >= DONATE_MIN and X.steal()

    def result(self, found: dict) -> tuple:
        """(found, stats, stop, pairs, keys): keys, the digests of the kernel states the
        piece expanded below the unit's own (None where one cannot be compared)."""
        g = self.g
        keys, memo = frozenset(), {}
        if self.lo > 0 or self.hi is not None or self.stop is not None:  # a piece: the driver compares
            try:
                keys = frozenset(_state_digest(g.T, k, memo) for k in g._memo if k[1] > 1)
            except KeyError:  # an expression node `_expr_digest` does not know
                keys = None
        return found, g.stats, self.stop, self.pairs, keys


def _expr_digest(T, e: int, memo: dict) -> bytes:
    """A digest of expression `e` of table `T` that is the same in every process: the
    table's ids depend on the order in which a process made its expressions, and it
    sorts a sum's terms and a term's factors by id, so these are sorted by digest."""
    d = memo.get(e)
    if d is None:
        node = T.nodes[e]
        kind = node[0]
        if kind == "expr":
            parts = sorted(_expr_digest(T, m, memo) for m in node[1])
        elif kind == "mono":
            parts = (node[1], sorted(_expr_digest(T, f, memo) for f in node[2]),
                     _expr_digest(T, node[3], memo) if node[3] else b"")
        elif kind in ("exp", "sqrt"):
            parts = _expr_digest(T, node[1], memo)
        elif kind == "fn":
            parts = (node[1], _expr_digest(T, node[2], memo))
        elif kind in ("var", "const", "none"):
            parts = node[1:]  # no ids
        else:
            raise KeyError(kind)
        d = memo[e] = hashlib.blake2b(repr((kind, parts)).encode(), digest_size=16).digest()
    return d


def _state_digest(T, key: tuple, memo: dict) -> bytes:
    """`Generator.state_key` `key` as a digest the same in every process (its expressions
    by `_expr_digest`; the rest are shapes, class names, counts)."""
    tensors, *rest = key
    canon = (tuple((_expr_digest(T, e, memo), shape, classes, used) for e, shape, classes, used in tensors), rest)
    return hashlib.blake2b(repr(canon).encode(), digest_size=16).digest()


def _walk(gen: Generator, item, follow=None, count_prefix: bool = True) -> None:
    """The DFS below work item `item` (its candidates go to `gen.on_candidate`);
    `follow(state)` replaces the search after each kernel state of its graph-defined kernel.
    A part ("graph_def", I, sched, j, n) of a graph-defined item (`split`) searches only
    after the kernel states whose `state_key` is the j-th distinct one of the n its
    block-graph DFS makes: states of one key stay in one part, so `search_kernel`'s memo
    hits, and with them the states and counts, are those of the whole item. Part 0
    counts that DFS (states, pruning); the others run it uncounted, as does every piece
    of a unit but its first (`count_prefix` False: `_Piece`)."""
    st = gen.initial()
    counted = gen.stats
    uncounted = counted if (len(item) < 5 or item[3] == 0) and count_prefix else Stats()
    try:
        if item[0] == "op":
            nst = gen.apply_op(st, item)
            if nst is not None:
                gen.search_kernel(nst)
            return
        follow = follow or gen.search_kernel
        kernels = gen.graph_defs(st, item[1], [item[2]])
        part = item[3] if len(item) >= 5 else None
        keys: dict = {}
        while True:
            gen.stats = uncounted
            try:
                nst = next(kernels)
            except StopIteration:
                return
            finally:
                gen.stats = counted
            if part is None or keys.setdefault(gen.state_key(nst), len(keys)) == part:
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


# `split` runs each item's first block-graph DFS: at most this many of its block states
# per item (GQA's cut items: 13 at most), and this many for all items (the unrestricted
# space of a small RMSNorm program: 1.1 M states over 808 items, 11 s), shared out over
# chunks of SPLIT_CHUNK items in order; an item past either limit stays whole. With a pool,
# the chunks run on its workers (`_search`): in one process GQA's and QKNorm's 373 items
# took 0.13 s on the VM, 0.2-0.3 s on the GPU machine, while 16 workers waited for them
SPLIT_ITEM_STATES = 500
SPLIT_STATES = 10_000
SPLIT_CHUNK = 8
# the time of a unit whose block-graph DFSs another unit of its group ran, as a share of
# that one's: GQA at max_block_ops=8, 0-25 %, mostly 5-10 % (`_Lanes`)
REPLAYED = 0.1


def split(gen: Generator, items: list, run=None) -> tuple[list, list]:
    """(units, meta): `items` with each graph-defined item whose kernel closes into n > 1
    distinct kernel states cut into its n parts (`_walk`), so that no item is a large
    share of the search (GQA at max_block_ops=8: one item was 7.6 % of the work, bounding
    16 workers to 0.82; its kernel closes into 8 states); per unit (weight, outputs):
    weight 1 for a unit whose kernel closes into a state (what follows is searched), 0.01
    for one that closes into none (only its block-graph DFS runs), 1 for an item not
    probed; outputs: a digest of the values of the tensors its kernel adds (one state),
    else None. Units of the same outputs search below tensors of the same values, whose
    block-graph DFSs the generator replays in a process that ran them once
    (`_BlockCtx.run`): `_Lanes` deals them to one worker. The cut is the block-graph DFS
    of each item's first kernel (`_probe`), nothing after it. `run(args)`: `_split_call`
    of each of `args` (chunks of items), in order (default: in this process). The same
    units wherever the chunks run, and the same states and counts as the whole items; with
    a state cap (`max_states`, per work item) nothing is cut, so that the cap keeps its
    meaning."""
    if gen.cfg.max_states is not None:
        return list(items), [(1.0, None)] * len(items)
    share = max(SPLIT_ITEM_STATES, SPLIT_STATES * SPLIT_CHUNK // max(1, len(items)))
    args = [(items[i:i + SPLIT_CHUNK], share) for i in range(0, len(items), SPLIT_CHUNK)]
    probes = run(args) if run is not None else [_probe(gen, *a) for a in args]
    units, meta = [], []
    for it, outs in zip(items, (o for chunk in probes for o in chunk)):
        n = len(outs)
        units += [it] if n <= 1 else [it + (j, n) for j in range(n)]
        meta += [(1.0, o) for o in outs] or [(0.01, None)]
    return units, meta


def _split_call(arg):
    """In a worker: `_probe` of a chunk of items on its generator."""
    return _probe(_W["gen"], *arg)


def _probe(gen: Generator, items: list, budget: int) -> list:
    """Per item: the outputs digest of each distinct kernel state its first kernel closes
    into, in `_walk`'s order of the parts ([None]: not probed, or cut short), within
    `budget` block states for all of them."""
    saved = gen.stats, gen._memo, gen.on_candidate, gen.cfg
    n_in = len(gen.ref.inputs)
    out, memo = [], {}
    try:
        for it in items:
            if it[0] == "op" or budget <= 0:
                out.append([None])
                continue
            keys: dict = {}  # in `_walk`'s order of the parts
            gen.cfg = saved[3].with_(max_states=min(SPLIT_ITEM_STATES, budget))
            gen.stats, gen._memo, gen.on_candidate = Stats(), {}, lambda plan: None
            _walk(gen, it, lambda st: keys.setdefault(gen.state_key(st), len(keys)))
            budget -= gen.stats.states
            out.append([None] if gen.stats.stopped else [_outputs_digest(gen.T, k, n_in, memo) for k in keys])
    finally:
        gen.stats, gen._memo, gen.on_candidate, gen.cfg = saved
    return out


def _outputs_digest(T, key: tuple, n_in: int, memo: dict) -> bytes | None:
    """The tensors a kernel state `key` adds past the program's `n_in` inputs, (expr,
    shape, classes) each, as a digest the same in every process (None: not comparable)."""
    try:
        outs = tuple((_expr_digest(T, e, memo), shape, classes) for e, shape, classes, _ in key[0][n_in:])
    except KeyError:  # an expression node `_expr_digest` does not know
        return None
    return hashlib.blake2b(repr(outs).encode(), digest_size=16).digest()


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
    3.1 s. With `learned` (a group's first unit -> its time in an earlier search of the same
    units: `_LEARNED`), the largest groups are lanes of their own, dealt first, and the
    estimates are those times. Which worker runs what changes no result: the units are
    independent."""

    def __init__(self, units: list, meta: list, workers: int = 1, learned: dict | None = None):
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
        # a group's time in an earlier search of the same units (`_LEARNED`), by its first unit
        self.learned = [None] * len(groups)
        if learned:
            self.learned = [learned.get(g[0]) for g in groups]
        if all(t is not None for t in self.learned) and groups:
            # the groups larger than BIG_SHARE of a worker's share first, largest first, each
            # a lane (adopted before the rest): QKNorm's largest group (5.7 % of the work at
            # max_block_ops=11) was dealt 3.3-3.7 s into a 5.7 s 16-worker enumeration, whose
            # end it made; the others in `_kind` order, for the memos they share
            share = BIG_SHARE * sum(self.learned) / workers
            big = sorted((j for j in range(len(groups)) if self.learned[j] >= share),
                         key=lambda j: (-self.learned[j], j))
            rest = [j for j in range(len(groups)) if self.learned[j] < share]
            self.lanes = [[j] for j in big] + ([rest] if rest else [])
            self.busy = [False] * len(self.lanes)

    def seen(self, j: int, seconds: float) -> None:
        key = self.keys[j]
        for d in range(len(key) + 1):
            t, n = self.seen_time.get(key[:d], (0.0, 0))
            self.seen_time[key[:d]] = (t + seconds, n + 1)

    def estimate(self, j: int) -> float:
        if self.learned[j] is not None:
            return self.learned[j]
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


# a unit that has run this long hands the rest of its pairs back as pieces (`_Piece`) when
# a worker is idle: a piece's first pairs on a worker that did not run its unit cost more
# (the generator's value memos: GQA's largest units cut in 4, +0-22 %, ~0.1 s a piece)
DONATE_MIN = 0.2
# `_Lanes`: with the groups' times of an earlier search of the same units, those over this
# share of a worker's share of the work are dealt first, largest first. 16 virtual workers
# (.ray17/h17/vpool.py, QKNorm at max_block_ops=11): 0.25 left the workers' ends 2.78-3.23 s
# apart, 0.1 2.49-2.62 s (8 workers: 5.04-5.21 s); replayed with the one-worker units'
# times (no memo effects), 0.1 deals GQA and QKNorm at 0.92-0.99 efficiency at 4-16 workers
BIG_SHARE = 0.1
# (program, units) digest -> {a group's first unit: its time}, from the last search of
# those units in this process that ran to its end (`_search`); a hint for the deal only:
# which worker runs what changes no result. Kept for LEARNED_MAX searches at most
_LEARNED: dict = {}
LEARNED_MAX = 64


def _units_key(ref: KNGraph, units: list) -> bytes:
    # the units fix the program's search space but for its ops: the program is in the key too
    return hashlib.blake2b(repr((B.graph_key(ref), units)).encode(), digest_size=16).digest()


def _learn(key: bytes, lanes: "_Lanes", spent: dict) -> None:
    """Record the groups' times of a search that ran every unit (`spent`: unit -> seconds)."""
    times = {g[0]: sum(spent.get(k, 0.0) for k in g) for g in lanes.groups}
    if sum(times.values()) <= 0:
        return
    _LEARNED.pop(key, None)
    while len(_LEARNED) >= LEARNED_MAX:
        _LEARNED.pop(next(iter(_LEARNED)))
    _LEARNED[key] = times


class _Donated:
    """The units cut into pieces while they ran (`_Piece`): with workers idle and nothing
    left to deal, the driver says so (`pool.want`), and a unit that has run DONATE_MIN
    seconds returns what it did and the first pair it did not run; the driver cuts the
    pairs left into pieces for the idle workers (which may be cut again), and once all
    have returned merges them, where no kernel state below the unit's own was expanded
    in two pieces: then they visited what the whole unit visits. Otherwise (a state
    reached from two pieces, which one run would have searched once) the unit runs
    again whole, and its pieces are dropped. Without it the end of a 16-worker search
    waited for the largest units: GQA's took up to 6.9 % of the work at max_block_ops=11
    (16 workers' share: 6.25 %), and the deal left workers idle while the last ones ran
    (results/search_scaling.md). Only units of one state key (`split`'s outputs) are cut:
    their first kernel's states are expanded once."""

    def __init__(self, units: list, meta: list, cfg: SearchConfig, workers: int):
        # not under a state cap (its count is per unit), nor with one worker
        self.ok = [cfg.max_states is None and workers > 1 and u[0] == "graph_def" and m[1] is not None
                   for u, m in zip(units, meta)]
        self.cut_ok = any(self.ok)
        self.pending: deque = deque()  # (units, lo, hi): a call to submit, the units' pairs lo..hi
        self.parts: dict = {}  # unit -> [pieces in flight, [(found, stats, keys)]]
        self.cut = self.again = self.pieces = 0  # units cut; of them, run again whole; pieces made
        self.transit = 0  # calls that stopped for an idle worker (`executor.steal`) and did not return yet

    def can(self, k: int) -> bool:
        return self.ok[k]

    def returned(self, pieces: list, m: int = 2) -> list:
        """The pieces of one call returned: (task, found, stats, stop, pairs, keys) each, a task
        (unit, lo, hi, budget). Those that stopped (at one pair: `_run_units`) leave their
        pairs from there to `m` new pieces (for the worker that ran the call and the idle
        one it stopped for), the call's units together. Returns [(unit, its pieces' (found,
        stats))] for the units whose pieces have all returned and can be merged; a unit
        that cannot runs again whole, first."""
        out, left = [], []
        for (k, lo, hi, _), found, stats, stop, n, keys in pieces:
            rec = self.parts.get(k)
            if rec is None:
                rec = self.parts[k] = [1, []]
                self.cut += 1
            rec[0] -= 1
            rec[1].append((found, stats, keys))
            if stop is not None:
                left.append((k, stop, hi, n))
        if left:
            self.transit = max(0, self.transit - 1)
            stop, hi = left[0][1], left[0][2]
            end = max(x[3] for x in left) if hi is None else hi
            m = max(1, min(end - stop, m))
            for j in range(m):
                a, b = stop + (end - stop) * j // m, stop + (end - stop) * (j + 1) // m
                self.pending.append((tuple(x[0] for x in left), a, hi if j == m - 1 else b))
            for x in left:
                self.parts[x[0]][0] += m
            self.pieces += m
        for (k, *_), *_ in pieces:
            rec = self.parts.get(k)
            if rec is None or rec[0]:
                continue
            del self.parts[k]
            parts = rec[1]
            stopped = any(s.stopped for _, s, _ in parts)  # a time limit: what finished counts
            seen: set = set()
            for _, _, keys in parts:
                if keys is None or (seen & keys and not stopped):
                    self.again += 1
                    self.pending.appendleft(((k,), 0, None))  # whole, no budget: merged as a unit
                    break
                seen |= keys
            else:
                out.append((k, [(f, s) for f, s, _ in parts]))
        return out

    def unfinished(self) -> list:
        out = [(f, s) for rec in self.parts.values() for f, s, _ in rec[1]]
        self.parts.clear()
        return out


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
        # each side searched alone (fast); the whole-program search then has to beat it.
        # Its stitched program's check may take the call's time: past the baseline's
        # share, a GPT-2 block's first subprogram (its LayerNorm fused, the projections
        # searched) was dropped for the reference, at random with the machine's load
        base = partitioned_search(ref, cfg.with_(partition="split", time_limit=SPLIT_SHARE * cfg.time_limit),
                                  verbose, device, preset, _search, deadline=t0 + cfg.time_limit)
        # what is left of the limit (not a floor of 1 s: a 0.3 s call ran 1 s over it)
        cfg_whole = cfg.with_(time_limit=max(0.0, cfg.time_limit - (time.monotonic() - t0)))
    else:
        cfg_whole = cfg
    if split and base.stats.stopped == "interrupted":
        res = base
    elif needs_partition(ref, cfg.partition):
        res = partitioned_search(ref, cfg_whole, verbose, device, preset,
                                 lambda sub, scfg, v, d: _subprogram(sub, scfg, v, d, preset))
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


def _subprogram(sub, cfg, verbose, device, preset) -> SearchResult:
    """The search of a Lax subprogram (`partitioned_search`): as `_strategy` searches a
    program, so that a default call has the split baseline inside it too (a GPT-2 block's
    first subprogram is its LayerNorm and the q, k, v projections: searched whole, 17 ops
    stayed 17 kernels; the norm alone fuses into one)."""
    if preset != "auto" or needs_partition(sub, "auto"):  # (no Lax partition inside: none again)
        return _search(sub, cfg, verbose, device)
    from .config import auto_config

    return _strategy(sub, cfg.with_(partition="auto"), verbose, device, preset, auto_config(sub)[0],
                     time.monotonic())


def _seeds(ref, cfg, device, pro=None, pruned=None) -> dict:
    """The seeds of `ref` (search/seed.py, search/mbci.py; of its core program, folded back,
    where it has input prologues) that build (fit in shared memory, ...), as the search's
    found candidates, as a worker sends them (`_run_item`). `pruned` counts the chain search's pruning."""
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
                g = B.build(ref, plan)
            except Exception:  # the builder's checks reject it: not a candidate
                continue
            out[B.plan_key(plan)] = _found_entry(plan, g, device)
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


def _start(ref: KNGraph, cfg: SearchConfig, device: Target, pruned: dict):
    """A search's steps before its workers: the input prologues, the seeds (as found
    candidates; `pruned` counts the chain search's pruning), the bound they set, the
    generator and its work items. Returns (prologue, found, bound, generator, items,
    items the bound skipped)."""
    from .prologue import aliased, analyze

    pro = analyze(ref) if cfg.prologues else None
    pro = pro or aliased(ref)  # a residual x @ W + x: the add reads an alias of x
    found = _seeds(ref, cfg, device, pro, pruned)
    # branch and bound: items (and kernel states) whose every candidate costs more than
    # the seeds' top-k window are not searched
    bound = BOUND_WINDOW * min(v[1] for v in found.values()) if found else None
    gen = Generator(pro.core if pro is not None else ref, cfg, bound=bound, device=device)
    items, skipped = work_items(gen, device, bound)
    return pro, found, bound, gen, items, skipped


def _search(ref: KNGraph, cfg: SearchConfig, verbose: bool, device: Target) -> SearchResult:
    t0 = time.monotonic()
    deadline = t0 + cfg.time_limit
    enumeration_deadline = t0 + ENUMERATION_SHARE * cfg.time_limit
    stats = Stats()
    pro, found, bound, gen, items, skipped = _start(ref, cfg, device, stats.pruned)
    workers = cfg.workers or (X.ray_workers() if cfg.executor == "ray" else os.cpu_count() or 1)
    pool = None
    if 1 < workers <= len(items):
        # the pool first: its workers cut the items (`split`). The local pool's workers are
        # forked: they start from `gen`'s memos at no cost; a Ray worker builds its own
        # (they would travel pickled)
        warm = gen if cfg.executor == "local" else None
        pool = X.make(cfg.executor, workers, _init_worker, (ref, cfg, pro, bound, device, True, warm),
                      enumeration_deadline)
        try:
            units, meta = split(gen, items, lambda args: _in_order(pool, _split_call, args))
        except BaseException:
            pool.close()
            raise
    else:
        units, meta = split(gen, items)
    workers = pool.workers if pool is not None else max(1, min(workers, len(units) or 1))
    ukey = _units_key(ref, units)
    lanes = _Lanes(units, meta, workers, _LEARNED.get(ukey))
    spent: dict = {}  # unit -> the seconds of the calls that ran it (a call's shared evenly)
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
                t = time.monotonic()
                absorb(_run_item(units[k]))
                spent[k] = time.monotonic() - t
                if _W["gen"].stats.stopped and _W["gen"].stats.stopped != "state cap":
                    break
            else:
                if not stats.stopped:
                    _learn(ukey, lanes, spent)
        except KeyboardInterrupt:
            stats.stopped = "interrupted"
            deadline = min(deadline, time.monotonic() + INTERRUPT_GRACE)
        finally:
            progress.end()
            # the generator is this search's alone: left in _W (and in a cycle through its
            # on_candidate), its memos (QKNorm at max_block_ops=11: 250-330k objects) stayed in
            # this process, walked by each later full collection (0.3-0.5 s on the VM, one of
            # them right after a later 16-worker search's enumeration) and inherited by the
            # workers of each later pool
            _W.pop("gen", None)
            gen.on_candidate = None
        return _rank(ref, cfg, stats, found, device, time.monotonic() - t0, checks, deadline, progress)
    if pool is None:
        pool = X.make(cfg.executor, workers, _init_worker,
                      (ref, cfg, pro, bound, device, True, gen if cfg.executor == "local" else None),
                      enumeration_deadline)
    checks.pool = pool
    running: dict = {}  # the calls of work items in flight: pool handle -> (lane, tasks, start)
    ranked = (-1, [])  # (len(found), its ranking)
    donated = _Donated(units, meta, cfg, workers)

    def deal(lane=None):
        # the checks that the ranking so far wants go first, beside the items, so that the
        # search does not end waiting for them (the seeds alone rank GQA's and QKNorm's
        # final best 3 first); a check whose candidate a later item displaces is wasted,
        # never wrong: what is checked, and in which order, still follows from the final
        # ranking alone (`_verify_ranked`). Checks take half the workers at most, the items
        # the others. No call is queued behind the running ones: the worker that just
        # returned `lane`'s call is likely the one idle, and takes that lane's next (`_Lanes`).
        # The pieces of units that stopped for an idle worker go before the lanes' next
        # units (there are none left by then, but for a unit that runs again whole)
        nonlocal ranked
        if cfg.verify:
            if ranked[0] != len(found):  # found only grows
                ranked = (len(found), checks.rank(found)[0])
            checks.start(ranked[1], min(workers // 2 - len(checks.running), workers - len(pool.running)))
        while stats.stopped != "interrupted" and len(pool.running) < workers:
            if donated.pending:
                ks, lo, hi = donated.pending.popleft()
                # (0, None): a unit run again whole (`_Donated`), which must not stop
                tasks = [(k, lo, hi, float("inf") if lo == 0 and hi is None else None) for k in ks]
                running[pool.submit(_run_units, [(units[k],) + t[1:] for k, t in zip(ks, tasks)])] = \
                    (None, tasks, time.monotonic())
                continue
            nxt, lane = (lanes.take(lane) if lanes.left else None), None
            if nxt is None:
                break
            tasks = [(k, 0, None, None) for k in nxt[1]]
            arg = [(units[k], 0, None, None) if donated.can(k) else units[k] for k in nxt[1]]
            running[pool.submit(_run_units, arg)] = (nxt[0], tasks, time.monotonic())
        if lane is not None:
            lanes.release(lane)
        # idle workers with nothing to run: the calls that can hand work back do (`_Piece`),
        # one for each, less those that did and have not returned yet (else a worker idle
        # for a while would have many calls cut for it, each piece paying for its memos)
        idle = workers - len(pool.running) - donated.transit
        donated.transit += pool.want(idle if idle > 0 and not lanes.left and not donated.pending
                                     and donated.cut_ok else 0)

    def collect():
        """The lane whose call returned (its worker is idle), or None after a check or a piece."""
        h, out = pool.next_done()
        if h not in running:
            checks.record(h, out)
            return None
        lane, tasks, start = running.pop(h)
        took = time.monotonic() - start
        if lane is not None:
            lanes.seen_call([t[0] for t in tasks], took)
        for t in tasks:
            spent[t[0]] = spent.get(t[0], 0.0) + took / len(tasks)
        f, s, pieces = out
        absorb((f, s), len(tasks) - len(pieces))
        for k, parts in donated.returned([(tasks[p[0]],) + p[1:] for p in pieces]):
            for res in parts:  # unit k's pieces, all returned
                absorb(res, 0)
            progress.advance(1, status=enumeration_status(stats, found))
        return lane

    try:
        with _collections_put_off():
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
        for res in donated.unfinished():  # interrupted: the pieces that returned, as found
            absorb(res, 0)
        if not stats.stopped:
            _learn(ukey, lanes, spent)
        progress.end()
        return _rank(ref, cfg, stats, found, device, time.monotonic() - t0, checks, deadline, progress)
    finally:
        progress.end()
        pool.close()  # checks still running (no longer wanted) are abandoned


def _in_order(pool, fn, args: list) -> list:
    """`fn` of each of `args` on `pool`'s workers, at once; the results in order."""
    handles = {pool.submit(fn, a): i for i, a in enumerate(args)}
    out = [None] * len(args)
    while handles:
        h, res = pool.next_done()
        out[handles.pop(h)] = res
    return out


@contextlib.contextmanager
def _collections_put_off():
    """The garbage collector off while the driver deals (then as it was): a full collection
    walks the driver's whole heap (a caller's data, the generator of a one-worker search
    before), and the workers whose calls return meanwhile wait. QKNorm at max_block_ops=11,
    16 workers after a one-worker search: on the 2-core VM the driver's 2 full collections
    (0.49 and 0.37 s of CPU) took 8.4 s of the enumeration, none with this; on the GPU
    machine's 16 CPUs (before this, not timed there) the workers waited between calls 0.17
    of their time, several at once for up to 0.78 s. What the driver makes while it deals
    is freed by reference counts."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _Found(Candidate):
    """A candidate found by a worker, which sent its cost, graph key and `diversity`
    (`_run_item`): its graph is built from its plan when first asked for (a caller for those
    it looks at; the checks). The driver built every candidate while ranking (the final
    ranking, and each ranking that picks the checks during the enumeration): QKNorm at
    max_block_ops=11, 4514 candidates, 8.4 s of the driver's CPU (2-core VM), and with 16
    workers the driver, busy ranking, left workers idle (results/search_scaling.md); then
    those near the best, for `diverse` (13 of 25 rankings 13-92 ms)."""

    def __init__(self, ref: KNGraph, plan, c, key: str, diversity: tuple):
        self._ref, self._graph = ref, None
        self.cost, self.key, self.plan, self._diversity = c, key, plan, diversity
        self.verification, self.measured_us = "", float("nan")

    @property
    def diversity(self) -> tuple:
        return self._diversity

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
        # plan key -> (Candidate, canonical graph key, its `_order`), made once: each ranking
        # sorts all found again (QKNorm at max_block_ops=11, 4414 found: the order keys
        # cached, 18 -> 10 ms of CPU a ranking on the 2-core VM)
        self._built: dict = {}

    def rank(self, found: dict) -> tuple[list, list]:
        """(ranked, slow): `found`'s distinct graphs (by canonical key) by cost, each main-kernel
        schedule's best first (`diverse`); `slow`: those costing over BOUND_WINDOW x the
        reference, which are not checked (at full size their float64 run alone can take a minute)."""
        ranked, seen = [], set()
        for key, got in sorted(found.items(), key=lambda kv: (kv[1][1], kv[0])):
            if key not in self._built:  # its cost, graph key and diversity; the graph built when asked for
                c, gk, div = got[2]
                f = _Found(self.ref, got[0], c, key, div)
                self._built[key] = (f, gk, _order(f))
            c, gk, o = self._built[key]
            if gk not in seen:
                seen.add(gk)
                ranked.append((o, c))
        ranked = diverse([c for _, c in sorted(ranked, key=lambda oc: oc[0])])
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

