"""The lifted tensor program: a DAG of `Term`s over the kernel's input arrays, made of
our `kn` operators, and its conversion to a `KNGraph`.

A term's shape follows numpy broadcasting (trailing dims aligned, size-1 dims stretch),
which is the `kn` element-wise rule, so a term can stand for a tensor that is constant
along some dims (a row statistic broadcast over the row) without materialising it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Term:
    op: str  # 'input', 'constant', or a kn operator name
    args: tuple
    attrs: tuple  # ((name, value), ...)
    shape: tuple

    def attr(self, name):
        return dict(self.attrs)[name]


class Program:
    """The interning table of terms (shared subterms are one object) and the inputs."""

    def __init__(self):
        self._table: dict = {}

    def term(self, op: str, args=(), shape=(), **attrs) -> Term:
        attrs_t = tuple(sorted(attrs.items()))
        key = (op, tuple(id(a) for a in args), attrs_t, tuple(shape))
        t = self._table.get(key)
        if t is None:
            t = Term(op, tuple(args), attrs_t, tuple(int(s) for s in shape))
            self._table[key] = t
        return t


def broadcast(*shapes) -> tuple:
    return tuple(np.broadcast_shapes(*shapes))


def evaluate(t: Term, inputs: dict, memo: dict | None = None) -> np.ndarray:
    """Float64 value of `t` with a trailing sample axis: `inputs` maps an input name to
    an array of shape (samples, *shape)."""
    from ..core.ops import OPS

    memo = {} if memo is None else memo
    if id(t) in memo:
        return memo[id(t)]
    a = [evaluate(x, inputs, memo) for x in t.args]
    op = t.op
    with np.errstate(all="ignore"):
        if op == "input":
            x = inputs[t.attr("name")]
            v = np.moveaxis(x, 0, -1)
        elif op == "constant":
            v = np.full(t.shape + (1,), t.attr("value"))
        elif op in ("add", "sub", "mul", "div"):
            v = _aligned(a[0], a[1], {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                                      "div": np.divide}[op])
        elif op == "exp":
            v = np.exp(a[0])
        elif op == "sqrt":
            v = np.sqrt(a[0])
        elif op == "rsqrt":
            v = 1.0 / np.sqrt(a[0])
        elif op in OPS and OPS[op].real:
            v = OPS[op].real(a[0])
        elif op == "reduction":
            v = np.sum(a[0], axis=t.attr("dim"), keepdims=True)
        elif op == "reduce_max":
            v = np.max(a[0], axis=t.attr("dim"), keepdims=True)
        elif op == "matmul":
            v = np.einsum("...iks,...kjs->...ijs", a[0], a[1])
        elif op == "reshape":
            v = a[0].reshape(t.shape + (a[0].shape[-1],))
        elif op == "transpose":
            perm = t.attr("permutation")
            v = np.transpose(a[0], tuple(perm) + (len(perm),))
        else:
            raise AssertionError(op)
    memo[id(t)] = v
    return v


def _aligned(x, y, fn):
    """Broadcast two values whose last axis is the sample axis (ranks may differ)."""
    rx, ry = x.ndim, y.ndim
    if rx < ry:
        x = x.reshape((1,) * (ry - rx) + x.shape)
    elif ry < rx:
        y = y.reshape((1,) * (rx - ry) + y.shape)
    return fn(x, y)


def to_graph(outputs: list, inputs: list, name: str = "lifted"):
    """A KNGraph computing `outputs` (terms, each with the shape of its array) from
    `inputs` ((name, shape, dtype) of the arrays read, in argument order)."""
    from ..core.graph import KNGraph

    g = KNGraph(name)
    env: dict = {}
    for nm, shape, dt in inputs:
        env[("input", nm)] = g.new_input(dims=shape, dtype=dt)
    default_dt = inputs[0][2] if inputs else None

    def emit(t: Term):
        key = ("input", t.attr("name")) if t.op == "input" else id(t)
        if key in env:
            return env[key]
        xs = [emit(a) for a in t.args]
        at = dict(t.attrs)
        if t.op == "constant":
            v = g.constant(at["value"], shape=t.shape, **({"dtype": default_dt} if default_dt else {}))
        elif t.op == "reduction":
            v = g.reduction(xs[0], at["dim"])
        elif t.op == "reduce_max":
            v = g.reduce_max(xs[0], at["dim"])
        elif t.op == "reshape":
            v = g.reshape(xs[0], t.shape)
        elif t.op == "transpose":
            v = g.transpose(xs[0], list(at["permutation"]))
        else:
            v = getattr(g, t.op)(*xs)
        env[key] = v
        return v

    for t in outputs:
        g.mark_output(emit(t))
    return g
