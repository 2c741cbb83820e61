"""`optimize(tb_graph)`: run the three §6 optimizations on one block graph."""
from __future__ import annotations

from typing import Iterable, Mapping

from ..core.graph import KNGraph, TBGraph
from .layout import inner_dim, select_layouts
from .plan import BlockPlan, tile_names
from .schedule import schedule
from .smem import plan_smem


def optimize(tb: TBGraph, layout: bool = True, schedule_ops: bool = True, smem: bool = True,
             capacity: int | None = None, double_buffer: bool = True,
             registers: Iterable[str] = (), global_inner: Mapping[int, int] | None = None) -> BlockPlan:
    """Optimize one block graph. `layout`, `schedule_ops`, `smem` switch each
    optimization (off: row-major unswizzled tiles / program order / no reuse).
    `registers`: names of tiles the lowering keeps in registers (no shared memory).
    Raises `SmemCapacityError` if the plan exceeds `capacity` (default 227 KiB)."""
    lp = select_layouts(tb, enabled=layout, global_inner=global_inner)
    sp = schedule(tb, enabled=schedule_ops, layouts=lp.tiles)
    mp = plan_smem(tb, sp, enabled=smem, capacity=capacity, double_buffer=double_buffer,
                   registers=registers)
    return BlockPlan(lp, sp, mp, tile_names(tb))


def optimize_graph(g: KNGraph, **options) -> dict[int, BlockPlan]:
    """A BlockPlan for every graph-defined kernel of `g`, keyed by its index in g.ops.
    The innermost dim of each device tensor an iterator reads follows the kernel
    graph's input strides (stride 1), default its last dim."""
    plans = {}
    for j, op in enumerate(g.ops):
        if op.kind != "graph_def":
            continue
        opts = dict(options)
        opts.setdefault("capacity", g.smem_capacity)
        plans[j] = optimize(op.body, global_inner=global_inner(g, op), **opts)
    return plans


def global_inner(g: KNGraph, op) -> dict[int, int] | None:
    """Input iterator index -> the innermost (stride-1) dim of the device tensor it reads,
    for the inputs of kernel op `op` of `g` with non-default strides (None if none)."""
    gi = {k: inner_dim(g.strides[t.index]) for k, t in enumerate(op.inputs)
          if t.producer == "input" and t.index in g.strides and 1 in g.strides[t.index]}
    return gi or None
