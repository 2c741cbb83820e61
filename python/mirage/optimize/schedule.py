"""Operator scheduling by depth (paper §6): block-level barriers only where needed.

A block graph runs as a pre region (once before the loop: ops that read only
loop-invariant tiles, i.e. loop-invariant code motion), a loop region (every for-loop
iteration: iterator copies, the ops upstream of the accumulators, the accumulators) and
a post region (once after the loop: ops downstream of an accumulator, then the output
savers). A barrier is needed
before an op that reads a tile another thread wrote since the last barrier. An edge
u -> v needs one unless both are element-wise over the same shape and layout (then the
thread that wrote an element is the one that reads it: thread-graph fusion); iterator
copies and reducing or contracting ops always need one.

Each op gets a depth: the most barrier-needing edges on any path to it from the start
of its region (a longest path, by dynamic programming in topological order). Running
the ops in ascending depth puts every independent op between the same two barriers,
so a region needs one barrier per depth level. `schedule` reports the barrier count
of that order and of the program order (as the graph was built), counted by the same
simulation.
"""
from __future__ import annotations

from typing import Mapping

from ..core.graph import TBGraph
from ..core.ops import is_accumulator
from .layout import ELEMENTWISE
from .plan import SchedulePlan, Stage, TileLayout, tile_names

_LOCAL = ELEMENTWISE | {"thread_graph", "constant"}


def _elementwise(op) -> bool:
    if op.kind == "forloop_accum":
        return op.attrs.get("kind") in ("none", "max")
    return op.kind in _LOCAL


REGION_RANK = {"pre": 0, "loop": 1, "post": 2}


def regions(tb: TBGraph) -> list[str]:
    """'pre', 'loop' or 'post' for each op of `tb`. An op is 'pre' when it reads only
    loop-invariant tiles (iterator tiles without a for-loop dim, constants, other 'pre'
    results) and no 'post' op reads it (a split loop's combine kernel runs only the post
    region, so what it reads must come from the accumulators or the inputs)."""
    counts = tb.accum_counts(varying_only=False)
    invariant = {id(r.stensor) for r in tb.inputs if r.forloop_dim == -1}
    out = []
    for op in tb.ops:
        c = counts.get(id(op.outputs[0]))
        if c is not None and c[1] >= 1 and not is_accumulator(op.kind):
            out.append("post")
        elif not is_accumulator(op.kind) and all(id(t) in invariant for t in op.inputs):
            out.append("pre")
            invariant.update(id(t) for t in op.outputs)
        else:
            out.append("loop")
    readers: dict[int, list[int]] = {}
    for j, op in enumerate(tb.ops):
        for t in op.inputs:
            readers.setdefault(id(t), []).append(j)
    for j in reversed(range(len(tb.ops))):  # consumers come later: one backward sweep
        if out[j] == "pre" and any(out[r] == "post" for t in tb.ops[j].outputs for r in readers.get(id(t), [])):
            out[j] = "loop"
    producer = {id(t): j for j, op in enumerate(tb.ops) for t in op.outputs}
    for j, op in enumerate(tb.ops):  # and a hoisted op never reads one that was not hoisted
        if out[j] == "pre" and any(out[producer[id(t)]] != "pre" for t in op.inputs if id(t) in producer):
            out[j] = "loop"
    return out


class _Deps:
    def __init__(self, tb: TBGraph, layouts: Mapping[str, TileLayout] | None):
        self.tb = tb
        self.names = tile_names(tb)
        self.producer = {}
        for j, op in enumerate(tb.ops):
            for t in op.outputs:
                self.producer[id(t)] = j
        self.layouts = layouts or {}
        self.region = regions(tb)

    def _inner(self, t):
        lay = self.layouts.get(self.names[id(t)])
        return lay.inner_dim if lay else len(t.shape) - 1

    def needs_sync(self, t, j: int) -> bool:
        """Whether op j reading tile t needs a barrier after t was written."""
        p = self.producer.get(id(t))
        if p is None:
            return True  # an iterator tile: copied cooperatively by all threads
        u, v = self.tb.ops[p], self.tb.ops[j]
        if self.region[p] != self.region[j]:
            return True
        if not (_elementwise(u) and _elementwise(v)):
            return True
        o = v.outputs[0]
        return t.shape != o.shape or self._inner(t) != self._inner(o)

    def depths(self) -> list[int]:
        d = []
        for j, op in enumerate(self.tb.ops):
            lvl = 1
            for t in op.inputs:
                p = self.producer.get(id(t))
                if p is not None and self.region[p] == self.region[j]:
                    lvl = max(lvl, d[p] + (1 if self.needs_sync(t, j) else 0))
            d.append(lvl)
        return d

    def simulate(self, order: list[int]) -> tuple[int, set[int]]:
        """Barriers of executing `order` (loop ops, then post ops, then the savers)
        and the ops preceded by one."""
        tb = self.tb
        dirty = {id(r.stensor) for r in tb.inputs}  # copies issued at the region start
        count, before, region = 0, set(), "pre"
        for j in order:
            op = tb.ops[j]
            if self.region[j] != region:
                if region == "pre":  # the loop's iterator copies are issued at its start
                    dirty.update(id(r.stensor) for r in tb.inputs if r.forloop_dim != -1)
                region = self.region[j]  # (loop finished: accumulators are written)
            if any(id(t) in dirty and self.needs_sync(t, j) for t in op.inputs):
                count += 1
                before.add(j)
                dirty = set()
            if is_accumulator(op.kind) and self.region[j] == "loop":
                # accumulator tiles are read after the loop, by other threads
                dirty.update(id(t) for t in op.outputs)
            else:
                dirty.update(id(t) for t in op.outputs)
        if any(id(o.stensor) in dirty for o in tb.outputs):
            count += 1  # before the output savers
        return count, before


def program_order(tb: TBGraph) -> list[int]:
    reg = regions(tb)
    return sorted(range(len(tb.ops)), key=lambda j: (REGION_RANK[reg[j]], j))


def valid_order(tb: TBGraph, order: list[int]) -> str | None:
    """Why `order` (indices of tb.ops) cannot be a schedule of `tb`, or None: it must
    hold every op once, run each op after the ops whose results it reads, and keep the
    regions in order (before the loop, in it, after it)."""
    if sorted(order) != list(range(len(tb.ops))):
        return f"the order must number the {len(tb.ops)} ops 0..{len(tb.ops) - 1}, each once"
    reg = regions(tb)
    pos = {j: p for p, j in enumerate(order)}
    made = {id(t): j for j, op in enumerate(tb.ops) for t in op.outputs}
    for j, op in enumerate(tb.ops):
        for t in op.inputs:
            if id(t) in made and pos[made[id(t)]] > pos[j]:
                return f"op {j} ({op.kind}) comes before op {made[id(t)]}, whose result it reads"
    ranks = [REGION_RANK[reg[j]] for j in order]
    if ranks != sorted(ranks):
        return "the order must run the ops before the for-loop first, then the loop's, then those after it"
    return None


def schedule(tb: TBGraph, enabled: bool = True,
             layouts: Mapping[str, TileLayout] | None = None, order: list[int] | None = None) -> SchedulePlan:
    """Order `tb`'s ops by depth (or keep the program order when disabled; or take
    `order`, one already chosen, e.g. recorded in the IR: see `valid_order`)."""
    deps = _Deps(tb, layouts)
    base = program_order(tb)
    base_count, base_before = deps.simulate(base)
    depth_order = enabled and order is None
    if order is not None:
        order = list(order)
    elif enabled:
        depth = deps.depths()
        order = sorted(base, key=lambda j: (REGION_RANK[deps.region[j]], depth[j], j))
    else:
        order = base
    count, before = deps.simulate(order)
    if depth_order and count > base_count:  # never worse than the program order
        order, count, before = base, base_count, base_before
    stages: list[Stage] = []
    for j in order:
        if not stages or j in before or deps.region[j] != stages[-1].region:
            stages.append(Stage(deps.region[j], [], j in before))
        stages[-1].ops.append(j)
    return SchedulePlan(order, stages, count, base_count, enabled)
