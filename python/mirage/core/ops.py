"""The one table of operator semantics.

Each `OpDef` says, for one compute operator: at which levels it exists (kn, tb, th),
its shape rule, its evaluation in terms of an `Arith` (so the float interpreter and the
finite-field verifier share it), its class in the Lax fragment (paper §5), its abstract
expression for the search, its FLOP count for the cost model, its category (from which
every stage derives its operator lists), and for element-wise operators its float64
function where other arithmetics model it as a random function (`real`) and its scalar
GPU code (`gpu`). The builder methods (`g.gelu(x)`, `tb.clamp(x, lo, hi)`) are made from
the entries (`graph.py`). Adding an operator means adding one entry here, its ODS
definition, and tests.

Operator names appear elsewhere only where they are genuinely special: the importers'
names for them (ATen ops in `frontend/torch_import.py`, the TOSA gelu pattern in
`mlir/tosa.py`), the lifter's term language for Triton kernels (`lift/`), the
exact Z3 encodings of relu and clamp (`verify/smt.py`), the axioms of the search's
abstract expressions (paper §4: `search/z3check.py` and `search/absexpr.py` name add, mul,
div, exp, sqrt, sum; the other unary functions come from `real` here), and the builder
methods written out in `graph.py` (`graph.WRITTEN_OUT`, with the reason for each). The structural operators, whose shape
and evaluation are here too, are also dispatched by name in the stages that give them an
algorithm of their own: `matmul` (tensor-core tiles and fragments in `lower/`, operand
layouts in `optimize/layout.py`, multilinear products in `verify/`, the chains of
`search/mbci.py`), the reductions and `rms_norm` (row emitters and reduction dims in
`lower/`, prologues and row seeds in `search/`), the layout operators `concat`,
`transpose`, `reshape` and `repeat` (views and slice copies in `lower/convert.py`, maps in
`search/partition.py` and `verify/lax.py`), and `exp` (one exp per Lax region in
`verify/` and `search/partition.py`, the attention seeds of `search/seed.py`).
`benchmarks/arch_check.py ops NAME...` lists where a name occurs.

Shapes passed to `shape` are logical shapes. Values passed to `eval` carry `nb` leading
batch axes (the interpreter puts grid and for-loop axes there); `eval` must treat them
as batch dims. Two block-level operators are stateful across for-loop iterations
(`reduction_max`, a running maximum, and the accumulator `forloop_accum_rescale`): their
`eval` reads the last batch axis (nb - 1) as the iteration axis. An operator with
`results` > 1 (`reduction_max`) returns a tuple of values; `shape` gives each result's
shape (they are equal).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import isfinite, prod
from numbers import Real
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
    # unary | binary (element-wise) | constant | matmul | reduction | norm | layout |
    # accumulator: every stage's list of "element-wise ops" etc. is derived from this (`named`)
    category: str = ""
    results: int = 1  # values the operator defines (reduction_max: the max and the diff)
    # element-wise operators only:
    # `real`: the float64 numpy function of an operator that arithmetics other than the
    # float one model as an uninterpreted (random) function (silu, gelu, relu, sigmoid);
    # `gpu`: its scalar f32 code, `(e, args, attrs) -> value`, written with a lowering
    # emitter `e` (`e.f32(c)`, `e.fbin(op, a, b)`, `e.op(text, "f")`: MLIR text)
    real: Callable | None = None
    gpu: Callable | None = None

    def flops(self, in_shapes: Sequence[Shape], out_shape: Shape, attrs: dict) -> float:
        if self.name == "matmul":
            return 2.0 * prod(out_shape) * in_shapes[0][-1]
        if self.name in ("reduction", "reduce_max", "reduction_to_dimx", "reduction_max"):
            return float(prod(in_shapes[0]))
        if self.name == "forloop_accum_rescale":  # per iteration: sum the input, acc * rescale + it
            return float(prod(in_shapes[0])) + 2.0 * prod(out_shape)
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
                    absexpr=lambda ex, xs, sh, at, f=ab: getattr(ex, f)(xs[0], xs[1]),
                    gpu=lambda e, xs, at, f=fn_name + "f": e.fbin(f, *xs)), "binary")


_binary("add", "add", "linear")
_binary("sub", "sub", "linear")
_binary("mul", "mul", "multilinear")
_binary("div", "div", "div")


def _pow_eval(ar, xs, attrs, nb):
    a, b = _pad(ar, xs, nb)
    return ar.pow(a, b)


# Mirage's KNGraph.pow(A, B): A ** B element-wise, broadcasting. No abstract expression:
# the search keeps it as a pre-defined kernel (a barrier), as it does reduce_max.
# The NVVM lowering expands math.powf inline (no libdevice call).
_register(OpDef("pow", 2, ALL, lambda s, a: broadcast_shapes(*s), _pow_eval, "nonlax", 8,
                gpu=lambda e, xs, at: e.op(f"math.powf {xs[0]}, {xs[1]} : f32", "f")), "binary")


# -- element-wise unary -------------------------------------------------------------------

def _unary(name: str, ev: Callable, lax: str, flops: float, absexpr: Callable | None, gpu: Callable,
           real: Callable | None = None) -> None:
    _register(OpDef(name, 1, ALL, lambda s, a: tuple(s[0]), lambda ar, xs, at, nb: ev(ar, xs[0]), lax, flops,
                    absexpr=(lambda ex, xs, sh, at: absexpr(ex, xs[0])) if absexpr else None,
                    real=real, gpu=lambda e, xs, at: gpu(e, xs[0])), "unary")


def _gelu(x):
    from scipy.special import erf  # the exact erf form, as torch.nn.functional.gelu

    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _gpu_sigmoid(e, x, num=None):
    """num / (1 + exp(-x)), num = 1 unless given (silu: x)."""
    den = e.fbin("addf", e.f32(1.0), e.exp(e.op(f"arith.negf {x} : f32", "f")))
    return e.fbin("divf", num or e.f32(1.0), den)


def _gpu_erf(e, x):
    """erf by the Abramowitz-Stegun 7.1.26 polynomial (|error| < 1.5e-7): no libdevice."""
    a = e.op(f"math.absf {x} : f32", "f")
    t = e.fbin("divf", e.f32(1.0), e.fbin("addf", e.f32(1.0), e.fbin("mulf", a, e.f32(0.3275911))))
    coef = [1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592]
    p = e.f32(coef[0])
    for c in coef[1:]:
        p = e.fbin("addf", e.fbin("mulf", p, t), e.f32(c))
    p = e.fbin("mulf", p, t)
    nsq = e.op(f"arith.negf {e.fbin('mulf', a, a)} : f32", "f")
    r = e.fbin("subf", e.f32(1.0), e.fbin("mulf", p, e.exp(nsq)))
    return e.op(f"math.copysign {r}, {x} : f32", "f")


def _gpu_gelu(e, x):
    z = e.fbin("mulf", x, e.f32(0.7071067811865476))
    return e.fbin("mulf", e.fbin("mulf", x, e.f32(0.5)), e.fbin("addf", e.f32(1.0), _gpu_erf(e, z)))


_unary("exp", lambda ar, x: ar.exp(x), "exp", 4, lambda ex, x: ex.exp(x), lambda e, x: e.exp(x))
_unary("sqrt", lambda ar, x: ar.sqrt(x), "sqrt", 4, lambda ex, x: ex.sqrt(x),
       lambda e, x: e.op(f"math.sqrt {x} : f32", "f"))
_unary("rsqrt", lambda ar, x: ar.div(ar.const(1.0, ar.shape(x)), ar.sqrt(x)), "sqrt", 4,
       lambda ex, x: ex.div(ex.const(), ex.sqrt(x)),
       lambda e, x: e.fbin("divf", e.f32(1.0), e.op(f"math.sqrt {x} : f32", "f")))
_unary("square", lambda ar, x: ar.mul(x, x), "multilinear", 1.0, lambda ex, x: ex.mul(x, x),
       lambda e, x: e.fbin("mulf", x, x))
# not Lax: the float arithmetic evaluates `real`, the others model a random function
for _n, _real, _gpu in (("silu", lambda x: x / (1.0 + np.exp(-x)), lambda e, x: _gpu_sigmoid(e, x, x)),
                        ("gelu", _gelu, _gpu_gelu),
                        ("relu", lambda x: np.maximum(x, 0.0), lambda e, x: e.fbin("maximumf", x, e.f32(0.0))),
                        ("sigmoid", lambda x: 1.0 / (1.0 + np.exp(-x)), _gpu_sigmoid)):
    _unary(_n, lambda ar, x, n=_n: ar.unary(n, x), "nonlax", 8, lambda ex, x, n=_n: ex.fn(n, x), _gpu, _real)


def _attr_shape(*names):
    """Shape rule of a unary op with scalar attributes: the operand's shape, once every
    attribute is there (a mutation or a hand-built op without them is a shape error, not
    a KeyError at evaluation)."""
    def shape(s, attrs):
        missing = [n for n in names if n not in attrs]
        if missing:
            raise ShapeError(f"needs the attribute(s) {', '.join(missing)}")
        for n in names:
            v = attrs[n]
            if isinstance(v, bool) or not isinstance(v, Real):
                raise ShapeError(f"{n} must be a real number, got {v!r} ({type(v).__name__})")
            if not isfinite(float(v)):  # no inf/nan literal in MLIR's decimal float syntax
                raise ShapeError(f"{n} must be finite, got {v!r}")
        return tuple(s[0])
    return shape


# Mirage's clamp(A, min_val, max_val): min(max(x, min_val), max_val), torch.clamp's
# semantics (min_val > max_val gives max_val everywhere). Not Lax: a random function of
# its argument (keyed by the bounds) in the finite-field verifier, a named function in the
# search's abstract expressions (as silu), so it stays inside subprograms (SDPA's safe softmax).
_register(OpDef("clamp", 1, ALL, _attr_shape("min_val", "max_val"),
                lambda ar, xs, at, nb: ar.clamp(xs[0], at["min_val"], at["max_val"]), "nonlax", 2,
                ("min_val", "max_val"),  # NaN stays NaN, as in torch.clamp
                absexpr=lambda ex, xs, sh, at: ex.fn("clamp", xs[0]),  # (the bounds: the verifier checks them)
                gpu=lambda e, xs, at: e.fbin("minimumf", e.fbin("maximumf", xs[0], e.f32(at["min_val"])),
                                             e.f32(at["max_val"]))), "unary")
# Mirage's TBGraph.mul_scalar(A, scalar): x * scalar (linear: exact in the field when the
# scalar is a rational the field represents, else a keyed random element, like constants)
_register(OpDef("mul_scalar", 1, ALL, _attr_shape("scalar"),
                lambda ar, xs, at, nb: ar.mul(xs[0], ar.const(at["scalar"], (1,) * len(ar.shape(xs[0])))),
                "linear", 1, ("scalar",), gpu=lambda e, xs, at: e.fbin("mulf", xs[0], e.f32(at["scalar"]))), "unary")


def _const_shape(s, attrs):
    return tuple(attrs["shape"])


_register(OpDef("constant", 0, ALL, _const_shape,
                lambda ar, xs, at, nb: ar.const(at["value"], (1,) * nb + tuple(at["shape"])),
                "linear", 0.0, ("value", "shape"), lambda ex, xs, sh, at: ex.const(),
                gpu=lambda e, xs, at: e.f32(at["value"])), "constant")


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


def _take(ar, x, axis: int, idx):
    return ar.apply(lambda a: np.take(a, list(idx), axis=axis), x)


def _cat(ar, xs, axis: int):
    return ar.apply(lambda *a: np.concatenate(a, axis=axis), *xs)


def running_max(ar, m, axis: int):
    """Prefix maxima of `m` along `axis`, one step at a time through `ar.max`, so any
    arithmetic's max applies (the finite-field one is a random total order)."""
    n = ar.shape(m)[axis]
    cur = _take(ar, m, axis, [0])
    parts = [cur]
    for k in range(1, n):
        cur = ar.max(_cat(ar, [cur, _take(ar, m, axis, [k])], axis), axis)
        parts.append(cur)
    return parts[0] if n == 1 else _cat(ar, parts, axis)


def _reduction_max_eval(ar, xs, attrs, nb):
    """Mirage's TBGraph.reduction_max(A, dim) -> (max, diff), as its generated kernel
    computes them: the max is a running maximum over the for-loop iterations so far (the
    block's max of A along `dim` at this iteration and every earlier one), and diff is
    the previous running max minus the new one (<= 0), 0 at the first iteration. Mirage's
    kernel starts from the lowest float, so its first diff is 0 or a huge negative number;
    either way exp(diff) multiplies an accumulator that is still 0 (forloop_accum_rescale).
    Outside the loop (one iteration, or after an accumulator) this is the plain max and
    diff is 0. The iteration axis is the last batch axis (nb - 1)."""
    x = xs[0]
    d = _norm_dim(attrs["dim"], len(ar.shape(x)) - nb)
    m = ar.max(x, nb + d)
    if nb:
        m = running_max(ar, m, nb - 1)
        n = ar.shape(m)[nb - 1]
        prev = _take(ar, m, nb - 1, [0] + list(range(n - 1)))  # iteration 0 compares with itself: diff 0
    else:
        prev = m
    return m, ar.sub(prev, m)


_register(OpDef("reduction_max", 1, frozenset({"tb"}), _reduce_shape, _reduction_max_eval, "nonlax",
                attrs=("dim",), results=2), "reduction")


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


# -- for-loop accumulators (tb level) ------------------------------------------------------

RESCALE_ACCUMULATORS = ("none", "sum")


def _rescale_shape(s, attrs):
    kind = attrs.get("acc", "none")
    if kind not in RESCALE_ACCUMULATORS:
        raise ShapeError(f"rescale accumulator '{kind}' is not one of {', '.join(RESCALE_ACCUMULATORS)}")
    a, r = s
    out = tuple(a) if kind == "none" else tuple(a[:-1]) + (1,)
    try:
        bc = broadcast_shapes(out, r)
    except ShapeError:
        bc = None
    if bc != out:
        raise ShapeError(f"the rescale factor {list(r)} must broadcast to the accumulator's shape {list(out)}")
    return out


def _rescale_eval(ar, xs, attrs, nb):
    """acc(-1) = 0, acc(k) = acc(k-1) * rescale(k) + x(k) over the iterations k on the last
    batch axis (nb - 1; the caller repeats loop-invariant operands along it); `sum` first
    sums x's last dim. With rescale = exp(diff) of `reduction_max` this is the online
    softmax: every term ends up scaled by exp(its max - the final max)."""
    x, r = _pad(ar, xs, nb)
    if attrs.get("acc", "none") == "sum":
        x = ar.sum(x, len(ar.shape(x)) - 1)
    axis = nb - 1
    acc = _take(ar, x, axis, [0])
    for k in range(1, ar.shape(x)[axis]):
        acc = ar.add(ar.mul(acc, _take(ar, r, axis, [k]) if ar.shape(r)[axis] > 1 else r),
                     _take(ar, x, axis, [k]))
    return acc


# Mirage's TBGraph.forloop_accum_rescale(A, rescale, acc): a for-loop accumulator (ops after
# it run once, after the loop) that rescales what it holds every iteration.
_register(OpDef("forloop_accum_rescale", 2, frozenset({"tb"}), _rescale_shape, _rescale_eval, "multilinear",
                attrs=("acc",)), "accumulator")


def is_accumulator(kind: str) -> bool:
    """Whether ops of this kind are for-loop accumulators (their result is final after the loop)."""
    return kind == "forloop_accum" or (kind in OPS and OPS[kind].category == "accumulator")


# `tb.forloop_accum <kind>` (not in OPS: the interpreter applies them).

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
