"""The reference interpreter: executes any μGraph with its exact semantics.

A block graph is run for all blocks and all for-loop iterations at once: every tile
value carries four leading axes (grid x, y, z, loop iteration), of size 1 where the
value does not vary along that axis. Slicing an input by its imap/fmap, the ops of the
block graph, the accumulators (which reduce the loop axis) and the output savers (which
scatter the grid axes by the omap) are then whole-array operations. This computes
exactly what running block by block and iteration by iteration computes — the ops are
the same — and is fast enough to verify full-size graphs.

The arithmetic is pluggable (`arith.py`): floats here, finite fields in the verifier.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from . import ops as O
from .arith import Arith, FloatArith
from .dtypes import dtype as Dtype
from .graph import KNGraph, TBGraph, THGraph

NB = 4  # leading axes of a tile value: grid x, y, z, loop
LOOP_AXIS = 3


def arith_for(dtype) -> Arith:
    """None, "float64" or numpy's float64: exact float64; "native": each tensor rounded to its
    own element type; a mirage dtype or its name (numpy's float16/float32 too): every
    tensor rounded to that type."""
    if dtype is not None and not isinstance(dtype, (str, Dtype)):
        try:
            dtype = np.dtype(dtype).name  # numpy types: by name (np.float64 was taken as bf16)
        except TypeError:
            raise ValueError(f"evaluate: unsupported dtype {dtype!r}") from None
    if dtype is None or dtype == "float64":
        return FloatArith()
    if dtype == "native":
        return FloatArith(native=True)
    if isinstance(dtype, str):
        dtype = Dtype.parse({"float16": "f16", "bfloat16": "bf16", "float32": "f32"}.get(dtype, dtype))
    return FloatArith(force=dtype)


def evaluate(g: KNGraph, inputs: Sequence, dtype=None, arith: Arith | None = None) -> list:
    """Evaluate `g` on `inputs` (numpy arrays, or values of `arith`); returns the outputs
    as numpy arrays (float arithmetic) or as values of `arith`."""
    ar = arith or arith_for(dtype)
    if len(inputs) != len(g.inputs):
        raise ValueError(f"the graph takes {len(g.inputs)} inputs, {len(inputs)} given")
    env: dict[int, object] = {}
    for k, (t, a) in enumerate(zip(g.inputs, inputs)):
        v = ar.from_array(a) if arith is None else a
        if tuple(ar.shape(v)) != t.shape:
            raise ValueError(f"input {k} has shape {list(ar.shape(v))}, the graph expects {list(t.shape)}")
        env[id(t)] = ar.round(v, t.dtype)
    for op in g.ops:
        xs = [env[id(t)] for t in op.inputs]
        if op.kind == "graph_def":
            outs = run_block_graph(ar, op.body, xs)
        else:
            outs = _results(O.OPS[op.kind], O.OPS[op.kind].eval(ar, xs, op.attrs, 0))
        for t, v in zip(op.outputs, outs):
            env[id(t)] = ar.round(v, t.dtype)
    res = [env[id(t)] for t in g.outputs]
    return [ar.to_array(v) for v in res] if arith is None else res


class ReferenceOutputs:
    """The outputs of one reference graph, per trial key, for checks of many candidates
    against it (one evaluation of full-size attention takes a second or more). The graph
    object is held, so its id cannot be reused, and its ops are compared, so a graph grown
    since is evaluated again; at most `limit` trials are kept."""

    def __init__(self, limit: int = 16):
        self.limit, self.graph, self.shape, self.values = limit, None, None, {}

    def get(self, reference: KNGraph, key, compute):
        """The outputs of trial `key`, from `compute()` the first time."""
        shape = (tuple(id(op) for op in reference.ops), tuple(id(t) for t in reference.outputs))
        if self.graph is not reference or self.shape != shape:
            self.graph, self.shape, self.values = reference, shape, {}
        if key not in self.values:
            if len(self.values) >= self.limit:
                self.values = {}
            self.values[key] = compute()
        return self.values[key]

    def clear(self) -> None:
        self.graph, self.shape, self.values = None, None, {}


def _results(d: O.OpDef, v) -> list:
    return list(v) if d.results > 1 else [v]


def _lead_sizes(tb: TBGraph) -> tuple[int, int, int, int]:
    return tuple(tb.grid_dim) + (tb.forloop_range,)


def _split_factors(tb: TBGraph, rank: int, dmap, loop_dim) -> list[list[int]]:
    """For each tensor dim, the lead axes (0..3) that split it, outer to inner."""
    per_dim: list[list[int]] = [[] for _ in range(rank)]
    for axis, d in enumerate(tuple(dmap) + (loop_dim,)):
        if d != -1:
            per_dim[d].append(axis)
    return per_dim


def slice_input(ar: Arith, tb: TBGraph, x, rec) -> object:
    """Device tensor -> tile value with lead axes (size 1 where replicated)."""
    lead = _lead_sizes(tb)
    shape = tuple(ar.shape(x))
    tile = rec.stensor.shape
    per_dim = _split_factors(tb, len(shape), rec.imap, rec.forloop_dim)
    split, labels = [], []
    for d, axes in enumerate(per_dim):
        split += [lead[a] for a in axes] + [tile[d]]
        labels += axes + [NB + d]
    present = sorted(a for a in labels if a < NB)
    perm = [labels.index(a) for a in present] + [labels.index(NB + d) for d in range(len(shape))]
    out_shape = tuple(lead[a] if a in present else 1 for a in range(NB)) + tuple(tile)
    return ar.apply(lambda a: a.reshape(split).transpose(perm).reshape(out_shape), x)


def save_output(ar: Arith, tb: TBGraph, v, rec) -> object:
    """Tile value with lead axes -> device tensor, scattered by the omap."""
    lead = _lead_sizes(tb)
    tile = rec.stensor.shape
    vshape = tuple(ar.shape(v))
    per_dim = _split_factors(tb, len(tile), rec.omap, rec.forloop_dim)
    mapped = {a for axes in per_dim for a in axes}
    if vshape[LOOP_AXIS] != 1 and LOOP_AXIS not in mapped:
        raise ValueError("[accumulator] an output that does not map the loop dim must be saved after an accumulator")
    full = tuple(lead[a] if a in mapped else 1 for a in range(NB)) + tuple(tile)
    order, final = [], []
    unmapped = [a for a in range(NB) if a not in mapped]
    for d, axes in enumerate(per_dim):
        order += axes + [NB + d]
        final.append(tile[d] * int(np.prod([lead[a] for a in axes], dtype=np.int64)))
    perm = unmapped + order
    return ar.apply(lambda a: np.broadcast_to(a, full).transpose(perm).reshape(final), v)


def run_block_graph(ar: Arith, tb: TBGraph, xs: Sequence) -> list:
    env: dict[int, object] = {}
    lead = _lead_sizes(tb)
    for rec, x in zip(tb.inputs, xs):
        env[id(rec.stensor)] = slice_input(ar, tb, x, rec)
    for op in tb.ops:
        ins = [env[id(t)] for t in op.inputs]
        if op.kind == "forloop_accum":
            x = ins[0]
            full = tuple(ar.shape(x)[:LOOP_AXIS]) + (lead[LOOP_AXIS],) + tuple(ar.shape(x)[NB:])
            x = ar.apply(lambda a: np.broadcast_to(a, full), x)  # loop-invariant values repeat
            outs = [O.accumulate(ar, op.attrs["kind"], x, LOOP_AXIS, tb.forloop_range, tb.reduction_dimx)]
        elif op.kind == "thread_graph":
            outs = run_thread_graph(ar, op.body, ins, NB)
        elif O.is_accumulator(op.kind):  # forloop_accum_rescale: its eval runs the iterations
            ins = [ar.apply(lambda a: np.broadcast_to(a, a.shape[:LOOP_AXIS] + (lead[LOOP_AXIS],) + a.shape[NB:]), x)
                   for x in ins]  # loop-invariant values repeat
            outs = [O.OPS[op.kind].eval(ar, ins, op.attrs, NB)]
        else:
            outs = _results(O.OPS[op.kind], O.OPS[op.kind].eval(ar, ins, op.attrs, NB))
        for t, v in zip(op.outputs, outs):
            env[id(t)] = ar.round(v, t.dtype)
    return [save_output(ar, tb, env[id(o.stensor)], o) for o in tb.outputs]


def run_thread_graph(ar: Arith, th: THGraph, xs: Sequence, nb: int) -> list:
    xs = O._pad(ar, list(xs), nb)
    env = {id(s): x for s, x in zip(th.inputs, xs)}
    for op in th.ops:
        v = O.OPS[op.kind].eval(ar, [env[id(t)] for t in op.inputs], op.attrs, nb)
        env[id(op.outputs[0])] = ar.round(v, op.outputs[0].dtype)
    shape = O.broadcast_shapes(*[tuple(ar.shape(x)) for x in xs])
    return [ar.apply(lambda a: np.broadcast_to(a, shape), env[id(s)]) for s in th.outputs]
