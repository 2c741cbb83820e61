"""The compact Python model of μGraphs and the Mirage-compatible builder API.

A `KNGraph` (kernel graph) holds device tensors (`DTensor`) and kernel ops; a
graph-defined kernel op owns a `TBGraph` (block graph) over shared-memory tiles
(`STensor`); a thread-graph op in a block graph owns a `THGraph` over scalars. Shapes
and dtypes are checked as ops are added, with the rules of `ops.py`. The search works
on this model; MLIR is produced from it only for results (`mirage.core.mlir_text`).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from math import isfinite, prod
from typing import Sequence

from ..target import DEFAULT as DEFAULT_TARGET
from . import ops as O
from .dtypes import dtype, float16, float32, bfloat16

GRID = ("x", "y", "z")
LOOP = "i"


class GraphError(ValueError):
    """A μGraph that breaks a validity rule; the message starts with the rule name."""


class GraphTypeError(GraphError, TypeError):
    """A builder argument of the wrong type (a float, bool or string where an integer is
    needed, a dtype that is not a mirage dtype); also a GraphError, so callers that catch
    GraphError see every builder rejection."""


# Launch limits of CUDA (compute capability >= 3.0): per-axis grid and block maxima and
# threads per block. Beyond them a launch fails; values near 2**63 also break the lowering's
# i64 arithmetic, so the builder rejects them up front.
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS = 1024
MAX_BYTES = 2**63 - 1  # a tensor's size in bytes must fit the i64 offsets of the lowering

_DTYPE_NAMES = {"float16": float16, "bfloat16": bfloat16, "float32": float32}


def _int_arg(v, what: str, rule: str, lo: int | None = None, hi: int | None = None) -> int:
    """`v` as an int. Only Python and numpy integers are accepted: int(4.7) would silently
    truncate, True is an int to Python but never meant as a size, "4" is not a number."""
    if type(v) is int and (lo is None or v >= lo) and (hi is None or v <= hi):
        return v  # the common case, kept cheap: the search builds many graphs
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise GraphTypeError(f"[{rule}] {what} must be an integer, got {v!r} ({type(v).__name__})")
    v = int(v)
    if lo is not None and v < lo:
        raise GraphError(f"[{rule}] {what} must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise GraphError(f"[{rule}] {what} must be <= {hi}, got {v}")
    return v


def _int_seq(v, what: str, rule: str, lo: int | None = None) -> tuple[int, ...]:
    """A sequence of integers (each checked by `_int_arg`)."""
    if type(v) is tuple and all(type(x) is int and (lo is None or x >= lo) for x in v):
        return v  # the common case, kept cheap (messages are formatted only on error)
    if isinstance(v, (str, bytes, dict)) or not hasattr(v, "__iter__"):
        raise GraphTypeError(f"[{rule}] {what} must be a sequence of integers, got {v!r} ({type(v).__name__})")
    return tuple(_int_arg(x, f"{what}[{k}]", rule, lo) for k, x in enumerate(v))


def _dims_arg(v, what: str, dt: dtype = float16) -> tuple[int, ...]:
    """Tensor dims: a non-empty sequence of positive integers whose tensor fits in 2**63 bytes."""
    dims = _int_seq(v, what, "shape", 1)
    if not dims:
        raise GraphError(f"[shape] {what} must have at least one dim, got []")
    _check_size(dims, dt, what)
    return dims


def _check_size(dims, dt: dtype, what: str) -> None:
    if prod(dims) * dt.itemsize > MAX_BYTES:
        raise GraphError(f"[shape] {what} {list(dims)}: a tensor of {prod(dims)} elements does not fit "
                         f"in 2**63 bytes")


def _dtype_arg(v, what: str = "dtype") -> dtype:
    """A mirage dtype; its MLIR spelling ("f16", "bf16", "f32") or name ("float16", ...) is
    accepted too, anything else is rejected here rather than failing when printed."""
    if isinstance(v, dtype):
        return v
    if isinstance(v, str):
        if v in _DTYPE_NAMES:
            return _DTYPE_NAMES[v]
        try:
            return dtype.parse(v)
        except ValueError:
            raise GraphError(f"[dtype] {what}: unsupported element type {v!r} (expected mirage.float16, "
                             f"mirage.bfloat16 or mirage.float32)") from None
    raise GraphTypeError(f"[dtype] {what} must be a mirage dtype (mirage.float16, mirage.bfloat16 or "
                         f"mirage.float32), got {v!r} ({type(v).__name__})")


@dataclass(eq=False)
class Tensor:
    shape: tuple[int, ...]
    dtype: dtype
    producer: object = None  # the op or input record that defines it
    index: int = 0  # which result of the producer
    graph: object = field(default=None, repr=False)  # the graph that defined it (ownership checks)

    # Mirage-compatible accessors
    @property
    def num_dims(self) -> int:
        return len(self.shape)

    def dim(self, i: int) -> int:
        return self.shape[i]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.shape)}, {self.dtype.mlir})"


class DTensor(Tensor):
    """A tensor in device memory (kernel-graph value)."""


class STensor(Tensor):
    """A tile in shared memory (block-graph value)."""


class Scalar(Tensor):
    """A register value of one thread (thread-graph value); shape is ()."""


@dataclass(eq=False)
class Op:
    kind: str  # an OPS key, "graph_def", "thread_graph" or "forloop_accum"
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)
    body: object = None  # TBGraph for graph_def, THGraph for thread_graph


def _dtype_of(inputs: Sequence[Tensor]) -> dtype:
    ds = {t.dtype for t in inputs}
    if len(ds) > 1:
        raise GraphError(f"[dtype] operands mix element types {sorted(d.mlir for d in ds)}")
    return ds.pop() if ds else float16


class _Builder:
    """Shared machinery: add a table op at this graph's level."""

    level = ""
    tensor_cls: type = Tensor

    def __init__(self):
        self.ops: list[Op] = []

    def default_dtype(self) -> dtype:
        """The element type of the graph's first input (float16 for a graph without one)."""
        first = self.inputs[0] if getattr(self, "inputs", None) else None
        t = getattr(first, "stensor", first)  # block graphs keep input records
        return t.dtype if t is not None else float16

    def _own(self, t: Tensor, what: str = "operand") -> None:
        if not isinstance(t, Tensor):
            raise GraphTypeError(f"[nesting] {what}: expected a {self.tensor_cls.__name__} of this graph, "
                                 f"got {t!r} ({type(t).__name__})")
        if not isinstance(t, self.tensor_cls):
            raise GraphError(f"[nesting] {what}: expected a {self.tensor_cls.__name__} of this graph, got {t!r}")
        if t.graph is not None and t.graph is not self:
            # a tensor of another graph has no value here (it used to fail later with a KeyError)
            raise GraphError(f"[nesting] {what}: {t!r} belongs to another graph")

    def _op(self, kind: str, inputs: Sequence[Tensor], dt: dtype | None = None, **attrs) -> Tensor:
        d = O.OPS.get(kind)
        if d is None or self.level not in d.levels:
            raise GraphError(f"[nesting] operator '{kind}' does not exist at the {self.level} level")
        for k, t in enumerate(inputs):
            self._own(t, f"{kind} operand {k}")
        attrs = _check_attrs(kind, attrs, self.level)
        dt = _dtype_arg(dt, f"{kind} dtype") if dt is not None else _dtype_of(inputs)
        try:
            shape = d.shape([t.shape for t in inputs], attrs)
        except O.ShapeError as e:
            raise GraphError(f"[shape] {kind}: {e}") from None
        _check_size(shape, dt, f"{kind} result")
        if "dim" in attrs and inputs:  # the IR takes dims >= 0 only; -1 means the last dim here as in numpy
            attrs["dim"] %= len(inputs[0].shape)
        out = self.tensor_cls(tuple(shape), dt, graph=self)
        op = Op(kind, list(inputs), [out], attrs)
        out.producer = op
        self.ops.append(op)
        return out

    # element-wise operators shared by all levels
    def add(self, A, B): return self._op("add", [A, B])
    def sub(self, A, B): return self._op("sub", [A, B])
    def mul(self, A, B): return self._op("mul", [A, B])
    def div(self, A, B): return self._op("div", [A, B])
    def exp(self, A): return self._op("exp", [A])
    def sqrt(self, A): return self._op("sqrt", [A])
    def rsqrt(self, A): return self._op("rsqrt", [A])
    def square(self, A): return self._op("square", [A])
    def silu(self, A): return self._op("silu", [A])
    def gelu(self, A): return self._op("gelu", [A])
    def relu(self, A): return self._op("relu", [A])
    def sigmoid(self, A): return self._op("sigmoid", [A])
    # Mirage's clamp, pow (KNGraph) and mul_scalar (TBGraph), at every level here; the
    # scalar attributes are checked by the op table's shape rule
    def pow(self, A, B): return self._op("pow", [A, B])
    def clamp(self, A, min_val: float, max_val: float): return self._op("clamp", [A], min_val=min_val,
                                                                        max_val=max_val)
    def mul_scalar(self, A, scalar: float): return self._op("mul_scalar", [A], scalar=scalar)


def _check_attrs(kind: str, attrs: dict, level: str) -> dict:
    """Type-check the table attributes of a builder call (the shape rules of ops.py assume
    integers: a float dim or repeat count would give a float shape)."""
    out = dict(attrs)
    for name, v in attrs.items():
        what = f"{kind} {name}"
        if name in ("dim", "dimx"):
            out[name] = _int_arg(v, what, "shape")
        elif name in ("shape", "normalized_shape", "repeats"):
            out[name] = _int_seq(v, what, "shape", 1)
            # rank-0 tensors exist only in thread graphs; an empty normalized_shape would
            # silently mean "the last dim"
            if not out[name] and name != "repeats" and level != "th":
                raise GraphError(f"[shape] {what} must have at least one dim, got []")
        elif name == "permutation":
            out[name] = _int_seq(v, what, "shape")
        elif name == "value":
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise GraphTypeError(f"[shape] {what} must be a real number, got {v!r} ({type(v).__name__})")
            if not isfinite(float(v)):  # MLIR's float attribute syntax has no inf/nan literal
                raise GraphError(f"[shape] {what} must be finite, got {v!r}")
            out[name] = float(v)
    return out


class _TensorOps(_Builder):
    """Operators present at the kernel and block levels."""

    def matmul(self, A, B): return self._op("matmul", [A, B])
    # attributes are type-checked in _op (_check_attrs)
    def reduction(self, A, dim: int): return self._op("reduction", [A], dim=dim)
    def reduce_max(self, A, dim: int): return self._op("reduce_max", [A], dim=dim)
    def concat(self, A, B, dim: int): return self._op("concat", [A, B], dim=dim)
    def reshape(self, A, shape): return self._op("reshape", [A], shape=shape)
    def transpose(self, A, permutation): return self._op("transpose", [A], permutation=permutation)
    def repeat(self, A, repeats): return self._op("repeat", [A], repeats=repeats)

    def constant(self, value: float, shape=(1,), dtype: dtype | None = None):
        """A tensor of `shape` filled with `value`; its element type defaults to the
        graph's (that of its first input), so constants never mix precisions by accident."""
        return self._op("constant", [], dtype if dtype is not None else self.default_dtype(), value=value,
                        shape=shape)


# -- kernel graph -------------------------------------------------------------------------

class KNGraph(_TensorOps):
    """A kernel graph: the μGraph's top level (Mirage's `mi.new_kernel_graph()`)."""

    level = "kn"
    tensor_cls = DTensor

    def __init__(self, name: str = "main"):
        super().__init__()
        self.name = name
        self.inputs: list[DTensor] = []
        self.outputs: list[DTensor] = []
        self.strides: dict[int, tuple[int, ...]] = {}  # input index -> non-default strides
        self.smem_capacity: int | None = None

    def new_input(self, dims, strides=None, dtype: dtype = float16) -> DTensor:
        dtype = _dtype_arg(dtype, "new_input dtype")
        dims = _dims_arg(dims, "new_input dims", dtype)
        t = DTensor(dims, dtype, "input", len(self.inputs), graph=self)
        if strides is not None:
            strides = _int_seq(strides, "new_input strides", "shape", 1)
            if len(strides) != len(dims):
                raise GraphError(f"[shape] {len(strides)} strides given for {len(dims)} dims")
            if strides != row_major_strides(dims):
                self.strides[len(self.inputs)] = strides
        self.inputs.append(t)
        return t

    def mark_output(self, A: DTensor, strides=None) -> None:
        self._own(A, "mark_output")
        if strides is not None:
            # outputs are always written row-major (no output layout in the IR or the
            # lowering): refuse other strides rather than ignore them
            strides = _int_seq(strides, "mark_output strides", "shape")
            if strides != row_major_strides(A.shape):
                raise GraphError(f"[strides] mark_output strides {list(strides)} are not supported: outputs "
                                 f"are row-major, strides {list(row_major_strides(A.shape))} for shape "
                                 f"{list(A.shape)}")
        self.outputs.append(A)

    def require_outputs(self, what: str) -> None:
        """Raise a clear error where a graph without outputs would be used: it computes
        nothing, and its MLIR (`return  :`) does not parse."""
        if not self.outputs:
            raise GraphError(f"[output] {what}: graph '{self.name}' has no output; mark the tensors it "
                             f"computes with mark_output(t)")

    def rms_norm(self, A, normalized_shape):
        return self._op("rms_norm", [A], normalized_shape=normalized_shape)

    def customized(self, inputs: Sequence[DTensor], bgraph: "TBGraph") -> list[DTensor]:
        """Add a graph-defined kernel whose block graph is `bgraph`; `inputs` are the
        device tensors its `new_input` calls read, in order."""
        if not isinstance(bgraph, TBGraph):
            raise GraphTypeError(f"[nesting] customized needs a block graph (mi.new_threadblock_graph), "
                                 f"got {type(bgraph).__name__}")
        if isinstance(inputs, Tensor) or not isinstance(inputs, (list, tuple)):
            raise GraphTypeError(f"[launch] customized inputs must be a list of tensors, got "
                                 f"{type(inputs).__name__}")
        inputs = list(inputs)
        if len(inputs) != len(bgraph.inputs):
            raise GraphError(f"[launch] {len(inputs)} tensors given for a block graph with "
                             f"{len(bgraph.inputs)} inputs")
        for k, (t, rec) in enumerate(zip(inputs, bgraph.inputs)):
            self._own(t, f"customized input {k}")
            if t.shape != rec.dtensor.shape or t.dtype != rec.dtensor.dtype:
                raise GraphError(f"[launch] input {k}: {t!r} does not match the block graph's {rec.dtensor!r}")
        bgraph.check()
        outs = []
        op = Op("graph_def", inputs, outs, {}, bgraph)
        for k, o in enumerate(bgraph.outputs):
            t = DTensor(bgraph.output_shape(o), o.stensor.dtype, op, k, graph=self)
            outs.append(t)
        self.ops.append(op)
        return outs

    # -- conversions and evaluation (implemented in sibling modules; superoptimize, compile
    # and __call__ reach up the pipeline and are attached by mirage.api) --
    def evaluate(self, inputs, dtype=None):
        """Run the μGraph on numpy arrays with the reference interpreter (float64 by
        default; `dtype="native"` rounds every tensor to its element type)."""
        from .interpret import evaluate

        return evaluate(self, inputs, dtype)

    def to_mlir(self) -> str:
        from .mlir_text import print_module

        return print_module([self])

    def __str__(self) -> str:
        return self.to_mlir()

    def to_dot(self) -> str:
        from .dot import to_dot

        return to_dot(self)

    def visualize(self, path: str) -> str:
        """Write Graphviz DOT to `path` (`.dot` added if missing); returns the path."""
        if not path.endswith(".dot"):
            path += ".dot"
        with open(path, "w") as f:
            f.write(self.to_dot())
        return path


def row_major_strides(dims) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(dims):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


# -- block graph --------------------------------------------------------------------------

@dataclass(eq=False)
class TBInput:
    dtensor: DTensor  # the kernel-level tensor this iterator reads (shape/dtype template)
    imap: tuple[int, int, int]
    forloop_dim: int
    stensor: STensor = None


@dataclass(eq=False)
class TBOutput:
    stensor: STensor
    omap: tuple[int, int, int]
    forloop_dim: int = -1


class TBGraph(_TensorOps):
    """A block graph (Mirage's `mi.new_threadblock_graph(...)`)."""

    level = "tb"
    tensor_cls = STensor

    def __init__(self, grid_dim=(1, 1, 1), block_dim=(128, 1, 1), forloop_range: int = 1,
                 reduction_dimx: int = 64):
        super().__init__()
        self.grid_dim = _dims3(grid_dim, "grid_dim")
        self.block_dim = _dims3(block_dim, "block_dim")
        for what, dims, top in (("grid_dim", self.grid_dim, MAX_GRID), ("block_dim", self.block_dim, MAX_BLOCK)):
            for g, n, m in zip(GRID, dims, top):
                if n > m:
                    raise GraphError(f"[launch] {what} {list(dims)}: {g} = {n} exceeds the CUDA limit {m}")
        if prod(self.block_dim) > MAX_THREADS:
            raise GraphError(f"[launch] block_dim {list(self.block_dim)} has {prod(self.block_dim)} threads, "
                             f"more than the CUDA limit of {MAX_THREADS} per block")
        self.forloop_range = _int_arg(forloop_range, "forloop_range", "launch", 1, MAX_GRID[0])
        self.reduction_dimx = _int_arg(reduction_dimx, "reduction_dimx", "launch", 1)
        self.inputs: list[TBInput] = []
        self.outputs: list[TBOutput] = []

    def partition(self, shape, dmap, loop_dim, what: str) -> tuple[int, ...]:
        """Tile shape of a tensor of `shape` read with grid map `dmap` and `loop_dim`."""
        tile = list(shape)
        for g, d in zip(GRID + (LOOP,), tuple(dmap) + (loop_dim,)):
            if d == -1:
                continue
            if not 0 <= d < len(shape):
                raise GraphError(f"[map] {what}: {g} -> {d} names no dim of a rank-{len(shape)} tensor")
            n = self.forloop_range if g == LOOP else self.grid_dim[GRID.index(g)]
            if tile[d] % n:
                raise GraphError(f"[divisibility] {what}: dim {d} of size {tile[d]} does not split "
                                 f"evenly into {n} parts along {g}")
            tile[d] //= n
        return tuple(tile)

    def new_input(self, dtensor: DTensor, input_map, forloop_dim: int, store_in_dmem: bool = False) -> STensor:
        imap = _dims3(input_map, "input_map", allow_neg=True)
        if not isinstance(dtensor, DTensor):
            raise GraphError(f"[nesting] new_input reads a device tensor, got {dtensor!r}")
        forloop_dim = _int_arg(forloop_dim, "new_input forloop_dim", "map")
        tile = self.partition(dtensor.shape, imap, forloop_dim, f"input {len(self.inputs)}")
        rec = TBInput(dtensor, imap, forloop_dim)
        rec.stensor = STensor(tile, dtensor.dtype, rec, 0, graph=self)
        self.inputs.append(rec)
        return rec.stensor

    def new_output(self, stensor: STensor, output_map, forloop_dim: int = -1) -> None:
        self._own(stensor, "new_output")
        rec = TBOutput(stensor, _dims3(output_map, "output_map", allow_neg=True),
                       _int_arg(forloop_dim, "new_output forloop_dim", "map"))
        self.output_shape(rec)  # validates
        self.outputs.append(rec)

    def output_shape(self, o: TBOutput) -> tuple[int, ...]:
        shape = list(o.stensor.shape)
        what = f"output {self.outputs.index(o) if o in self.outputs else len(self.outputs)}"
        for g, n in zip(GRID, self.grid_dim):
            d = o.omap[GRID.index(g)]
            if d == -1:
                if n > 1:
                    raise GraphError(f"[omap] {what}: grid dim {g} of size {n} maps to a replica, "
                                     f"so its blocks would overwrite each other")
                continue
            if not 0 <= d < len(shape):
                raise GraphError(f"[map] {what}: {g} -> {d} names no dim of a rank-{len(shape)} tile")
            shape[d] *= n
        if o.forloop_dim != -1:
            if not 0 <= o.forloop_dim < len(shape):
                raise GraphError(f"[map] {what}: i -> {o.forloop_dim} names no dim")
            shape[o.forloop_dim] *= self.forloop_range
        return tuple(shape)

    def forloop_accum(self, A: STensor, acc: str | None = None) -> STensor:
        self._own(A, "forloop_accum")
        kind = "none" if acc is None else str(acc)
        if kind not in O.ACCUMULATORS:
            raise GraphError(f"[accumulator] unknown accumulator '{acc}' (expected None or one of "
                             f"{', '.join(repr(a) for a in O.ACCUMULATORS[1:])})")
        try:
            shape = O.accum_shape(kind, A.shape, self.reduction_dimx)
        except O.ShapeError as e:
            raise GraphError(f"[dimx] forloop_accum {kind}: {e}") from None
        out = STensor(shape, A.dtype, graph=self)
        op = Op("forloop_accum", [A], [out], {"kind": kind})
        out.producer = op
        self.ops.append(op)
        return out

    def forloop_accum_max(self, A: STensor) -> STensor:
        """Mirage's forloop_accum_max: the element-wise max over the iterations."""
        return self.forloop_accum(A, "max")

    def forloop_accum_rescale(self, A: STensor, B: STensor, acc: str | None = None) -> STensor:
        """Mirage's rescaling accumulator: acc = acc * B + A every iteration (A's last dim
        summed first with acc="sum"); B broadcasts to the result (ops.py)."""
        kind = "none" if acc is None else acc
        if kind not in O.RESCALE_ACCUMULATORS:
            raise GraphError(f"[accumulator] unknown rescale accumulator {acc!r} (expected None or 'sum')")
        return self._op("forloop_accum_rescale", [A, B], acc=kind)  # "acc": `kind` names the op in _op

    def reduction_max(self, A: STensor, dim: int) -> tuple[STensor, STensor]:
        """Mirage's reduction_max: (running max along `dim`, its change), see ops.py."""
        m = self._op("reduction_max", [A], dim=dim)
        return tuple(m.producer.outputs)

    def rms_norm(self, A):
        self._own(A, "rms_norm operand 0")
        return self._op("rms_norm", [A], normalized_shape=(A.shape[-1],))

    def reduction_to_dimx(self, A):
        return self._op("reduction_to_dimx", [A], dimx=self.reduction_dimx)

    def _op(self, kind, inputs, dt=None, **attrs):
        if kind == "reduction_to_dimx":
            attrs["dimx"] = self.reduction_dimx
        try:
            out = super()._op(kind, inputs, dt, **attrs)
            for k in range(1, O.OPS[kind].results):  # further results (reduction_max's diff)
                out.producer.outputs.append(STensor(out.shape, out.dtype, out.producer, k, graph=self))
            return out
        except GraphError as e:
            if kind == "reduction_to_dimx" and "[shape]" in str(e):
                raise GraphError(str(e).replace("[shape]", "[dimx]")) from None
            raise

    def thread_graph(self, inputs: Sequence[STensor], body: "THGraph") -> list[STensor]:
        """Fuse an element-wise chain: `body` runs per element on broadcast `inputs`."""
        if not isinstance(body, THGraph):
            raise GraphTypeError(f"[nesting] thread_graph needs a THGraph body, got {type(body).__name__}")
        inputs = list(inputs)
        for k, t in enumerate(inputs):
            self._own(t, f"thread_graph input {k}")
        if len(inputs) != len(body.inputs):
            raise GraphError(f"[shape] thread graph takes {len(body.inputs)} inputs, {len(inputs)} given")
        try:
            shape = O.broadcast_shapes(*[t.shape for t in inputs])
        except O.ShapeError as e:
            raise GraphError(f"[shape] thread_graph: {e}") from None
        outs = [STensor(shape, o.dtype, graph=self) for o in body.outputs]
        op = Op("thread_graph", inputs, outs, {}, body)
        for k, o in enumerate(outs):
            o.producer, o.index = op, k
        self.ops.append(op)
        return outs

    # -- whole-graph checks (the μGraph validity rules not checked op by op) --

    def smem_bytes(self) -> int:
        tiles = [r.stensor for r in self.inputs] + [t for op in self.ops for t in op.outputs]
        return sum(prod(t.shape) * t.dtype.itemsize for t in tiles)

    def check(self, smem_capacity: int | None = None) -> None:
        if not self.outputs:
            raise GraphError("[launch] the block graph has no output")
        cap = smem_capacity or DEFAULT_SMEM
        if self.smem_bytes() > cap:
            raise GraphError(f"[smem] the block graph needs {self.smem_bytes()} bytes of shared memory, "
                             f"more than the capacity {cap}")
        accums, every = self.accum_counts(), self.accum_counts(varying_only=False)
        for k, o in enumerate(self.outputs):
            if every[id(o.stensor)] and every[id(o.stensor)][1] > 1:
                raise GraphError(f"[accumulator] output {k}: a path passes {every[id(o.stensor)][1]} accumulators")
            n = accums[id(o.stensor)]
            if n is None:
                continue  # depends on loop-invariant inputs only
            lo, hi = n
            need = 0 if o.forloop_dim != -1 else (1 if self.forloop_range > 1 else None)
            if need is not None and (lo != need or hi != need):
                raise GraphError(f"[accumulator] output {k}: with forloop {self.forloop_range} every "
                                 f"input->output path must pass exactly {need} accumulator(s), found "
                                 f"{lo}..{hi}")

    def accum_counts(self, varying_only: bool = True) -> dict:
        """For each tile id: (min, max) number of accumulators on the paths to it from
        loop-varying inputs (or from all inputs); None where no such path exists."""
        counts: dict = {id(r.stensor): (0, 0) for r in self.inputs
                        if r.forloop_dim != -1 or not varying_only}
        for op in self.ops:
            ins = [counts.get(id(t)) for t in op.inputs]
            ins = [c for c in ins if c is not None]
            c = (min(a for a, _ in ins), max(b for _, b in ins)) if ins else None
            if c is not None and O.is_accumulator(op.kind):
                c = (c[0] + 1, c[1] + 1)
            for t in op.outputs:
                counts[id(t)] = c
        return counts

    def is_post_loop(self, t: STensor) -> bool:
        """Whether `t` is computed once after the loop (downstream of an accumulator)."""
        c = self.accum_counts(varying_only=False).get(id(t))
        return c is not None and c[1] >= 1


DEFAULT_SMEM = DEFAULT_TARGET.smem_per_block  # per-block shared memory of the default target


def _dims3(v, what: str, allow_neg: bool = False) -> tuple[int, int, int]:
    v = _int_seq(v, what, "map" if allow_neg else "launch")
    if len(v) > 3 or not v:
        raise GraphError(f"[launch] {what} needs 1 to 3 entries, got {list(v)}")
    fill = -1 if allow_neg else 1
    v = v + (fill,) * (3 - len(v))
    if not allow_neg and min(v) < 1:
        raise GraphError(f"[launch] {what} entries must be positive, got {list(v)}")
    if allow_neg and min(v) < -1:
        raise GraphError(f"[map] {what} entries are tensor dims or -1, got {list(v)}")
    return v


# -- thread graph -------------------------------------------------------------------------

class THGraph(_Builder):
    """A thread graph: a scalar function of its inputs, run per element in registers."""

    level = "th"
    tensor_cls = Scalar

    def __init__(self, input_dtypes: Sequence[dtype]):
        super().__init__()
        self.inputs = [Scalar((), _dtype_arg(d, f"thread graph input {k} dtype"), "input", k, graph=self)
                       for k, d in enumerate(input_dtypes)]
        self.outputs: list[Scalar] = []

    def constant(self, value: float, dtype: dtype | None = None):
        return self._op("constant", [], dtype if dtype is not None else self.default_dtype(), value=value,
                        shape=())

    def output(self, s: Scalar) -> None:
        self._own(s, "output")
        self.outputs.append(s)


def new_kernel_graph(name: str = "main") -> KNGraph:
    return KNGraph(name)


def new_threadblock_graph(grid_dim, block_dim=(128, 1, 1), forloop_range: int = 1,
                          reduction_dimx: int = 64) -> TBGraph:
    return TBGraph(grid_dim, block_dim, forloop_range, reduction_dimx)


def new_thread_graph(input_dtypes: Sequence[dtype]) -> THGraph:
    return THGraph(input_dtypes)
