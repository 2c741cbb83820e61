"""`--mirage-layout`: choose the innermost dim and swizzle of every shared-memory tile
(paper §6, an ILP solved with Z3) and record them on the ops that define the tiles:
`tb.layout = #tb.layout<inner = D, swizzle = S>` (`tb.input` and compute ops; an array
of them on an op with several results; the dialect checks that each fits its tile), and
`tb.layout_cost = C : i64` on the `kn.graph_def`. `convert-mirage-to-gpu` takes the
recorded layouts instead of choosing.
"""
from __future__ import annotations

from ..bridge import graph_defs, set_attr
from ..registry import Pass, register
from ...optimize.api import global_inner
from ...optimize.layout import select_layouts


def _text(lay) -> str:
    return f"#tb.layout<inner = {lay.inner_dim}, swizzle = {lay.swizzle}>"


@register
class LayoutPass(Pass):
    argument = "mirage-layout"
    summary = "Choose the innermost dim and swizzle of every shared-memory tile (ILP, Z3)"

    def run(self, module, **_) -> None:
        for gdef, g, kernel, tiles in graph_defs(module, self.argument):
            tb = kernel.body
            plan = select_layouts(tb, global_inner=global_inner(g, kernel))
            for j, op in enumerate(tb.ops):
                if len(op.outputs) > 1:
                    set_attr(tiles[f"op{j}.0"], "tb.layout",
                             "[" + ", ".join(_text(plan.tiles[f"op{j}.{k}"]) for k in range(len(op.outputs))) + "]")
            for name, lay in plan.tiles.items():
                if "." not in name:
                    set_attr(tiles[name], "tb.layout", _text(lay))
            set_attr(gdef, "tb.layout_cost", f"{plan.cost} : i64")
