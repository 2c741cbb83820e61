"""Plain dataclasses of the μGraph optimizer's results (paper §6), read by the lowering.

Tiles of a block graph are named deterministically: the k-th input iterator's tile is
`in{k}`, the j-th op's output `op{j}` (`op{j}.{k}` for the k-th output of a
multi-output op). `BlockPlan.name(t)` maps an `STensor` to its name.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from ..core.graph import GraphError, STensor, TBGraph


class SmemCapacityError(GraphError):
    """The shared-memory plan of a block graph exceeds the capacity."""


def tile_names(tb: TBGraph) -> dict[int, str]:
    """id(STensor) -> name, for every tile of `tb`."""
    names = {id(r.stensor): f"in{k}" for k, r in enumerate(tb.inputs)}
    for j, op in enumerate(tb.ops):
        for k, t in enumerate(op.outputs):
            names[id(t)] = f"op{j}" if len(op.outputs) == 1 else f"op{j}.{k}"
    return names


def tiles(tb: TBGraph) -> list[STensor]:
    return [r.stensor for r in tb.inputs] + [t for op in tb.ops for t in op.outputs]


def atom_bytes(row_bytes: int, swizzle: int) -> int:
    """Bytes of the column blocks a row of `row_bytes` under `swizzle` is stored in (0: the
    rows whole): rows wider than a 128-byte swizzle, and rows wider than a 32- or 64-byte
    swizzle whose width is no power of two (a head dim of 80 or 96: 160 or 192 bytes), are
    cut into blocks of the swizzle's width, each block [rows, width] row-major: Hopper's
    swizzle atoms, which a wgmma descriptor reads (the matrix one block after the other),
    and whose 8-row groups ldmatrix reads without bank conflicts."""
    if swizzle and row_bytes > swizzle and (swizzle == 128 or row_bytes & (row_bytes - 1)):
        return swizzle
    return 0


@dataclass
class TileLayout:
    name: str
    shape: tuple
    dtype: str
    inner_dim: int          # the dim stored contiguously (stride 1)
    swizzle: int = 0        # XOR-swizzle width in bytes: 0 (none), 32, 64 or 128

    def offset(self, index) -> int:
        """Element offset of logical `index` in the tile's shared-memory buffer.

        Rows are the tile flattened over all dims but `inner_dim` (row-major), each row
        `shape[inner_dim]` elements long (R bytes). With a swizzle of S bytes, the
        16-byte chunk holding the element moves to chunk ^ phase within the row, where
        phase = (row // per_phase) % (S // 16) and per_phase = max(1, 128 // R)
        (Triton's swizzled shared layout with 16-byte vectors). S divides R, so the
        chunk stays in its row and 16-byte vectors stay contiguous. Rows of the last dim
        that `atom_bytes` cuts into blocks narrower than 128 bytes are swizzled so within
        their block (R = the block's width), the blocks one after the other. (Blocks of
        128 bytes, as the lowering stores them, hold every chunk in the bank it has in
        the whole row: the plan keeps the whole rows there.)
        """
        st = self.strides
        lin = sum(i * s for i, s in zip(index, st))
        if not self.swizzle:
            return lin
        item = {"f16": 2, "bf16": 2, "f32": 4}[self.dtype]
        n = self.shape[self.inner_dim]
        row, col = divmod(lin, n)
        base = 0
        width = atom_bytes(n * item, self.swizzle) if self.inner_dim == len(self.shape) - 1 else 0
        if 0 < width < 128:
            blk, col = divmod(col, width // item)
            base, n = blk * self.rows * (width // item), width // item
        per_phase = max(1, 128 // (n * item))
        phase = (row // per_phase) % (self.swizzle // 16)
        per_chunk = 16 // item
        chunk, within = divmod(col, per_chunk)
        return base + row * n + (chunk ^ phase) * per_chunk + within

    @property
    def rows(self) -> int:
        """Rows of the tile: its elements over the length of its inner dim."""
        return prod(self.shape) // self.shape[self.inner_dim]

    @property
    def strides(self) -> tuple:
        """Element strides: `inner_dim` has stride 1, the other dims row-major around it."""
        order = [d for d in range(len(self.shape)) if d != self.inner_dim] + [self.inner_dim]
        strides, acc = [0] * len(self.shape), 1
        for d in reversed(order):
            strides[d] = acc
            acc *= self.shape[d]
        return tuple(strides)


@dataclass
class LayoutPlan:
    tiles: dict[str, TileLayout]
    cost: int               # model cost of the chosen layouts (lower is better)
    default_cost: int       # cost of the default (row-major, unswizzled) layouts
    optimal: bool           # the solver proved optimality
    enabled: bool = True


@dataclass
class Stage:
    region: str             # "pre" (once before the loop), "loop" (every iteration) or "post" (once after it)
    ops: list[int]          # indices into tb.ops, in execution order
    barrier_before: bool    # a block-level barrier (bar.sync) precedes the stage


@dataclass
class SchedulePlan:
    order: list[int]        # all tb.ops indices in execution order
    stages: list[Stage]
    barriers: int           # static barriers of this schedule (loop + post + before savers)
    barriers_program_order: int  # the same count for the ops in the order they were built
    enabled: bool = True

    @property
    def barrier_ops(self) -> list[int]:
        """Op indices that are preceded by a barrier."""
        return [s.ops[0] for s in self.stages if s.barrier_before and s.ops]


@dataclass
class SmemBuffer:
    name: str
    offset: int             # bytes from the start of dynamic shared memory
    size: int               # bytes reserved (copies × tile bytes, aligned)
    start: int              # live range over schedule steps [start, end]
    end: int
    copies: int = 1         # 2 for double-buffered iterator tiles


@dataclass
class SmemPlan:
    buffers: dict[str, SmemBuffer]
    total_bytes: int        # dynamic shared memory the kernel needs
    no_reuse_bytes: int     # bytes without reuse (every buffer its own range)
    capacity: int
    optimal: bool
    enabled: bool = True

    def offset(self, name: str) -> int:
        return self.buffers[name].offset


@dataclass
class BlockPlan:
    layouts: LayoutPlan
    schedule: SchedulePlan
    smem: SmemPlan
    names: dict[int, str] = field(default_factory=dict, repr=False)

    def name(self, t: STensor) -> str:
        return self.names[id(t)]

    def layout(self, t: STensor) -> TileLayout:
        return self.layouts.tiles[self.name(t)]


# Z3 work units per millisecond of solving on the 2-core development machine (measured
# 2026-11-24: about 38-45 million a second).
Z3_UNITS_PER_MS = 40_000


def solver_budget(opt, ms: int) -> None:
    """Bound a Z3 solver by a deterministic amount of work (`rlimit`) worth about `ms`
    milliseconds on an idle machine, not by wall-clock time: a timeout makes the plan, and
    so the PTX, depend on the machine's load."""
    opt.set("rlimit", max(1, int(ms)) * Z3_UNITS_PER_MS)
