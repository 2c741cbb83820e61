"""The μGraph validity rules of the Python model, in one place (paper Def. 2.1, docs/ir.md).

Every rule has a tag, and every error it raises starts with that tag in brackets
(`[divisibility] input 0: ...`), as the C++ verifiers' diagnostics do. The builder
(`graph.py`) calls these functions as ops are added; `check_block_graph` holds the
whole-graph rules that cannot be checked op by op. The C++ side of the same rules is in
lib/Dialect/{Common,Kernel,Block}/IR; test/python/test_rules_conformance.py checks that
both sides accept and reject the same graphs with the same tag.

| tag            | checked here by                                             |
|----------------|-------------------------------------------------------------|
| `shape`        | int_arg, int_seq, dims_arg, check_size, check_attrs, op_shape |
| `dtype`        | dtype_arg, common_dtype                                     |
| `nesting`      | check_level, check_owned                                    |
| `launch`       | check_launch, check_kernel_inputs, check_block_graph        |
| `map`          | map_arg, input_tile, output_shape                           |
| `divisibility` | input_tile                                                  |
| `omap`         | output_shape                                                |
| `accumulator`  | accumulator_kind, rescale_kind, check_accumulators          |
| `stage`        | check_staging                                               |
| `smem`         | check_smem                                                  |
| `dimx`         | accum_shape, op_shape (reduction_to_dimx)                   |
| `strides`      | check_output_strides (builder only: outputs are row-major)  |
| `output`       | require_outputs (builder only: a graph must compute something) |

The builder checks more than the IR can express (integers that are not bools or floats,
tensors that fit in 2**63 bytes, tensors of the graph they are used in); those checks
carry the tag of the rule they belong to.
"""
from __future__ import annotations

import numbers
from math import isfinite, prod
from typing import Sequence

from ..target import DEFAULT as DEFAULT_TARGET
from . import ops as O
from .dtypes import dtype, float16, float32, bfloat16

GRID = ("x", "y", "z")
LOOP = "i"

RULES = {
    "shape": "result and operand shapes obey the op's shape rule",
    "dtype": "element types are f16/bf16/f32; the operands of an op and its result share one",
    "nesting": "each op exists at the level it is used at; operands belong to the graph using them",
    "launch": "grid/block/forloop/dimx are in range (CUDA's limits); a block graph matches its kernel's "
              "operands and has an output",
    "map": "each mapped tensor dim exists; tb.input reads a device tensor",
    "divisibility": "every partitioned tensor dim divides evenly",
    "omap": "every grid dim of size > 1 maps to a dim of each output",
    "accumulator": "paths from loop-varying inputs to outputs pass exactly one accumulator (none to an "
                   "output saved every iteration); no path passes two",
    "stage": "a staged input (k_chunk) is read by one matmul alone, whose other operand is an input staged "
             "alike; the chunk, a multiple of 16, cuts the contracted dim into two or more",
    "smem": "the tiles of a block graph fit in shared memory (a staged input's: two chunks)",
    "dimx": "the last dim reduced to dimx is a multiple of dimx",
    "strides": "outputs are row-major",
    "output": "a kernel graph has at least one output",
}


class GraphError(ValueError):
    """A μGraph that breaks a validity rule; the message starts with the rule name."""


class GraphTypeError(GraphError, TypeError):
    """A builder argument of the wrong type (a float, bool or string where an integer is
    needed, a dtype that is not a mirage dtype); also a GraphError, so callers that catch
    GraphError see every builder rejection."""


# Launch limits of CUDA (compute capability >= 3.0): per-axis grid and block maxima and
# threads per block. Beyond them a launch fails; values near 2**63 also break the lowering's
# i64 arithmetic, so the builder rejects them up front (so does the kn.graph_def verifier).
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS = 1024
MAX_BYTES = 2**63 - 1  # a tensor's size in bytes must fit the i64 offsets of the lowering
DEFAULT_SMEM = DEFAULT_TARGET.smem_per_block  # per-block shared memory of the default target

_DTYPE_NAMES = {"float16": float16, "bfloat16": bfloat16, "float32": float32}


# -- arguments: integers, dims, dtypes, attributes ([shape] [dtype] [launch] [map]) ----------

def int_arg(v, what: str, rule: str, lo: int | None = None, hi: int | None = None) -> int:
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


def int_seq(v, what: str, rule: str, lo: int | None = None) -> tuple[int, ...]:
    """A sequence of integers (each checked by `int_arg`)."""
    if type(v) is tuple and all(type(x) is int and (lo is None or x >= lo) for x in v):
        return v  # the common case, kept cheap (messages are formatted only on error)
    if isinstance(v, (str, bytes, dict)) or not hasattr(v, "__iter__"):
        raise GraphTypeError(f"[{rule}] {what} must be a sequence of integers, got {v!r} ({type(v).__name__})")
    return tuple(int_arg(x, f"{what}[{k}]", rule, lo) for k, x in enumerate(v))


def check_size(dims, dt: dtype, what: str) -> None:
    """[shape] a tensor's bytes fit in 2**63."""
    if prod(dims) * dt.itemsize > MAX_BYTES:
        raise GraphError(f"[shape] {what} {list(dims)}: a tensor of {prod(dims)} elements does not fit "
                         f"in 2**63 bytes")


def dims_arg(v, what: str, dt: dtype = float16) -> tuple[int, ...]:
    """[shape] tensor dims: a non-empty sequence of positive integers whose tensor fits in
    2**63 bytes."""
    dims = int_seq(v, what, "shape", 1)
    if not dims:
        raise GraphError(f"[shape] {what} must have at least one dim, got []")
    check_size(dims, dt, what)
    return dims


def dtype_arg(v, what: str = "dtype") -> dtype:
    """[dtype] a mirage dtype; its MLIR spelling ("f16", "bf16", "f32") or name ("float16",
    ...) is accepted too, anything else is rejected here rather than failing when printed."""
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


def check_attrs(kind: str, attrs: dict, level: str) -> dict:
    """[shape] type-check the table attributes of a builder call (the shape rules of ops.py
    assume integers: a float dim or repeat count would give a float shape)."""
    out = dict(attrs)
    for name, v in attrs.items():
        what = f"{kind} {name}"
        if name in ("dim", "dimx"):
            out[name] = int_arg(v, what, "shape")
        elif name in ("shape", "normalized_shape", "repeats"):
            out[name] = int_seq(v, what, "shape", 1)
            # rank-0 tensors exist only in thread graphs; an empty normalized_shape would
            # silently mean "the last dim"
            if not out[name] and name != "repeats" and level != "th":
                raise GraphError(f"[shape] {what} must have at least one dim, got []")
        elif name == "permutation":
            out[name] = int_seq(v, what, "shape")
        elif name == "value":
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise GraphTypeError(f"[shape] {what} must be a real number, got {v!r} ({type(v).__name__})")
            if not isfinite(float(v)):  # MLIR's float attribute syntax has no inf/nan literal
                raise GraphError(f"[shape] {what} must be finite, got {v!r}")
            out[name] = float(v)
    return out


def dims3(v, what: str, allow_neg: bool = False) -> tuple[int, int, int]:
    """[launch] grid/block dims (1 to 3 positive entries, padded with 1), or with
    `allow_neg` [map] a map (1 to 3 tensor dims or -1, padded with -1)."""
    v = int_seq(v, what, "map" if allow_neg else "launch")
    if len(v) > 3 or not v:
        raise GraphError(f"[launch] {what} needs 1 to 3 entries, got {list(v)}")
    fill = -1 if allow_neg else 1
    v = v + (fill,) * (3 - len(v))
    if not allow_neg and min(v) < 1:
        raise GraphError(f"[launch] {what} entries must be positive, got {list(v)}")
    if allow_neg and min(v) < -1:
        raise GraphError(f"[map] {what} entries are tensor dims or -1, got {list(v)}")
    return v


def map_arg(v, what: str) -> tuple[int, int, int]:
    """[map] an input or output map (x, y, z): tensor dims or -1 (a replica)."""
    return dims3(v, what, allow_neg=True)


# -- ops: level, ownership, element types, shapes ([nesting] [dtype] [shape] [dimx]) --------

def check_level(kind: str, level: str) -> O.OpDef:
    """[nesting] the table operator `kind` exists at `level` (kn, tb or th)."""
    d = O.OPS.get(kind)
    if d is None or level not in d.levels:
        raise GraphError(f"[nesting] operator '{kind}' does not exist at the {level} level")
    return d


def check_owned(graph, t, what: str = "operand") -> None:
    """[nesting] `t` is a tensor of `graph` (a tensor of another graph has no value there)."""
    from .graph import Tensor  # the model's tensor class (graph.py imports this module)

    cls = graph.tensor_cls
    if not isinstance(t, Tensor):
        raise GraphTypeError(f"[nesting] {what}: expected a {cls.__name__} of this graph, "
                             f"got {t!r} ({type(t).__name__})")
    if not isinstance(t, cls):
        raise GraphError(f"[nesting] {what}: expected a {cls.__name__} of this graph, got {t!r}")
    if t.graph is not None and t.graph is not graph:
        raise GraphError(f"[nesting] {what}: {t!r} belongs to another graph")


def common_dtype(inputs) -> dtype:
    """[dtype] the one element type of an op's operands (float16 for an op without any)."""
    ds = {t.dtype for t in inputs}
    if len(ds) > 1:
        raise GraphError(f"[dtype] operands mix element types {sorted(d.mlir for d in ds)}")
    return ds.pop() if ds else float16


def op_shape(d: O.OpDef, shapes: Sequence[tuple[int, ...]], attrs: dict) -> tuple[int, ...]:
    """[shape] (or [dimx] for reduction_to_dimx) the result shape by the op table's rule."""
    try:
        return d.shape(shapes, attrs)
    except O.ShapeError as e:
        rule = "dimx" if d.name == "reduction_to_dimx" else "shape"
        raise GraphError(f"[{rule}] {d.name}: {e}") from None


def broadcast_shape(shapes, what: str) -> tuple[int, ...]:
    """[shape] the broadcast shape of a thread graph's operands."""
    try:
        return O.broadcast_shapes(*shapes)
    except O.ShapeError as e:
        raise GraphError(f"[shape] {what}: {e}") from None


# -- [launch] ----------------------------------------------------------------------------------

def check_launch(grid_dim, block_dim, forloop_range, reduction_dimx):
    """[launch] a block graph's launch parameters: 1 to 3 positive grid and block dims
    within CUDA's limits, 1 <= forloop <= 2**31 - 1, dimx >= 1. Returns them normalized."""
    grid = dims3(grid_dim, "grid_dim")
    block = dims3(block_dim, "block_dim")
    for what, dims, top in (("grid_dim", grid, MAX_GRID), ("block_dim", block, MAX_BLOCK)):
        for g, n, m in zip(GRID, dims, top):
            if n > m:
                raise GraphError(f"[launch] {what} {list(dims)}: {g} = {n} exceeds the CUDA limit {m}")
    if prod(block) > MAX_THREADS:
        raise GraphError(f"[launch] block_dim {list(block)} has {prod(block)} threads, "
                         f"more than the CUDA limit of {MAX_THREADS} per block")
    forloop = int_arg(forloop_range, "forloop_range", "launch", 1, MAX_GRID[0])
    dimx = int_arg(reduction_dimx, "reduction_dimx", "launch", 1)
    return grid, block, forloop, dimx


def check_kernel_inputs(inputs, bgraph) -> list:
    """[launch] a graph-defined kernel reads a list of device tensors, one per input of its
    block graph (their shapes and dtypes: check_kernel_input). Returns them as a list."""
    from .graph import Tensor  # the model's tensor class (graph.py imports this module)

    if isinstance(inputs, Tensor) or not isinstance(inputs, (list, tuple)):
        raise GraphTypeError(f"[launch] customized inputs must be a list of tensors, got "
                             f"{type(inputs).__name__}")
    inputs = list(inputs)
    if len(inputs) != len(bgraph.inputs):
        raise GraphError(f"[launch] {len(inputs)} tensors given for a block graph with "
                         f"{len(bgraph.inputs)} inputs")
    return inputs


def check_kernel_input(k: int, t, rec) -> None:
    """[launch] input `k` of a graph-defined kernel has the shape and dtype its block
    graph's `new_input` was given."""
    if t.shape != rec.dtensor.shape or t.dtype != rec.dtensor.dtype:
        raise GraphError(f"[launch] input {k}: {t!r} does not match the block graph's {rec.dtensor!r}")


# -- [map] [divisibility] [omap] -------------------------------------------------------------

def _check_map_dims(dmap, loop_dim: int, rank: int, what: str, noun: str) -> None:
    """[map] every mapped dim names a dim of a rank-`rank` tensor (all entries checked
    before any other rule, as the C++ verifier does)."""
    for g, d in zip(GRID + (LOOP,), tuple(dmap) + (loop_dim,)):
        if d != -1 and not 0 <= d < rank:
            raise GraphError(f"[map] {what}: {g} -> {d} names no dim of a rank-{rank} {noun}")


def input_tile(shape, dmap, loop_dim: int, grid_dim, forloop_range: int, what: str) -> tuple[int, ...]:
    """[map] [divisibility] the tile of a device tensor of `shape` read with grid map
    `dmap` and `loop_dim`: each mapped dim split evenly by the grid dims (and the
    for-loop range for `loop_dim`) that map to it."""
    _check_map_dims(dmap, loop_dim, len(shape), what, "tensor")
    tile = list(shape)
    for g, d in zip(GRID + (LOOP,), tuple(dmap) + (loop_dim,)):
        if d == -1:
            continue
        n = forloop_range if g == LOOP else grid_dim[GRID.index(g)]
        if tile[d] % n:
            raise GraphError(f"[divisibility] {what}: dim {d} of size {tile[d]} does not split "
                             f"evenly into {n} parts along {g}")
        tile[d] //= n
    return tuple(tile)


def output_shape(tile, omap, loop_dim: int, grid_dim, forloop_range: int, what: str) -> tuple[int, ...]:
    """[map] [omap] the device tensor a block graph's output of tile shape `tile` writes:
    every grid dim of size > 1 maps to a tile dim (else the blocks would overwrite each
    other), each mapped dim grows by the grid size (and the for-loop range for `loop_dim`)."""
    _check_map_dims(omap, loop_dim, len(tile), what, "tile")
    shape = list(tile)
    for g, n in zip(GRID, grid_dim):
        d = omap[GRID.index(g)]
        if d == -1:
            if n > 1:
                raise GraphError(f"[omap] {what}: grid dim {g} of size {n} maps to a replica, "
                                 f"so its blocks would overwrite each other")
            continue
        shape[d] *= n
    if loop_dim != -1:
        shape[loop_dim] *= forloop_range
    return tuple(shape)


# -- [accumulator] [dimx] ----------------------------------------------------------------------

def accumulator_kind(acc) -> str:
    """[accumulator] the kind of a `forloop_accum` (None is Mirage's "none")."""
    kind = "none" if acc is None else str(acc)
    if kind not in O.ACCUMULATORS:
        raise GraphError(f"[accumulator] unknown accumulator '{acc}' (expected None or one of "
                         f"{', '.join(repr(a) for a in O.ACCUMULATORS[1:])})")
    return kind


def rescale_kind(acc) -> str:
    """[accumulator] the kind of a `forloop_accum_rescale`: none or sum."""
    kind = "none" if acc is None else acc
    if kind not in O.RESCALE_ACCUMULATORS:
        raise GraphError(f"[accumulator] unknown rescale accumulator {acc!r} (expected None or 'sum')")
    return kind


def accum_shape(kind: str, shape, dimx: int) -> tuple[int, ...]:
    """[dimx] the result shape of `forloop_accum <kind>` (sum_todimx: the last dim is a
    multiple of dimx)."""
    try:
        return O.accum_shape(kind, shape, dimx)
    except O.ShapeError as e:
        raise GraphError(f"[dimx] forloop_accum {kind}: {e}") from None


# -- whole block graph: [launch] [smem] [accumulator] ---------------------------------------

STAGED_CHUNKS = 2  # chunks of a staged input that [smem] counts: the lowering's shallowest ring


def chunks_ok(K: int, kc: int) -> bool:
    """[stage]'s chunk: a multiple of 16 that cuts the contracted dim K into two or more."""
    return kc > 0 and kc % 16 == 0 and K % kc == 0 and K // kc >= 2


def _staged_matmul(tb, rec):
    """The matmul that reads staged input `rec` if [stage] holds for it, else None."""
    users = [(op, k) for op in tb.ops for k, t in enumerate(op.inputs) if t is rec.stensor]
    if len(users) != 1 or users[0][0].kind != "matmul":
        return None
    mm, k = users[0]
    other = getattr(mm.inputs[1 - k].producer, "k_chunk", 0)
    return mm if other == rec.k_chunk and chunks_ok(mm.inputs[0].shape[-1], rec.k_chunk) else None


def check_staging(tb) -> None:
    """[stage] every staged input (k_chunk) is read by one matmul alone whose other operand
    is an input staged alike, and its chunk, a multiple of 16, cuts K into two or more."""
    for k, rec in enumerate(tb.inputs):
        if rec.k_chunk and _staged_matmul(tb, rec) is None:
            raise GraphError(f"[stage] input {k} (k_chunk = {rec.k_chunk}): a staged input is read by one "
                             f"matmul alone, whose other operand is an input staged alike, and its chunk, a "
                             f"multiple of 16, cuts the contracted dim into two or more")


def smem_bytes(tb) -> int:
    """Bytes of shared memory of a block graph's tiles (its inputs' and every op's results;
    of a staged input, STAGED_CHUNKS chunks)."""
    tiles = [r.stensor for r in tb.inputs] + [t for op in tb.ops for t in op.outputs]
    total = sum(prod(t.shape) * t.dtype.itemsize for t in tiles)
    for rec in tb.inputs:
        mm = _staged_matmul(tb, rec) if rec.k_chunk else None
        if mm is not None:
            full = prod(rec.stensor.shape) * rec.stensor.dtype.itemsize
            total -= full - full // mm.inputs[0].shape[-1] * rec.k_chunk * STAGED_CHUNKS
    return total


def accum_counts(tb, varying_only: bool = True) -> dict:
    """For each tile id: (min, max) number of accumulators on the paths to it from
    loop-varying inputs (or from all inputs); None where no such path exists."""
    counts: dict = {id(r.stensor): (0, 0) for r in tb.inputs
                    if r.forloop_dim != -1 or not varying_only}
    for op in tb.ops:
        ins = [counts.get(id(t)) for t in op.inputs]
        ins = [c for c in ins if c is not None]
        c = (min(a for a, _ in ins), max(b for _, b in ins)) if ins else None
        if c is not None and O.is_accumulator(op.kind):
            c = (c[0] + 1, c[1] + 1)
        for t in op.outputs:
            counts[id(t)] = c
    return counts


def check_smem(tb, capacity: int | None = None) -> None:
    """[smem] the tiles fit in `capacity` bytes (the default target's per-block shared memory)."""
    cap = capacity or DEFAULT_SMEM
    need = smem_bytes(tb)
    if need > cap:
        raise GraphError(f"[smem] the block graph needs {need} bytes of shared memory, "
                         f"more than the capacity {cap}")


def check_accumulators(tb) -> None:
    """[accumulator] no path from an input passes two accumulators (dead ones included); an
    output that maps the loop dim is saved inside the loop, so no path to it passes an
    accumulator (whose result exists only after the loop), whatever the for-loop range;
    with forloop > 1, every path from a loop-varying input to any other output passes
    exactly one."""
    accums, every = accum_counts(tb), accum_counts(tb, varying_only=False)
    for k, o in enumerate(tb.outputs):
        c = every.get(id(o.stensor))
        if c is not None and c[1] > 1:
            raise GraphError(f"[accumulator] output {k}: a path passes {c[1]} accumulators")
    for k, op in enumerate(tb.ops):  # a chain of two that reaches no output is still invalid
        c = every.get(id(op.outputs[0]))
        if O.is_accumulator(op.kind) and c is not None and c[1] > 1:
            raise GraphError(f"[accumulator] op {k} ({op.kind}): a path from an input passes {c[1]} "
                             f"accumulators")
    for k, o in enumerate(tb.outputs):
        if o.forloop_dim != -1:
            c = every.get(id(o.stensor))
            if c is not None and c[1] > 0:
                raise GraphError(f"[accumulator] output {k} maps the for-loop dim (saved every iteration) "
                                 f"but a path to it passes {c[1]} accumulator(s)")
            continue
        n = accums.get(id(o.stensor))  # (an invariant input saved as it is: not in accums)
        if n is None or tb.forloop_range == 1:
            continue  # depends on loop-invariant inputs only, or no loop
        lo, hi = n
        if lo != 1 or hi != 1:
            raise GraphError(f"[accumulator] output {k}: with forloop {tb.forloop_range} every "
                             f"input->output path must pass exactly 1 accumulator(s), found "
                             f"{lo}..{hi}")


def check_block_graph(tb, smem_capacity: int | None = None) -> None:
    """The whole-graph rules of a block graph, in the C++ verifier's order: [launch] it has
    an output, [stage], [smem], [accumulator]."""
    if not tb.outputs:
        raise GraphError("[launch] the block graph has no output")
    check_staging(tb)
    check_smem(tb, smem_capacity)
    check_accumulators(tb)


# -- kernel graph: [strides] [output] -------------------------------------------------------

def row_major_strides(dims) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(dims):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def check_output_strides(strides, shape) -> None:
    """[strides] outputs are always written row-major (no output layout in the IR or the
    lowering): other strides are refused rather than ignored."""
    strides = int_seq(strides, "mark_output strides", "shape")
    if strides != row_major_strides(shape):
        raise GraphError(f"[strides] mark_output strides {list(strides)} are not supported: outputs "
                         f"are row-major, strides {list(row_major_strides(shape))} for shape "
                         f"{list(shape)}")


def require_outputs(g, what: str) -> None:
    """[output] a graph without outputs computes nothing, and its MLIR (`return  :`) does
    not parse."""
    if not g.outputs:
        raise GraphError(f"[output] {what}: graph '{g.name}' has no output; mark the tensors it "
                         f"computes with mark_output(t)")
