"""`--mirage-smem-plan`: plan the shared memory of every kernel as `convert-mirage-to-gpu`
will lower it (the planning half of the lowering, `lower.convert.plan_graph`, nothing
emitted: the tiles as the lowering stores them, padded `ldmatrix` rows, input rings, f32
accumulator state; offsets that reuse the space of dead tiles, paper §6) and record the
plan on each `kn.graph_def`:

    tb.smem = {full = #tb.smem<stages = 3, offsets = {in0 = 0 : i64, op2 = 8192 : i64, ...}>}

one entry per kernel the lowering emits for the block graph (`full`; a split for-loop:
`partial`, and `combine` with fold-combine=false), a `#tb.smem` with the cp.async ring
depth and every buffer's offset in bytes (tile names of `optimize.plan.tile_names`,
`scratch<j>` for op j's f32 state, `flag`, `red`). `convert-mirage-to-gpu` takes the
record (checked: by the dialect, stages >= 1 and offsets 128-byte aligned; by the
lowering, every buffer placed, within the capacity, no two live at once overlapping);
a kernel keeping its rows in registers has no shared-memory tiles and no record. Takes
the lowering's options (give both passes the same ones) and `capacity`; a plan over the
capacity is an error at the graph_def. Plans afresh, replacing a `tb.smem` already there.
"""
from __future__ import annotations

from .. import diagnostics as D
from ..bridge import functions, graph_def_of, import_graphs, set_attr
from ..registry import Option, Pass, PassFailure, register
from ...lower.kernel_plan import LoweringError
from .convert_mirage_to_gpu import OPTIONS, options


def _text(record: dict) -> str:
    return "{" + ", ".join(
        f"{kernel} = #tb.smem<stages = {S}, offsets = {{{', '.join(f'{b} = {o} : i64' for b, o in offsets.items())}}}>"
        for kernel, (S, offsets) in record.items()) + "}"


@register
class SmemPlanPass(Pass):
    argument = "mirage-smem-plan"
    summary = ("Plan each kernel's shared memory as convert-mirage-to-gpu will (offsets reusing dead tiles, "
               "ring depth) and record it (tb.smem); check the capacity")
    options = (Option("capacity", int, 0, "bytes of shared memory per block (0: the module's "
                      "kn.smem_capacity, else the target's)"),) + OPTIONS

    def run(self, module, capacity: int = 0, **values) -> None:
        from ...lower.convert import plan_graph

        origins: dict = {}
        failed = False
        for f, g in zip(functions(module), import_graphs(module, self.argument, origins)):
            opts = options(values)
            opts.smem_capacity = capacity or g.smem_capacity or opts.smem_capacity
            defs = [op for op in g.ops if op.kind == "graph_def"]
            for op in defs:
                op.body.recorded_smem = {}  # plan afresh
            try:
                kernels = plan_graph(g, opts).kernels
            except (LoweringError, NotImplementedError) as e:
                D.error(graph_def_of(g, getattr(e, "tb", None), origins, f), f"function @{g.name}: {e}")
                failed = True
                continue
            records: dict = {id(op): {} for op in defs}
            for k in kernels:
                rec = k.plan.smem_record() if k.op is not None and id(k.op) in records else None
                if rec is not None:
                    records[id(k.op)][k.plan.mode] = rec
            for op in defs:
                gdef = origins[id(op)]
                if records[id(op)]:
                    set_attr(gdef, "tb.smem", _text(records[id(op)]))
                elif "tb.smem" in gdef.attributes:
                    del gdef.attributes["tb.smem"]
        if failed:
            raise PassFailure("mirage-smem-plan: a kernel cannot be planned")
