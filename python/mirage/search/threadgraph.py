"""Thread-graph construction (paper §4.2, Algorithm 1 lines 38-42): rule-based fusion.

An element-wise block op whose result has exactly one consumer, which is itself
element-wise, and which is not saved as an output, is fused into its consumer; every
maximal group so formed becomes one `tb.thread_graph` whose body computes the group per
element in registers (intermediates never touch shared memory). Groups of one op are
fused too when they run after an accumulator (the epilogue of the loop), as in the
paper's Figure 3b.
"""
from __future__ import annotations

from collections import Counter

from ..core import ops as O
from ..core.graph import TBGraph, THGraph

ELEMENTWISE = frozenset(O.ELEMENTWISE)


def fuse_thread_graphs(tb: TBGraph) -> TBGraph:
    uses = Counter(id(t) for op in tb.ops for t in op.inputs)
    outputs = {id(o.stensor) for o in tb.outputs}
    consumer = {}
    for op in tb.ops:
        for t in op.inputs:
            consumer[id(t)] = op
    root_of = {}  # id(op) -> root op
    for op in reversed(tb.ops):
        if op.kind not in ELEMENTWISE:
            continue
        out = op.outputs[0]
        c = consumer.get(id(out))
        if (uses[id(out)] == 1 and id(out) not in outputs and c is not None and c.kind in ELEMENTWISE):
            root_of[id(op)] = root_of[id(c)]
        else:
            root_of[id(op)] = op
    groups: dict = {}
    for op in tb.ops:
        if op.kind in ELEMENTWISE:
            groups.setdefault(id(root_of[id(op)]), []).append(op)
    post = tb.accum_counts(varying_only=False)
    fuse = {}
    for rid, members in groups.items():
        root = members[-1]
        after_loop = (post.get(id(root.outputs[0])) or (0, 0))[1] >= 1 and any(
            o.kind == "forloop_accum" for o in tb.ops)
        if len(members) >= 2 or after_loop:
            fuse[rid] = members
    if not fuse:
        return tb
    member_ids = {id(m) for ms in fuse.values() for m in ms}
    new = TBGraph(tb.grid_dim, tb.block_dim, tb.forloop_range, tb.reduction_dimx)
    env = {}
    for rec in tb.inputs:
        env[id(rec.stensor)] = new.new_input(rec.dtensor, rec.imap, rec.forloop_dim)
    for op in tb.ops:
        if id(op) in member_ids:
            if id(op) not in fuse:
                continue  # emitted with its group's root
            members = fuse[id(op)]
            inner = {id(m.outputs[0]) for m in members}
            ext = []
            for m in members:
                for t in m.inputs:
                    if id(t) not in inner and all(t is not e for e in ext):
                        ext.append(t)
            th = THGraph([t.dtype for t in ext])
            tenv = {id(t): s for t, s in zip(ext, th.inputs)}
            for m in members:
                tenv[id(m.outputs[0])] = getattr(th, m.kind)(*[tenv[id(t)] for t in m.inputs], **m.attrs)
            th.output(tenv[id(op.outputs[0])])
            env[id(op.outputs[0])] = new.thread_graph([env[id(t)] for t in ext], th)[0]
            continue
        xs = [env[id(t)] for t in op.inputs]
        if op.kind == "forloop_accum":
            k = op.attrs["kind"]
            r = new.forloop_accum(xs[0], None if k == "none" else k)
        elif op.kind == "thread_graph":
            r = new.thread_graph(xs, op.body)[0]
        elif op.kind == "rms_norm":
            r = new.rms_norm(xs[0])
        elif op.kind == "reduction_to_dimx":
            r = new.reduction_to_dimx(xs[0])
        elif op.kind == "constant":
            r = new.constant(op.attrs["value"], op.attrs["shape"], op.outputs[0].dtype)
        else:  # attributes by name (a reduction's dim, mul_scalar's scalar, clamp's bounds)
            r = getattr(new, op.kind)(*xs, **op.attrs)
        env[id(op.outputs[0])] = r
    for o in tb.outputs:
        new.new_output(env[id(o.stensor)], o.omap, o.forloop_dim)
    return new
