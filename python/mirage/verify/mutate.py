"""Replay a μGraph through the builder API, optionally shrinking its sizes or applying one
mutation. Every rebuilt graph is checked by the builder's validity rules, so a mutation
that makes the graph invalid raises `GraphError` (callers skip those).

Used by the mutation tests (every non-equivalent mutant must be rejected by the
verifier) and handy for building small versions of full-size benchmark graphs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from ..core import ops as O
from ..core.graph import GraphError, KNGraph, TBGraph, THGraph

__all__ = ["Mutation", "replay", "mutations", "GraphError"]

_BINARY, _UNARY = O.BINARY, O.UNARY


@dataclass(frozen=True)
class Mutation:
    """`site`: ("kn", op) | ("tb", kn_op, tb_op) | ("tbin", kn_op, input) | ("tbout", kn_op, output)
    | ("launch", kn_op); `change`: a tuple whose first entry names the change."""

    site: tuple
    change: tuple
    operand: object = field(default=None, compare=False)  # an old tensor, for "replace"

    def __str__(self) -> str:
        return f"{'/'.join(map(str, self.site))}: {' '.join(map(str, self.change))}"


def _map_dims(shape, dims: dict):
    return tuple(dims.get(int(s), int(s)) for s in shape)


def replay(g: KNGraph, mutation: Mutation | None = None, dims: dict | None = None,
           grid: dict | None = None, loop: dict | None = None, dimx: dict | None = None) -> KNGraph:
    """Rebuild `g`; `dims` maps tensor sizes (inputs and size attributes), `grid` grid sizes,
    `loop` for-loop ranges, `dimx` reduction_dimx values; `mutation` changes one site."""
    dims, grid, loop, dimx = dims or {}, grid or {}, loop or {}, dimx or {}
    mu = mutation
    ng = KNGraph(g.name)
    env: dict[int, object] = {}
    for t in g.inputs:
        env[id(t)] = ng.new_input(_map_dims(t.shape, dims), dtype=t.dtype)

    def attrs_of(op):
        a = dict(op.attrs)
        for k in ("shape", "normalized_shape"):
            if k in a and op.kind != "constant":
                a[k] = _map_dims(a[k], dims)
        return a

    def table_op(builder, site, op, ins):
        kind, attrs = op.kind, attrs_of(op)
        if mu is not None and mu.site == site:
            c = mu.change
            if c[0] == "swap":
                ins = ins[::-1]
            elif c[0] == "replace":
                ins = list(ins)
                ins[c[1]] = env[id(mu.operand)]
            elif c[0] == "optype":
                kind = c[1]
                # the new operator's own attributes only (clamp -> exp drops the bounds; exp ->
                # clamp has none, which its shape rule rejects: an invalid mutant)
                attrs = {k: v for k, v in attrs.items() if k in O.OPS[kind].attrs}
            elif c[0] == "drop":
                return [ins[c[1]]]
            elif c[0] == "const":
                attrs["value"] = c[1]
            elif c[0] == "dim":
                attrs["dim"] = c[1]
        if kind == "constant":
            return [builder._op(kind, [], op.outputs[0].dtype, **attrs)]
        return list(builder._op(kind, ins, None, **attrs).producer.outputs)  # reduction_max: two

    for n, op in enumerate(g.ops):
        ins = [env[id(t)] for t in op.inputs]
        if op.kind == "graph_def":
            outs = _replay_block(op, n, ins, ng, env, mu, dims, grid, loop, dimx, table_op)
        else:
            outs = table_op(ng, ("kn", n), op, ins)
        for t, v in zip(op.outputs, outs):
            env[id(t)] = v
    for t in g.outputs:
        ng.mark_output(env[id(t)])
    return ng


def _replay_block(op, n, ins, ng, env, mu, dims, grid, loop, dimx, table_op):
    tb: TBGraph = op.body
    gd = [grid.get(x, x) for x in tb.grid_dim]
    fr = loop.get(tb.forloop_range, tb.forloop_range)
    if mu is not None and mu.site == ("launch", n):
        if mu.change[0] == "grid":
            gd[mu.change[1]] = mu.change[2]
        elif mu.change[0] == "forloop":
            fr = mu.change[1]
    nt = TBGraph(tuple(gd), tb.block_dim, fr, dimx.get(tb.reduction_dimx, tb.reduction_dimx))
    for k, rec in enumerate(tb.inputs):
        imap, fdim = list(rec.imap), rec.forloop_dim
        if mu is not None and mu.site == ("tbin", n, k):
            if mu.change[0] == "imap":
                imap[mu.change[1]] = mu.change[2]
            else:
                fdim = mu.change[1]
        env[id(rec.stensor)] = nt.new_input(ins[k], tuple(imap), fdim)
    for j, bop in enumerate(tb.ops):
        xs = [env[id(t)] for t in bop.inputs]
        site = ("tb", n, j)
        if bop.kind == "forloop_accum":
            kind = bop.attrs["kind"]
            if mu is not None and mu.site == site:
                if mu.change[0] == "accum":
                    kind = mu.change[1]
                elif mu.change[0] == "drop":
                    env[id(bop.outputs[0])] = xs[0]
                    continue
            outs = [nt.forloop_accum(xs[0], None if kind == "none" else kind)]
        elif bop.kind == "thread_graph":
            th: THGraph = bop.body
            nth = THGraph([s.dtype for s in th.inputs])
            tenv = {id(s): v for s, v in zip(th.inputs, nth.inputs)}
            for top in th.ops:
                tenv[id(top.outputs[0])] = (nth.constant(top.attrs["value"], top.outputs[0].dtype)
                                            if top.kind == "constant" else
                                            nth._op(top.kind, [tenv[id(t)] for t in top.inputs], None, **top.attrs))
            for s in th.outputs:
                nth.output(tenv[id(s)])
            outs = nt.thread_graph(xs, nth)
        else:
            outs = table_op(nt, site, bop, xs)
        for t, v in zip(bop.outputs, outs):
            env[id(t)] = v
    for k, o in enumerate(tb.outputs):
        omap, fdim = list(o.omap), o.forloop_dim
        if mu is not None and mu.site == ("tbout", n, k):
            if mu.change[0] == "omap":
                omap[mu.change[1]] = mu.change[2]
            else:
                fdim = mu.change[1]
        nt.new_output(env[id(o.stensor)], tuple(omap), fdim)
    return ng.customized(ins, nt)


def _op_mutations(site, op, earlier) -> Iterator[Mutation]:
    kind = op.kind
    if kind in _BINARY:
        yield Mutation(site, ("swap",))
        for k in _BINARY:
            if k != kind:
                yield Mutation(site, ("optype", k))
    if kind in ("matmul", "concat"):
        yield Mutation(site, ("swap",))
    if kind in _UNARY:
        for k in _UNARY:
            if k != kind:
                yield Mutation(site, ("optype", k))
    if kind in ("reduction", "reduce_max"):
        yield Mutation(site, ("optype", "reduce_max" if kind == "reduction" else "reduction"))
        rank = len(op.inputs[0].shape)
        for d in range(rank):
            if d != op.attrs["dim"] % rank:
                yield Mutation(site, ("dim", d))
    if kind == "constant":
        v = op.attrs["value"]
        for nv in (v * 2, v + 1.0, -v):
            yield Mutation(site, ("const", nv))
    for i, t in enumerate(op.inputs):
        if len(op.outputs) == 1:  # an op with two results has no operand to stand for both
            yield Mutation(site, ("drop", i))
        for s in earlier:
            if s is not t and s.shape == t.shape:
                yield Mutation(site, ("replace", i), s)


def mutations(g: KNGraph) -> Iterator[Mutation]:
    """Every single-site mutation of `g` (valid or not: `replay` rejects invalid ones)."""
    earlier = list(g.inputs)
    for n, op in enumerate(g.ops):
        if op.kind != "graph_def":
            yield from _op_mutations(("kn", n), op, earlier)
        else:
            tb = op.body
            for axis in range(3):
                for f in (2, 4):
                    yield Mutation(("launch", n), ("grid", axis, tb.grid_dim[axis] * f))
                    if tb.grid_dim[axis] % f == 0:
                        yield Mutation(("launch", n), ("grid", axis, tb.grid_dim[axis] // f))
            for f in (2, 4):
                yield Mutation(("launch", n), ("forloop", tb.forloop_range * f))
                if tb.forloop_range % f == 0:
                    yield Mutation(("launch", n), ("forloop", tb.forloop_range // f))
            tearlier = [r.stensor for r in tb.inputs]
            for k, rec in enumerate(tb.inputs):
                rank = len(rec.dtensor.shape)
                for axis in range(3):
                    for v in range(-1, rank):
                        if v != rec.imap[axis]:
                            yield Mutation(("tbin", n, k), ("imap", axis, v))
                for v in range(-1, rank):
                    if v != rec.forloop_dim:
                        yield Mutation(("tbin", n, k), ("fmap", v))
            for j, bop in enumerate(tb.ops):
                site = ("tb", n, j)
                if bop.kind == "forloop_accum":
                    for a in O.ACCUMULATORS:
                        if a != bop.attrs["kind"]:
                            yield Mutation(site, ("accum", a))
                    yield Mutation(site, ("drop", 0))
                elif bop.kind != "thread_graph":
                    yield from _op_mutations(site, bop, tearlier)
                tearlier += bop.outputs
            for k, o in enumerate(tb.outputs):
                rank = len(o.stensor.shape)
                for axis in range(3):
                    for v in range(-1, rank):
                        if v != o.omap[axis]:
                            yield Mutation(("tbout", n, k), ("omap", axis, v))
                for v in range(-1, rank):
                    if v != o.forloop_dim:
                        yield Mutation(("tbout", n, k), ("ofmap", v))
        earlier += op.outputs
