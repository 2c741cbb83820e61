"""Analytical cost model used to rank verified candidates.

Per kernel: time = launch + max(device-memory time, shared-memory time, compute time),
each divided by an occupancy factor α in the spirit of MCFuser's performance model
(eqs. 2-5): with B blocks on S SMs the last wave is partly empty, so
α = B / (ceil(B / S) · S), and a kernel with fewer blocks than SMs uses only B/S of the
SMs (shared memory, compute); device memory saturates once about half the SMs stream
(min(1, 2α) for a single wave). The kernels costed are the ones the lowering
(`lower.convert.plan_graph`) emits: a pre-defined kernel op is costed as the graph-defined
kernel of its default block graph (`lower.predefined`); a concat as one copy kernel per
operand into its slice of the output; a view (a reshape of row-major memory or a
transpose, neither a graph output) is free; a graph output that no kernel writes (an
input marked as output, or a tensor marked twice) costs a copy.

- device-memory bytes: every block loads its input tiles (every iteration for inputs
  that the loop slices; once otherwise) and stores its output tiles; of an input tensor
  that fits in half the L2 cache only the first read of each byte comes from device
  memory, the blocks' repeated reads of replicated tiles from L2 (at the L2 bandwidth);
- shared-memory traffic: every block op reads its operands and writes its result (per
  iteration in the loop; once for ops hoisted before it or run after it); ops fused into a thread graph keep
  their intermediates in registers, so only the group's operands and result count;
- FLOPs from the op table (matmuls on tensor cores, the rest on the SIMT units);
- a floor for the dependent chains a thread runs (`chain_time`): the K terms of a matmul
  without tensor cores per lane, the elements of a row reduction per lane, in waves of
  co-resident blocks, the for-loop split across blocks as the lowering splits it.
The device is a `mirage.target.Target` (H100 SXM by default).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import ceil, prod

from ..core import ops as O
from ..core.graph import KNGraph, Op, TBGraph
from ..core.rules import smem_bytes
from ..optimize.schedule import regions
from ..target import DEFAULT, Target


@dataclass
class KernelCost:
    kind: str
    blocks: int
    dram_bytes: float
    smem_bytes: float
    flops: float
    alpha: float
    time: float


@dataclass
class Cost:
    time: float  # seconds (the ranking key)
    kernels: list = field(default_factory=list)

    @property
    def launches(self) -> int:
        return len(self.kernels)

    @property
    def dram_bytes(self) -> float:
        return sum(k.dram_bytes for k in self.kernels)

    def summary(self) -> str:
        return (f"{self.time * 1e6:.2f} us, {self.launches} kernel(s), {self.dram_bytes / 1e6:.2f} MB device "
                f"memory, {sum(k.smem_bytes for k in self.kernels) / 1e6:.2f} MB shared memory, "
                f"{sum(k.flops for k in self.kernels) / 1e9:.3f} GFLOP")


def _bytes(t) -> float:
    return prod(t.shape) * t.dtype.itemsize


def alpha(blocks: int, sms: int) -> float:
    return blocks / (ceil(blocks / sms) * sms)


def mem_alpha(blocks: int, sms: int) -> float:
    """Device memory saturates once about half the SMs stream; with several waves the
    last one's empty share counts as for compute."""
    a = alpha(blocks, sms)
    return a if blocks > sms else min(1.0, 2.0 * a)


def split_reads(reads: float, tensor_bytes: float, dev: Target = DEFAULT) -> tuple[float, float]:
    """(device-memory bytes, L2 bytes) of `reads` bytes that blocks read of a tensor of
    `tensor_bytes`: one that fits in half the L2 comes from device memory once, the
    repeated reads of replicated tiles from L2."""
    once = min(reads, tensor_bytes) if tensor_bytes <= dev.l2_bytes // 2 else reads
    return once, reads - once


def read_time(blocks: int, dram: float, l2: float, dev: Target = DEFAULT) -> float:
    return dram / (dev.dram_bw * mem_alpha(blocks, dev.sms)) + l2 / (dev.l2_bw * alpha(blocks, dev.sms))


def read_bound(blocks: int, reads, dev: Target = DEFAULT) -> float:
    """A lower bound of the cost-model time of a graph-defined kernel of `blocks` blocks
    whose blocks read `reads` = [(bytes read in all, bytes of the tensor)]: its launch
    plus those reads."""
    dram = l2 = 0.0
    for r, t in reads:
        d, c = split_reads(r, t, dev)
        dram, l2 = dram + d, l2 + c
    return dev.launch + read_time(blocks, dram, l2, dev)


def cost(g: KNGraph, dev: Target = DEFAULT) -> Cost:
    from ..lower.convert import copied_outputs, view_strides  # the lowering's rules

    views = view_strides(g)
    ks = []
    for op in g.ops:
        if op.kind == "graph_def":
            ks.append(_graph_def_cost(op, dev))
        elif id(op.outputs[0]) in views:
            continue
        elif op.kind == "concat":  # a copy kernel per operand into its slice of the output
            ks += [replace(_copy_cost(t, dev), kind="concat") for t in op.inputs]
        else:
            ks.append(_predefined_cost(op, dev))
    ks += [_copy_cost(g.outputs[k], dev) for k in copied_outputs(g)]  # outputs no kernel writes
    return Cost(sum(k.time for k in ks), ks)


def _copy_cost(t, dev: Target) -> KernelCost:
    return _predefined_cost(Op("copy", [t], [t]), dev)


def _predefined_cost(op, dev: Target) -> KernelCost:
    """A pre-defined kernel op is costed as what it is lowered to: the graph-defined kernel
    of its default block graph (`lower.predefined`: tiles, grid, for-loop), so that the
    reference's kernels and the search's fused ones are judged by one model. (Costed at
    peak bandwidth and FLOP rate instead, the two-GEMM reference of MCFuser's G4 came out
    at 6.6 µs against 9.1 µs for its fused chain; measured on an H100: 22.5 against 11.8.)"""
    key = (op.kind, tuple((t.shape, t.dtype.mlir) for t in op.inputs + op.outputs),
           repr(sorted(op.attrs.items())), dev.name)
    if key not in _PREDEFINED:  # the search costs the same pre-defined ops in many candidates
        from ..lower.predefined import default_block_graph

        k = _graph_def_cost(Op("graph_def", op.inputs, op.outputs, {}, default_block_graph(op, dev.sms)), dev)
        _PREDEFINED[key] = replace(k, kind=op.kind)
    return _PREDEFINED[key]


_PREDEFINED: dict = {}


def cluster_split_of(tb: TBGraph, dev: Target = DEFAULT) -> int:
    """The split of `tb`'s for-loop where the lowering combines it in clusters and splits it
    because its matmuls are compute-bound (`lower.kernel_plan.default_split`) and each warp
    holds 16 whole rows of every matmul (warpgroup matmuls, the chain's C in registers),
    else 1: such a kernel launches that many times the blocks, each running its share of the
    iterations. The others are costed as their grid, as before: H100 (benchmarks/results/
    mbci.md, 2026-11-25 10:21), G5's 32-row tiling of 16 blocks split 4 in clusters ran 13.0 us
    against the reference's 10.5, G4's 64-row one 9.7 against 10.6."""
    from ..lower.kernel_plan import COMPUTE_BOUND_INTENSITY, cluster_rows, default_split, loop_intensity

    warp_rows = 16 * (prod(tb.block_dim) // 32)
    if any(op.kind == "matmul" and prod(op.outputs[0].shape[:-1]) != warp_rows for op in tb.ops):
        return 1
    intensity = loop_intensity(tb)
    rows = cluster_rows(tb) if intensity >= COMPUTE_BOUND_INTENSITY else 0
    # `choose_split`'s rule where it takes the cluster branch (any split it gives divides `rows`)
    return default_split(prod(tb.grid_dim), tb.forloop_range, dev.sms, intensity, rows) if rows else 1


def _graph_def_cost(op, dev: Target) -> KernelCost:
    tb: TBGraph = op.body
    s = cluster_split_of(tb, dev)
    grid = prod(tb.grid_dim)
    blocks = grid * s
    iters = tb.forloop_range // s
    dram = 0.0
    l2 = 0.0
    smem = 0.0
    for rec, t in zip(tb.inputs, op.inputs):
        n = iters if rec.per_iteration else 1
        reads = _bytes(rec.stensor) * n * blocks
        d, c = split_reads(reads, _bytes(t), dev)
        dram, l2, smem = dram + d, l2 + c, smem + reads
    for o in tb.outputs:  # (a split's blocks store 1 / s of the tile each)
        dram += _bytes(o.stensor) * (iters if o.forloop_dim != -1 else 1) * grid
    if s > 1:  # the f32 partials, written and read back once (costed as L2 traffic; since
        # e83ce02 the cluster reads them from its blocks' shared memory: not re-calibrated)
        l2 += 8 * sum(prod(a.outputs[0].shape) for a in tb.ops if a.kind == "forloop_accum") * blocks
    tc, simt = 0.0, 0.0
    regs = regions(tb)
    for bop, region in zip(tb.ops, regs):
        out = bop.outputs[0]
        n = iters if region == "loop" else 1  # hoisted before the loop, or once after it
        traffic = sum(_bytes(t) for t in bop.inputs) + sum(_bytes(t) for t in bop.outputs)
        smem += traffic * n * blocks
        if bop.kind == "thread_graph":
            fl = sum(O.OPS[t.kind].flops([()] * len(t.inputs), (), t.attrs) for t in bop.body.ops) * prod(out.shape)
            simt += fl * n * blocks
        elif bop.kind == "forloop_accum":
            simt += prod(bop.inputs[0].shape) * iters * blocks
        else:
            fl = O.OPS[bop.kind].flops([t.shape for t in bop.inputs], out.shape, bop.attrs) * n * blocks
            if bop.kind == "matmul":
                tc += fl
            else:
                simt += fl
    a = alpha(blocks, dev.sms)
    # shared memory and compute scale with the busy SMs
    mem = read_time(blocks, dram, l2, dev)
    work = max(smem / (dev.smem_bw * a), tc / (dev.tensor_flops * a) + simt / (dev.simt_flops * a))
    # a for-loop whose loop-varying input tiles do not fit a second time in shared memory
    # gets no prefetch ring (the lowering's stages = 1): every iteration waits for its
    # loads, so reading and computing do not overlap
    varying = sum(_bytes(r.stensor) for r in tb.inputs if r.forloop_dim != -1)
    serial = iters > 1 and smem_bytes(tb) + varying > dev.smem_per_block
    t = dev.launch + max(mem + work if serial else max(mem, work), chain_time(tb, dev, regs))
    t += iters * staged_steps(tb) * STAGED_STEP
    return KernelCost("graph_def", blocks, dram, smem, tc + simt, a, t)


# seconds a block waits per chunk of a staged matmul (`tb.input` k_chunk: each chunk's copies
# land before its matmul runs, `Options.kstages` - 2 chunks ahead on wgmma), beside the
# throughput terms. H100, MCFuser's G5 and G6 in 64-row tilings staged in chunks of 64, 6
# slots, wgmma (benchmarks/results/mbci.md, 2026-12-07 23:31): the measured time above the
# throughput model, per chunk, 0.06-0.25 us on the fastest tilings (64 x 128 x 128 and
# 64 x 64 x 256 of both rows); 0.3 us fitted the mma.sync chunks before (2026-12-07 15:43)
STAGED_STEP = 0.12e-6


def staged_steps(tb: TBGraph) -> int:
    """Chunks an iteration of `tb`'s loop runs through its staged matmuls (`[stage]`)."""
    return sum(op.inputs[0].shape[-1] // op.inputs[0].producer.k_chunk for op in tb.ops
               if op.kind == "matmul" and getattr(op.inputs[0].producer, "k_chunk", 0))


# cycles of one step of a thread's dependent chain (two shared-memory loads and an FMA, or a
# load and an add): the H100 ran P @ V over 4097 keys, 64 outputs a block of 128 threads (one
# thread an output), at about 18 cycles a term (51 us)
CHAIN_CYCLES = 18


def chain_time(tb: TBGraph, dev: Target = DEFAULT, regs=None) -> float:
    """Seconds of the longest dependent chains the lowering gives a thread, in waves of
    co-resident blocks: the throughput terms assume enough independent work to hide
    latency, which a block summing 4097 terms a thread does not have. `regs`: the ops'
    `regions`, where the caller has them."""
    from ..lower.kernel_plan import (MAX_THREADS_PER_SM, SMEM_RESERVED_PER_BLOCK, Options, block_threads,
                                     choose_split, k_lanes, mma_ok)

    opts = Options(sms=dev.sms)
    split = choose_split(tb, opts)
    T = prod(block_threads(tb, opts, split))
    chained = {id(op) for op in tb.ops
               if op.kind in ("reduction", "reduce_max") or (op.kind == "matmul" and not mma_ok(op, opts, T))}
    if not chained:
        return 0.0
    steps = 0
    for bop, region in zip(tb.ops, regs or regions(tb)):
        if id(bop) not in chained:
            continue
        n = tb.forloop_range // split if region == "loop" else 1
        out, x = bop.outputs[0], bop.inputs[0]
        if bop.kind == "matmul":
            outputs, K = prod(out.shape), x.shape[-1]
            lanes = k_lanes(outputs, K, T)
            steps += n * ceil(outputs * lanes / T) * ceil(K / lanes)
        else:  # a warp a row, its lanes along the row
            L = x.shape[bop.attrs["dim"] % len(x.shape)]
            steps += n * ceil(prod(out.shape) / max(1, T // 32)) * ceil(L / 32)
    resident = max(1, min(MAX_THREADS_PER_SM // T, dev.smem_per_sm // (smem_bytes(tb) + SMEM_RESERVED_PER_BLOCK)))
    waves = ceil(prod(tb.grid_dim) * split / (dev.sms * resident))
    return waves * steps * CHAIN_CYCLES / dev.clock
