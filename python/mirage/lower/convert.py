"""`convert-mirage-to-gpu` on the Python μGraph model: KNGraph -> `gpu.module` text plus
the launch plan (which kernels, in which order, on which tensors).

Every kernel-graph op becomes one kernel: a graph-defined kernel through
`block.BlockLowering`, a pre-defined op through `kernels.lower_kn_op`. Device tensors
that are neither inputs nor outputs become runtime-allocated buffers. Each tensor is
passed as one bare pointer (`memref<N x T>` with the bare-pointer calling convention).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from ..core.graph import KNGraph, row_major_strides
from .block import BlockLowering, GlobalArg, KernelInfo, LoweringError, Options, choose_split
from .kernels import lower_kn_op


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
    return hashlib.sha256(g.to_mlir().encode()).hexdigest()[:16]


def _sym(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return s if s and not s[0].isdigit() else "g_" + s


def convert(g: KNGraph, options: Options | None = None, name: str | None = None) -> Lowered:
    opts = options or Options()
    if g.smem_capacity:
        opts.smem_capacity = g.smem_capacity
    base = _sym(name or g.name)
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

    def strides_of(t):
        kind, i = loc[id(t)]
        return tuple(inputs[i]["strides"]) if kind == "input" else row_major_strides(t.shape)

    def gl(t, kind, i, nm):
        return GlobalArg(nm, tuple(t.shape), tuple(strides_of(t)), t.dtype.mlir, t.dtype.itemsize)

    kernels, infos, texts = [], [], []
    for n, op in enumerate(g.ops):
        for t in op.outputs:
            if id(t) in out_slots:
                loc[id(t)] = ("output", out_slots[id(t)])
            else:
                loc[id(t)] = ("buffer", len(buffers))
                buffers.append({"shape": list(t.shape), "dtype": t.dtype.mlir})
        kname = f"{base}_k{n}"
        ins = [gl(t, *loc[id(t)], f"%in{j}") for j, t in enumerate(op.inputs)]
        outs = [gl(t, *loc[id(t)], f"%out{j}") for j, t in enumerate(op.outputs)]
        if op.kind == "graph_def" and choose_split(op.body, opts) > 1:
            split = choose_split(op.body, opts)
            probe = BlockLowering(op.body, kname, ins, [], opts, "partial", split)
            wsi = len(buffers)
            buffers.append({"shape": [probe.ws_size], "dtype": "f32"})
            ws = GlobalArg("%ws", (probe.ws_size,), (1,), "f32", 4)
            in_args = [{"kind": loc[id(t)][0], "index": loc[id(t)][1]} for t in op.inputs]
            out_args = [{"kind": loc[id(t)][0], "index": loc[id(t)][1]} for t in op.outputs]
            stages = ((("partial", kname + "_split", outs),) if opts.fold_combine else
                      (("partial", kname + "_partial", []), ("combine", kname + "_combine", outs)))
            for mode, kn_, extra in stages:
                info = BlockLowering(op.body, kn_, ins, extra, opts, mode, split, ws).lower()
                args = in_args + [{"kind": "buffer", "index": wsi}] + (out_args if extra else [])
                kernels.append({"name": kn_, "grid": list(info.grid), "block": list(info.block),
                                "smem_bytes": info.smem_bytes, "args": args, "notes": info.notes})
                infos.append(info)
                texts.append(info.text)
            continue
        if op.kind == "graph_def":
            info = BlockLowering(op.body, kname, ins, outs, opts).lower()
        else:
            info = lower_kn_op(op, kname, ins, outs[0])
        args = [{"kind": loc[id(t)][0], "index": loc[id(t)][1]} for t in list(op.inputs) + list(op.outputs)]
        kernels.append({"name": kname, "grid": list(info.grid), "block": list(info.block),
                        "smem_bytes": info.smem_bytes, "args": args, "notes": info.notes})
        infos.append(info)
        texts.append(info.text)
    # outputs not written by a kernel (an input marked as output, or one tensor marked twice)
    for k, t in enumerate(g.outputs):
        if loc.get(id(t)) == ("output", k):
            continue
        from ..core.graph import Op

        kname = f"{base}_copy{k}"
        src = gl(t, *loc[id(t)], "%in0")
        dst = GlobalArg("%out0", tuple(t.shape), row_major_strides(t.shape), t.dtype.mlir, t.dtype.itemsize)
        info = lower_kn_op(Op("copy", [t], [t]), kname, [src], dst)
        kernels.append({"name": kname, "grid": list(info.grid), "block": list(info.block), "smem_bytes": 0,
                        "args": [{"kind": loc[id(t)][0], "index": loc[id(t)][1]}, {"kind": "output", "index": k}],
                        "notes": info.notes})
        infos.append(info)
        texts.append(info.text)
    module = ("module attributes {gpu.container_module} {\n  gpu.module @" + base + "_kernels {\n"
              + "\n".join(texts) + "\n  }\n}\n")
    return Lowered(g.name, graph_hash(g), inputs, outputs, buffers, kernels, module, infos)
