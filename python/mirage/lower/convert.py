"""`convert-mirage-to-gpu` on the Python μGraph model: KNGraph -> `gpu.module` text plus
the launch plan (which kernels, in which order, on which tensors).

Every kernel-graph op becomes one kernel (two with a split for-loop and no folded
combine), except: a `reshape` of row-major memory or a `transpose` that is not a graph
output is a view (its users read the input's memory with the new shape, or permuted
strides); a `concat` is one copy kernel per operand into its slice of the output. Kernels are planned first
(`plan_graph`: a `KernelPlan` per kernel, from its block graph: a graph-defined kernel's
own, or for a pre-defined op the default one of `predefined.py`), then emitted by
`block.BlockLowering`; `--mirage-smem-plan` runs the first half only. Device tensors
that are neither inputs nor outputs become runtime-allocated buffers. Each tensor is
passed as one bare pointer (`memref<N x T>` with the bare-pointer calling convention).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace

from ..core.graph import KNGraph, Op, row_major_strides
from .block import BlockLowering, KernelInfo, unsupported
from .kernel_plan import GlobalArg, KernelPlan, LoweringError, Options, choose_split
from .predefined import default_block_graph


@dataclass
class Kernel:
    """One kernel to emit: its plan, output arguments, launch arguments and the kernel-graph
    op it lowers (None for a copy of an output)."""
    plan: KernelPlan
    outs: list[GlobalArg]
    args: list[dict]
    notes: dict
    op: Op | None
    ws: GlobalArg | None = None


@dataclass
class GraphPlan:
    inputs: list[dict]
    outputs: list[dict]
    buffers: list[dict]
    kernels: list[Kernel]


@dataclass
class Lowered:
    name: str
    graph_hash: str
    inputs: list[dict]
    outputs: list[dict]
    buffers: list[dict]
    kernels: list[dict]  # name, grid, block, smem_bytes, args, notes
    module: str  # MLIR text: a module holding one gpu.module
    infos: list[KernelInfo] = field(default_factory=list)


def graph_hash(g: KNGraph) -> str:
    """The identity of what `g` lowers to (bundle caches are keyed by it): its kn MLIR and
    the decisions recorded in the IR (layouts, op order, shared-memory plan), which change
    the kernels but are not printed with the model."""
    h = hashlib.sha256(g.to_mlir().encode())
    for op in g.ops:
        tb = op.body if op.kind == "graph_def" else None
        rec = tb and (tb.recorded_layouts, tb.recorded_order, tb.recorded_smem)
        if rec and any(rec):
            h.update(repr(rec).encode())
    return h.hexdigest()[:16]


def _sym(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return s if s and not s[0].isdigit() else "g_" + s


def convert(g: KNGraph, options: Options | None = None, name: str | None = None) -> Lowered:
    opts = options or Options()
    if g.smem_capacity:  # the module's target (a copy: the caller's options stay as they are)
        opts = replace(opts, smem_capacity=g.smem_capacity)
    base = _sym(name or g.name)
    gp = plan_graph(g, opts, base)
    kernels, infos, texts = [], [], []
    for k in gp.kernels:
        info = BlockLowering(k.plan, k.outs, k.ws).lower()
        info.notes.update(k.notes)
        kernels.append({"name": info.name, "grid": list(info.grid), "block": list(info.block),
                        "smem_bytes": info.smem_bytes, "args": k.args, "pdl": k.plan.pdl, "notes": info.notes})
        infos.append(info)
        texts.append(info.text)
    module = ("module attributes {gpu.container_module} {\n  gpu.module @" + base + "_kernels {\n"
              + "\n".join(texts) + "\n  }\n}\n")
    return Lowered(g.name, graph_hash(g), gp.inputs, gp.outputs, gp.buffers, kernels, module, infos)


def view_strides(g: KNGraph) -> dict[int, tuple]:
    """id(DTensor) -> strides of each op output that is a view of its input's memory, not a
    kernel: a reshape of row-major memory, or a transpose (its users read the input with
    permuted strides); never a graph output (that is its own allocation). The search's cost
    model reads the same rule."""
    outs = {id(t) for t in g.outputs}
    strides = {id(t): tuple(g.strides.get(k, row_major_strides(t.shape))) for k, t in enumerate(g.inputs)}
    views: dict[int, tuple] = {}
    for op in g.ops:
        out = op.outputs[0]
        if id(out) in outs or not op.inputs:
            continue
        a = op.inputs[0]
        sa = views[id(a)] if id(a) in views else strides.get(id(a), tuple(row_major_strides(a.shape)))
        if op.kind == "reshape" and tuple(sa) == tuple(row_major_strides(a.shape)):
            views[id(out)] = tuple(row_major_strides(out.shape))
        elif op.kind == "transpose":
            views[id(out)] = tuple(sa[p] for p in op.attrs["permutation"])
    return views


def copied_outputs(g: KNGraph) -> list[int]:
    """Indices of the graph outputs that no kernel writes, each given a copy kernel: an
    input marked as output, or a tensor marked as output again (the kernel that makes it
    writes its first mark only). The search's cost model reads the same rule."""
    made = {id(t) for op in g.ops for t in op.outputs}
    seen: set[int] = set()
    copies = []
    for k, t in enumerate(g.outputs):
        if id(t) not in made or id(t) in seen:
            copies.append(k)
        seen.add(id(t))
    return copies


def plan_graph(g: KNGraph, opts: Options, base: str | None = None) -> GraphPlan:
    """Every kernel of `g` with its plan, in launch order (`base`: the kernels' name prefix,
    default the graph's name)."""
    base = base or _sym(g.name)
    if not g.outputs:
        raise LoweringError(f"[lowering] graph '{g.name}' has no outputs")
    loc: dict[int, tuple[str, int]] = {}  # id(DTensor) -> (kind, index)
    inputs = []
    for k, t in enumerate(g.inputs):
        loc[id(t)] = ("input", k)
        inputs.append({"shape": list(t.shape), "dtype": t.dtype.mlir,
                       "strides": list(g.strides.get(k, row_major_strides(t.shape)))})
    out_slots: dict[int, int] = {}
    outputs = []
    for k, t in enumerate(g.outputs):
        outputs.append({"shape": list(t.shape), "dtype": t.dtype.mlir,
                        "strides": list(row_major_strides(t.shape))})
        out_slots.setdefault(id(t), k)
    buffers = []
    views = view_strides(g)

    def strides_of(t):
        if id(t) in views:
            return views[id(t)]
        kind, i = loc[id(t)]
        return tuple(inputs[i]["strides"]) if kind == "input" else row_major_strides(t.shape)

    def gl(t, kind, i, nm):
        return GlobalArg(nm, tuple(t.shape), tuple(strides_of(t)), t.dtype.mlir, t.dtype.itemsize)

    kernels: list[Kernel] = []

    def emit(op, body, kname, ins, outs, args, notes):
        """Plan one kernel op (block graph `body`): one kernel, or with a split for-loop
        a partial kernel that folds the combine (or partial + combine kernels)."""
        unsupported(body, kname)  # a clear error naming the op, before any planning
        split = choose_split(body, opts)
        if split > 1:
            stages = ((("partial", kname + "_split", outs),) if opts.fold_combine else
                      (("partial", kname + "_partial", []), ("combine", kname + "_combine", outs)))
            plans = [(KernelPlan(body, ins, opts, mode, split, bool(extra), kn_, extra), extra)
                     for mode, kn_, extra in stages]
            ws_size = plans[0][0].ws_size  # 0: a cluster's blocks combine in shared memory
            ws, wsarg = None, []
            if ws_size:
                wsarg = [{"kind": "buffer", "index": len(buffers)}]
                buffers.append({"shape": [ws_size], "dtype": "f32"})
                ws = GlobalArg("%ws", (ws_size,), (1,), "f32", 4)
            n_in = len(ins)
            for p, extra in plans:
                kargs = args[:n_in] + wsarg + (args[n_in:] if extra else [])
                kernels.append(Kernel(p, extra, kargs, notes, op, ws))
            return
        kernels.append(Kernel(KernelPlan(body, ins, opts, "full", 1, bool(outs), kname, outs), outs, args, notes, op))

    for n, op in enumerate(g.ops):
        out = op.outputs[0]
        if id(out) in views:
            loc[id(out)] = loc[id(op.inputs[0])]
            continue
        for t in op.outputs:
            if id(t) in out_slots:
                loc[id(t)] = ("output", out_slots[id(t)])
            else:
                loc[id(t)] = ("buffer", len(buffers))
                buffers.append({"shape": list(t.shape), "dtype": t.dtype.mlir})
        ins = [gl(t, *loc[id(t)], f"%in{j}") for j, t in enumerate(op.inputs)]
        outs = [gl(t, *loc[id(t)], f"%out{j}") for j, t in enumerate(op.outputs)]
        args = [{"kind": loc[id(t)][0], "index": loc[id(t)][1]} for t in list(op.inputs) + list(op.outputs)]
        if op.kind == "concat":
            # one copy kernel per operand into its slice of the output (one kernel would
            # hold the whole concat dim in each block: 0.36 TB/s on a KV cache)
            d = op.attrs["dim"] % len(out.shape)
            at = 0
            for j, (t, src) in enumerate(zip(op.inputs, ins)):
                dst = replace(outs[0], name="%out0", shape=tuple(t.shape), offset=outs[0].offset + at * outs[0].strides[d])
                emit(op, default_block_graph(Op("copy", [t], [t])), f"{base}_k{n}_{j}", [replace(src, name="%in0")],
                     [dst], [args[j], args[-1]], {"kind": "concat"})
                at += t.shape[d]
            continue
        defined = op.kind == "graph_def"  # else a pre-defined op: its default block graph
        emit(op, op.body if defined else default_block_graph(op, opts.sms), f"{base}_k{n}", ins, outs, args,
             {} if defined else {"kind": op.kind})
    for k in copied_outputs(g):
        t = g.outputs[k]
        src = gl(t, *loc[id(t)], "%in0")
        dst = GlobalArg("%out0", tuple(t.shape), row_major_strides(t.shape), t.dtype.mlir, t.dtype.itemsize)
        emit(None, default_block_graph(Op("copy", [t], [t])), f"{base}_copy{k}", [src], [dst],
             [{"kind": loc[id(t)][0], "index": loc[id(t)][1]}, {"kind": "output", "index": k}], {"kind": "copy"})
    return GraphPlan(inputs, outputs, buffers, kernels)
