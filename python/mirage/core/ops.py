"""The one table of operator semantics.

Each `OpDef` says, for one compute operator: at which levels it exists (kn, tb, th),
its shape rule, its evaluation in terms of an `Arith` (so the float interpreter and the
finite-field verifier share it), its class in the Lax fragment (paper §5), and its
FLOP count for the cost model. Adding an operator means adding one entry here, its ODS
definition, and tests.

Shapes passed to `shape` are logical shapes. Values passed to `eval` carry `nb` leading
batch axes (the interpreter puts grid and for-loop axes there); `eval` must treat them
as batch dims.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import prod
from typing import Callable, Sequence

import numpy as np


class ShapeError(ValueError):
    """An operator applied to operands whose shapes its rule rejects."""


Shape = tuple[int, ...]


def broadcast_shapes(*shapes: Shape) -> Shape:
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ShapeError(f"shapes {' and '.join(str(list(s)) for s in shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _norm_dim(dim: int, rank: int, what: str = "dim") -> int:
    if not -rank <= dim < rank:
        raise ShapeError(f"{what} {dim} out of range for rank {rank}")
    return dim % rank


def _pad(ar, xs, nb):
    """Insert size-1 axes after the batch axes so every operand has the same rank."""
    rank = max(len(ar.shape(x)) for x in xs)
    out = []
    for x in xs:
        r = len(ar.shape(x))
        if r < rank:
            x = ar.apply(lambda a, r=r: a.reshape(a.shape[:nb] + (1,) * (rank - r) + a.shape[nb:]), x)
        out.append(x)
    return out


@dataclass(frozen=True)
class OpDef:
    name: str
    arity: int  # -1: any number >= 1
    levels: frozenset
    shape: Callable[[Sequence[Shape], dict], Shape]
    eval: Callable  # (arith, inputs, attrs, nb) -> value
    lax: str  # linear | multilinear | div | exp | sqrt | nonlax
    flops_per_elem: float = 1.0  # per output element (matmul: per multiply-add, see flops())
    attrs: tuple = field(default=())  # attribute names the op takes
    # abstract expression (paper Table 1): (ex, in_exprs, in_shapes, attrs) -> expr, built
    # with an expression builder `ex` (add, mul, div, exp, sqrt, fn, sum, const); None:
    # the search does not generate this operator.
    absexpr: Callable | None = None
    # unary | binary (element-wise) | constant | matmul | reduction | norm | layout: every
    # stage's list of "element-wise ops" etc. is derived from this (`named`)
    category: str = ""

    def flops(self, in_shapes: Sequence[Shape], out_shape: Shape, attrs: dict) -> float:
        if self.name == "matmul":
            return 2.0 * prod(out_shape) * in_shapes[0][-1]
        if self.name in ("reduction", "reduce_max", "reduction_to_dimx"):
            return float(prod(in_shapes[0]))
        return self.flops_per_elem * prod(out_shape)


OPS: dict[str, OpDef] = {}
ALL = frozenset({"kn", "tb", "th"})
KT = frozenset({"kn", "tb"})


def _register(op: OpDef, category: str) -> None:
    OPS[op.name] = replace(op, category=category)


def named(*categories: str) -> tuple:
    """Names of the operators of these categories, in table order."""
    return tuple(n for n, d in OPS.items() if d.category in categories)


# -- element-wise binary ------------------------------------------------------------------

def _binary(name: str, fn_name: str, lax: str) -> None:
    def ev(ar, xs, attrs, nb):
        a, b = _pad(ar, xs, nb)
        return getattr(ar, fn_name)(a, b)

    # sub is abstracted as add: abstract expressions ignore signs and constants
    ab = {"add": "add", "sub": "add", "mul": "mul", "div": "div"}[name]
    _register(OpDef(name, 2, ALL, lambda s, a: broadcast_shapes(*s), ev, lax,
                    absexpr=lambda ex, xs, sh, at, f=ab: getattr(ex, f)(xs[0], xs[1])), "binary")


_binary("add", "add", "linear")
_binary("sub", "sub", "linear")
_binary("mul", "mul", "multilinear")
_binary("div", "div", "div")


# -- element-wise unary -------------------------------------------------------------------

def _unary(name: str, ev: Callable, lax: str, flops: float = 1.0, absexpr: Callable | None = None) -> None:
    _register(OpDef(name, 1, ALL, lambda s, a: tuple(s[0]), lambda ar, xs, at, nb: ev(ar, xs[0]), lax, flops,
                    absexpr=(lambda ex, xs, sh, at: absexpr(ex, xs[0])) if absexpr else None), "unary")


_unary("exp", lambda ar, x: ar.exp(x), "exp", 4, lambda ex, x: ex.exp(x))
_unary("sqrt", lambda ar, x: ar.sqrt(x), "sqrt", 4, lambda ex, x: ex.sqrt(x))
_unary("rsqrt", lambda ar, x: ar.div(ar.const(1.0, ar.shape(x)), ar.sqrt(x)), "sqrt", 4,
       lambda ex, x: ex.div(ex.const(), ex.sqrt(x)))
_unary("square", lambda ar, x: ar.mul(x, x), "multilinear", 1.0, lambda ex, x: ex.mul(x, x))
for _n in ("silu", "gelu", "relu", "sigmoid"):
    _unary(_n, lambda ar, x, n=_n: ar.unary(n, x), "nonlax", 8, lambda ex, x, n=_n: ex.fn(n, x))


def _const_shape(s, attrs):
    return tuple(attrs["shape"])


_register(OpDef("constant", 0, ALL, _const_shape,
                lambda ar, xs, at, nb: ar.const(at["value"], (1,) * nb + tuple(at["shape"])),
                "linear", 0.0, ("value", "shape"), lambda ex, xs, sh, at: ex.const()), "constant")


# -- matmul -------------------------------------------------------------------------------

def _matmul_shape(s, attrs):
    a, b = s
    if len(a) < 2 or len(a) != len(b):
        raise ShapeError(f"matmul needs operands of equal rank >= 2, got {list(a)} and {list(b)}")
    if a[:-2] != b[:-2]:
        raise ShapeError(f"matmul batch dims differ: {list(a[:-2])} vs {list(b[:-2])}")
    if a[-1] != b[-2]:
        raise ShapeError(f"matmul contraction dims differ: {list(a)} x {list(b)}")
    return tuple(a[:-1]) + (b[-1],)


_register(OpDef("matmul", 2, ALL - {"th"}, _matmul_shape,
                lambda ar, xs, at, nb: ar.matmul(*xs), "multilinear",
                absexpr=lambda ex, xs, sh, at: ex.sum(sh[0][-1], ex.mul(xs[0], xs[1]))), "matmul")


# -- reductions ---------------------------------------------------------------------------

def _reduce_shape(s, attrs):
    d = _norm_dim(attrs["dim"], len(s[0]))
    return tuple(1 if i == d else n for i, n in enumerate(s[0]))


def _reduce_eval(method):
    def ev(ar, xs, attrs, nb):
        x = xs[0]
        d = _norm_dim(attrs["dim"], len(ar.shape(x)) - nb)
        return getattr(ar, method)(x, nb + d)

    return ev


def _reduced_size(sh, at):
    return sh[0][_norm_dim(at["dim"], len(sh[0]))]


_register(OpDef("reduction", 1, KT, _reduce_shape, _reduce_eval("sum"), "linear", attrs=("dim",),
                absexpr=lambda ex, xs, sh, at: ex.sum(_reduced_size(sh, at), xs[0])), "reduction")
_register(OpDef("reduce_max", 1, KT, _reduce_shape, _reduce_eval("max"), "nonlax", attrs=("dim",),
                absexpr=lambda ex, xs, sh, at: ex.fn(f"max{_reduced_size(sh, at)}", xs[0])), "reduction")


def _dimx_shape(s, attrs):
    n, dimx = s[0][-1], attrs["dimx"]
    if n % dimx:
        raise ShapeError(f"last dim {n} is not a multiple of dimx {dimx}")
    return tuple(s[0][:-1]) + (dimx,)


def sum_to_dimx(ar, x, dimx: int, axis: int | None = None):
    """Sum the last dim down to `dimx` (element j sums x[..., k*dimx + j]); with `axis`,
    also sum over that (batch) axis."""
    n = ar.shape(x)[-1]
    x = ar.apply(lambda a: a.reshape(a.shape[:-1] + (n // dimx, dimx)), x)
    x = ar.sum(x, len(ar.shape(x)) - 2)
    x = ar.apply(lambda a: a.reshape(a.shape[:-2] + (dimx,)), x)
    return x if axis is None else ar.sum(x, axis)


_register(OpDef("reduction_to_dimx", 1, frozenset({"tb"}), _dimx_shape,
                lambda ar, xs, at, nb: sum_to_dimx(ar, xs[0], at["dimx"]), "linear", attrs=("dimx",),
                absexpr=lambda ex, xs, sh, at: ex.sum(sh[0][-1] // at["dimx"], xs[0])), "reduction")


# -- normalization ------------------------------------------------------------------------

def _rms_shape(s, attrs):
    ns = tuple(attrs.get("normalized_shape") or s[0][-1:])
    if tuple(s[0][len(s[0]) - len(ns):]) != ns or not ns:
        raise ShapeError(f"normalized_shape {list(ns)} is not the trailing dims of {list(s[0])}")
    return tuple(s[0])


def rms(ar, x, axes: Sequence[int], count: int):
    """sqrt(sum of squares over `axes` / count), axes kept."""
    sq = ar.mul(x, x)
    for a in axes:
        sq = ar.sum(sq, a)
    return ar.sqrt(ar.div(sq, ar.const(float(count), ar.shape(sq))))


def _rms_eval(ar, xs, attrs, nb):
    x = xs[0]
    rank = len(ar.shape(x))
    k = len(attrs.get("normalized_shape") or (1,))
    axes = list(range(rank - k, rank))
    return ar.div(x, rms(ar, x, axes, prod(ar.shape(x)[rank - k:])))


def abstract_rms(ex, x, count: int):
    """Abstract expression of sqrt(sum of `count` squares / count): the constant count
    is the constant leaf."""
    return ex.sqrt(ex.div(ex.sum(count, ex.mul(x, x)), ex.const()))


def _rms_absexpr(ex, xs, sh, at):
    k = len(at.get("normalized_shape") or (1,))
    return ex.div(xs[0], abstract_rms(ex, xs[0], prod(sh[0][len(sh[0]) - k:])))


_register(OpDef("rms_norm", 1, KT, _rms_shape, _rms_eval, "sqrt", 4, ("normalized_shape",), _rms_absexpr), "norm")


# -- data movement ------------------------------------------------------------------------

def _concat_shape(s, attrs):
    a, b = s
    d = _norm_dim(attrs["dim"], len(a))
    if len(a) != len(b) or any(x != y for i, (x, y) in enumerate(zip(a, b)) if i != d):
        raise ShapeError(f"concat along dim {d} needs equal other dims: {list(a)} vs {list(b)}")
    return tuple(a[i] + b[i] if i == d else a[i] for i in range(len(a)))


def _concat_eval(ar, xs, attrs, nb):
    d = _norm_dim(attrs["dim"], len(ar.shape(xs[0])) - nb)
    shapes = [ar.shape(x) for x in xs]
    lead = tuple(max(s[i] for s in shapes) for i in range(nb))
    xs = [ar.apply(lambda a: np.broadcast_to(a, lead + a.shape[nb:]), x) for x in xs]
    return ar.apply(lambda a, b: np.concatenate([a, b], axis=nb + d), *xs)


_register(OpDef("concat", 2, KT, _concat_shape, _concat_eval, "linear", 0.0, ("dim",)), "layout")


def _reshape_shape(s, attrs):
    new = tuple(attrs["shape"])
    if prod(new) != prod(s[0]):
        raise ShapeError(f"cannot reshape {list(s[0])} to {list(new)}")
    return new


_register(OpDef("reshape", 1, KT, _reshape_shape,
                lambda ar, xs, at, nb: ar.apply(lambda a: a.reshape(a.shape[:nb] + tuple(at["shape"])), xs[0]),
                "linear", 0.0, ("shape",), lambda ex, xs, sh, at: xs[0]), "layout")


def _transpose_shape(s, attrs):
    perm = tuple(attrs["permutation"])
    if sorted(perm) != list(range(len(s[0]))):
        raise ShapeError(f"permutation {list(perm)} is not a permutation of the {len(s[0])} dims")
    return tuple(s[0][p] for p in perm)


_register(OpDef("transpose", 1, KT, _transpose_shape,
                lambda ar, xs, at, nb: ar.apply(
                    lambda a: a.transpose(tuple(range(nb)) + tuple(nb + p for p in at["permutation"])), xs[0]),
                "linear", 0.0, ("permutation",), lambda ex, xs, sh, at: xs[0]), "layout")


def _repeat_shape(s, attrs):
    reps = tuple(attrs["repeats"])
    if len(reps) != len(s[0]) or min(reps) < 1:
        raise ShapeError(f"repeats {list(reps)} must give a positive count for each of the {len(s[0])} dims")
    return tuple(n * r for n, r in zip(s[0], reps))


_register(OpDef("repeat", 1, KT, _repeat_shape,
                lambda ar, xs, at, nb: ar.apply(lambda a: np.tile(a, (1,) * nb + tuple(at["repeats"])), xs[0]),
                "linear", 0.0, ("repeats",), lambda ex, xs, sh, at: xs[0]), "layout")


# the category lists every stage reads (table order: the search enumerates in this order)
UNARY = named("unary")
BINARY = named("binary")
ELEMENTWISE = BINARY + UNARY


# -- for-loop accumulators (tb level; not in OPS: the interpreter applies them) -----------

ACCUMULATORS = ("none", "sum", "mean", "rms", "max", "sum_todimx")
NONLAX_ACCUMULATORS = frozenset({"max"})


def accum_shape(kind: str, shape: Shape, dimx: int) -> Shape:
    if kind in ("none", "max"):
        return tuple(shape)
    if kind == "sum_todimx":
        return _dimx_shape([shape], {"dimx": dimx})
    return tuple(shape[:-1]) + (1,)


def accumulate(ar, kind: str, x, loop_axis: int, iterations: int, dimx: int):
    """Apply accumulator `kind` to `x`, whose axis `loop_axis` holds the iterations."""
    last = len(ar.shape(x)) - 1
    if kind == "none":
        return ar.sum(x, loop_axis)
    if kind == "max":
        return ar.max(x, loop_axis)
    if kind == "sum_todimx":
        return sum_to_dimx(ar, x, dimx, loop_axis)
    count = iterations * ar.shape(x)[-1]
    if kind == "rms":
        return rms(ar, x, [last, loop_axis], count)
    s = ar.sum(ar.sum(x, last), loop_axis)
    if kind == "mean":
        return ar.div(s, ar.const(float(count), ar.shape(s)))
    return s


def accum_absexpr(ex, kind: str, x, shape: Shape, iterations: int, dimx: int):
    """Abstract expression of `tb.forloop_accum <kind>` applied to a tile of `shape` over
    `iterations` iterations (paper Table 1, Accum; the reducing kinds also sum the tile's
    last dim)."""
    if kind == "none":
        return ex.sum(iterations, x)
    if kind == "max":
        return ex.fn(f"max{iterations}", x)
    if kind == "sum_todimx":
        return ex.sum(iterations * (shape[-1] // dimx), x)
    n = iterations * shape[-1]
    if kind == "rms":
        return abstract_rms(ex, x, n)
    if kind == "mean":
        return ex.div(ex.sum(n, x), ex.const())
    return ex.sum(n, x)
