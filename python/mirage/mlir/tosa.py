"""Conversion of TOSA functions into `kn` kernel graphs (`convert-tosa-to-kn`).

Input: a parsed `mlir.ir.Module` of `func.func`s over TOSA ops, as torch-mlir's FX
importer prints them (`output_type="tosa"`) or as written elsewhere. Output: per
function, one `KNGraph` when every op is expressible, otherwise a list of segments —
runs of `kn` ops (each a `KNGraph`) and the TOSA ops that stay as they are (reported,
with their location and the reason).

The conversion works in three steps:

1. each TOSA op becomes one or more nodes of a small DAG (`Node`); an op we cannot
   express becomes an *opaque* node that keeps the MLIR op;
2. exact rewrites apply while nodes are created (their operands exist already):
   `x * sigmoid(x)` -> `silu(x)`; `x * (0.5 * (1 + erf(x * 1/sqrt(2))))` -> `gelu(x)`;
   `a * reciprocal(b)` -> `a / b`; the rank-3 reshapes TOSA puts around a 2-D matmul are
   folded; `x * 1` and `x + 0` are dropped; reshape chains collapse;
3. nodes no output needs are dropped (the `erf` of a recognised gelu, say) and the
   rest are cut into segments: maximal runs of `kn` nodes in program order.

Every rewrite computes the same real-number function as the TOSA it replaces
(`a * (1/b)` and `a / b` differ only in rounding); nothing is dropped that an output
depends on. Element types: `f16`, `bf16`, `f32` (what `kn` has); any other element type
makes the op opaque.

Translation table (TOSA -> kn):

| TOSA | kn |
|---|---|
| add, sub, mul (shift 0) | add, sub, mul |
| reciprocal | div(constant 1, x) |
| pow x, c (splat c) | c = 2: square; 0.5: sqrt; -0.5: rsqrt; 1: x; -1: 1/x; other small integers: products |
| rsqrt, exp, sigmoid | rsqrt, exp, sigmoid |
| tanh | 2 * sigmoid(2x) - 1 |
| erf (inside the gelu pattern) | gelu |
| clamp [0, +inf), maximum(x, 0) | relu |
| clamp [lo, hi], both finite | clamp |
| negate | mul(x, constant -1) |
| matmul (zero points 0) | matmul |
| reduce_sum, reduce_max | reduction, reduce_max |
| reshape, transpose, tile, concat | reshape, transpose, repeat, concat |
| slice | matmul by a 0/1 selection matrix (a constant kernel input; the sliced dim moved last) |
| const (splat) | constant |
| const (not splat) | stays TOSA (a kernel input in the Python import) |
| cast to the same type, identity | nothing |
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..core import ops as O
from ..core.dtypes import dtype as Dtype
from ..core.graph import GraphError, KNGraph
from ..core.mlir_text import print_function, tensor_type

FLOAT_TYPES = {"f16", "bf16", "f32"}


class ConversionError(ValueError):
    """The input is not a TOSA program this conversion can read (not an unsupported op:
    those become opaque segments)."""


@dataclass(eq=False)
class Node:
    kind: str  # "arg", an ops.py op name, "opaque", "meta"
    ins: list = field(default_factory=list)
    attrs: dict = field(default_factory=dict)
    shape: tuple = ()
    dtype: str = "f32"
    op: object = None  # the MLIR op (opaque nodes; source of kn nodes, for reports)
    index: int = 0  # arg index / result index of an opaque op
    value: object = None  # meta: python value; lifted const: numpy array
    reason: str = ""  # opaque: why

    @property
    def is_kn(self) -> bool:
        return self.kind in O.OPS


@dataclass
class Unsupported:
    """A TOSA op left out of the kn program, with where it is and why."""

    op: str
    location: tuple
    reason: str

    def format(self) -> str:
        f, l, c = self.location
        where = f"{f}:{l}:{c}: " if l else ""
        return f"{where}{self.op}: {self.reason}"


@dataclass
class Segment:
    """A run of kn nodes (`graph` set) or one opaque TOSA op (`node` set)."""

    graph: KNGraph | None
    inputs: list  # Nodes read from outside (graph inputs in order)
    outputs: list  # Nodes defined here and used later (graph outputs in order)
    node: Node | None = None
    nodes: list = field(default_factory=list)


@dataclass
class FuncResult:
    name: str
    args: list  # arg Nodes
    results: list  # returned Nodes
    nodes: list  # live nodes in program order
    segments: list
    unsupported: list
    rewrites: list

    @property
    def fully_converted(self) -> bool:
        return all(s.graph is not None for s in self.segments) and len(self.segments) <= 1

    @property
    def graph(self) -> KNGraph:
        """The single KNGraph of a fully converted function."""
        if not self.fully_converted:
            raise ConversionError(f"@{self.name} is not fully expressible in kn: " +
                                  "; ".join(u.format() for u in self.unsupported))
        return self.segments[0].graph if self.segments else _passthrough_graph(self)


def _passthrough_graph(fr: FuncResult) -> KNGraph:
    raise ConversionError(f"@{fr.name} computes nothing (its results are its arguments)")


# -- reading TOSA ---------------------------------------------------------------------------

def _ir():
    import mlir.ir as ir  # noqa: imported lazily so `import mirage.frontend` stays light

    return ir


def _tensor_info(t) -> tuple[tuple, str] | None:
    ir = _ir()
    if not isinstance(t, ir.RankedTensorType):
        try:
            t = ir.RankedTensorType(t)
        except Exception:
            return None
    if not t.has_static_shape:
        return None
    return tuple(t.shape), str(t.element_type)


def _splat(n: Node) -> float | None:
    """The scalar of a splat constant node, else None."""
    if n.kind == "constant":
        return n.attrs["value"]
    return None


_ROUNDING = {"f16": 2.0 ** -11, "bf16": 2.0 ** -8}  # half an ulp, relative: a constant rounded to the type


def _is_const(n: Node, v: float, tol: float = 0.0) -> bool:
    s = _splat(n)
    return s is not None and abs(s - v) <= tol * max(1.0, abs(v))


class _Builder:
    """Turns the ops of one function into Nodes, applying the exact rewrites."""

    def __init__(self, func, lift_constants: bool = False):
        self.func = func
        self.lift_constants = lift_constants
        self.nodes: list[Node] = []
        self.vals: dict = {}
        self.rewrites: list[str] = []
        self._lifted: dict = {}

    # node creation ---------------------------------------------------------------------
    def add(self, n: Node) -> Node:
        self.nodes.append(n)
        return n

    def kn(self, kind: str, ins: Sequence[Node], src, **attrs) -> Node:
        """A kn node; its shape by the op table (raises GraphError on a bad shape)."""
        dts = {i.dtype for i in ins}
        dt = attrs.pop("_dtype", None) or (dts.pop() if len(dts) == 1 else None)
        if dt is None:
            raise GraphError("[dtype] operands mix element types")
        try:
            shape = O.OPS[kind].shape([i.shape for i in ins], attrs)
        except O.ShapeError as e:
            raise GraphError(f"[shape] {kind}: {e}") from None
        return self.add(Node(kind, list(ins), attrs, tuple(shape), dt, src))

    def const(self, value: float, shape, dt: str, src) -> Node:
        return self.add(Node("constant", [], {"value": float(value), "shape": tuple(shape)}, tuple(shape), dt, src))

    def lifted(self, value: np.ndarray, dt: str, src) -> Node:
        """A constant tensor that becomes a kernel input (equal values: one input)."""
        key = (value.shape, dt, value.tobytes())
        if key not in self._lifted:
            self._lifted[key] = self.add(Node("lifted", shape=value.shape, dtype=dt, op=src, value=value))
        return self._lifted[key]

    # rewrites applied at creation ------------------------------------------------------
    def mul(self, a: Node, b: Node, src) -> Node:
        for x, y in ((a, b), (b, a)):
            if _is_const(y, 1.0) and O.broadcast_shapes(x.shape, y.shape) == x.shape:
                self.rewrites.append("x * 1 -> x")
                return x
            if y.kind == "sigmoid" and y.ins[0] is x:
                self.rewrites.append("x * sigmoid(x) -> silu(x)")
                return self.kn("silu", [x], src)
            if y.kind == "div" and _is_const(y.ins[0], 1.0) and \
                    O.broadcast_shapes(x.shape, y.shape) == O.broadcast_shapes(x.shape, y.ins[1].shape):
                self.rewrites.append("a * reciprocal(b) -> a / b")
                return self.kn("div", [x, y.ins[1]], src)
            g = self._gelu_arg(y)
            if g is x:
                self.rewrites.append("x * 0.5 * (1 + erf(x / sqrt 2)) -> gelu(x)")
                return self.kn("gelu", [x], src)
        return self.kn("mul", [a, b], src)

    def _gelu_arg(self, n: Node) -> Node | None:
        """x if n = 0.5 * (1 + erf(x * 1/sqrt(2))) (operands in any order)."""
        if n.kind != "mul":
            return None
        for h, s in ((n.ins[0], n.ins[1]), (n.ins[1], n.ins[0])):
            if not _is_const(h, 0.5) or s.kind != "add" or h.shape != (1,) * len(h.shape):
                continue
            for e, one in ((s.ins[0], s.ins[1]), (s.ins[1], s.ins[0])):
                if not _is_const(one, 1.0) or e.kind != "opaque" or e.op is None or e.op.name != "tosa.erf":
                    continue
                arg = e.ins[0]
                if arg.kind != "mul":
                    continue
                for x, c in ((arg.ins[0], arg.ins[1]), (arg.ins[1], arg.ins[0])):
                    # 1/sqrt(2) rounded to c's type (f16: 0.70703125, half-precision GELU)
                    if _is_const(c, 1 / math.sqrt(2), _ROUNDING.get(c.dtype, 1e-6)) and c.shape == (1,) * len(c.shape):
                        return x
        return None

    def reshape(self, x: Node, shape, src) -> Node:
        shape = tuple(shape)
        while x.kind == "reshape":  # reshape chains collapse
            x = x.ins[0]
        if x.shape == shape:
            return x
        if x.kind == "matmul" and len(x.shape) == 3 and x.shape[0] == 1 and shape[-1:] == x.shape[-1:]:
            # TOSA's rank-3 matmul around a 2-D product: [1,M,K] x [1,K,N] -> [1,M,N] -> S
            a, b = x.ins
            (_, m, k), n = a.shape, b.shape[-1]
            self.rewrites.append("reshape(matmul(reshape a, reshape b)) -> matmul(a, b)")
            # reshapes of the operands collapse into theirs (none is left for nn.Linear's)
            mm = self.kn("matmul", [self.reshape(a, (m, k), src), self.reshape(b, (k, n), src)], src)
            return mm if shape == (m, n) else self.kn("reshape", [mm], src, shape=shape)
        return self.kn("reshape", [x], src, shape=shape)

    # the op table ----------------------------------------------------------------------
    def opaque(self, op, reason: str) -> list[Node]:
        outs = []
        for k, r in enumerate(op.results):
            info = _tensor_info(r.type)
            shape, dt = info if info else ((), str(r.type))
            outs.append(self.add(Node("opaque", [self.vals.get(_key(v)) for v in op.operands], {}, shape, dt,
                                      op, k, reason=reason)))
        return outs

    def convert(self, op) -> list[Node]:
        name = op.name
        res_info = [_tensor_info(r.type) for r in op.results]
        ins = [self.vals.get(_key(v)) for v in op.operands]
        if name == "tosa.const_shape":
            return [self.add(Node("meta", value=_int_list(op.attributes["values"])))]
        if name == "tosa.const":
            return [self._const(op, res_info[0])]
        if len(res_info) != 1 or res_info[0] is None:
            return self.opaque(op, "results are not statically shaped tensors")
        shape, dt = res_info[0]
        if dt not in FLOAT_TYPES:
            return self.opaque(op, f"element type {dt} (kn has f16, bf16, f32)")
        h = getattr(self, "_" + name.replace("tosa.", ""), None) if name.startswith("tosa.") else None
        if h is None:
            return self.opaque(op, "no kn equivalent")
        if name not in ("tosa.reshape", "tosa.cast") and any(
                _is_accumulator(v, n) for v, n in zip(op.operands, ins)):
            return self.opaque(op, "reads the float32 accumulator of a half-precision matmul")
        try:
            out = h(op, ins, shape, dt)
        except GraphError as e:
            return self.opaque(op, f"cannot build the kn op: {e}")
        if isinstance(out, str):
            return self.opaque(op, out)
        if out.shape != shape:
            return self.opaque(op, f"kn shape {list(out.shape)} differs from the TOSA result {list(shape)}")
        return [out]

    def _const(self, op, info) -> Node:
        ir = _ir()
        attr = op.attributes["values"]
        if info is None:
            return self.add(Node("meta", value=None))
        shape, dt = info
        if not isinstance(attr, ir.DenseElementsAttr):
            return self.opaque(op, "constant stored as a resource blob")[0]
        if dt not in FLOAT_TYPES:
            return self.add(Node("meta", value=np.array(attr) if not attr.is_splat else None,
                                 shape=shape, dtype=dt, op=op))
        if attr.is_splat:
            v = float(ir.FloatAttr(attr.get_splat_value()).value)
            return self.const(v, shape, dt, op)
        if self.lift_constants:
            return self.add(Node("lifted", shape=shape, dtype=dt, op=op, value=np.array(attr).astype(np.float64)))
        n = self.opaque(op, "tensor constant that is not a splat (kn.constant fills one scalar)")[0]
        n.value = np.array(attr).astype(np.float64)
        return n

    def _f(self, ins):
        for i in ins:
            if i is None or not (i.is_kn or i.kind in ("arg", "opaque", "lifted")):
                raise GraphError("[dtype] operand is not a float tensor")
        return ins

    def _add(self, op, ins, shape, dt):
        a, b = self._f(ins)
        for x, y in ((a, b), (b, a)):
            if _is_const(y, 0.0) and O.broadcast_shapes(x.shape, y.shape) == x.shape:
                self.rewrites.append("x + 0 -> x")
                return x
        return self.kn("add", [a, b], op)

    def _sub(self, op, ins, shape, dt):
        return self.kn("sub", self._f(ins), op)

    def _mul(self, op, ins, shape, dt):
        a, b = self._f(ins[:2])
        if len(ins) > 2 and ins[2] is not None and ins[2].kind == "meta" and ins[2].value is not None \
                and np.any(np.asarray(ins[2].value) != 0):
            return "nonzero shift"
        return self.mul(a, b, op)

    def _reciprocal(self, op, ins, shape, dt):
        (x,) = self._f(ins)
        return self.kn("div", [self.const(1.0, (1,) * len(shape), dt, op), x], op)

    def _pow(self, op, ins, shape, dt):
        x, e = self._f(ins)
        c = _splat(e)
        if c is None:
            return "exponent is not a constant"
        if e.shape != (1,) * len(e.shape) and O.broadcast_shapes(x.shape, e.shape) != x.shape:
            return "exponent broadcasts the base"
        if c == 2.0:
            return self.kn("square", [x], op)
        if c == 0.5:
            return self.kn("sqrt", [x], op)
        if c == -0.5:
            return self.kn("rsqrt", [x], op)
        if c == 1.0:
            return x
        if c == float(int(c)) and 1 <= abs(c) <= 8:
            n, acc = int(abs(c)), None
            p = x
            while n:  # binary powering: every product is exact in real arithmetic
                if n & 1:
                    acc = p if acc is None else self.kn("mul", [acc, p], op)
                n >>= 1
                if n:
                    p = self.kn("square", [p], op)
            if c < 0:
                acc = self.kn("div", [self.const(1.0, (1,) * len(shape), dt, op), acc], op)
            return acc
        return f"exponent {c} is not one of 2, 0.5, -0.5 or a small integer"

    def _unary(kind):
        def h(self, op, ins, shape, dt):
            return self.kn(kind, self._f(ins), op)

        return h

    _rsqrt = _unary("rsqrt")
    _exp = _unary("exp")
    _sigmoid = _unary("sigmoid")

    def _tanh(self, op, ins, shape, dt):
        (x,) = self._f(ins)
        one = (1,) * len(shape)
        s = self.kn("sigmoid", [self.kn("mul", [x, self.const(2.0, one, dt, op)], op)], op)
        self.rewrites.append("tanh(x) -> 2 * sigmoid(2x) - 1")
        return self.kn("sub", [self.kn("mul", [s, self.const(2.0, one, dt, op)], op), self.const(1.0, one, dt, op)], op)

    def _negate(self, op, ins, shape, dt):
        x = self._f(ins[:1])[0]
        for z in ins[1:]:
            if z is None or (z.kind == "constant" and z.attrs["value"] != 0.0):
                return "nonzero zero point"
        return self.kn("mul", [x, self.const(-1.0, (1,) * len(shape), dt, op)], op)

    def _clamp(self, op, ins, shape, dt):
        (x,) = self._f(ins[:1])
        lo = _float_attr(op, "min_val")
        hi = _float_attr(op, "max_val")
        if lo == 0.0 and hi is not None and hi >= 3.0e38:
            return self.kn("relu", [x], op)
        if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
            return self.kn("clamp", [x], op, min_val=lo, max_val=hi)
        return f"clamp to [{lo}, {hi}] (kn's clamp takes finite bounds; [0, +inf) is relu)"

    def _maximum(self, op, ins, shape, dt):
        a, b = self._f(ins)
        for x, y in ((a, b), (b, a)):
            if _is_const(y, 0.0) and O.broadcast_shapes(x.shape, y.shape) == x.shape:
                return self.kn("relu", [x], op)
        return "maximum of two tensors (only maximum(x, 0), i.e. relu, is expressible)"

    def _matmul(self, op, ins, shape, dt):
        a, b = self._f(ins[:2])
        for z in ins[2:]:
            if z is None or z.kind != "constant" or z.attrs["value"] != 0.0:
                return "nonzero zero point"
        # a half matmul whose TOSA result is f32 (torch-mlir accumulates at f32, then casts
        # back): the kn node is the half matmul, its TOSA value an accumulator (`_is_accumulator`)
        return self._grouped_matmul(a, b, op) or self.kn("matmul", [a, b], op)

    def _grouped_matmul(self, a: Node, b: Node, src) -> Node | None:
        """Grouped-query attention without the KV copies. `repeat_kv` (transformers)
        repeats each of `kv` heads `r` times; the batched matmul then multiplies query head
        `g*r + j` by copy j of KV head g. With `b` = reshape([transpose](reshape(repeat(X))))
        of that form (X: [n, kv, 1, s, d], repeats (1, 1, r, 1, 1), batch n*kv*r), the
        same product is `a` regrouped as [n, kv, r*L, k] times X as [n, kv, s, d] (transposed
        when `b` was), reshaped back: no repeat, each KV head read once."""
        if b.kind != "reshape" or len(b.shape) != 3 or len(a.shape) != 3:
            return None
        x, swap = b.ins[0], False
        if x.kind == "transpose" and tuple(x.attrs["permutation"]) == (0, 1, 3, 2):
            x, swap = x.ins[0], True
        if x.kind == "reshape" and len(x.shape) == 4:
            x = x.ins[0]
        if x.kind != "repeat" or len(x.shape) != 5:
            return None
        src, reps = x.ins[0], tuple(x.attrs["repeats"])
        n, kv, one, s_, d = src.shape
        r = reps[2]
        if one != 1 or reps != (1, 1, r, 1, 1) or b.shape != (n * kv * r,) + ((d, s_) if swap else (s_, d)):
            return None
        ell, k = a.shape[1], a.shape[2]
        # batch dims (n, kv) kept apart: X is then the KV cache as it is (no reshape of it)
        kvs = self.reshape(src, (n, kv, s_, d), src)
        if swap:
            kvs = self.kn("transpose", [kvs], src, permutation=(0, 1, 3, 2))
        prod = self.kn("matmul", [self.reshape(a, (n, kv, r * ell, k), src), kvs], src)
        self.rewrites.append("matmul by repeat_kv's copies -> grouped matmul (each KV head read once)")
        return self.reshape(prod, (n * kv * r, ell, prod.shape[-1]), src)

    def _reduce(kind):
        def h(self, op, ins, shape, dt):
            (x,) = self._f(ins)
            return self.kn(kind, [x], op, dim=int(_ir().IntegerAttr(op.attributes["axis"]).value))

        return h

    _reduce_sum = _reduce("reduction")
    _reduce_max = _reduce("reduce_max")

    def _reshape(self, op, ins, shape, dt):
        return self.reshape(self._f(ins[:1])[0], shape, op)

    def _transpose(self, op, ins, shape, dt):
        (x,) = self._f(ins)
        perm = tuple(int(p) for p in _ir().DenseI32ArrayAttr(op.attributes["perms"]))
        if perm == tuple(range(len(perm))):
            return x
        return self.kn("transpose", [x], op, permutation=perm)

    def _tile(self, op, ins, shape, dt):
        x = self._f(ins[:1])[0]
        reps = tuple(o // i for o, i in zip(shape, x.shape))
        if all(r == 1 for r in reps):
            return x
        return self.kn("repeat", [x], op, repeats=reps)

    def _slice(self, op, ins, shape, dt):
        """kn has no slice: a slice of dim d is a product with a 0/1 selection matrix S
        (S[start + j, j] = 1), lifted as a constant kernel input; dim d is moved last and
        the other dims flattened around the 2-D matmul. Exact: each output sums one
        product by 1 and zeros."""
        if not self.lift_constants:
            return "slice (kn has none; the PyTorch import lifts a selection matrix as a kernel input)"
        x = self._f(ins[:1])[0]
        start, size = (n.value if n is not None and n.kind == "meta" else None for n in ins[1:3])
        if start is None or size is None:
            return "slice bounds are not constants"
        for d, (a, m) in enumerate(zip(start, size)):
            n = x.shape[d]
            if m == n:
                continue
            rank = len(x.shape)
            perm = tuple(range(d)) + tuple(range(d + 1, rank)) + (d,)
            t = x if d == rank - 1 else self.kn("transpose", [x], op, permutation=perm)
            rows = int(np.prod(t.shape[:-1]))
            sel = np.zeros((n, m))
            sel[np.arange(a, a + m), np.arange(m)] = 1.0
            y = self.kn("matmul", [self.reshape(t, (rows, n), op), self.lifted(sel, dt, op)], op)
            y = self.reshape(y, t.shape[:-1] + (m,), op)
            back = tuple(perm.index(k) for k in range(rank))
            x = y if d == rank - 1 else self.kn("transpose", [y], op, permutation=back)
            self.rewrites.append("slice -> matmul by a 0/1 selection matrix")
        return x

    def _selection(self, x: Node):
        """(rows, S, sign) when x = sign * reshape(rows @ S) with S a lifted constant
        (a slice of the last dim, see `_slice`, possibly negated), else None."""
        sign = 1.0
        if x.kind == "mul" and _is_const(x.ins[1], -1.0):
            sign, x = -1.0, x.ins[0]
        if x.kind == "reshape":
            x = x.ins[0]
        if x.kind != "matmul" or x.ins[1].kind != "lifted" or len(x.shape) != 2:
            return None
        return x.ins[0], x.ins[1].value, sign

    def _concat(self, op, ins, shape, dt):
        xs = self._f(ins)
        axis = int(_ir().IntegerAttr(op.attributes["axis"]).value)
        if axis in (-1, len(shape) - 1):
            # slices of one tensor's last dim, some negated, concatenated along it (RoPE's
            # rotate_half: cat(-x2, x1)): one product by the concatenated signed selections
            sel = [self._selection(x) for x in xs]
            if all(sel) and all(_same_value(t[0], sel[0][0]) for t in sel):
                mat = np.concatenate([sg * m for _, m, sg in sel], axis=1)
                self.rewrites.append("concatenated slices of one tensor -> one matmul by a signed selection matrix")
                y = self.kn("matmul", [sel[0][0], self.lifted(mat, dt, op)], op)
                return self.reshape(y, shape, op)
        acc = xs[0]
        for x in xs[1:]:
            acc = self.kn("concat", [acc, x], op, dim=axis)
        return acc

    def _cast(self, op, ins, shape, dt):
        (x,) = self._f(ins)
        if x.dtype == dt and _is_accumulator(op.operands[0], x):
            self.rewrites.append("cast(half matmul accumulated at f32) -> half matmul")
        if x.dtype != dt:
            return f"changes the element type {x.dtype} -> {dt} (kn has no cast)"
        return x

    def _identity(self, op, ins, shape, dt):
        return self._f(ins)[0]


def _same_value(a: Node, b: Node) -> bool:
    """a and b are the same node, or reshapes of one node to one shape."""
    return a is b or (a.kind == b.kind == "reshape" and a.ins[0] is b.ins[0] and a.shape == b.shape)


def _is_accumulator(value, node) -> bool:
    """Whether TOSA `value` is the f32 accumulator of a half matmul that `node` (its kn
    node, of the half type) stands for: the types differ."""
    info = _tensor_info(value.type)
    return node is not None and node.is_kn and info is not None and info[1] != node.dtype


def _float_attr(op, name):
    ir = _ir()
    if name not in op.attributes:
        return None
    a = op.attributes[name]
    try:
        return float(ir.FloatAttr(a).value)
    except Exception:
        return None


def _int_list(attr):
    ir = _ir()
    try:
        a = ir.DenseIntElementsAttr(attr)
        return [int(a[i]) for i in range(len(a))]
    except Exception:
        return None


def _key(v):
    """A hashable identity for an mlir Value."""
    return v


def _func_ops(func):
    return list(func.regions[0].blocks[0].operations)


def convert_function(func, lift_constants: bool = False) -> FuncResult:
    """Convert one `func.func` (an OpView or Operation) of TOSA ops. With
    `lift_constants`, tensor constants that are not splats become extra kernel inputs
    (nodes of kind "lifted" carrying the value) instead of staying TOSA."""
    ir = _ir()
    op = func.operation
    name = ir.StringAttr(op.attributes["sym_name"]).value
    if len(op.regions[0].blocks) != 1:
        raise ConversionError(f"@{name}: expected a function with one block")
    b = _Builder(func, lift_constants)
    block = op.regions[0].blocks[0]
    args = []
    for k, a in enumerate(block.arguments):
        info = _tensor_info(a.type)
        if info is None:
            raise ConversionError(f"@{name}: argument {k} has type {a.type}; only static tensors are supported")
        n = Node("arg", shape=info[0], dtype=info[1], index=k)
        args.append(n)
        b.vals[a] = n
    results = None
    for o in _func_ops(func):
        o = o.operation
        if o.name == "func.return":
            results = [b.vals[v] for v in o.operands]
            break
        if len(o.regions):
            raise ConversionError(f"@{name}: op {o.name} has regions; only straight-line TOSA is supported")
        outs = b.convert(o)
        for r, n in zip(o.results, outs):
            b.vals[r] = n
    if results is None:
        raise ConversionError(f"@{name}: no func.return")
    if any(_is_accumulator(v, n) for v, n in zip(o.operands, results)):
        raise ConversionError(f"@{name}: returns the float32 accumulator of a half-precision matmul")
    live = _live(b.nodes, results)
    nodes = [n for n in b.nodes if id(n) in live]
    unsupported = [Unsupported(n.op.name, _loc(n.op), n.reason) for n in nodes
                   if n.kind == "opaque" and n.index == 0]
    segs = _segments(name, nodes, args, results)
    return FuncResult(name, args, results, nodes, segs, unsupported, b.rewrites)


def _loc(op):
    from .diagnostics import location_of

    return location_of(op)


def _live(nodes, results) -> set:
    live, stack = set(), list(results)
    while stack:
        n = stack.pop()
        if id(n) in live:
            continue
        live.add(id(n))
        stack += [i for i in n.ins if i is not None]
        if n.kind == "opaque":  # an opaque op's other results share its op: keep them together
            stack += [m for m in nodes if m.kind == "opaque" and m.op is n.op and id(m) not in live]
    return live


def _schedule(nodes: list[Node]) -> list[Node]:
    """A topological order that keeps kn nodes together: opaque ops without tensor
    operands (constants) first, then kn nodes whenever one is ready, then the other
    opaque ops; ties in program order. Splat constants are left out (each kn run
    re-creates the ones it uses)."""
    pos = {id(n): k for k, n in enumerate(nodes)}
    deps = {id(n): {id(i) for i in n.ins if i is not None and id(i) in pos and i.kind != "constant"}
            for n in nodes}
    users: dict[int, list] = {}
    for n in nodes:
        for d in deps[id(n)]:
            users.setdefault(d, []).append(n)
    # an opaque op's results are scheduled together: make later results depend on the first
    first: dict = {}
    for n in nodes:
        if n.kind == "opaque":
            f = first.setdefault(id(n.op), n)
            if f is not n:
                deps[id(n)].add(id(f))
                users.setdefault(id(f), []).append(n)
    left = {k: len(v) for k, v in deps.items()}

    def cls(n):
        if n.kind == "opaque" and not any(i is not None and i.kind not in ("meta",) for i in n.ins):
            return 0
        return 1 if n.kind != "opaque" else 2

    import heapq

    ready = [(cls(n), pos[id(n)], id(n)) for n in nodes if left[id(n)] == 0]
    heapq.heapify(ready)
    byid = {id(n): n for n in nodes}
    out = []
    while ready:
        _, _, i = heapq.heappop(ready)
        n = byid[i]
        out.append(n)
        for u in users.get(i, []):
            left[id(u)] -= 1
            if left[id(u)] == 0:
                heapq.heappush(ready, (cls(u), pos[id(u)], id(u)))
    return [n for n in out if n.kind != "constant"]


def _segments(name, nodes, args, results) -> list[Segment]:
    """Cut the live nodes into maximal runs of kn nodes and single opaque ops."""
    runs: list[list[Node]] = []
    cur: list[Node] = []
    for n in _schedule(nodes):
        if n.kind in ("meta", "arg", "lifted"):
            continue
        if n.is_kn:
            cur.append(n)
            continue
        if cur:
            runs.append(cur)
            cur = []
        if n.index == 0:
            runs.append([n])
        else:
            runs[-1].append(n)
    if cur:
        runs.append(cur)
    users_after: dict[int, int] = {}  # node id -> index of the last run using it (len = return)
    for k, run in enumerate(runs):
        for n in run:
            for i in n.ins:
                if i is not None:
                    users_after[id(i)] = max(users_after.get(id(i), -1), k)
    for r in results:
        users_after[id(r)] = len(runs)
    segs = []
    for k, run in enumerate(runs):
        inside = {id(n) for n in run}
        if run[0].kind == "opaque":
            segs.append(Segment(None, [i for i in run[0].ins], list(run), run[0], list(run)))
            continue
        ins, consts, alias = [], [], {}
        for n in run:
            for i in n.ins:
                if i.kind == "constant":
                    if id(i) not in inside:
                        inside.add(id(i))
                        consts.append(i)
                        key = (i.attrs["value"], i.shape, i.dtype)
                        alias.setdefault(key, i)  # equal constants are emitted once
                elif id(i) not in inside and all(i is not j for j in ins):
                    ins.append(i)
        outs = [n for n in run if users_after.get(id(n), -1) > k]
        whole = len(runs) == 1
        if whole:  # the function itself: its arguments (then lifted constants) and results, in order
            ins, outs = list(args) + [i for i in ins if i.kind == "lifted"], list(results)
            for r in results:
                if r.kind == "constant" and id(r) not in inside:
                    inside.add(id(r))
                    consts.append(r)
                    alias.setdefault((r.attrs["value"], r.shape, r.dtype), r)
        run = consts + run
        g = KNGraph(name if len(runs) == 1 else f"{name}_kn{k}")
        env = {}
        for i in ins:
            env[id(i)] = g.new_input(i.shape, dtype=Dtype.parse(i.dtype))
        for n in consts:
            first = alias[(n.attrs["value"], n.shape, n.dtype)]
            env[id(n)] = env[id(first)] if first is not n else _emit(g, n, [])
        for n in run[len(consts):]:
            env[id(n)] = _emit(g, n, [env[id(i)] for i in n.ins])
        for o in outs:
            g.mark_output(env[id(o)] if id(o) in env else env[id(alias[(o.attrs["value"], o.shape, o.dtype)])])
        segs.append(Segment(g, ins, outs, None, list(run)))
    return segs


def _emit(g: KNGraph, n: Node, xs):
    if n.kind == "constant":
        return g.constant(n.attrs["value"], n.attrs["shape"], Dtype.parse(n.dtype))
    t = g._op(n.kind, xs, **n.attrs)
    if t.shape != n.shape:  # the op table is the one used to build the node: cannot differ
        raise GraphError(f"[shape] internal: {n.kind} gave {t.shape}, expected {n.shape}")
    return t


def convert_module(module) -> list[FuncResult]:
    """Convert every `func.func` of a parsed `mlir.ir.Module` (or its operation)."""
    body = module.body if hasattr(module, "body") else module.regions[0].blocks[0]
    out = []
    for op in body.operations:
        if op.operation.name == "func.func":
            out.append(convert_function(op))
    return out


def parse_tosa(text: str, context=None):
    """Parse TOSA text (e.g. torch-mlir's output) with the `mlir` bindings."""
    ir = _ir()
    ctx = context or ir.Context()
    return ir.Module.parse(text, ctx)


# -- printing the converted module ----------------------------------------------------------

def _generic(op, names: dict, out_names: list[str]) -> str:
    """An opaque TOSA op in generic form over our SSA names."""
    operands = ", ".join(names[v] for v in op.operands)
    attrs = ", ".join(f"{k} = {op.attributes[k]}" for k in op.attributes)
    ins_t = ", ".join(str(v.type) for v in op.operands)
    outs_t = ", ".join(str(r.type) for r in op.results)
    res = ""
    if out_names:
        res = (out_names[0] if len(out_names) == 1 else out_names[0].split("#")[0] + f":{len(out_names)}") + " = "
    return f'{res}"{op.name}"({operands})' + (f" {{{attrs}}}" if attrs else "") + f" : ({ins_t}) -> ({outs_t})"


def print_converted(fr: FuncResult, arg_types: Sequence[str], result_types: Sequence[str]) -> str:
    """MLIR text for one converted function: the function itself holds kn ops when it
    is fully converted; otherwise each kn run is outlined as `@<name>_kn<k>` and the
    function calls them in order, the unsupported TOSA ops between the calls."""
    if len(fr.segments) == 1 and fr.segments[0].graph is not None:
        return "\n".join(print_function(fr.segments[0].graph))
    # general form: the function keeps its signature
    lines = []
    for s in fr.segments:
        if s.graph is not None:
            lines += print_function(s.graph)
    names: dict = {}
    body = []
    for k, a in enumerate(fr.args):
        names[id(a)] = f"%arg{k}"
    count = 0
    for s in fr.segments:
        if s.graph is not None:
            base = f"%{count}"
            count += 1
            outs = [f"{base}#{j}" for j in range(len(s.outputs))] if len(s.outputs) > 1 else [base]
            for o, nm in zip(s.outputs, outs):
                names[id(o)] = nm
            ins = ", ".join(names[id(i)] for i in s.inputs)
            it = ", ".join(tensor_type(t) for t in s.graph.inputs)
            ot = ", ".join(tensor_type(t) for t in s.graph.outputs)
            res = f"{base}:{len(s.outputs)}" if len(s.outputs) > 1 else base
            body.append(f"{res} = func.call @{s.graph.name}({ins}) : ({it}) -> ({ot})" if s.outputs else
                        f"func.call @{s.graph.name}({ins}) : ({it}) -> ()")
        else:
            op = s.node.op
            base = f"%{count}"
            count += 1
            outs = [f"{base}#{j}" for j in range(len(op.results))] if len(op.results) > 1 else [base]
            for n in s.nodes:
                names[id(n)] = outs[n.index]
            vmap = {}
            for v, n in zip(op.operands, s.node.ins):
                vmap[v] = names[id(n)] if n is not None and id(n) in names else None
            missing = [v for v, nm in vmap.items() if nm is None]
            if missing:  # an operand that is not a tensor we track (a shape, a zero point)
                for v in missing:
                    d = v.owner
                    nm = f"%c{count}"
                    count += 1
                    body.append(_generic(d, {}, [nm]) if hasattr(d, "operands") else "")
                    vmap[v] = nm
            body.append(_generic(op, vmap, outs))
    ret = ", ".join(names[id(r)] for r in fr.results)
    sig = ", ".join(f"%arg{k}: {t}" for k, t in enumerate(arg_types))
    rt = ", ".join(result_types)
    lines.append(f"  func.func @{fr.name}({sig}) -> ({rt}) {{")
    lines += ["    " + l for l in body]
    lines.append(f"    return {ret} : {rt}")
    lines.append("  }")
    return "\n".join(lines)


def to_kn_text(module) -> tuple[str, list[FuncResult]]:
    """The whole module converted, as MLIR text, and the per-function results."""
    ir = _ir()
    body = module.body if hasattr(module, "body") else module.regions[0].blocks[0]
    chunks, results = [], []
    for op in body.operations:
        if op.operation.name != "func.func":
            chunks.append("  " + str(op))
            continue
        fr = convert_function(op)
        results.append(fr)
        ft = ir.FunctionType(ir.TypeAttr(op.operation.attributes["function_type"]).value)
        chunks.append(print_converted(fr, [str(t) for t in ft.inputs], [str(t) for t in ft.results]))
    return "module {\n" + "\n".join(chunks) + "\n}\n", results
