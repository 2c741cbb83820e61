"""The plan of one graph-defined kernel: every decision the lowering takes before it
emits a line, as data (no MLIR, no emitter), so it can be printed (`describe()`),
unit-tested, and read by the emitters in `block.py`.

Decided here, from the block graph, its device tensors and the `Options`:

- which matmuls run on the tensor cores, and which keep their result in registers
  (a `none` accumulator carrying the fragments, or an element-wise op applied to them and
  fed to the next matmul / a `sum` accumulator: `frag_fuse`);
- each tile's shared-memory layout (padding or swizzle, innermost dim; the optimizer's
  layout plan), its offset (the optimizer's shared-memory plan) and ring depth, or the
  offsets and ring depth recorded in the IR (`tb.smem`, by `--mirage-smem-plan`),
  checked (`smem_offsets` gives what to record);
- which inputs are 16-byte cp.async copies, which stream with an L2 evict_first policy;
- the order of the ops (the optimizer's schedule) and where warps share a row
  reduction (`row_split`) or an element loop moves 16-byte chunks (`vec_width`);
- the split of the for-loop over blocks (`choose_split`) and the workspace it needs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import gcd, prod

from ..core.graph import GraphError, Op, STensor, TBGraph
from ..core.ops import is_accumulator
from ..core.rules import chunks_ok
from ..optimize.layout import inner_dim, lowering_layouts
from ..optimize.plan import SmemPlan, atom_bytes, tile_names
from ..optimize.schedule import _Deps, schedule as schedule_ops
from ..optimize.smem import buffers, check_offsets, live_ranges, plan_smem
from ..target import DEFAULT as DEFAULT_TARGET
from . import scalar
from .emitter import SMEM, Emitter, Idx

class LoweringError(GraphError):
    """A μGraph that this lowering cannot turn into a GPU kernel (the message says why).
    `tb`: the block graph at fault, where the error is about one (the passes report it
    at its kn.graph_def)."""

    def __init__(self, message: str, tb: TBGraph | None = None):
        super().__init__(message)
        self.tb = tb


ALIGN = 128




@dataclass
class Tile:
    shape: tuple
    elt: str  # f16 | bf16 | f32
    itemsize: int
    ld: int = 0
    rows_alloc: int = 0
    stages: int = 1
    offset: int = 0  # bytes in dynamic shared memory
    inner: int = -1  # the dim stored contiguously (-1: the last); the layout plan's
    swizzle: int = 0  # XOR swizzle in bytes (TileLayout.offset); 0 = none

    def __post_init__(self):
        if not self.ld:
            self.ld = self.cols
        if not self.rows_alloc:
            self.rows_alloc = self.rows

    @property
    def cols(self) -> int:
        return self.shape[-1] if self.shape else 1

    @property
    def rows(self) -> int:
        return prod(self.shape[:-1]) if self.shape else 1

    @property
    def elems(self) -> int:
        return self.rows_alloc * self.ld

    @property
    def stage_bytes(self) -> int:
        return -(-self.elems * self.itemsize // ALIGN) * ALIGN

    @property
    def bytes(self) -> int:
        return self.stage_bytes * self.stages

    @property
    def mtype(self) -> str:
        return f"memref<{self.elems}x{self.elt}, {SMEM}>"

    @property
    def mtype2d(self) -> str:
        if self.atom:  # the column blocks one under the other
            return f"memref<{self.rows_alloc * self.cols // self.atom}x{self.atom}x{self.elt}, {SMEM}>"
        return f"memref<{self.rows_alloc}x{self.ld}x{self.elt}, {SMEM}>"

    @property
    def atom(self) -> int:
        """The width of the column blocks the rows are stored as (elements; 0: rows stored
        whole; `optimize.plan.atom_bytes`), each block [rows_alloc, atom] row-major and
        swizzled as `TileLayout.offset` says: Hopper's swizzle atoms, which wgmma reads
        through a descriptor."""
        if self.inner_last and self.ld == self.cols:
            return atom_bytes(self.cols * self.itemsize, self.swizzle) // self.itemsize
        return 0

    def mn_major_offsets(self) -> tuple[int, int, int]:
        """Bytes (pitch, leading offset, stride offset) of this tile [K, N] as the MN-major
        operand of a wgmma descriptor: one row of K to the next; one column block to the
        next (`atom`; unused where a row is one block); one group of 8 rows of K to the
        next. PTX ISA, the MN-major canonical layouts under a swizzle of S bytes, in
        16-bit elements: ((8, S/16, m), (8, k)) : ((1, 8, LBO), (S/2, SBO))."""
        pitch = (self.atom or self.cols) * self.itemsize
        return pitch, (self.rows_alloc * pitch if self.atom else 8 * pitch), 8 * pitch

    @property
    def inner_last(self) -> bool:
        return not self.shape or self.inner in (-1, len(self.shape) - 1)

    def layout_strides(self) -> list:
        """Element strides of a tile whose innermost dim is `inner` (the optimizer's
        `TileLayout.strides`): the other dims row-major around it."""
        r = len(self.shape)
        inner = self.inner % r
        order = [d for d in range(r) if d != inner] + [inner]
        st, acc = [0] * r, 1
        for d in reversed(order):
            st[d] = acc
            acc *= self.shape[d]
        return st

    def swz(self, e: Emitter, row: Idx, col: Idx, n: int) -> Idx:
        """`TileLayout.offset` of (row, col) for rows of n elements under the swizzle:
        the 16-byte chunk c of row r is stored at chunk c ^ ((r // per_phase) % (S // 16))."""
        vec = 16 // self.itemsize
        blk = None
        if self.atom and n == self.cols:
            blk, col, n = e.div(col, self.atom), e.rem(col, self.atom), self.atom
        per_phase = max(1, 128 // (n * self.itemsize))
        phase = e.rem(e.div(row, per_phase), self.swizzle // 16)
        off = e.add(e.mul(row, n), e.add(e.mul(e.xor(e.div(col, vec), phase), vec), e.rem(col, vec)))
        return off if blk is None else e.add(e.mul(blk, self.rows_alloc * n), off)

    def ldm_index(self, e: Emitter, row: Idx, col: Idx) -> tuple:
        """[row, column] in the 2-d view `mtype2d` of the 16-byte chunk starting at logical
        (row, col) (col a multiple of the chunk): ldmatrix addresses."""
        if not self.swizzle:
            return row, col
        vec = 16 // self.itemsize
        n = self.atom or self.cols
        per_phase = max(1, 128 // (n * self.itemsize))
        phase = e.rem(e.div(row, per_phase), self.swizzle // 16)
        if self.atom:
            row, col = e.add(e.mul(e.div(col, n), self.rows_alloc), row), e.rem(col, n)
        return row, e.mul(e.xor(e.div(col, vec), phase), vec)

    def offset_rc(self, e: Emitter, row: Idx, col: Idx) -> Idx:
        """Offset of element `col` of flattened row `row` (rows over all dims but the last)."""
        if self.inner_last:
            if self.swizzle:
                return self.swz(e, row, col, self.cols)
            return e.add(e.mul(row, self.ld), col)
        return self.offset_of(e, e.delinearize(row, self.shape[:-1]) + [col])

    def offset_of(self, e: Emitter, coords) -> Idx:
        if not self.shape:
            return 0
        if self.inner_last:
            row = e.dot(coords[:-1], _row_major(self.shape[:-1]))
            return self.offset_rc(e, row, coords[-1])
        lin = e.dot(coords, self.layout_strides())
        if not self.swizzle:
            return lin
        n = self.shape[self.inner % len(self.shape)]
        return self.swz(e, e.div(lin, n), e.rem(lin, n), n)


def _row_major(shape):
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


@dataclass
class GlobalArg:
    name: str  # SSA name of the kernel argument
    shape: tuple
    strides: tuple
    elt: str
    itemsize: int
    offset: int = 0  # elements from the buffer's start (a slice of a larger tensor)

    @property
    def span(self) -> int:
        return self.offset + 1 + sum((d - 1) * s for d, s in zip(self.shape, self.strides))

    def chunks_along(self, d: int, vec: int) -> bool:
        """Whether dim d is contiguous and every vec-element chunk along it 16-byte aligned."""
        return (self.strides[d] == 1 and self.offset % vec == 0
                and all(s % vec == 0 for k, s in enumerate(self.strides) if k != d))

    @property
    def mtype(self) -> str:
        return f"memref<{self.span}x{self.elt}>"


MAX_THREADS_PER_SM = 2048  # sm_80 .. sm_90
SMEM_RESERVED_PER_BLOCK = 1024  # the driver's shared memory per block


@dataclass
class Options:
    tensor_cores: bool = True
    async_copy: bool = True
    stages: int = 4  # deepest ring for loop-varying inputs (>= 2: prefetch); the plan may take less
    # deepest ring of a staged matmul's chunks (`KStage`; shallower where shared memory is
    # short). H100, MCFuser's G5/G6 in chunks of 64 on wgmma (benchmarks/results/mbci.md,
    # 2026-12-07 23:31): 6 slots (copies 4 chunks ahead) 4-21 % faster than 4 (2 ahead)
    kstages: int = 6
    smem_capacity: int = DEFAULT_TARGET.smem_per_block
    split: int = 0  # blocks sharing one for-loop (split-K); 0 = choose (see choose_split)
    sms: int = DEFAULT_TARGET.sms  # multiprocessors of the target
    smem_per_sm: int = DEFAULT_TARGET.smem_per_sm  # shared by the co-resident blocks of a split loop
    unroll_k: int = 32  # unroll the k-steps of a tile matmul up to this many
    # split for-loop: the last block of each split group to finish combines the partials
    # and runs the epilogue (one kernel; arrival counters in the workspace) instead of a
    # second, combine kernel
    fold_combine: bool = True
    # inputs that each element of which one block reads (no grid dim replicates them, e.g.
    # the weights of a GEMV) are copied with an L2 evict_first policy, so that streaming
    # them does not push other data out of L2 (nor force write-backs of dirty lines)
    evict_first: bool = True
    # the μGraph optimizer's plan (paper §6), each switchable for the Figure-12 ablation:
    # layout: tiles take the ILP's innermost dim and swizzle (swizzled ldmatrix operands
    # instead of padded rows); schedule: ops run in the plan's depth order with a barrier
    # only where a tile written by other threads is read (or dead memory is reused), and
    # one barrier per iteration of the cp.async ring; smem_plan: shared-memory offsets
    # reuse the space of dead tiles (live ranges of the schedule)
    layout: bool = True
    schedule: bool = True
    smem_plan: bool = True
    # matmul -> unary op kept in the mma fragments (registers), feeding the next tensor-core
    # matmul's A operand and `sum` accumulators directly (schedule on; `_plan_frag_fusion`)
    frag_fusion: bool = True
    # element loops move 16-byte chunks (vector loads/stores of shared memory) where the
    # tiles allow it (`BlockLowering.vec_width`)
    vectorize: bool = True
    # threads of every block (0: the μGraph's block_dim); a tuning knob, see `tuning_choices`
    threads: int = 0
    # a block graph of row-wise ops without a for-loop (element-wise ops, thread graphs, row
    # reductions, RMS norms) keeps its rows in registers: 16-byte global loads and stores,
    # no shared-memory tiles, a barrier only where warps combine a row (`plan_rows`)
    row_registers: bool = True
    # programmatic dependent launch (sm_90; `KernelPlan.pdl`): a kernel waits for the grid
    # before it (griddepcontrol.wait) and lets the next one launch as it finishes, so that
    # back-to-back launches overlap; off on targets without it (`lower.to_ptx`)
    pdl: bool = True
    # Hopper warpgroup matmuls (sm_90a; `KernelPlan.wgmma`): a tile matmul of 16 rows a
    # warp in a block of whole warpgroups whose B tile is swizzled runs as wgmma.mma_async,
    # B read by the tensor cores straight from shared memory; off on targets without it
    wgmma: bool = True
    # a split for-loop of at most CLUSTER_MAX blocks whose accumulators are plain sums runs
    # its split blocks as one thread-block cluster (sm_90): each block writes its partials,
    # the cluster waits at its barrier, and every block sums its own rows of them and stores
    # them (the ops after the loop, if any, then run on the first block: `cluster_split`),
    # instead of the last block combining all of them alone
    clusters: bool = True


K_CHUNK = 64  # K of the chunks of a matmul the lowering stages on its own (`KernelPlan.kstage`)


@dataclass
class KStage:
    """A matmul staged in chunks of K (`KernelPlan.kstage`): its operands A [.., M, K] and
    B [K, N], inputs `inputs` of the block graph, are copied kc columns of A and kc rows of
    B at a time into a ring of `stages` slots inside the matmul, which runs as K / kc
    matmuls `sub` on the chunks (`MatmulEmitter.mma_staged`). A tile too big for shared
    memory, A of a GEMM chain whose K is large (MCFuser's G6: 64 x 1024), then takes
    `stages` chunks; each iteration of the for-loop reads A again (from L2). The μGraph
    says so (`tb.input`'s k_chunk, [stage]); where the whole tiles do not fit the lowering
    stages a matmul of two inputs on its own, in chunks of K_CHUNK."""
    kc: int
    stages: int
    inputs: tuple
    sub: Op


def running_maxima(tb: TBGraph) -> list[Op]:
    """The `reduction_max` ops that keep a running max across the for-loop's iterations
    (their operand changes from iteration to iteration)."""
    if tb.forloop_range < 2:
        return []
    varying = tb.accum_counts()  # tiles on paths from loop-varying inputs (before accumulators)
    return [op for op in tb.ops if op.kind == "reduction_max" and (varying.get(id(op.inputs[0])) or (1, 1))[1] == 0]


def split_ok(tb: TBGraph) -> bool:
    """Whether the for-loop can be split across blocks: every output is saved after
    the loop and at least one accumulator exists, and all of them are plain sums of
    their iterations (a rescaling accumulator or a running max is not: its partials
    would need each other's maxima)."""
    if tb.forloop_range < 2 or any(o.forloop_dim != -1 for o in tb.outputs):
        return False
    if running_maxima(tb) or any(op.kind == "forloop_accum_rescale" for op in tb.ops):
        return False
    return any(op.kind == "forloop_accum" for op in tb.ops)


# warpgroup matmuls read A through a shared-memory descriptor from this K on (A's ldmatrix
# fragments: K / 4 registers a thread). H100 (benchmarks/results/mbci.md, 2026-11-25 12:17):
# at K = 512 the fragments spilled (G5's 64 x 64 x 128 chain: 255 registers, 13.1 -> 11.5 us
# with the descriptor); at K = 64 the attention rows ran slower with it (S1-S3 13.2-14.1 ->
# 15.7-17.1 us), as did G7 (K = 128, 8.1 -> 8.9)
A_DESC_MIN_K = 256

# the most blocks of a portable thread-block cluster (CUDA: 8)
CLUSTER_MAX = 8


def cluster_split(tb: TBGraph, split: int, opts: "Options") -> bool:
    """Whether a for-loop split over `split` blocks combines its partials in a cluster: every
    accumulator is a plain sum with rows for every block of the cluster, whose padded f32
    copies fit in shared memory (`KernelPlan.place_parts`); either the ops after the loop
    run on the cluster's first block (`post_ops`: attention's division by the row sums),
    or there are none and each accumulator's output is saved as it is, in 4-element rows."""
    if not opts.clusters or not 1 < split <= CLUSTER_MAX or not split_ok(tb):
        return False
    accs = [op for op in tb.ops if op.kind == "forloop_accum"]
    if sum(part_tile(op.outputs[0].shape).bytes for op in accs) > opts.smem_capacity:
        return False
    if not all(op.attrs["kind"] in ("none", "sum") and prod(op.outputs[0].shape[:-1]) % split == 0 for op in accs):
        return False
    if post_ops(tb):
        return True
    saved = {id(rec.stensor) for rec in tb.outputs}
    return {id(op.outputs[0]) for op in accs} == saved and all(op.outputs[0].shape[-1] % 4 == 0 for op in accs)


def post_ops(tb: TBGraph) -> list[Op]:
    """The ops after the for-loop other than its accumulators."""
    after = accum_after(tb)
    return [op for op in tb.ops if id(op) in after and op.kind != "forloop_accum"]


def part_tile(shape) -> Tile:
    """A register accumulator's partial in shared memory (`KernelPlan.place_parts`): f32
    rows padded by 8 (the fragments' 8-byte stores of 8 rows hit distinct banks)."""
    return Tile(tuple(shape), "f32", 4, ld=shape[-1] + 8)


def accum_after(tb: TBGraph) -> set[int]:
    """id() of the ops that run after the for-loop (those fed by an accumulator's output)."""
    counts = tb.accum_counts(varying_only=False)
    return {id(op) for op in tb.ops
            if not is_accumulator(op.kind) and any((counts.get(id(t)) or (0, 0))[1] >= 1 for t in op.outputs)}


def choose_split(tb: TBGraph, opts: "Options") -> int:
    """Split the for-loop when the grid has fewer blocks than 3/4 of the multiprocessors
    (and, for a loop whose matmuls compute much on what it streams, fewer than 1/4 of
    them): the largest divisor s of the loop range with blocks * s <= 4 * SMs and at least
    MIN_SPLIT_ITERS iterations per block left (each split block fills the cp.async ring
    again, and the partials are combined after); a long loop of a prime count of steps (17
    steps of 241 keys) runs one iteration a block, up to 16 blocks an SM."""
    if opts.split:
        return opts.split if split_ok(tb) and tb.forloop_range % opts.split == 0 else 1
    if not split_ok(tb):
        return 1
    rows = cluster_rows(tb) if opts.clusters else 0
    return default_split(prod(tb.grid_dim), tb.forloop_range, opts.sms, loop_intensity(tb), rows)


def cluster_rows(tb: TBGraph) -> int:
    """The rows every split block of a cluster could take a share of (`cluster_split`: the
    gcd of the accumulators' rows); 0 if the loop's combine cannot be a cluster's."""
    rows = gcd(*(prod(op.outputs[0].shape[:-1]) for op in tb.ops if op.kind == "forloop_accum"))
    return rows if cluster_split(tb, 2, Options(clusters=True)) else 0


def loop_intensity(tb: TBGraph) -> float:
    """FLOPs of the matmuls in the for-loop's body an iteration (those reading what the loop
    streams, before an accumulator) per byte of the tiles it streams (the inputs that vary
    with the loop, and staged ones, read again each iteration); 0 where nothing streams."""
    varying = {id(r.stensor) for r in tb.inputs if r.forloop_dim != -1}
    streamed = sum(prod(r.stensor.shape) * r.stensor.dtype.itemsize for r in tb.inputs if r.per_iteration)
    flops = 0
    for op in tb.ops:
        if op.kind.startswith("forloop_accum") or not any(id(t) in varying for t in op.inputs):
            continue
        varying |= {id(t) for t in op.outputs}
        if op.kind == "matmul":
            flops += 2 * prod(op.outputs[0].shape) * op.inputs[0].shape[-1]
    return flops / streamed if streamed else 0.0


# a loop that computes at least this many FLOPs a streamed byte (a block of 64 rows of a GEMM
# chain or of attention: 64-65; a GEMV's rows: 1-16) is not split from a quarter of the SMs
# on: each split block repeats the prologue and fills the ring again for a few iterations,
# and the partials' combine follows. H100, the chains' picks with and without their default
# split (benchmarks/results/mbci.md, 2026-11-25 07:11): S2 (96 blocks, 8 iterations) 19.9 ->
# 14.0 us unsplit (split 4), S4 (48 blocks) 12.7 -> 10.3, G7 (64 blocks) 9.9 -> 8.4
COMPUTE_BOUND_INTENSITY = 32.0


# fewest iterations a split block keeps. H100, pre-defined matmuls [512, 512] @ [512, 256] in 64
# blocks of 64 x 32 with 4 K steps (benchmarks/results/mbci.md, 2026-11-25 07:50): split 2
# (2 steps a block) 11.0 us, unsplit 7.4; the same for G4-G8's second GEMMs, and [1024, 1024]
# @ [1024, 128] (8 steps, split 4) 12.9 against 8.8
MIN_SPLIT_ITERS = 4


def default_split(blocks: int, R: int, sms: int, intensity: float = 0.0, cluster: int = 0) -> int:
    """`choose_split`'s rule for a loop that may split: a grid of `blocks`, a loop of `R`
    computing `intensity` FLOPs a streamed byte (`loop_intensity`), whose partials a
    cluster can combine when it splits into a divisor of `cluster` rows (`cluster_rows`).
    Such a loop that computes much on what it streams is split up to half the SMs, however
    few iterations a block keeps: each block's matmuls are what takes the time, and the
    combine is shared by the cluster. H100, the warp-resident tilings of G4-G12 with each
    split (benchmarks/results/mbci.md, 2026-11-25 09:40): the fastest split of every tiling
    of a grid under 64 blocks launched 64 (G4 64x128x128: 16 blocks, R 4: split 4 11.6 us,
    unsplit 22.3; 64x64x256: 8 blocks, R 8: split 8 14.3, 4 16.2), of 64 blocks or more none.
    A grid over a quarter of the SMs, which that leaves unsplit, may still split up to all of
    them where each block keeps MIN_SPLIT_ITERS iterations: since the partials combine in
    distributed shared memory (e83ce02), splits 2 of 64 blocks of 8 or 16 iterations ran
    faster (H100, 2026-11-25 14:38, benchmarks/results/mbci.md: G11 64x128x128 15.7 -> 12.7
    us, 64x64x128 17.2 -> 13.4, G9 64x64x64 10.4 -> 9.3, S1 64 rows 13.7 -> 13.3), those of 2
    iterations left slower (S4-S6: 10.9-12.4 -> 11.6-13.5). Smaller grids split that far
    made the search pick 16- and 32-wide loop tiles that ran slower (G8-G10, 14:51)."""
    if intensity >= COMPUTE_BOUND_INTENSITY and cluster:
        fits = [s for s in range(1, min(R, CLUSTER_MAX) + 1)
                if R % s == 0 and cluster % s == 0 and blocks * s <= sms // 2]
        if fits == [1] and 4 * blocks > sms:
            fits += [s for s in range(2, min(R, CLUSTER_MAX) + 1)
                     if R % s == 0 and cluster % s == 0 and blocks * s <= sms and R // s >= MIN_SPLIT_ITERS]
        return max(fits, default=1)
    if blocks >= 0.75 * sms or (intensity >= COMPUTE_BOUND_INTENSITY and 4 * blocks >= sms):
        return 1
    best = 1
    for s in range(2, R + 1):
        if R % s == 0 and blocks * s <= 4 * sms and R // s >= MIN_SPLIT_ITERS:
            best = s
    if best == 1 and R >= 8 and blocks * R <= 16 * sms and all(R % d for d in range(2, R)):
        best = R  # a long loop of a prime count of steps: one a block
    return best


def mma_ok(op: Op, opts: "Options", nthreads: int) -> bool:
    """Whether block matmul `op` runs on tensor cores (else the f32 FMA matmul)."""
    if not opts.tensor_cores or nthreads % 32:
        return False
    a, b = op.inputs
    # bf16: upstream nvgpu.mma.sync cannot deduce bf16 PTX operand types (MLIR 22);
    # bf16 tiles use nvgpu.ldmatrix and an inline-PTX mma.sync (`mma_bf16`)
    if a.dtype.mlir not in ("f16", "bf16") or b.dtype != a.dtype:
        return False
    if prod(a.shape[:-2]) != 1 or prod(b.shape[:-2]) != 1:
        return False
    K, N = a.shape[-1], b.shape[-1]
    return K % 16 == 0 and N % 8 == 0


def k_lanes(outputs: int, K: int, threads: int) -> int:
    """Threads that share one output element of an FMA matmul and split its K sum: the most
    (a power of two, at most a warp) that the block's threads hold, if at least 4 (else 1).
    P @ V at decode has 28-64 outputs a block and 241 keys a step: one thread per output
    left most threads idle and ran 241 dependent FMAs each. H100, one matmul, cold L2
    (benchmarks/results/matmul_sweep.md): [8, 4, 4097] @ [8, 4097, 128] 73.1 -> 62.7 us (4
    lanes), 59.5 -> 44.6 (256 threads, 8 lanes); [16, 1, 4097] @ [16, 4097, 64] 47.4 ->
    32.2; with 2 lanes no gain ([4, 7, 4097] @ [4, 4097, 128]: 88.1 -> 92.8)."""
    lanes = 1
    while lanes < 32 and outputs * lanes * 2 <= threads and lanes * 2 <= K and threads % 32 == 0:
        lanes *= 2
    return lanes if lanes >= 4 else 1


FMA_LONG_K = 1024  # an FMA matmul's K sum this long is a chain worth more lanes
WIDE_BLOCK = 512
WIDE_TILE = 32768


def block_threads(tb: TBGraph, opts: "Options", split: int = 1) -> tuple:
    """Threads of a block: opts.threads (a 1-d block) if set, else the μGraph's block_dim
    (neither changes what the block graph computes), widened to WIDE_BLOCK threads where
    - an FMA matmul sums at least FMA_LONG_K terms an output and more threads give it at
      least twice the lanes (`k_lanes`). H100, decode attention: P @ V over 4097 keys in 64
      blocks of 64 outputs, one thread an output, ran 4097 dependent FMAs a thread: 51 us;
    - or a grid of fewer blocks than a quarter of the SMs (counting those of a for-loop
      split over `split` blocks) reads at least WIDE_TILE bytes a block: its few warps keep
      few loads in flight (exp and row sums over [8, 4097] in 4 blocks: 23 us)."""
    if opts.threads:
        return (opts.threads, 1, 1)
    block = tuple(tb.block_dim)
    T = prod(block)
    if T >= WIDE_BLOCK:
        return block
    if prod(tb.grid_dim) * split < opts.sms // 4 and \
            sum(prod(r.stensor.shape) * r.stensor.dtype.itemsize for r in tb.inputs) >= WIDE_TILE:
        return (WIDE_BLOCK, 1, 1)
    for op in tb.ops:
        if op.kind == "matmul" and not mma_ok(op, opts, T):
            n, K = prod(op.outputs[0].shape), op.inputs[0].shape[-1]
            if K >= FMA_LONG_K and k_lanes(n, K, WIDE_BLOCK) >= 2 * k_lanes(n, K, T):
                return (WIDE_BLOCK, 1, 1)
    return block


ROW_OPS = scalar.BINARY + scalar.UNARY + ("constant", "thread_graph", "reduction", "reduce_max", "rms_norm")
MAX_ROW_CHUNKS = 4  # 16-byte chunks a thread keeps per tensor before the plan adds threads


@dataclass(frozen=True)
class RowPlan:
    """A block graph computed in registers, row by row: every tensor broadcasts to `shape`
    (rows x L); thread t owns the 16-byte chunks (`V` elements) t % tpr + i * tpr (i <
    per_row) of the rows (t // tpr) + p * (threads // tpr) (p < passes). Row reductions
    combine the chunks in-thread, the `tpr` threads of a row by shuffles and, where a row
    spans warps, their partials through `slots` f32 words of shared memory per reduction."""
    shape: tuple
    V: int
    threads: int
    tpr: int
    passes: int
    per_row: int
    reductions: int

    @property
    def slots(self) -> int:
        return self.passes * (self.threads // 32) if self.tpr > 32 else 0

    @property
    def smem(self) -> int:
        return self.reductions * self.slots * 4


def _broadcasts(t: tuple, shape: tuple) -> bool:
    return len(t) <= len(shape) and all(a in (1, b) for a, b in zip(reversed(t), reversed(shape)))


def plan_rows(tb: TBGraph, ins: list[GlobalArg], outs: list[GlobalArg], opts: Options,
              nthreads: int) -> RowPlan | None:
    """The register row layout of `tb` (`RowPlan`), or None where it does not apply: a for-loop,
    an op other than element-wise ops, thread graphs and reductions / RMS norms over the last
    dim, a tensor that does not broadcast to the largest one with its last dim whole or 1, or
    a device tensor whose rows are not 16-byte chunks. Threads: the μGraph's (or opts.threads),
    doubled while a thread would keep more than MAX_ROW_CHUNKS chunks, halved while some
    would have none (both only when opts.threads does not fix them)."""
    if not (opts.row_registers and opts.vectorize) or tb.forloop_range != 1 or not tb.ops:
        return None
    tensors = [rec.stensor for rec in tb.inputs] + [t for op in tb.ops for t in op.outputs]
    shape = max((tuple(t.shape) for t in tensors), key=prod)
    if len(shape) < 1:
        return None
    L = shape[-1]
    for op in tb.ops:
        if op.kind not in ROW_OPS or any(o.shape != op.outputs[0].shape for o in op.outputs):
            return None
        x = op.inputs[0] if op.inputs else None
        if op.kind in ("reduction", "reduce_max") and (
                op.attrs["dim"] % len(x.shape) != len(x.shape) - 1 or x.shape[-1] != L):
            return None
        if op.kind == "rms_norm" and (len(op.attrs.get("normalized_shape") or (1,)) != 1 or x.shape[-1] != L):
            return None
    if any(not t.shape or not _broadcasts(tuple(t.shape), shape) or t.shape[-1] not in (1, L) for t in tensors):
        return None
    V = 16 // min(t.dtype.itemsize for t in tensors)
    if L % V:
        return None
    for g, t in [(g, rec.stensor) for g, rec in zip(ins, tb.inputs)] + [(g, rec.stensor) for g, rec in zip(outs, tb.outputs)]:
        if t.shape[-1] == L and L > 1 and not g.chunks_along(len(g.shape) - 1, V):
            return None
    rows, n = prod(shape[:-1]), L // V
    T = nthreads
    if not opts.threads:
        while rows * n > MAX_ROW_CHUNKS * T and T < 1024:
            T *= 2
        while T > 32 and rows * n < T:
            T //= 2
    if T % 32 or rows * n < T:
        return None
    tpr = min(T, n)
    if n >= T and n % T:
        return None
    if n < T and (T % n or (n < 32 and n & (n - 1)) or (n > 32 and n % 32)):
        return None
    if rows % (T // tpr):
        return None
    passes, per_row = rows // (T // tpr), n // tpr
    if passes * per_row > 2 * MAX_ROW_CHUNKS:
        return None
    reds = sum(1 for op in tb.ops if op.kind in ("reduction", "reduce_max", "rms_norm"))
    return RowPlan(shape, V, T, tpr, passes, per_row, reds)


def _unary_chain(op: Op) -> bool:
    """A thread graph of one input and one output whose ops are a chain of unary ops
    (exp(s * x) between the GEMMs of attention): applied to mma fragments like one unary op."""
    if op.kind != "thread_graph" or len(op.inputs) != 1 or len(op.outputs) != 1:
        return False
    th = op.body
    x = th.inputs[0] if len(th.inputs) == 1 else None
    for o in th.ops:
        if o.kind not in scalar.UNARY or len(o.inputs) != 1 or o.inputs[0] is not x:
            return False
        x = o.outputs[0]
    return bool(th.ops) and len(th.outputs) == 1 and th.outputs[0] is x


class KernelPlan:
    """The decisions for lowering block graph `tb` (mode "full", or with the for-loop split
    over `split` blocks: "partial" / "combine", see `BlockLowering.lower`)."""

    def __init__(self, tb: TBGraph, ins: list[GlobalArg], opts: Options, mode: str = "full", split: int = 1,
                 has_outputs: bool = True, name: str = "kernel", outs: list[GlobalArg] | None = None):
        if mode == "combine":  # reads the partials once: no ring
            opts = replace(opts, stages=1)
        self.tb, self.ins, self.opts, self.mode, self.split, self.name = tb, ins, opts, mode, split, name
        # partial kernel whose split blocks form a cluster that combines (`cluster_split`)
        self.cluster = split if mode == "partial" and has_outputs and cluster_split(tb, split, opts) else 0
        # the ops after the loop run on the cluster's first block, on the accumulators' tiles
        # that the cluster's blocks fill with their shares of the sums
        self.cluster_post = bool(self.cluster and post_ops(tb))
        # partial kernel that also combines (last-arriving block of each split group)
        self.fold = mode == "partial" and opts.fold_combine and has_outputs and not self.cluster
        self.ws_off: dict[int, int] = {}
        off = 0
        for op in tb.ops:
            if op.kind == "forloop_accum" and not self.cluster:  # a cluster's partials stay in shared memory
                self.ws_off[id(op)] = off
                off += -(-prod(op.outputs[0].shape) * split * prod(tb.grid_dim) // 4) * 4  # 16-byte aligned parts
        self.ws_size = off
        self.cnt_off = off  # fold: one arrival counter (f32) per block of the μGraph's grid
        if self.fold:
            self.ws_size = off + prod(tb.grid_dim)
        self.block = block_threads(tb, opts, split if mode == "partial" else 1)
        self.nthreads = prod(self.block)
        self.R = tb.forloop_range
        self.lead = tuple(tb.grid_dim) + (self.R,)
        self.tiles: dict[int, Tile] = {}
        self.scratch: dict[int, Tile] = {}  # accumulator op output id -> f32 scratch
        self.running = {id(op) for op in running_maxima(tb)}  # reduction_max ops with a running state
        self.mma_ops: set[int] = set()  # id(op) of matmuls on tensor cores
        self.wgmma: set[int] = set()  # those of them run as warpgroup matmuls (`_wgmma_ok`)
        self.reg_acc: dict[int, Op] = {}  # id(accum op) -> matmul op whose fragments it keeps
        self.notes: dict = {"mma": 0, "cp_async_inputs": 0, "stages": 1, "warp_reductions": 0}
        self.kstage: dict[int, KStage] = {}  # id(matmul) -> its staging in chunks of K
        self.rows = plan_rows(tb, ins, outs, opts, self.nthreads) if mode == "full" and outs else None
        # the ring depth and offsets recorded in the IR for this kernel (`tb.smem`, read by the
        # importer: role -> (stages, {buffer: offset})), taken instead of planned; the record of
        # another lowering (other options) names other kernels or buffers: an error, never ignored
        recorded = tb.recorded_smem if opts.smem_plan else {}
        self.recorded = recorded.get(mode)
        if recorded and (self.recorded is None or self.rows):
            raise LoweringError(
                f"[smem] kernel {name}: tb.smem records shared memory for the {'/'.join(recorded)} "
                f"kernel(s) of this block graph, but the lowering emits "
                f"{'one keeping its rows in registers (no shared-memory tiles)' if self.rows else f'a {mode} kernel'}"
                f"; record it with --mirage-smem-plan under the options given to convert-mirage-to-gpu", tb)
        if self.rows:  # no tiles: the rows live in registers
            self.block, self.nthreads, self.smem = (self.rows.threads, 1, 1), self.rows.threads, self.rows.smem
            self.notes["row_registers"] = f"{self.rows.passes}x{self.rows.per_row} chunks/thread, {self.rows.tpr} threads/row"
            return
        self.kstage = self._kstage(None)  # those the μGraph stages
        try:
            self.plan()
        except LoweringError as err:  # the whole tiles do not fit: stage the matmuls that can be
            if self.kstage or self.recorded is not None or not str(err).startswith("[smem]"):
                raise
            self.kstage = self._kstage(K_CHUNK)
            if not self.kstage:
                raise
            self.plan()
            self.notes["k_staged_by_lowering"] = True

    def _kstage(self, kc: int | None) -> dict[int, KStage]:
        """The matmuls to stage in chunks of kc along K (`KStage`; kc None: those whose
        operands the μGraph stages, in its chunks): on the tensor cores, both operands
        inputs of the block graph (copied with cp.async) that no other op reads, K a
        multiple of kc with at least two chunks."""
        cons = self._consumers()
        pos = {id(rec.stensor): k for k, rec in enumerate(self.tb.inputs)}
        out = {}
        for j, op in enumerate(self.tb.ops):
            if op.kind != "matmul":
                continue
            a, b = op.inputs
            K = a.shape[-1]
            staged = id(a) in pos and self.tb.inputs[pos[id(a)]].k_chunk
            c = staged if kc is None else kc
            if not c or id(a) not in pos or id(b) not in pos:
                continue
            if (not mma_ok(op, self.opts, self.nthreads) or a is b or len(cons[id(a)]) != 1 or len(cons[id(b)]) != 1
                    or not chunks_ok(K, c) or prod(b.shape[:-2]) != 1 or not self.opts.async_copy):
                if kc is None:  # the μGraph asks for what this lowering cannot do
                    raise LoweringError(f"[stage] kernel {self.name}: op {j}'s operands are staged (k_chunk = {c}) "
                                        f"but it does not run on the tensor cores with cp.async copies under these "
                                        f"options", self.tb)
                continue
            sa = STensor(a.shape[:-1] + (c,), a.dtype)
            sb = STensor(b.shape[:-2] + (c, b.shape[-1]), b.dtype)
            sub = Op("matmul", [sa, sb], [STensor(op.outputs[0].shape, op.outputs[0].dtype)])
            out[id(op)] = KStage(c, max(2, min(self.opts.kstages, K // c)), (pos[id(a)], pos[id(b)]), sub)
        return out

    def tile_of(self, t: STensor) -> Tile:
        """The tile of `t`, or of a chunk of a staged matmul (`KStage.sub`): its operand's ring."""
        if id(t) in self.tiles:
            return self.tiles[id(t)]
        for op in self.tb.ops:
            ks = self.kstage.get(id(op))
            if ks is not None and any(t is x for x in ks.sub.inputs):
                return self.tiles[id(op.inputs[ks.sub.inputs.index(t)])]
        raise KeyError(t)

    def kstaged_inputs(self) -> set[int]:
        """Inputs of the block graph copied by their staged matmul (not by the loop)."""
        return {k for ks in self.kstage.values() for k in ks.inputs}

    def _consumers(self):
        cons: dict[int, list] = {}
        for op in self.tb.ops:
            for t in op.inputs:
                cons.setdefault(id(t), []).append(op)
        return cons

    def _warp_rows_ok(self, op: Op) -> bool:
        """Each warp owns whole 16-row blocks of the matmul's output (all its 16x8 tiles
        of those rows), with no clamped tiles: row-wise work on the fragments stays in the warp."""
        M, K, N, MT, NT, T, tpw = self.mma_geometry(op)
        return M % 16 == 0 and tpw % NT == 0 and T == tpw * (self.nthreads // 32)

    def _plan_frag_fusion(self, cons, out_ids) -> None:
        """Matmul -> unary element-wise op (or a thread graph chaining unary ops,
        `_unary_chain`) kept in registers: the op is applied to the mma fragments (a GEMM
        chain, matmul -> matmul: the fragments rounded to the tile's type, `frag_fuse` maps
        the first matmul to None); its result feeds a tensor-core matmul as the A operand
        straight from the fragments (C layout of two n-tiles = A layout of one k-step)
        and/or a `sum` accumulator (row sums of the fragments: in-thread, then 2 shuffles
        in the quad).
        Neither tile is stored in shared memory (FlashAttention-2's register reuse)."""
        self.frag_fuse: dict[int, Op] = {}  # id(first matmul) -> its unary consumer
        self.fused_unary: set[int] = set()
        self.reg_tiles: set[int] = set()    # tensors that live only in registers
        self.a_from_regs: dict[int, int] = {}  # id(second matmul) -> id(its register A operand)
        self.sum_regs: dict[int, int] = {}     # id(sum accumulator) -> id(its register input)
        if not self.opts.schedule or not self.opts.frag_fusion:
            return
        tb = self.tb
        pos = {id(o): j for j, o in enumerate(tb.ops)}
        acc_mms = {id(m) for m in self.reg_acc.values()}
        for op in tb.ops:
            if id(op) not in self.mma_ops or id(op) in acc_mms or not self._warp_rows_ok(op):
                continue
            s_t = op.outputs[0]
            c = cons.get(id(s_t), [])
            if len(c) != 1 or id(s_t) in out_ids:
                continue
            if c[0].kind in scalar.UNARY or _unary_chain(c[0]):
                u = c[0]
                e_t = u.outputs[0]
                users = cons.get(id(e_t), [])
            elif c[0].kind == "matmul":  # a GEMM chain: C's fragments are the next mma's A operand
                u, e_t, users = None, s_t, c
            else:
                continue
            if id(e_t) in out_ids or not users or e_t.dtype != s_t.dtype:
                continue
            rows1 = self.mma_geometry(op)
            ok = True
            a_mm, sums = [], []
            for o in users:
                if (o.kind == "matmul" and id(o) in self.mma_ops and o.inputs[0] is e_t and o.inputs[1] is not e_t
                        and self._warp_rows_ok(o)):
                    g2 = self.mma_geometry(o)
                    # same rows per warp, k-steps unrolled (static fragment indices)
                    if g2[0] == rows1[0] and g2[6] // g2[4] == rows1[6] // rows1[4] and g2[1] // 16 <= self.opts.unroll_k:
                        a_mm.append(o)
                        continue
                if o.kind == "forloop_accum" and o.attrs["kind"] == "sum" and id(o) not in self.reg_acc:
                    sums.append(o)
                    continue
                ok = False
            chain = [op] + ([u] if u is not None else []) + a_mm + sums
            if not ok or (u is None and not a_mm) or any(self.region[pos[id(x)]] != "loop" for x in chain):
                continue
            self.frag_fuse[id(op)] = u
            if u is not None:
                self.fused_unary.add(id(u))
            self.reg_tiles |= {id(s_t), id(e_t)}
            for o in a_mm:
                self.a_from_regs[id(o)] = id(e_t)
            for o in sums:
                self.sum_regs[id(o)] = id(e_t)
        self.notes["frag_fused"] = len(self.frag_fuse)

    def plan(self):
        tb = self.tb
        cons = self._consumers()
        out_ids = {id(o.stensor) for o in tb.outputs}
        a_ops, b_ops = set(), set()
        for op in tb.ops:
            if op.kind == "matmul" and mma_ok(op, self.opts, self.nthreads):
                self.mma_ops.add(id(op))
                a_ops.add(id(op.inputs[0]))
                b_ops.add(id(op.inputs[1]))
                c = cons.get(id(op.outputs[0]), [])
                if (len(c) == 1 and c[0].kind == "forloop_accum" and c[0].attrs["kind"] == "none"
                        and id(op.outputs[0]) not in out_ids):
                    self.reg_acc[id(c[0])] = op
        reg_mm_out = {id(m.outputs[0]) for m in self.reg_acc.values()}

        # the optimizer's layouts (row-major, unswizzled when off) and schedule
        self.names = tile_names(tb)
        gi = {}
        for k, g in enumerate(self.ins):
            if 1 in g.strides:
                gi[k] = inner_dim(g.strides)
        self.layout_plan = lowering_layouts(tb, self.opts.layout, gi or None)  # those of --mirage-layout, if it ran
        lays = self.layout_plan.tiles
        self.sched_plan = schedule_ops(tb, layouts=lays, order=tb.recorded_order)  # that of --mirage-schedule, if it ran
        self.deps = _Deps(tb, lays)
        self.region = self.deps.region
        self._plan_frag_fusion(cons, out_ids)
        reg_mm_out |= self.reg_tiles
        self.notes["barriers_plan"] = self.sched_plan.barriers
        self.notes["swizzled"] = 0

        def mk(t: STensor) -> Tile:
            tl = Tile(tuple(t.shape), t.dtype.mlir, t.dtype.itemsize)
            lay = lays[self.names[id(t)]]
            mma_operand = id(t) in a_ops or id(t) in b_ops
            if mma_operand:
                # ldmatrix reads rows of the last dim: swizzled rows when the plan says so,
                # else padded rows (ld = cols + 8), both conflict-free
                if lay.swizzle and lay.inner_dim == len(t.shape) - 1:
                    tl.swizzle = lay.swizzle
                else:
                    tl.ld = tl.cols + 8
            elif t.shape:
                tl.inner, tl.swizzle = lay.inner_dim, lay.swizzle
            if tl.swizzle:
                self.notes["swizzled"] += 1
            if id(t) in a_ops:
                tl.rows_alloc = -(-tl.rows // 16) * 16
            return tl

        for rec in tb.inputs:
            self.tiles[id(rec.stensor)] = mk(rec.stensor)
        for ks in self.kstage.values():  # the operands of a staged matmul: rings of chunks
            for k, t in zip(ks.inputs, ks.sub.inputs):
                tl = Tile(tuple(t.shape), t.dtype.mlir, t.dtype.itemsize, stages=ks.stages)
                row = tl.cols * tl.itemsize
                # swizzled rows where the chunk's matmul may run as wgmma (B through a
                # descriptor: whole rows of 32-128 bytes or 128-byte column blocks), else padded
                if self._wgmma_shape_ok(ks.sub) and (row in (32, 64, 128) or row % 128 == 0):
                    tl.swizzle = min(row, 128)
                else:
                    tl.ld = tl.cols + 8
                if k == ks.inputs[0]:
                    tl.rows_alloc = -(-tl.rows // 16) * 16
                self.tiles[id(tb.inputs[k].stensor)] = tl
        for op in tb.ops:
            for t in op.outputs:
                if id(t) in reg_mm_out or (self.cluster and not self.cluster_post and op.kind == "forloop_accum"):
                    continue  # in registers; or a cluster's partial, combined from its part (`place_parts`)
                self.tiles[id(t)] = mk(t)
            if (op.kind == "forloop_accum" and id(op) not in self.reg_acc) or op.kind == "forloop_accum_rescale" \
                    or id(op) in self.running:  # f32 state carried across the iterations
                self.scratch[id(op)] = Tile(tuple(op.outputs[0].shape), "f32", 4)
            if op.kind == "rms_norm":
                self.scratch[id(op)] = Tile((op.inputs[0].shape and prod(op.inputs[0].shape[:-1]) or 1,),
                                            "f32", 4)
        # which inputs are copied asynchronously, and how deep the ring is
        self.async_in = {}
        for k, rec in enumerate(tb.inputs):
            self.async_in[k] = self._vec_copy(rec, self.ins[k])
        self.gather_in = {k: 0 if self.async_in[k] else self._gather(rec, self.ins[k]) for k, rec in enumerate(tb.inputs)}
        staged = self.kstaged_inputs()
        if any(not self.async_in[k] for k in staged):
            raise LoweringError(f"[smem] kernel {self.name}: a staged matmul's operand cannot be copied in "
                                f"16-byte chunks", tb)
        varying = [k for k, rec in enumerate(tb.inputs) if rec.forloop_dim != -1 and self.async_in[k]
                   and k not in staged]
        self.flag = Tile((1,), "f32", 4) if self.fold else None
        # partial row sums of warps that share a row (`warp_rows` with few, long rows)
        red = [self.nthreads // 32 for dims in self._rowwise_dims() if self._row_split(*dims) > 1]
        red += [n * self._col_split(n, L) for n, L in self._colwise_dims() if self._col_split(n, L) > 1]
        self.red = Tile((max(red),), "f32", 4) if red else None
        R = self.R // (self.split if self.mode == "partial" else 1)
        S = 1
        if self.recorded is not None:
            S = self.recorded[0]
            deepest = min(self.opts.stages, R) if varying and R > 1 else 1
            if not 1 <= S <= max(deepest, 1):
                raise LoweringError(f"[smem] kernel {self.name}: tb.smem ({self.mode} kernel): stages = {S}, but the "
                                    f"ring of this kernel's loop-varying inputs takes 1 to {max(deepest, 1)}", tb)
        elif varying and R > 1 and self.opts.stages > 1:
            # the deepest ring (up to opts.stages) that costs no extra wave of blocks: a
            # deeper ring hides more latency, but fewer co-resident blocks hide less
            blocks = prod(tb.grid_dim) * (self.split if self.mode == "partial" else 1)
            need = {s: self._place(varying, s) for s in range(2, min(self.opts.stages, R) + 1)}  # bytes

            def waves(s: int) -> int:
                per_sm = min(MAX_THREADS_PER_SM // self.nthreads,
                             self.opts.smem_per_sm // (need[s] + SMEM_RESERVED_PER_BLOCK))
                return -(-blocks // (self.opts.sms * max(per_sm, 1)))

            fits = [s for s, b in need.items() if b <= self.opts.smem_capacity]
            S = min(fits, key=lambda s: (waves(s), -s)) if fits else 1
        while True:
            off = self._place(varying, S, final=True)
            if self.cluster:
                off = max(off, self.place_parts(off if self.cluster_post else 0))
            deep = [ks for ks in self.kstage.values() if ks.stages > 2]
            if off <= self.opts.smem_capacity or (S == 1 and not deep) or self.recorded is not None:
                break
            if S > 1:
                S -= 1  # a shallower ring beside the cluster's partials (GPT-2's MLP: 234624 bytes at 4 stages)
                continue
            for ks in deep:  # then shallower rings of the staged matmuls' chunks
                ks.stages -= 1
                for k in ks.inputs:
                    self.tiles[id(tb.inputs[k].stensor)].stages = ks.stages
        self.S = S
        self.varying_async = varying
        self.notes["stages"] = S
        self.notes["cp_async_inputs"] = sum(1 for v in self.async_in.values() if v)
        self.smem = off
        self.wgmma = {id(op) for op in tb.ops if id(op) in self.mma_ops and id(op) not in self.kstage
                      and self._wgmma_ok(op)} | {id(ks.sub) for ks in self.kstage.values() if self._wgmma_ok(ks.sub)}
        if self.kstage:
            self.notes["k_staged"] = ", ".join(f"{ks.kc}x{ks.stages}" for ks in self.kstage.values())
        if self.wgmma:
            self.notes["wgmma"] = len(self.wgmma)
        if off > self.opts.smem_capacity:
            raise LoweringError(f"[smem] kernel {self.name}: the block graph's tiles need {off} bytes of "
                                f"shared memory with this lowering (padding, f32 accumulators, {S} stages"
                                f"{', reuse of dead tiles' if self.opts.smem_plan else ''}), more than the "
                                f"capacity {self.opts.smem_capacity}", tb)

    def place_parts(self, lowest: int = 0) -> int:
        """Where each accumulator's partial waits for the cluster's other blocks to read it
        (`AccumulatorEmitter.cluster_combine`): a scratch accumulator's is its scratch
        tile; a register accumulator's is a padded f32 tile (`part_tile`) over the space
        of the tiles, which are dead after the loop (a cluster-combined loop without ops
        after it; with them, `lowest` is the end of the tiles, which the first block's
        epilogue reads), clear of the scratch tiles: from the lowest offset from `lowest`
        where they all fit. Returns the end of the last buffer."""
        self.parts: dict[int, Tile] = {}
        regs = []
        for op in self.tb.ops:
            if op.kind != "forloop_accum":
                continue
            if id(op) in self.scratch:
                self.parts[id(op)] = self.scratch[id(op)]
            else:
                regs.append((id(op), part_tile(op.outputs[0].shape)))
        taken = sorted((t.offset, t.offset + t.bytes) for t in self.scratch.values())
        need = sum(t.bytes for _, t in regs)
        start = next(a for a in [-(-lowest // ALIGN) * ALIGN] + [-(-hi // ALIGN) * ALIGN for _, hi in taken if hi >= lowest]
                     if not any(lo < a + need and a < hi for lo, hi in taken))
        for oid, t in regs:
            t.offset, start = start, start + t.bytes
            self.parts[oid] = t
        return max([start] + [hi for _, hi in taken])

    def exec_order(self) -> list[int]:
        """Indices of tb.ops in the order this kernel runs them: the schedule's depth
        order, or (schedule off) the hoisted ops, the loop ops, then the accumulators, then the post ops."""
        if self.opts.schedule:
            return list(self.sched_plan.order)
        ops = self.tb.ops
        loop = [j for j in range(len(ops)) if self.region[j] == "loop"]
        return ([j for j in range(len(ops)) if self.region[j] == "pre"]
                + [j for j in loop if not is_accumulator(ops[j].kind)] + [j for j in loop if is_accumulator(ops[j].kind)]
                + [j for j in range(len(ops)) if self.region[j] == "post"])

    def _place(self, varying, S: int, final: bool = False) -> int:
        """Offsets of every shared-memory buffer (ring of S stages for the inputs in
        `varying`); returns the bytes. With smem_plan: the optimizer's live ranges on this
        kernel's order, dead tiles' space reused; off: one range after another."""
        tb = self.tb
        for k in varying:
            self.tiles[id(tb.inputs[k].stensor)].stages = S
        bufs = [(self.names[t], tile) for t, tile in self.tiles.items()]
        if not self.opts.smem_plan:
            off = 0
            for _, t in self.buffers():
                if final:
                    t.offset = off
                off += t.bytes
            return off
        order = self.exec_order()
        step = {j: p + 1 for p, j in enumerate(order)}
        last_step = len(order) + 1
        pos = {id(o): j for j, o in enumerate(tb.ops)}
        sizes = {n: t.bytes for n, t in bufs}
        ranges = live_ranges(tb, order, True, [n for n in self.names.values() if n not in sizes])
        extra = {}
        for oid, tile in self.scratch.items():
            j = pos[oid]
            out = self.names[id(tb.ops[j].outputs[0])]
            if is_accumulator(tb.ops[j].kind):  # the f32 accumulator: as long as its result
                lo, hi = 0, max(ranges[out].end if out in ranges else last_step, step[j])
            elif oid in self.running:  # the running max: across the whole loop
                lo, hi = 0, last_step
            else:  # rms_norm's row statistics: during the op
                lo = hi = step[j]
            extra[f"scratch{j}"] = (tile.bytes, lo, hi)
        for n, t in self._specials():
            extra[n] = (t.bytes, 0, last_step)
        registers = [n for n in self.names.values() if n not in sizes]
        if final and self.recorded is not None:
            plan = buffers(tb, order, True, registers, sizes, extra)
            why = check_offsets(plan, self.recorded[1], self.opts.smem_capacity)
            if why:
                raise LoweringError(f"[smem] kernel {self.name}: tb.smem ({self.mode} kernel): {why}", tb)
            plan = SmemPlan(plan, max((b.offset + b.size for b in plan.values()), default=0),
                            sum(b.size for b in plan.values()), self.opts.smem_capacity, False)
        else:
            plan = plan_smem(tb, order, enabled=True, capacity=1 << 30, double_buffer=True, registers=registers,
                             timeout_ms=300 if final else 0, sizes=sizes, extra=extra)
        if final:
            for n, t in self.buffers():
                t.offset = plan.buffers[n].offset
            self.notes["smem_no_reuse"] = plan.no_reuse_bytes
        return plan.total_bytes

    def buffers(self) -> list:
        """Every shared-memory buffer of the kernel, (name, Tile): the tiles (names of
        `optimize.plan.tile_names`), the f32 state of op j (`scratch{j}`), `flag`, `red`."""
        pos = {id(o): j for j, o in enumerate(self.tb.ops)}
        return ([(self.names[t], tile) for t, tile in self.tiles.items()]
                + [(f"scratch{pos[oid]}", tile) for oid, tile in self.scratch.items()] + self._specials())

    def smem_record(self) -> tuple[int, dict[str, int]] | None:
        """What `--mirage-smem-plan` records for this kernel (`tb.smem`) and the lowering
        takes back: (ring depth, buffer name -> offset); None without shared-memory tiles."""
        return None if self.rows else (self.S, {n: t.offset for n, t in self.buffers()})

    def _specials(self) -> list:
        """Shared-memory buffers that belong to no tile: (name, Tile)."""
        return [(n, t) for n, t in (("flag", self.flag), ("red", self.red)) if t is not None]

    def _rowwise_dims(self):
        """(rows, length) of every row reduction this kernel emits (`rowwise`)."""
        for op in self.tb.ops:
            x = op.inputs[0] if op.inputs else None
            if x is None or not x.shape:
                continue
            last = (op.kind == "rms_norm" or (op.kind in ("reduction", "reduce_max", "reduction_max")
                                              and op.attrs["dim"] % len(x.shape) == len(x.shape) - 1)
                    or (op.kind == "forloop_accum" and op.attrs["kind"] in ("sum", "mean", "rms")
                        and id(op) not in self.sum_regs)
                    or (op.kind == "forloop_accum_rescale" and op.attrs["acc"] == "sum"))
            if last:
                yield prod(x.shape[:-1]), x.shape[-1] // self.chunk(x)

    def chunk(self, t: STensor) -> int:
        """Elements of tile `t` an element loop or row reduction moves at once: a 16-byte
        chunk where its rows are whole chunks (innermost last dim; offsets are 128-byte
        aligned; a swizzle moves whole chunks), else 1 (also for register tiles)."""
        tl = self.tiles.get(id(t))
        if tl is None or not t.shape or not self.opts.vectorize:
            return 1
        V = 16 // tl.itemsize
        return V if t.shape[-1] % V == 0 and tl.inner_last and tl.ld % V == 0 else 1

    def _colwise_dims(self):
        """(outputs, length) of every reduction over a dim other than the last."""
        for op in self.tb.ops:
            if op.kind in ("reduction", "reduce_max", "reduction_max"):
                x = op.inputs[0]
                d = op.attrs["dim"] % len(x.shape)
                if d != len(x.shape) - 1:
                    yield prod(op.outputs[0].shape), x.shape[d]

    def _col_split(self, outputs: int, length: int) -> int:
        """Threads per output of a reduction over a dim other than the last: 1, or where
        the outputs are fewer than the threads, the largest power of two that leaves each
        thread >= 8 elements (partials combined through shared memory)."""
        if outputs >= self.nthreads or length < 16:
            return 1
        g = 1
        while 2 * g * outputs <= self.nthreads and 16 * g <= length:
            g *= 2
        return g

    def _row_split(self, rows: int, length: int) -> int:
        """Warps per row in `warp_rows` (rows of `length` elements or chunks): 1, or where
        the rows are fewer than the warps and long, the largest power of two that keeps
        every lane busy with >= 2 of them."""
        nw = self.nthreads // 32
        if self.nthreads % 32 or rows >= nw or length < 64:
            return 1
        w = 1
        while 2 * w * rows <= nw and 64 * w <= length:
            w *= 2
        return w

    def _vec_copy(self, rec, g: GlobalArg) -> int:
        """Elements per 16-byte chunk if the input tile can be copied with cp.async, else 0."""
        if not self.opts.async_copy:
            return 0
        vec = 16 // g.itemsize
        tile = rec.stensor.shape
        # chunks along the tile's innermost dim (the last, or another where the layout put
        # the global's contiguous dim innermost: a transposed view)
        d = len(tile) - 1 if self.tiles[id(rec.stensor)].inner_last else self.tiles[id(rec.stensor)].inner % len(tile)
        if not tile or tile[d] % vec or not g.chunks_along(d, vec):
            return 0
        return vec

    def _gather(self, rec, g: GlobalArg) -> int:
        """Elements per 16-byte chunk if the input tile's rows are contiguous in global memory
        but not cut into aligned 16-byte chunks (rows of 4097 keys): they are gathered from
        the aligned chunks that overlap them (`TileIO.load_input`); else 0 (element copies)."""
        tile = rec.stensor.shape
        tl = self.tiles[id(rec.stensor)]
        V = 16 // g.itemsize
        if not self.opts.vectorize or not tile or not tl.inner_last or tl.swizzle or g.strides[-1] != 1 \
                or tile[-1] < 2 * V:
            return 0
        return V

    def _streamed(self, k: int) -> bool:
        """Input k is read once overall (every grid dim > 1 partitions it) and varies
        with the loop: an L2 evict_first candidate."""
        rec = self.tb.inputs[k]
        if not self.opts.evict_first or rec.forloop_dim == -1:
            return False
        return all(d != -1 for d, n in zip(rec.imap, self.tb.grid_dim) if n > 1)

    def vec_width(self, op: Op) -> int:
        """Elements a thread handles at once in the element loop of `op` (element-wise or
        thread graph): the common `chunk` of every tile it reads in full and writes, else 1.
        Broadcast operands of last extent 1 are read once a chunk. The consumers' barriers
        depend on this (`hazard`)."""
        if op.kind not in scalar.BINARY + scalar.UNARY + ("constant", "thread_graph") or not self.opts.vectorize:
            return 1
        out = op.outputs[0]
        if not out.shape:
            return 1
        n = out.shape[-1]
        if any(t.shape and t.shape[-1] not in (1, n) for t in op.inputs) or any(
                o.shape != out.shape for o in op.outputs):
            return 1
        full = list(op.outputs) + [t for t in op.inputs if t.shape and t.shape[-1] == n and n > 1]
        widths = {self.chunk(t) for t in full}
        return widths.pop() if len(widths) == 1 else 1

    def _wgmma_ok(self, op: Op) -> bool:
        """Whether matmul `op` can run as wgmma m64nNk16 with A from registers (each of the
        block's warps, whole warpgroups of 4, holds 16 rows: one wgmma a warpgroup; the
        mma.sync path's A fragments, from ldmatrix or from the fragments of the matmul
        before it (`a_from_regs`), and C layout) and B
        from shared memory through a descriptor: B's tile [K, N] is row-major, swizzled as
        wide as its rows of 32, 64 or 128 bytes (the hardware's swizzle mode of that width
        for an MN-major operand) or stored as swizzled column blocks of the swizzle's width
        (`Tile.atom`, N up to 256: 80 in blocks of 16), every block a whole number of the
        swizzle's periods (8 rows), the tile 1024-byte aligned."""
        if not self._wgmma_shape_ok(op):
            return False
        a, b = op.inputs
        N = b.shape[-1]
        tile = self._tile_or_none(b)
        if tile is None or not (self._tile_or_none(a) or id(op) in self.a_from_regs):
            return False
        row = N * tile.itemsize
        if tile.elt not in ("f16", "bf16") or not tile.inner_last or tile.ld != N:
            return False
        blocks_ok = tile.atom and tile.rows_alloc % 8 == 0  # each block a whole swizzle period
        return (tile.swizzle == row in (32, 64, 128) or bool(blocks_ok)) \
            and tile.offset % 1024 == 0 and tile.stage_bytes % 1024 == 0

    def _wgmma_shape_ok(self, op: Op) -> bool:
        """The shapes `_wgmma_ok` needs: whole warpgroups, 16 rows a warp, N up to 256."""
        a, b = op.inputs
        M, K, N, MT, NT, T, tpw = self.mma_geometry(op)
        return (self.opts.wgmma and self.nthreads % 128 == 0 and M == 16 * (self.nthreads // 32) and K % 16 == 0
                and N <= 256 and a.dtype == b.dtype and prod(b.shape[:-2]) == 1)

    def _tile_or_none(self, t: STensor) -> Tile | None:
        try:
            return self.tile_of(t)
        except KeyError:
            return None

    def a_desc_ok(self, op: Op) -> bool:
        """Whether warpgroup matmul `op` reads A from shared memory through a descriptor
        instead of ldmatrix fragments (K / 4 registers a thread, which spilled at K = 512):
        K is at least A_DESC_MIN_K, A is not the fragments of the matmul before it, and its
        tile [M, K] is K-major in 128-byte swizzled column blocks (`Tile.atom`), each
        1024-byte aligned. The chunks of a staged matmul (`KStage.sub`), rows of 128 bytes,
        one such block: through a descriptor at any K, so that no register of A is held
        while a chunk's matmul runs on (`mma_staged`)."""
        if id(op) not in self.wgmma or id(op) in self.a_from_regs:
            return False
        chunk = any(op is ks.sub for ks in self.kstage.values())
        ta = self.tile_of(op.inputs[0]) if chunk else self.tiles.get(id(op.inputs[0]))
        if ta is None:
            return False
        one_block = chunk and ta.swizzle == 128 and ta.ld == ta.cols and ta.cols * ta.itemsize == 128
        wide = ta.atom * ta.itemsize == 128
        return ((wide and (op.inputs[0].shape[-1] >= A_DESC_MIN_K or chunk)) or one_block) \
            and ta.offset % 1024 == 0 and ta.stage_bytes % 1024 == 0 and (ta.rows_alloc * 128) % 1024 == 0

    @property
    def pdl(self) -> bool:
        """Whether the kernel is launched as a programmatic dependent of the previous one.
        Measured on the H100 (back to back in a CUDA graph): 4-15% faster for kernels of
        3-10 us, 1% for 23 us; but 4% slower for GatedMLP at batch 8, whose 128 blocks take
        more than half an SM's shared memory each, whatever the placement of the trigger:
        such kernels launch as before."""
        return self.opts.pdl and 2 * self.smem <= self.opts.smem_per_sm

    def mma_geometry(self, op: Op):
        a, b = op.inputs
        M, K, N = prod(a.shape[:-1]), a.shape[-1], b.shape[-1]
        MT, NT = -(-M // 16), N // 8
        T = MT * NT
        nw = self.nthreads // 32
        tpw = -(-T // nw)
        return M, K, N, MT, NT, T, tpw

    def describe(self) -> str:
        """The plan in a few lines, for debugging and tests."""
        tb = self.tb
        if self.rows:
            r = self.rows
            return (f"kernel plan (rows in registers): grid {list(tb.grid_dim)}, {self.nthreads} threads, rows "
                    f"{list(r.shape)} in {r.V}-element chunks, {r.tpr} threads a row, {r.passes} row(s) x "
                    f"{r.per_row} chunk(s) a thread, {self.smem} bytes of shared memory")
        names = self.names
        out = [f"kernel plan ({self.mode}, split {self.split}): grid {list(tb.grid_dim)}, {self.nthreads} threads, "
               f"for-loop {self.R}, ring {self.S} stage(s), {self.smem} bytes of shared memory"]
        for op in tb.ops:
            if id(op) in self.mma_ops:
                how = ("tensor cores, registers across the loop" if any(m is op for m in self.reg_acc.values())
                       else "tensor cores, fragments fused" if id(op) in self.frag_fuse else "tensor cores")
                ks = self.kstage.get(id(op))
                if ks is not None:
                    how += f", staged in chunks of {ks.kc} x {ks.stages}" + (", wgmma" if id(ks.sub) in self.wgmma else "")
                out.append(f"  matmul -> {names[id(op.outputs[0])]}: {how}" + (", wgmma" if id(op) in self.wgmma else ""))
        for t, tile in self.tiles.items():
            lay = f"swizzle {tile.swizzle}" if tile.swizzle else (f"ld {tile.ld}" if tile.ld != tile.cols else "row-major")
            out.append(f"  tile {names.get(t, '?')} {list(tile.shape)} {tile.elt} at {tile.offset} ({lay}"
                       + (f", {tile.stages} stages" if tile.stages > 1 else "") + ")")
        for k, rec in enumerate(tb.inputs):
            how = ("cp.async" if self.async_in[k] else "16-byte chunks gathered" if self.gather_in[k]
                   else "element copies") + (", evict_first" if self._streamed(k) else "")
            out.append(f"  input {k}: {how}")
        for op in tb.ops:
            if self.vec_width(op) > 1:
                out.append(f"  {op.kind} -> {names[id(op.outputs[0])]}: element loop in {self.vec_width(op)}-element chunks")
        return "\n".join(out)
