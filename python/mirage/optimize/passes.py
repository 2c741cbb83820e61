"""mirage-opt passes of the μGraph optimizer: `--mirage-layout`, `--mirage-schedule`,
`--mirage-smem-plan`. Each imports the module's functions as KNGraphs
(`mirage.core.mlir_import.parse_module`), runs one optimization on every block graph,
and writes its results back as attributes (all in `annotate_*` below):

- `--mirage-layout`: `tb.layout = {inner = D : i64, swizzle = S : i64}` on every
  tile-defining op (`tb.input` and compute ops); `tb.layout_cost = C : i64` on the
  `kn.graph_def`.
- `--mirage-schedule`: moves the block graph's ops into depth order, marks each op
  preceded by a barrier with `tb.barrier`, numbers the stages (`tb.stage = N : i64`), and
  records `tb.barriers` (this order) and `tb.barriers_program_order` on the graph_def.
- `--mirage-smem-plan`: `tb.smem_offset = N : i64` (and `tb.smem_copies = 2` for
  double-buffered iterator tiles) on every tile-defining op, `tb.smem_bytes = N : i64` on
  the graph_def; fails with an error at the graph_def when the plan exceeds the capacity.

Leaving a pass out of the pipeline is the ablation switch (paper Figure 12).
"""
from __future__ import annotations

from .. import diagnostics as D
from ..passes import Option, Pass, PassFailure, functions, import_graphs, parse_bool, register
from .layout import select_layouts
from .plan import SmemCapacityError
from .schedule import schedule
from .smem import plan_smem


def _graph_defs(module, pass_name: str):
    """[(graph_def mlir op, KNGraph, index of the graph_def in g.ops)] in module order."""
    graphs = import_graphs(module, pass_name)
    funcs = functions(module)
    out = []
    for f, g in zip(funcs, graphs):
        mlir_defs = [o.operation for o in f.regions[0].blocks[0].operations
                     if _name(o) == "kn.graph_def"]
        model_defs = [j for j, op in enumerate(g.ops) if op.kind == "graph_def"]
        for o, j in zip(mlir_defs, model_defs):
            out.append((o, g, j))
    return out


def _body_ops(gdef):
    """(input ops, compute ops, output ops) of a graph_def's block, in IR order."""
    ops = [o.operation for o in gdef.regions[0].blocks[0].operations]
    return ([o for o in ops if o.name == "tb.input"],
            [o for o in ops if o.name not in ("tb.input", "tb.output")],
            [o for o in ops if o.name == "tb.output"])


def _name(op) -> str:
    """The op name (an OpView's `.name` may be a symbol name, e.g. func.FuncOp)."""
    return op.operation.name


def _tile_ops(gdef, tb) -> dict[str, object]:
    """tile name -> the MLIR op defining it (names as in `plan.tile_names`)."""
    ins, comp, _ = _body_ops(gdef)
    out = {f"in{k}": o for k, o in enumerate(ins)}
    for j, (o, op) in enumerate(zip(comp, tb.ops)):
        if len(op.outputs) == 1:
            out[f"op{j}"] = o
        else:
            for k in range(len(op.outputs)):
                out[f"op{j}.{k}"] = o
    return out


def _set(op, name: str, text: str) -> None:
    import mlir.ir as ir

    op.attributes[name] = ir.Attribute.parse(text, op.context)


def annotate_layouts(gdef, tb, plan) -> None:
    ops = _tile_ops(gdef, tb)
    for n, lay in plan.tiles.items():
        if n in ops and "." not in n:
            _set(ops[n], "tb.layout", f"{{inner = {lay.inner_dim} : i64, swizzle = {lay.swizzle} : i64}}")
    _set(gdef, "tb.layout_cost", f"{plan.cost} : i64")


def annotate_schedule(gdef, tb, plan) -> None:
    import mlir.ir as ir

    _, comp, outs = _body_ops(gdef)
    anchor = outs[0] if outs else None
    for stage_no, st in enumerate(plan.stages):
        for k, j in enumerate(st.ops):
            o = comp[j]
            if anchor is not None:
                o.move_before(anchor)
            _set(o, "tb.stage", f"{stage_no} : i64")
            if k == 0 and st.barrier_before:
                o.attributes["tb.barrier"] = ir.UnitAttr.get(o.context)
    _set(gdef, "tb.barriers", f"{plan.barriers} : i64")
    _set(gdef, "tb.barriers_program_order", f"{plan.barriers_program_order} : i64")


def annotate_smem(gdef, tb, plan) -> None:
    ops = _tile_ops(gdef, tb)
    for n, b in plan.buffers.items():
        if n in ops and "." not in n:
            _set(ops[n], "tb.smem_offset", f"{b.offset} : i64")
            if b.copies > 1:
                _set(ops[n], "tb.smem_copies", f"{b.copies} : i64")
    _set(gdef, "tb.smem_bytes", f"{plan.total_bytes} : i64")


@register
class LayoutPass(Pass):
    argument = "mirage-layout"
    summary = "Choose the innermost dim and swizzle of every shared-memory tile (ILP, Z3)"
    options = ()

    def run(self, module, **_) -> None:
        for gdef, g, j in _graph_defs(module, self.argument):
            annotate_layouts(gdef, g.ops[j].body, select_layouts(g.ops[j].body))


@register
class SchedulePass(Pass):
    argument = "mirage-schedule"
    summary = "Order block-graph ops by depth so barriers are only where needed"
    options = ()

    def run(self, module, **_) -> None:
        for gdef, g, j in _graph_defs(module, self.argument):
            annotate_schedule(gdef, g.ops[j].body, schedule(g.ops[j].body))


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
        for gdef, g, j in _graph_defs(module, self.argument):
            tb = g.ops[j].body
            try:
                plan = plan_smem(tb, None, capacity=capacity or g.smem_capacity,
                                 double_buffer=opts.get("double-buffer", True))
            except SmemCapacityError as e:
                D.error(gdef, str(e))
                failed = True
                continue
            annotate_smem(gdef, tb, plan)
        if failed:
            raise PassFailure("mirage-smem-plan: shared memory exceeds the capacity")
