"""`--mirage-schedule`: order each block graph's ops by depth so that barriers are only
where needed (paper §6). Records on every op its place in that order (`tb.order = N : i64`)
and its stage (`tb.stage = N : i64`), marks the first op of each stage preceded by a
barrier with `tb.barrier`, and records `tb.barriers` (this order) and
`tb.barriers_program_order` on the `kn.graph_def`. The ops stay where they are in the IR.

The dependences are judged on the tiles' layouts (those of `--mirage-layout` when it ran,
else the ones the lowering would choose); `convert-mirage-to-gpu` runs the ops in the
recorded order.
"""
from __future__ import annotations

from ..bridge import graph_defs, set_attr
from ..registry import Pass, register
from ...optimize.api import global_inner
from ...optimize.layout import lowering_layouts
from ...optimize.schedule import schedule


@register
class SchedulePass(Pass):
    argument = "mirage-schedule"
    summary = "Order block-graph ops by depth so barriers are only where needed"

    def run(self, module, **_) -> None:
        import mlir.ir as ir

        for gdef, g, kernel, tiles in graph_defs(module, self.argument):
            tb = kernel.body
            plan = schedule(tb, layouts=lowering_layouts(tb, global_inner=global_inner(g, kernel)).tiles)
            pos = 0
            for stage_no, st in enumerate(plan.stages):
                for k, j in enumerate(st.ops):
                    o = tiles[f"op{j}" if len(tb.ops[j].outputs) == 1 else f"op{j}.0"]
                    set_attr(o, "tb.order", f"{pos} : i64")
                    set_attr(o, "tb.stage", f"{stage_no} : i64")
                    if k == 0 and st.barrier_before:
                        o.attributes["tb.barrier"] = ir.UnitAttr.get(o.context)
                    pos += 1
            set_attr(gdef, "tb.barriers", f"{plan.barriers} : i64")
            set_attr(gdef, "tb.barriers_program_order", f"{plan.barriers_program_order} : i64")
