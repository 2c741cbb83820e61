"""Reshapes moved past the ops that do not care about them, and cancelled.

PyTorch code reshapes between every step (heads split and merged, `view`s around each
`nn.Linear`, the batched matmuls of attention flattened to 3-D and back), and each
reshape stays a `kn.reshape` between the ops. The search cuts its subprograms at them,
so attention's matmul, softmax and matmul were never one program to fuse. Here a value
that is `reshape(x)` is kept as x as long as its users do not depend on the shape:

- an element-wise op of one operand; of two reshaped operands whose reshapes keep the
  last dim and agree on the others (softmax's `exp(x - max) / sum`); or of a reshaped
  tensor and a constant of size 1 (a splat that broadcasts as a scalar), is computed on x;
- a reduction of the last dim (`reduction`, `reduce_max`) that x shares is computed on x;
- `reshape(reshape(x))` is one reshape, and a reshape to x's own shape is x.

Everything else (matmuls, concat, transpose, the graph's outputs) gets the reshape,
materialized once per value. Exact: every rule computes the same elements.
"""
from __future__ import annotations

from ..core import ops as O
from ..core.graph import KNGraph

_LAST_DIM = ("reduction", "reduce_max")


def _is_scalar_const(g_op) -> bool:
    return g_op is not None and g_op.kind == "constant" and all(d == 1 for d in g_op.outputs[0].shape)


def sink_reshapes(graph: KNGraph) -> tuple[KNGraph, int]:
    """A graph computing the same outputs with reshapes moved down and cancelled, and how
    many reshape ops the input graph had more than the result."""
    out = KNGraph(graph.name)
    out.smem_capacity = graph.smem_capacity
    lazy: dict = {}  # id(old tensor) -> (new tensor, shape it stands reshaped to, or None)
    made: dict = {}  # id(old tensor) -> its materialized new tensor
    views: dict = {}  # (id(new tensor), shape) -> its reshape
    producer = {id(o): op for op in graph.ops for o in op.outputs}
    for k, t in enumerate(graph.inputs):
        lazy[id(t)] = (out.new_input(t.shape, graph.strides.get(k), t.dtype), None)

    def value(t):
        """The new tensor for old tensor t, its pending reshape applied."""
        if id(t) not in made:
            base, shape = lazy[id(t)]
            if base is None:  # a constant, made where it is used
                c = producer[id(t)]
                made[id(t)] = out.constant(c.attrs["value"], tuple(t.shape), t.dtype)
                return made[id(t)]
            if shape is None or tuple(shape) == tuple(base.shape):
                made[id(t)] = base
            else:  # one reshape per (tensor, shape), however many reshaped it
                key = (id(base), tuple(shape))
                if key not in views:
                    views[key] = out._op("reshape", [base], base.dtype, shape=tuple(shape))
                made[id(t)] = views[key]
        return made[id(t)]

    for op in graph.ops:
        o = op.outputs[0]
        ins = [lazy[id(t)] for t in op.inputs]
        pending = [s is not None for _, s in ins]
        if op.kind == "constant":
            lazy[id(o)] = (None, None)
            continue
        if op.kind == "reshape":
            base, _ = ins[0]
            lazy[id(o)] = (base, None if tuple(o.shape) == tuple(base.shape) else tuple(o.shape))
            continue
        if any(pending) and op.kind in O.UNARY:
            (base, shape), = ins
            lazy[id(o)] = (out._op(op.kind, [base], o.dtype, **op.attrs), tuple(o.shape))
            continue
        if any(pending) and op.kind in O.BINARY:
            (a, sa), (b, sb) = ins
            pa, pb = (producer.get(id(t)) for t in op.inputs)
            if sa is not None and sb is not None and a.shape[:-1] == b.shape[:-1] and sa[:-1] == sb[:-1] \
                    and a.shape[-1] == sa[-1] and b.shape[-1] == sb[-1]:
                lazy[id(o)] = (out._op(op.kind, [a, b], o.dtype, **op.attrs), tuple(o.shape))
                continue
            if sa is not None and sb is None and _is_scalar_const(pb) and tuple(o.shape) == sa:
                c = out.constant(pb.attrs["value"], (1,) * len(a.shape), op.inputs[1].dtype)
                lazy[id(o)] = (out._op(op.kind, [a, c], o.dtype, **op.attrs), tuple(o.shape))
                continue
            if sb is not None and sa is None and _is_scalar_const(pa) and tuple(o.shape) == sb:
                c = out.constant(pa.attrs["value"], (1,) * len(b.shape), op.inputs[0].dtype)
                lazy[id(o)] = (out._op(op.kind, [c, b], o.dtype, **op.attrs), tuple(o.shape))
                continue
        if pending[:1] == [True] and op.kind in _LAST_DIM:
            (base, shape), = ins
            rank = len(op.inputs[0].shape)
            if op.attrs["dim"] in (-1, rank - 1) and base.shape[-1] == shape[-1]:
                r = out._op(op.kind, [base], o.dtype, dim=len(base.shape) - 1)
                lazy[id(o)] = (r, tuple(o.shape))
                continue
        lazy[id(o)] = (out._op(op.kind, [value(t) for t in op.inputs], o.dtype, **op.attrs), None)
    for t in graph.outputs:
        out.mark_output(value(t))
    count = sum(1 for op in graph.ops if op.kind == "reshape") - sum(1 for op in out.ops if op.kind == "reshape")
    return out, count
