"""The lowering as `mirage-opt` passes.

- `convert-mirage-to-gpu`: every `func.func` of kn/tb/th ops becomes kernels of one
  `gpu.module` (the module gets `gpu.container_module`); the launch plan (kernel order,
  grid, block, dynamic shared memory, argument kinds, buffers) is attached as the
  `mirage.launch` string attribute (JSON) of the gpu.module, so a later step can write
  the bundle. Follow it with the upstream
  `gpu-lower-to-nvvm-pipeline{cubin-format=isa cubin-chip=sm_90 cubin-features=+ptx80
  kernel-bare-ptr-calling-convention=true}` for PTX (`mirage.lower.compile` does both and
  also repairs the PTX's dynamic shared memory declaration, `pipeline.fix_dynamic_smem`;
  `python -m mirage.lower FILE --emit ptx` prints that PTX).
"""
from __future__ import annotations

import json

from .. import diagnostics as D
from ..bridge import functions, graph_def_of, import_graphs
from ..registry import Option, Pass, PassFailure, parse_bool, register
from ...lower.kernel_plan import LoweringError, Options

# the lowering's options, also those of --mirage-smem-plan, which plans as the lowering will
OPTIONS = (
    Option("tensor-cores", parse_bool, True, "block matmuls on f16/bf16 tiles use mma.sync"),
    Option("async-copy", parse_bool, True, "input iterators use 16-byte cp.async copies"),
    Option("stages", int, 4, "ring depth of loop-varying inputs (1 = no prefetch)"),
    Option("split", int, 0, "blocks sharing one for-loop (0 = choose, 1 = never split)"),
    Option("fold-combine", parse_bool, True,
           "split for-loops: the last block of each group combines (one kernel), not a second kernel"),
    Option("evict-first", parse_bool, True, "inputs read once are copied with an L2 evict_first policy"),
    Option("layout", parse_bool, True, "tiles take the optimizer's layouts (swizzled ldmatrix operands)"),
    Option("schedule", parse_bool, True, "ops in the optimizer's depth order, barriers only where needed"),
    Option("smem-plan", parse_bool, True, "shared-memory offsets reuse dead tiles (optimizer's live ranges)"),
    Option("vectorize", parse_bool, True, "element loops and row reductions move 16-byte chunks"),
    Option("threads", int, 0, "threads of every block (0 = the μGraph's block_dim)"),
    Option("row-registers", parse_bool, True, "row-wise block graphs without a for-loop keep their rows "
           "in registers (no shared-memory tiles)"),
    Option("pdl", parse_bool, True, "kernels wait on griddepcontrol and are launched as programmatic "
           "dependents of the kernel before them (sm_90)"),
    Option("wgmma", parse_bool, True, "tile matmuls of 16 rows a warp in blocks of whole warpgroups run as "
           "warpgroup wgmma (sm_90a) where the B tile is swizzled"),
    Option("clusters", parse_bool, True, "split for-loops of plain-sum accumulators combine in a thread-block "
           "cluster of their split blocks, each block its share of the rows; the ops after the loop run on "
           "the first block (sm_90)"),
)


def options(values: dict) -> Options:
    """`Options` from the values of the pass options `OPTIONS`."""
    return Options(tensor_cores=values["tensor-cores"], async_copy=values["async-copy"], stages=values["stages"],
                   split=values["split"], fold_combine=values["fold-combine"], evict_first=values["evict-first"],
                   layout=values["layout"], schedule=values["schedule"], smem_plan=values["smem-plan"],
                   vectorize=values["vectorize"], threads=values["threads"],
                   row_registers=values["row-registers"], pdl=values["pdl"],
                   wgmma=values["wgmma"], clusters=values["clusters"])


def _lower_module(module, opts: Options) -> None:
    import mlir.ir as ir

    from ...lower.convert import convert

    origins: dict = {}
    graphs = import_graphs(module, "convert-mirage-to-gpu", origins)
    if not graphs:
        return
    gpu_modules = []
    for f, g in zip(functions(module), graphs):
        try:
            low = convert(g, Options(**vars(opts)))
        except (LoweringError, NotImplementedError) as e:
            D.error(graph_def_of(g, getattr(e, "tb", None), origins, f), f"[lowering] function @{g.name}: {e}")
            raise PassFailure() from None
        plan = {"function": g.name, "graph_hash": low.graph_hash, "inputs": low.inputs,
                "outputs": low.outputs, "buffers": low.buffers,
                "kernels": [{k: v for k, v in kk.items() if k != "notes"} for kk in low.kernels]}
        new = ir.Module.parse(low.module, module.context)
        for o in list(new.body.operations):
            o.detach_from_parent()
            o.attributes["mirage.launch"] = ir.StringAttr.get(json.dumps(plan), module.context)
            gpu_modules.append(o)
    blk = module.regions[0].blocks[0]
    for o in list(blk.operations):
        o.erase()
    ip = ir.InsertionPoint(blk)
    for o in gpu_modules:
        ip.insert(o)
    module.attributes["gpu.container_module"] = ir.UnitAttr.get(module.context)
    if "kn.smem_capacity" in module.attributes:
        del module.attributes["kn.smem_capacity"]


@register
class ConvertMirageToGPU(Pass):
    argument = "convert-mirage-to-gpu"
    summary = ("Lower μGraphs (kn/tb/th) to gpu/nvgpu/arith/memref/scf/vector/math kernels: tiles in "
               "shared memory, cp.async input rings, mma.sync tensor-core matmuls, warp-shuffle "
               "reductions, split for-loops")
    options = OPTIONS

    def run(self, module, **values) -> None:
        _lower_module(module, options(values))
