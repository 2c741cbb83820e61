"""What a search returns: the ranked candidates and statistics (`SearchResult`), and
the ranking key. Shared by the driver and the Lax-partitioned search."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core.graph import KNGraph
from . import build as B
from .config import SearchConfig
from .cost import Cost, cost
from ..target import DEFAULT
from .generator import Stats


@dataclass
class Candidate:
    graph: KNGraph
    cost: Cost
    key: str
    plan: object = None
    verification: str = ""  # the formal verifier's summary
    measured_us: float = float("nan")  # time on the GPU (search.measure), NaN when not measured

    @property
    def time_us(self) -> float:
        return self.cost.time * 1e6

    @property
    def diversity(self) -> tuple:
        """What `diverse` spreads the top over (`diversity`)."""
        return diversity(self.graph, self.cost)


def reference_candidate(ref: KNGraph, device=DEFAULT) -> Candidate:
    """The reference program itself as a candidate (always kept: it is what is returned
    when nothing better was verified)."""
    c = Candidate(ref, cost(ref, device), "reference", B.reference_plan(ref))
    c.verification = "reference"
    return c


@dataclass
class SearchResult:
    reference: KNGraph
    candidates: list  # ranked, best first (the reference is among them)
    stats: Stats
    seconds: float
    config: SearchConfig
    reference_cost: Cost = None
    from_cache: bool = False
    notes: list = field(default_factory=list)
    # distinct candidates that passed the float64 pre-filter but were not run through the
    # formal verifier (ranked below the verified top-k), best first
    others: list = field(default_factory=list)

    @property
    def best(self) -> KNGraph:
        return self.candidates[0].graph

    def report(self) -> str:
        s = self.stats
        lines = [f"superoptimize {self.reference.name}: {self.seconds:.1f} s"
                 + (" (from cache)" if self.from_cache else "")
                 + (f", stopped early ({s.stopped})" if s.stopped else ""),
                 f"  states visited: {s.states} (kernel {s.kernel_states}, block {s.block_states}), "
                 f"schedules {s.schedules}",
                 "  pruned: " + (", ".join(f"{k} {v}" for k, v in sorted(s.pruned.items())) or "none"),
                 f"  candidates: {s.candidates} found ({len(self.others) + len(self.candidates) - 1} distinct); "
                 f"best first: {s.verified} passed the float64 check, {s.rejected - s.formal_rejected} failed it; "
                 f"{s.formal} formally verified, {s.formal_rejected} rejected by the verifier; "
                 f"{len(self.candidates)} kept",
                 f"  reference: {self.reference_cost.summary()}"]
        for k, c in enumerate(self.candidates[:self.config.top_k]):
            tag = " (reference)" if c.key == "reference" else ""
            gpu = f", measured {c.measured_us:.1f} µs" if c.measured_us == c.measured_us else ""
            lines.append(f"  #{k + 1}{tag}: {c.cost.summary()}{gpu}")
        lines += ["  note: " + n for n in self.notes]
        return "\n".join(lines)


def order(c: Candidate):
    """The ranking key: cost-model time, then bytes, FLOPs and the canonical key (a total order)."""
    ks = c.cost.kernels
    return (round(c.cost.time, 12), sum(k.dram_bytes for k in ks), sum(k.smem_bytes for k in ks),
            sum(k.flops for k in ks), c.key)


def main_schedule(g: KNGraph, c: Cost):
    """Grid, for-loop range and block of the costliest graph-defined kernel of `g` (costs
    `c`; None for a program of pre-defined kernels only)."""
    gds = [op for op in g.ops if op.kind == "graph_def"]
    costs = [k for k in c.kernels if k.kind == "graph_def"]  # in op order
    if not gds or len(costs) != len(gds):
        return None
    body = max(zip(costs, gds), key=lambda kg: kg[0].time)[1].body
    return tuple(body.grid_dim), body.forloop_range, tuple(body.block_dim)


def diversity(g: KNGraph, c: Cost) -> tuple:
    """The keys of `diverse`: the number of graph-defined kernels of `g` and its main
    kernel's schedule (`main_schedule`). A search worker sends them with each candidate, so
    the driver ranks without building graphs (`driver._Found`)."""
    return sum(op.kind == "graph_def" for op in g.ops), main_schedule(g, c)


def diverse(ranked: list, window: float = 2.0) -> list:
    """`ranked` with, among the candidates within `window` times the best cost, the best of
    each number of graph-defined kernels first, then the best of each main-kernel grid and
    block, then of each main-kernel schedule, then the rest (each group in rank order). The
    top-k kept are what the GPU times when it picks by measurement, so they should differ
    where the cost model is least sure: in how the work is cut into kernels (a norm folded
    into the attention kernel or run before it), in how the dominant kernel's work is cut
    into blocks (MCFuser's S6: its 64-row warpgroup tilings came after three 32-row ones
    that differ only in their loops, the model's costs 2-4 % apart), and in the kernel that
    dominates the time rather than only in a small combine kernel. The cost model's best
    stays first."""
    limit = ranked[0].cost.time * window if ranked else 0.0
    near = [c for c in ranked if c.cost.time <= limit]
    picked: dict = {}  # id -> candidate, in the order picked
    keys = {}
    for c in near:
        n, s = c.diversity
        keys[id(c)] = (n, s and (s[0], s[2]), s)
    for i in (0, 1, 2):
        seen = set()
        for c in near:
            k = keys[id(c)][i]
            if k not in seen:
                seen.add(k)
                picked.setdefault(id(c), c)
    return list(picked.values()) + [c for c in ranked if id(c) not in picked]
