"""The compact Python model of μGraphs and the Mirage-compatible builder API.

A `KNGraph` (kernel graph) holds device tensors (`DTensor`) and kernel ops; a
graph-defined kernel op owns a `TBGraph` (block graph) over shared-memory tiles
(`STensor`); a thread-graph op in a block graph owns a `THGraph` over scalars. Shapes
and dtypes are checked as ops are added: the builder calls the validity rules of
`rules.py` (each tagged with its rule name, as the C++ verifiers' diagnostics are) and the
shape rules of the op table `ops.py`. The search works on this model; MLIR is produced
from it only for results (`mirage.core.mlir_text`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from . import ops as O
from . import rules as R
from .dtypes import dtype, float16
# re-exported: the rules' errors and limits are part of the builder's API
from .rules import (DEFAULT_SMEM, GRID, LOOP, MAX_BLOCK, MAX_BYTES, MAX_GRID, MAX_THREADS,  # noqa: F401
                    GraphError, GraphTypeError, row_major_strides)


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
        R.check_owned(self, t, what)

    def _op(self, kind: str, inputs: Sequence[Tensor], dt: dtype | None = None, **attrs) -> Tensor:
        d = R.check_level(kind, self.level)
        for k, t in enumerate(inputs):
            self._own(t, f"{kind} operand {k}")
        attrs = R.check_attrs(kind, attrs, self.level)
        dt = R.dtype_arg(dt, f"{kind} dtype") if dt is not None else R.common_dtype(inputs)
        shape = R.op_shape(d, [t.shape for t in inputs], attrs)
        R.check_size(shape, dt, f"{kind} result")
        if "dim" in attrs and inputs:  # the IR takes dims >= 0 only; -1 means the last dim here as in numpy
            attrs["dim"] %= len(inputs[0].shape)
        out = self.tensor_cls(tuple(shape), dt, graph=self)
        op = Op(kind, list(inputs), [out], attrs)
        out.producer = op
        self.ops.append(op)
        return out


class _TensorOps(_Builder):
    """Operators present at the kernel and block levels (their plain builder methods are
    attached from the op table below)."""

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
        dtype = R.dtype_arg(dtype, "new_input dtype")
        dims = R.dims_arg(dims, "new_input dims", dtype)
        t = DTensor(dims, dtype, "input", len(self.inputs), graph=self)
        if strides is not None:
            strides = R.int_seq(strides, "new_input strides", "shape", 1)
            if len(strides) != len(dims):
                raise GraphError(f"[shape] {len(strides)} strides given for {len(dims)} dims")
            if strides != row_major_strides(dims):
                self.strides[len(self.inputs)] = strides
        self.inputs.append(t)
        return t

    def mark_output(self, A: DTensor, strides=None) -> None:
        self._own(A, "mark_output")
        if strides is not None:
            R.check_output_strides(strides, A.shape)
        self.outputs.append(A)

    def require_outputs(self, what: str) -> None:
        """Raise a clear error where a graph without outputs would be used: it computes
        nothing, and its MLIR (`return  :`) does not parse."""
        R.require_outputs(self, what)

    def rms_norm(self, A, normalized_shape):
        return self._op("rms_norm", [A], normalized_shape=normalized_shape)

    def customized(self, inputs: Sequence[DTensor], bgraph: "TBGraph") -> list[DTensor]:
        """Add a graph-defined kernel whose block graph is `bgraph`; `inputs` are the
        device tensors its `new_input` calls read, in order."""
        if not isinstance(bgraph, TBGraph):
            raise GraphTypeError(f"[nesting] customized needs a block graph (mi.new_threadblock_graph), "
                                 f"got {type(bgraph).__name__}")
        inputs = R.check_kernel_inputs(inputs, bgraph)
        for k, (t, rec) in enumerate(zip(inputs, bgraph.inputs)):
            self._own(t, f"customized input {k}")
            R.check_kernel_input(k, t, rec)
        bgraph.check(self.smem_capacity)  # the module's kn.smem_capacity, as the C++ verifier reads it
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


# -- block graph --------------------------------------------------------------------------

@dataclass(eq=False)
class TBInput:
    dtensor: DTensor  # the kernel-level tensor this iterator reads (shape/dtype template)
    imap: tuple[int, int, int]
    forloop_dim: int
    stensor: STensor = None
    k_chunk: int = 0  # staged in chunks of its matmul's K ([stage]; 0: the whole tile)

    @property
    def per_iteration(self) -> bool:
        """Read again each for-loop iteration: it varies with the loop, or it is staged."""
        return self.forloop_dim != -1 or bool(self.k_chunk)


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
        self.grid_dim, self.block_dim, self.forloop_range, self.reduction_dimx = R.check_launch(
            grid_dim, block_dim, forloop_range, reduction_dimx)
        self.inputs: list[TBInput] = []
        self.outputs: list[TBOutput] = []
        # decisions of the optimizer passes read back from the IR (`mirage.mlir.importer`),
        # which the lowering takes instead of deciding again: tile name (as
        # `optimize.plan.tile_names`) -> (innermost dim, swizzle bytes) from `tb.layout`;
        # the order in which the ops run (indices of `ops`) from `tb.order`; per emitted
        # kernel (full, partial, combine) the ring depth and buffer offsets from `tb.smem`
        self.recorded_layouts: dict[str, tuple[int, int]] = {}
        self.recorded_order: list[int] | None = None
        self.recorded_smem: dict = {}

    def partition(self, shape, dmap, loop_dim, what: str) -> tuple[int, ...]:
        """Tile shape of a tensor of `shape` read with grid map `dmap` and `loop_dim`."""
        return R.input_tile(shape, dmap, loop_dim, self.grid_dim, self.forloop_range, what)

    def new_input(self, dtensor: DTensor, input_map, forloop_dim: int, store_in_dmem: bool = False,
                  k_chunk: int = 0) -> STensor:
        """The tile of `dtensor` this block reads (`input_map`, `forloop_dim`); `k_chunk`:
        staged, its one matmul reads it k_chunk at a time along K ([stage])."""
        imap = R.map_arg(input_map, "input_map")
        if not isinstance(dtensor, DTensor):  # docs/ir.md: tb.input reads a region argument ([map])
            raise GraphError(f"[map] new_input reads a device tensor, got {dtensor!r}")
        forloop_dim = R.int_arg(forloop_dim, "new_input forloop_dim", "map")
        k_chunk = R.int_arg(k_chunk, "new_input k_chunk", "stage", lo=0)
        tile = self.partition(dtensor.shape, imap, forloop_dim, f"input {len(self.inputs)}")
        rec = TBInput(dtensor, imap, forloop_dim, k_chunk=k_chunk)
        rec.stensor = STensor(tile, dtensor.dtype, rec, 0, graph=self)
        self.inputs.append(rec)
        return rec.stensor

    def new_output(self, stensor: STensor, output_map, forloop_dim: int = -1) -> None:
        self._own(stensor, "new_output")
        rec = TBOutput(stensor, R.map_arg(output_map, "output_map"),
                       R.int_arg(forloop_dim, "new_output forloop_dim", "map"))
        self.output_shape(rec)  # validates
        self.outputs.append(rec)

    def output_shape(self, o: TBOutput) -> tuple[int, ...]:
        what = f"output {self.outputs.index(o) if o in self.outputs else len(self.outputs)}"
        return R.output_shape(o.stensor.shape, o.omap, o.forloop_dim, self.grid_dim, self.forloop_range, what)

    def forloop_accum(self, A: STensor, acc: str | None = None) -> STensor:
        self._own(A, "forloop_accum")
        kind = R.accumulator_kind(acc)
        shape = R.accum_shape(kind, A.shape, self.reduction_dimx)
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
        kind = R.rescale_kind(acc)
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
        out = super()._op(kind, inputs, dt, **attrs)
        for k in range(1, O.OPS[kind].results):  # further results (reduction_max's diff)
            out.producer.outputs.append(STensor(out.shape, out.dtype, out.producer, k, graph=self))
        return out

    def thread_graph(self, inputs: Sequence[STensor], body: "THGraph") -> list[STensor]:
        """Fuse an element-wise chain: `body` runs per element on broadcast `inputs`."""
        if not isinstance(body, THGraph):
            raise GraphTypeError(f"[nesting] thread_graph needs a THGraph body, got {type(body).__name__}")
        inputs = list(inputs)
        for k, t in enumerate(inputs):
            self._own(t, f"thread_graph input {k}")
        if len(inputs) != len(body.inputs):
            raise GraphError(f"[shape] thread graph takes {len(body.inputs)} inputs, {len(inputs)} given")
        shape = R.broadcast_shape([t.shape for t in inputs], "thread_graph")
        outs = [STensor(shape, o.dtype, graph=self) for o in body.outputs]
        op = Op("thread_graph", inputs, outs, {}, body)
        for k, o in enumerate(outs):
            o.producer, o.index = op, k
        self.ops.append(op)
        return outs

    # -- whole-graph checks (the μGraph validity rules not checked op by op: rules.py) --

    def smem_bytes(self) -> int:
        return R.smem_bytes(self)

    def check(self, smem_capacity: int | None = None) -> None:
        R.check_block_graph(self, smem_capacity)

    def accum_counts(self, varying_only: bool = True) -> dict:
        """For each tile id: (min, max) number of accumulators on the paths to it from
        loop-varying inputs (or from all inputs); None where no such path exists."""
        return R.accum_counts(self, varying_only)

    def is_post_loop(self, t: STensor) -> bool:
        """Whether `t` is computed once after the loop (downstream of an accumulator)."""
        c = self.accum_counts(varying_only=False).get(id(t))
        return c is not None and c[1] >= 1


# -- thread graph -------------------------------------------------------------------------

class THGraph(_Builder):
    """A thread graph: a scalar function of its inputs, run per element in registers."""

    level = "th"
    tensor_cls = Scalar

    def __init__(self, input_dtypes: Sequence[dtype]):
        super().__init__()
        self.inputs = [Scalar((), R.dtype_arg(d, f"thread graph input {k} dtype"), "input", k, graph=self)
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


# -- builder methods from the op table ------------------------------------------------------

# Operators whose builder method is written out above, with the reason: `constant` takes
# its dtype from the graph; `rms_norm` takes Mirage's normalized_shape on kernel graphs
# and none on block graphs; `reduction_max` returns its two results; `reduction_to_dimx`
# reads the block graph's dimx; `forloop_accum_rescale` names its accumulator kind `acc`.
WRITTEN_OUT = ("constant", "rms_norm", "reduction_max", "reduction_to_dimx", "forloop_accum_rescale")


def _table_method(d: O.OpDef):
    """`g.<op>(A[, B], *attrs)`: operands first, then the table's attributes in order."""
    import inspect

    P = inspect.Parameter
    params = [P("self", P.POSITIONAL_ONLY)] + [P(n, P.POSITIONAL_OR_KEYWORD) for n in "AB"[:d.arity]]
    params += [P(a, P.POSITIONAL_OR_KEYWORD) for a in d.attrs]
    sig = inspect.Signature(params)

    def method(*args, **kw):
        bound = sig.bind(*args, **kw)
        self, *vals = bound.arguments.values()
        return self._op(d.name, vals[:d.arity], **dict(zip(d.attrs, vals[d.arity:])))

    method.__name__ = method.__qualname__ = d.name
    method.__signature__ = sig
    method.__doc__ = f"The `{d.name}` operator ({d.category}; semantics in core/ops.py)."
    return method


for _d in O.OPS.values():
    if _d.name in WRITTEN_OUT or _d.arity < 1:
        continue
    _cls = {O.ALL: _Builder, O.KT: _TensorOps, frozenset({"tb"}): TBGraph}[_d.levels]
    setattr(_cls, _d.name, _table_method(_d))
