"""`--mirage-smem-plan`: assign shared-memory offsets that reuse the space of dead tiles
(paper §6) and check the capacity: `tb.smem_offset = N : i64` (and `tb.smem_copies = 2`
for double-buffered iterator tiles) on every tile-defining op, `tb.smem_bytes = N : i64`
on the `kn.graph_def`; an error at the graph_def when the plan exceeds the capacity.
"""
from __future__ import annotations

from .. import diagnostics as D
from ..bridge import graph_defs, set_attr
from ..registry import Option, Pass, PassFailure, parse_bool, register
from ...optimize.plan import SmemCapacityError
from ...optimize.smem import plan_smem


@register
class SmemPlanPass(Pass):
    argument = "mirage-smem-plan"
    summary = "Assign shared-memory offsets with reuse of dead tiles; check the capacity"
    options = (
        Option("capacity", int, 0, "bytes of shared memory per block (0: the module's "
               "kn.smem_capacity, else 227 KiB)"),
        Option("double-buffer", parse_bool, True, "two copies of loop-varying iterator tiles"),
    )

    def run(self, module, capacity: int = 0, **opts) -> None:
        failed = False
        for gdef, g, kernel, tiles in graph_defs(module, self.argument):
            tb = kernel.body
            try:
                plan = plan_smem(tb, None, capacity=capacity or g.smem_capacity,
                                 double_buffer=opts.get("double-buffer", True))
            except SmemCapacityError as e:
                D.error(gdef, str(e))
                failed = True
                continue
            for name, b in plan.buffers.items():
                if name in tiles and "." not in name:
                    set_attr(tiles[name], "tb.smem_offset", f"{b.offset} : i64")
                    if b.copies > 1:
                        set_attr(tiles[name], "tb.smem_copies", f"{b.copies} : i64")
            set_attr(gdef, "tb.smem_bytes", f"{plan.total_bytes} : i64")
        if failed:
            raise PassFailure("mirage-smem-plan: shared memory exceeds the capacity")
