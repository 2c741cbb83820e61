"""Search plans -> KNGraphs (through the builder API, so every validity check runs),
canonical keys for dedupe, and the reference as a plan-less baseline."""
from __future__ import annotations

import hashlib

from ..core.graph import KNGraph, TBGraph
from .generator import build_chain
from .threadgraph import fuse_thread_graphs


def build(ref: KNGraph, plan, name: str | None = None, thread_graphs: bool = True) -> KNGraph:
    ops, outs = plan
    g = KNGraph(name or ref.name)
    tensors = [g.new_input(t.shape, dtype=t.dtype) for t in ref.inputs]
    for k, s in ref.strides.items():
        g.strides[k] = s
    build_ops(g, tensors, ops, thread_graphs)
    for k in outs:
        g.mark_output(tensors[k])
    return g


def build_ops(g: KNGraph, tensors: list, ops, thread_graphs: bool = True) -> list:
    """Append the plan's ops to `g`; `tensors` (the plan's tensor list, inputs first) grows."""
    for op in ops:
        if op[0] == "op":
            _, kind, ins, attrs = op
            xs = [tensors[i] for i in ins]
            ad = dict(attrs)
            if kind == "reduction":
                tensors.append(g.reduction(xs[0], ad["dim"]))
            elif kind == "reduce_max":
                tensors.append(g.reduce_max(xs[0], ad["dim"]))
            elif kind == "rms_norm":
                tensors.append(g.rms_norm(xs[0], ad["normalized_shape"]))
            elif kind == "constant":
                tensors.append(g.constant(ad["value"], ad["shape"]))
            else:
                tensors.append(getattr(g, kind)(*xs, **ad))
        else:
            _, I, grid, forloop, dimx, maps, bops, omaps = op
            tb = TBGraph(grid, (128, 1, 1), forloop, dimx)
            # (map, loop dim) or (map, loop dim, k_chunk): a staged input ([stage])
            tiles = [tb.new_input(tensors[i], m[0], m[1], k_chunk=m[2] if len(m) > 2 else 0) for i, m in zip(I, maps)]
            for kind, ins, attrs in bops:
                xs = [tiles[i] for i in ins]
                ad = dict(attrs)
                if kind == "accum":
                    tiles.append(tb.forloop_accum(xs[0], None if ad["kind"] == "none" else ad["kind"]))
                elif kind == "rms_norm":
                    tiles.append(tb.rms_norm(xs[0]))
                elif kind == "reduction_to_dimx":
                    tiles.append(tb.reduction_to_dimx(xs[0]))
                elif kind == "constant":
                    tiles.append(tb.constant(ad["value"], ad["shape"]))
                elif kind == "chain":  # the reference's constant chain (generator.constant_chains)
                    tiles.append(build_chain(tb, ad["steps"], xs[0]))
                else:  # attributes by name (a reduction's dim, mul_scalar's scalar, clamp's bounds)
                    tiles.append(getattr(tb, kind)(*xs, **ad))
            for k, omap in omaps:
                tb.new_output(tiles[k], omap)
            if thread_graphs:
                tb = fuse_thread_graphs(tb)
            tensors.extend(g.customized([tensors[i] for i in I], tb))
    return tensors


def plan_key(plan) -> str:
    """Canonical key of a plan: the plan tuple is already in canonical operator order."""
    return hashlib.sha256(repr(plan).encode()).hexdigest()[:16]


def graph_key(g: KNGraph) -> str:
    return hashlib.sha256(g.to_mlir().encode()).hexdigest()[:16]


def reference_plan(ref: KNGraph):
    """The reference program itself as a plan (pre-defined ops only), or None."""
    index = {id(t): k for k, t in enumerate(ref.inputs)}
    ops = []
    n = len(ref.inputs)
    for op in ref.ops:
        if op.kind == "graph_def":
            return None
        attrs = tuple(sorted((k, v) for k, v in op.attrs.items()))
        ops.append(("op", op.kind, tuple(index[id(t)] for t in op.inputs), attrs))
        index[id(op.outputs[0])] = n
        n += 1
    return (tuple(ops), tuple(index[id(t)] for t in ref.outputs))
