"""Lowering of one graph-defined kernel (a block graph) to a `gpu.func`.

Layout of the generated kernel (one thread block = one block of the μGraph's grid; a
block graph of row-wise ops without a for-loop keeps its rows in registers instead,
`emitters/rows.py`):

- every tile of the block graph lives in dynamic shared memory, row-major with a
  padded row (`ld`) where it feeds the tensor cores; accumulators that are not in
  registers keep an f32 copy there;
- input iterators are 16-byte `cp.async` copies (`nvgpu.device_async_copy`), consecutive
  threads taking consecutive 16-byte chunks (coalesced); loop-varying inputs are
  prefetched `stages - 1` iterations ahead into a ring of `stages` buffers (double
  buffering or deeper; `stages - 2` where a warpgroup matmul stays in flight into the
  next iteration: `_overlap_ok`), loop-invariant inputs are loaded once before the loop; tiles
  that cannot be copied in 16-byte pieces fall back to element copies;
- `tb.matmul` on f16 tiles (K % 16 == 0, N % 8 == 0) runs on the tensor cores (bf16:
  generic path, see docs/lowering.md):
  `nvgpu.ldmatrix` + `nvgpu.mma.sync` m16n8k16 with f32 accumulation, warps splitting
  the 16x8 output tiles; a matmul whose only use is a `none` accumulator keeps its
  fragments in registers across the whole for-loop;
- reductions over the last dim (reduction, rms_norm, the sum/mean/rms accumulators) use
  one warp per row and `gpu.shuffle xor`; every other op is an element loop (thread t
  computes elements t, t + nthreads, ...) in f32, rounded to the tile's type on store;
- thread graphs are one fused element loop (registers only);
- output savers copy the tile to device memory, 16 bytes per thread where possible.

A `gpu.barrier` separates ops that communicate through shared memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core.graph import Op, TBGraph
from ..core.ops import is_accumulator
from . import scalar
from .emitter import SMEM, Emitter, Idx
from .emitters import AccumulatorEmitter, ElementwiseEmitter, MatmulEmitter, ReductionEmitter, RowsEmitter, TileIO
from .kernel_plan import GlobalArg, KernelPlan, LoweringError, _row_major, accum_after, running_maxima


# registers a thread may hold in the rotated loop's fragments (the first matmul's, their
# rounded copy, its A operand's, the register accumulators), leaving room below the
# 255-register limit for addresses and the element-wise chain
ROTATE_FRAG_REGS = 160


@dataclass
class KernelInfo:
    name: str
    grid: tuple
    block: tuple
    smem_bytes: int
    text: str
    notes: dict = field(default_factory=dict)


def unsupported(tb: TBGraph, kernel: str) -> None:
    """Raise a LoweringError naming the op for block-graph ops this lowering cannot emit:
    a running max (tb.reduction_max that the loop updates) over a dim other than the last."""
    running = {id(op) for op in running_maxima(tb)}
    for j, op in enumerate(tb.ops):
        if id(op) in running and op.attrs["dim"] % len(op.inputs[0].shape) != len(op.inputs[0].shape) - 1:
            raise LoweringError(
                f"[lowering] kernel {kernel}: tb.reduction_max (#{j}) keeps a running max across the "
                f"for-loop over dim {op.attrs['dim']}; the GPU lowering keeps one over the last dim only")


class BlockLowering(TileIO, ElementwiseEmitter, ReductionEmitter, MatmulEmitter, AccumulatorEmitter, RowsEmitter):
    """Emits one kernel from its `KernelPlan` (`self.p`): the decisions are read there,
    this class only writes MLIR (the emit-time state: views, register values, barriers).
    The op families' emitters are in `lower/emitters/`; here: the op dispatch, the loop
    skeletons (scheduled and in program order) and the barrier placement."""

    def __init__(self, plan: KernelPlan, outs: list[GlobalArg], ws: GlobalArg | None = None):
        self.p = plan
        self.tb, self.name, self.ins, self.outs, self.opts = plan.tb, plan.name, plan.ins, outs, plan.opts
        self.mode, self.split, self.ws = plan.mode, plan.split, ws
        self.e = Emitter()
        self.views: dict[int, str] = {}
        self.views2d: dict[int, str] = {}
        self.scratch_views: dict[int, str] = {}
        self.reg_vals: dict[int, list] = {}  # register tensors (fused fragments) -> values
        self.notes = self.p.notes
        self.written_by: dict[int, int] = {}  # tile id -> chunk width of the element loop that wrote it
        # wgmma in the loop body: the groups stay in flight until the body's end (`wgmma_wait`),
        # and matmuls of one A view share its ldmatrix fragments
        self.wgmma_pending = False
        self.a_frags: dict[str, list[str]] = {}
        self.acc_first: int | str = 1  # 0 (or an i32 SSA value 0) where a carried accumulator starts
        self.row_parts: dict[int, list[str]] = {}  # a register `sum` accumulator -> its rows' partials

    def emit_op(self, op: Op) -> bool:
        """Emit a pre- or post-loop compute op; returns whether it wrote shared memory."""
        e = self.e
        k = op.kind
        out = op.outputs[0] if op.outputs else None
        if k == "matmul":
            if id(op) in self.p.mma_ops:
                frags = self.mma(op, None)
                self.store_frags(op, frags, out)
            else:
                self.matmul_generic(op)
            return True
        if k in scalar.BINARY or k in scalar.UNARY or k == "constant":
            if self.p.vec_width(op) > 1:
                self.elementwise_vec(op, lambda args: [scalar.apply(e, k, args, op.attrs, out.dtype.mlir)])
                return True

            def body(cs):
                args = [self.read(t, cs, out.shape) for t in op.inputs]
                self.write(out, cs, scalar.apply(e, k, args, op.attrs, out.dtype.mlir))
            self.elementwise(out.shape, body)
            return True
        if k == "thread_graph":
            self.thread_graph(op)
            return True
        if k in ("reduction", "reduce_max"):
            self.reduction(op, "addf" if k == "reduction" else "maximumf")
            return True
        if k == "reduction_max" and id(op) in self.p.running:
            self.running_max(op)
            return True
        if k == "reduction_max":  # run once: the running max is this tile's max, its change 0
            self.reduction(op, "maximumf")
            diff = op.outputs[1]
            self.elementwise(diff.shape, lambda cs: self.write(diff, cs, e.f32(0.0)))
            return True
        if k == "reduction_to_dimx":
            a = op.inputs[0]
            dimx = op.attrs["dimx"]
            L = a.shape[-1]

            def body(cs):
                j, args, res, close = e.for_iter(0, L // dimx, 1, [(e.f32(0.0), "f32")])
                close([e.fbin("addf", args[0], self.read(a, list(cs[:-1]) + [e.add(e.mul(j, dimx), cs[-1])], a.shape))])
                self.write(out, cs, res[0])
            self.elementwise(out.shape, body)
            return True
        if k == "rms_norm":
            a = op.inputs[0]
            sc = self.p.scratch[id(op)]
            sv = self.scratch_views[id(op)]
            L = a.shape[-1]
            self.rowwise(a, "addf", True,
                         lambda r, v: e.store(e.op(f"math.sqrt {e.fbin('divf', v, e.f32(float(L)))} : f32", "f"),
                                              sv, sc.mtype, r, "f32"))
            e.barrier()
            V = self.p.chunk(a) if self.p.chunk(a) == self.p.chunk(out) else 1
            if V > 1:  # x / rms in 16-byte chunks
                ta, to = self.p.tiles[id(a)], self.p.tiles[id(out)]
                with self.chunk_loop(a.shape, V) as (row, cs):
                    r = e.load(sv, sc.mtype, row, "f32")
                    xs = self.load_chunk(self.view(a), ta, ta.offset_of(e, cs), V)
                    self.store_chunk([e.fbin("divf", x, r) for x in xs], self.view(out), to, to.offset_of(e, cs))
                return True

            def body(cs):
                row = e.dot(cs[:-1], _row_major(a.shape[:-1]))
                self.write(out, cs, e.fbin("divf", self.read(a, cs, a.shape), e.load(sv, sc.mtype, row, "f32")))
            self.elementwise(out.shape, body)
            return True
        if k == "concat":
            self.concat(op)
            return True
        if k in ("reshape", "transpose", "repeat"):
            a = op.inputs[0]

            def body(cs):
                if k == "reshape":
                    lin = e.dot(cs, _row_major(out.shape))
                    src = e.delinearize(lin, a.shape)
                elif k == "transpose":
                    src = [None] * len(cs)
                    for j, p in enumerate(op.attrs["permutation"]):
                        src[p] = cs[j]
                else:
                    src = [e.rem(c, n) for c, n in zip(cs, a.shape)]
                self.write(out, cs, self.read(a, src, a.shape))
            self.elementwise(out.shape, body)
            return True
        raise LoweringError(f"[lowering] block-graph operator '{k}' has no GPU lowering")

    # ------------------------------------------------------------------ the kernel
    def lower(self) -> KernelInfo:
        """mode "full": the whole block graph in one kernel. With a split of the for-loop
        over `split` blocks: mode "partial" runs iterations [p*R/s, (p+1)*R/s) and writes
        the raw f32 accumulators to the workspace `ws`; mode "combine" (grid as the μGraph
        says) reduces the `split` partials, finishes the accumulators and runs the ops
        after the loop and the output savers."""
        e = self.e
        tb = self.tb
        bx, by, bz = self.p.block
        g = tb.grid_dim
        split = self.split if self.mode == "partial" else 1
        # prologue: ids, shared memory, views
        tx = e.op("gpu.thread_id x", "tid")
        tid: Idx = tx
        if by > 1 or bz > 1:
            ty = e.op("gpu.thread_id y", "tid")
            tz = e.op("gpu.thread_id z", "tid")
            tid = e.add(tx, e.mul(bx, e.add(ty, e.mul(by, tz))))
        self.tid = tid
        self.warp = e.div(tid, 32)
        self.lane = e.rem(tid, 32)
        self.bx = e.op("gpu.block_id x", "bid") if g[0] > 1 else 0
        self.by = e.op("gpu.block_id y", "bid") if g[1] > 1 else 0
        self.sp: Idx = 0
        if split > 1 and self.p.cluster:  # a cluster is `split` consecutive blocks along z
            zid = e.op("gpu.block_id z", "bid")
            self.bz = e.div(zid, split) if g[2] > 1 else 0
            self.sp = e.rem(zid, split)
        elif split > 1:
            zid = e.op("gpu.block_id z", "bid")
            self.bz = e.rem(zid, g[2]) if g[2] > 1 else 0
            self.sp = e.div(zid, g[2])
        else:
            self.bz = e.op("gpu.block_id z", "bid") if g[2] > 1 else 0
        self.blin = e.add(self.bx, e.mul(g[0], e.add(self.by, e.mul(g[1], self.bz))))
        self.itg: Idx = 0  # the for-loop's iteration (the loop sets it): staged matmuls' copies
        if self.p.rows:
            return self.lower_rows()
        self.smem_base = e.op(f"gpu.dynamic_shared_memory : memref<?xi8, {SMEM}>", "smem")
        self.gptrs: dict[int, str] = {}
        for k in range(len(tb.inputs)):
            if self.p._streamed(k) and self.p.async_in[k]:
                self._gptr(k)
        staged = {id(tb.inputs[k].stensor) for k in self.p.varying_async} if self.p.S > 1 else set()
        for tid_, tile in self.p.tiles.items():
            if tid_ in staged:
                continue
            self.views[tid_] = self._make_view(tile, tile.offset)
        for oid, tile in self.p.scratch.items():
            self.scratch_views[oid] = self._make_view(tile, tile.offset)
        if self.p.flag is not None:
            self.flag_view = self._make_view(self.p.flag, self.p.flag.offset)
        if self.p.red is not None:
            self.red_view = self._make_view(self.p.red, self.p.red.offset)
        for op in tb.ops:
            if id(op) in self.p.mma_ops:
                for t in op.inputs:
                    if id(t) not in staged and id(t) not in self.p.reg_tiles:
                        self.views2d[id(t)] = self._make_view(self.p.tiles[id(t)], self.p.tiles[id(t)].offset, True)
        self.in_base = [self._global_base(self.ins[k], rec.stensor.shape, rec.imap, rec.forloop_dim)
                        for k, rec in enumerate(tb.inputs)]
        self.out_base = [self._global_base(self.outs[k], rec.stensor.shape, rec.omap, rec.forloop_dim)
                         for k, rec in enumerate(tb.outputs)] if self.outs else []

        post = accum_after(tb)
        accs = [op for op in tb.ops if is_accumulator(op.kind)]
        pre_ops = [op for op in tb.ops if not is_accumulator(op.kind) and id(op) not in post]
        post_ops = [op for op in tb.ops if id(op) in post]
        staged = self.p.kstaged_inputs()  # copied by their matmul, chunk by chunk
        inv = [k for k, rec in enumerate(tb.inputs) if rec.forloop_dim == -1 and k not in staged]

        if self.mode == "combine":
            for k in inv:
                self.load_input(k, 0, None)
            if any(self.p.async_in[k] for k in inv):
                e.line("nvvm.cp.async.commit.group")
                self.cp_wait(0)
            for op in accs:
                self.combine_acc(op)
            e.barrier()
            self.epilogue(post_ops)
            return self._finish()

        if self.opts.schedule:
            return self.lower_scheduled(accs, inv, split)

        R, it0, reg_ops, reg_inits = self.loop_setup(accs, inv, split, wait_invariant=True)
        S = self.p.S
        it, args, res, close = e.for_iter(0, R, 1, reg_inits or [(e.f32(0.0), "f32")])
        itg = self.itg = e.add(it0, it)
        # loads of this iteration
        if S > 1:
            nxt = e.add(it, S - 1)
            with e.if_(e.cmp("ult", nxt, R)):
                for k in self.p.varying_async:
                    self.load_input(k, e.add(it0, nxt), e.rem(nxt, S))
            e.line("nvvm.cp.async.commit.group")
            self.cp_wait(S - 1)
            slot = e.rem(it, S)
            for k in self.p.varying_async:
                t = tb.inputs[k].stensor
                tile = self.p.tiles[id(t)]
                boff = e.add(tile.offset, e.mul(slot, tile.stage_bytes))
                self.views[id(t)] = self._make_view(tile, boff)
                self.views2d[id(t)] = self._make_view(tile, boff, True)
        sync_varying = self._sync_varying()
        for k in sync_varying:
            self.load_input(k, itg, None)
        if S == 1 and any(self.p.async_in[k] for k in sync_varying):
            e.line("nvvm.cp.async.commit.group")
            self.cp_wait(0)
        e.barrier()
        # compute
        for op in pre_ops:
            if id(op) in self.p.mma_ops and any(self.p.reg_acc.get(id(a)) is op for a in accs):
                continue  # computed by its register accumulator below
            self.emit_op(op)
            e.barrier()
        new_frags = []
        pos = 0
        for op in reg_ops:
            mm = self.p.reg_acc[id(op)]
            n = self.p.mma_geometry(mm)[-1]
            new_frags += self.mma(mm, args[pos:pos + n])
            pos += n
        for op in accs:
            if id(op) not in self.p.reg_acc:
                self.accum_update(op)
        for k, rec in enumerate(tb.outputs):
            if rec.forloop_dim != -1:
                e.barrier()
                self.save_output(k, itg)
        e.barrier()
        close(new_frags or [args[0]])

        # after the loop
        pos = 0
        for op in accs:
            if id(op) in self.p.reg_acc:
                mm = self.p.reg_acc[id(op)]
                n = self.p.mma_geometry(mm)[-1]
                if self.mode == "partial":
                    self.frags_to_ws(mm, res[pos:pos + n], op)
                else:
                    self.store_frags(mm, res[pos:pos + n], op.outputs[0])
                pos += n
            elif self.mode == "partial":
                self.scratch_to_ws(op)
            else:
                self.accum_finish(op)
        if self.mode == "partial":
            if self.p.fold:
                self.fold_combine(accs, post_ops)
            elif self.p.cluster:
                self.cluster_combine(accs, post_ops)
            return self._finish()
        e.barrier()
        self.epilogue(post_ops)
        return self._finish()

    def epilogue(self, post_ops) -> None:
        e = self.e
        if self.opts.schedule:  # preceded by a barrier: nothing pending
            self._reset()
            self.post_region([j for j in self.p.exec_order() if self.p.region[j] == "post"])
            return
        for op in post_ops:
            self.emit_op(op)
            e.barrier()
        for k, rec in enumerate(self.tb.outputs):
            if rec.forloop_dim == -1:
                self.save_output(k, 0)

    # -- the optimizer's schedule: barriers only where needed --
    def _reset(self) -> None:
        self.dirty: set = set()   # buffers written since the last barrier (keys of _range)
        self.readset: set = set()  # buffers read since the last barrier

    def sync(self) -> None:
        self.e.barrier()
        self._reset()

    def _range(self, key) -> tuple[int, int]:
        t = self.p.tiles.get(key) or self.p.scratch.get(key)
        return (t.offset, t.offset + t.bytes) if t is not None else (0, 0)

    def _overlaps(self, key, others) -> bool:
        lo, hi = self._range(key)
        for o in others:
            if o != key:
                a, b = self._range(o)
                if a < hi and lo < b:
                    return True
        return False

    def hazard(self, j: int | None, reads, writes) -> None:
        """Barrier before an op (index j of tb.ops; None: not a graph op) that reads the
        tiles `reads` and writes the buffers `writes`, if one of its reads was written by
        other threads since the last barrier (the optimizer's rule, `_Deps.needs_sync`),
        or a buffer it writes shares memory with one read or written since (a dead tile
        whose space the shared-memory plan reuses)."""
        need = any(id(t) in self.dirty and (j is None or self.p.deps.needs_sync(t, j)
                                             or self.written_by.get(id(t), 1) != self.p.vec_width(self.tb.ops[j]))
                   for t in reads)
        need = need or any(self._overlaps(w, self.readset | self.dirty) for w in writes)
        if need:
            self.sync()

    def run_op(self, j: int) -> None:
        """Emit op j of the block graph with the barrier it needs before it."""
        op = self.tb.ops[j]
        if is_accumulator(op.kind):
            if id(op) in self.p.reg_acc:
                mm = self.p.reg_acc[id(op)]
                self.hazard(self.tb.ops.index(mm), mm.inputs, [])
                self.readset.update(id(t) for t in mm.inputs)
                n = self.p.mma_geometry(mm)[-1]
                pos = self.reg_pos[id(op)]
                self.new_frags[pos:pos + n] = self.mma(mm, self.frag_args[pos:pos + n])
                return
            if id(op) in self.row_parts:  # added to the loop's partials in registers
                self.frag_row_sums(op, self.reg_vals[self.p.sum_regs[id(op)]])
                return
            self.hazard(j, op.inputs, [id(op)])
            if id(op) in self.p.sum_regs:
                self.frag_row_sums(op, self.reg_vals[self.p.sum_regs[id(op)]])
            else:
                self.accum_update(op)
            self.readset.update(id(t) for t in op.inputs)
            if op.attrs.get("kind", op.attrs.get("acc")) in ("sum", "mean", "rms"):  # rows combined by warps,
                self.dirty.add(id(op))                                                 # lane 0 writes
            return
        if id(op) in self.p.mma_ops and any(self.p.reg_acc.get(id(a)) is op for a in self.tb.ops):
            return  # computed by its register accumulator
        if id(op) in self.p.fused_unary:
            return  # applied to the fragments of its matmul
        if id(op) in self.p.frag_fuse:
            self.hazard(j, op.inputs, [])
            u = self.p.frag_fuse[id(op)]
            self.reg_vals[id((u or op).outputs[0])] = (self.p.mma_geometry(op)[4], self.frag_unary(op, u, self.mma(op, None)))
            self.readset.update(id(t) for t in op.inputs)
            return
        writes = [id(t) for t in op.outputs if id(t) in self.p.tiles] + ([id(op)] if id(op) in self.p.scratch else [])
        self.hazard(j, op.inputs, writes)
        self.emit_op(op)
        for t in op.outputs:  # which thread wrote which element: the element loop's chunk width
            self.written_by[id(t)] = self.p.vec_width(op)
        self.readset.update(id(t) for t in op.inputs)
        self.dirty.update(writes)

    def post_region(self, post) -> None:
        for j in post:
            self.run_op(j)
        outs = [k for k, rec in enumerate(self.tb.outputs) if rec.forloop_dim == -1]
        if any(id(self.tb.outputs[k].stensor) in self.dirty for k in outs):
            self.sync()
        for k in outs:
            self.save_output(k, 0)

    def _sync_varying(self) -> list[int]:
        """The loop-varying inputs each iteration copies and waits for itself: those outside
        the cp.async ring (no ring at all: every one), but for the staged ones (their
        matmul copies them, `mma_staged`)."""
        staged = self.p.kstaged_inputs()
        return [k for k, rec in enumerate(self.tb.inputs) if rec.forloop_dim != -1 and k not in staged
                and (self.p.S == 1 or k not in self.p.varying_async)]

    def loop_setup(self, accs, inv, split: int, wait_invariant: bool, ahead: int | None = None):
        """Before the for-loop: initialise the shared-memory accumulators, load the
        loop-invariant inputs (with `wait_invariant`, wait for them behind a barrier;
        the scheduled path lets its hazard analysis place that barrier), and issue the
        cp.async ring's prologue (iterations 0 .. `ahead` - 1, default S - 1). Returns the iterations this block
        runs, its first iteration, the register accumulators and their loop-carried zero
        initial values (`self.reg_pos` maps each to its first fragment)."""
        e = self.e
        for op in accs + [op for op in self.tb.ops if id(op) in self.p.running]:
            if id(op) not in self.p.reg_acc:
                self.accum_init(op)
        for k in inv:
            self.load_input(k, 0, None)
        if any(self.p.async_in[k] for k in inv):
            e.line("nvvm.cp.async.commit.group")
            if wait_invariant:
                self.cp_wait(0)
        if wait_invariant:
            e.barrier()
        R = self.p.R // split  # iterations run by this block
        it0 = e.mul(self.sp, R)
        if self.p.S > 1:
            for s in range(self.p.S - 1 if ahead is None else ahead):
                if s < R:
                    for k in self.p.varying_async:
                        self.load_input(k, e.add(it0, s), s)
                e.line("nvvm.cp.async.commit.group")
        reg_inits = []
        reg_ops = [op for op in accs if id(op) in self.p.reg_acc]
        zero = e.const("0.000000e+00", "vector<2x2xf32>")
        self.reg_pos = {}
        for op in reg_ops:
            self.reg_pos[id(op)] = len(reg_inits)
            reg_inits += [(zero, "vector<2x2xf32>")] * self.p.mma_geometry(self.p.reg_acc[id(op)])[-1]
        return R, it0, reg_ops, reg_inits

    def lower_scheduled(self, accs, inv, split: int) -> KernelInfo:
        """The kernel with the optimizer's schedule: ops in depth order, a barrier only
        where `hazard` finds one needed, and one barrier per iteration of the cp.async
        ring (wait for this iteration's tiles, barrier, then issue the copies of
        iteration i + S - 1 into the slot iteration i - 1 read: the barrier covers both).
        A rotated loop (`_rotate_ok`) issues the first matmul one iteration ahead: its
        result for iteration i + 1 runs on the tensor cores while the ops after it work
        on iteration i's, and the last iteration's ops run after the loop."""
        e = self.e
        tb = self.tb
        order = self.p.exec_order()
        pre = [j for j in order if self.p.region[j] == "pre"]
        loop = [j for j in order if self.p.region[j] == "loop"]
        post = [j for j in order if self.p.region[j] == "post"]
        self._reset()
        S = self.p.S
        sync_varying = self._sync_varying()
        overlap = not sync_varying and self._overlap_ok(loop)
        rotate = overlap and self._rotate_ok(loop)
        overlap = overlap and not rotate  # (a rotated loop leaves nothing in flight across iterations)
        ahead = S - 2 if overlap else S - 1  # iterations whose copies are in flight
        R, it0, reg_ops, reg_inits = self.loop_setup(accs, inv, split, wait_invariant=False, ahead=ahead)
        # the register `sum` accumulators' rows, where a warp owns one 16-row block: each
        # thread's two partial sums stay in registers through the loop, combined across the
        # quad and added to the scratch after it (H100, MCFuser's S2, S3, S5: 2.4-3.3 %
        # faster). More rows (GQA's 256-row pick at batch 8: 8 a thread) spilled a kernel
        # at 255 registers further (696 -> 1110 bytes, 41 -> 75 us): those add each iteration.
        self.row_parts = {id(op): [e.f32(0.0)] * 2 for op in accs
                          if id(op) in self.p.sum_regs and self._row_sum_count(op) == 2}
        if pre or rotate:  # hoisted ops: the invariant copies (the oldest group) land, then they run once
            if rotate:  # and iteration 0's, which the first matmul reads before the loop
                self.cp_wait(ahead - 1)
            elif any(self.p.async_in[k] for k in inv):
                self.cp_wait(ahead if S > 1 else 0)
            e.barrier()
            self._reset()
            for j in pre:
                self.run_op(j)
            # the loop starts with a barrier (ring wait, or R > 1 / S == 1): the results are visible
        if rotate:
            self.notes["rotated"] = True
            res = self._rotated_loop(loop, R, it0, reg_inits, ahead)
        else:
            nreg = len(reg_inits) or 1  # (a placeholder without register accumulators)
            it, args, res, close = e.for_iter(0, R, 1, (reg_inits or [(e.f32(0.0), "f32")])
                                              + [(v, "f32") for v in self._parts()])
            self._set_parts(args[nreg:])
            self.frag_args = args[:nreg]
            self.new_frags = list(args[:nreg]) if reg_inits else []
            itg = self.itg = e.add(it0, it)
            # a loop that starts with a staged matmul: its first chunk's wait and barrier also
            # cover the iteration's other copies, which then land beside its chunks
            behind = S == 1 and bool(loop) and id(tb.ops[loop[0]]) in self.p.kstage
            self._ring_top(it, R, it0, ahead, sync_varying, inv, None, behind)
            self.wgmma_pending = None  # defer: the loop's matmuls overlap each other
            for j in loop:
                self.run_op(j)
            if not overlap:
                self.wgmma_wait()
            for k, rec in enumerate(tb.outputs):
                if rec.forloop_dim != -1:
                    if id(rec.stensor) in self.dirty:
                        self.sync()
                    self.save_output(k, itg)
                    self.readset.add(id(rec.stensor))
            close((self.new_frags or [args[0]]) + self._parts())
            self._set_parts(res[nreg:])
            res = res[:nreg]
        self.wgmma_wait()  # (with `overlap`: those of the last iteration)
        for op in accs:
            if id(op) in self.row_parts:
                self.hazard(None, [], [id(op)])
                self.row_sums_to_scratch(op, self.row_parts.pop(id(op)))
                self.dirty.add(id(op))
        # after the loop: the state of the last iteration's end carries on
        for op in accs:
            out = op.outputs[0]
            if id(op) in self.p.reg_acc:
                mm = self.p.reg_acc[id(op)]
                pos, n = self.reg_pos[id(op)], self.p.mma_geometry(mm)[-1]
                if self.mode == "partial":
                    self.frags_to_ws(mm, res[pos:pos + n], op)
                else:
                    self.hazard(None, [], [id(out)])
                    self.store_frags(mm, res[pos:pos + n], out)
                    self.dirty.add(id(out))
            elif self.mode == "partial":
                self.scratch_to_ws(op)  # begins with a barrier
                self._reset()
            else:
                if id(op) in self.dirty:
                    self.sync()
                self.hazard(None, [], [id(out)])
                self.accum_finish(op)
                self.readset.add(id(op))
                self.dirty.add(id(out))
        if self.mode == "partial":
            if self.p.fold:
                self.fold_combine(accs, None)
            elif self.p.cluster:
                self.cluster_combine(accs, None)
            return self._finish()
        self.post_region(post)
        return self._finish()

    def _ring_top(self, it: Idx, R: int, it0: Idx, ahead: int, sync_varying, inv, first: Op | None,
                  behind: bool = False) -> None:
        """The start of iteration `it`: with a ring, wait for its tiles (rotated: those of
        iteration it + 1, which the first matmul `first` reads), barrier, issue the
        copies of iteration it + ahead into the slot of iteration it - S + ahead (with
        `overlap` two back, whose matmuls the wait of the last iteration's first covered),
        point the views at the slots; without one, load the loop-varying inputs and wait
        for them (`behind`: the staged matmul that comes first waits)."""
        e, S = self.e, self.p.S
        if S > 1:
            self.cp_wait(ahead - 2 if first is not None else ahead - 1)
            e.barrier()
            nxt = e.add(it, ahead)
            with e.if_(e.cmp("ult", nxt, R)):
                for k in self.p.varying_async:
                    self.load_input(k, e.add(it0, nxt), e.rem(nxt, S))
            e.line("nvvm.cp.async.commit.group")
            self._ring_views(e.rem(it, S), e.rem(e.add(it, 1), S) if first is not None else None, first)
        elif R > 1:
            e.barrier()  # the previous iteration is done with the tiles these copies overwrite
        for k in sync_varying:
            self.load_input(k, e.add(it0, it), None)
        if S == 1 and any(self.p.async_in[k] for k in sync_varying + inv):
            e.line("nvvm.cp.async.commit.group")
            if not behind:
                self.cp_wait(0)
        if (S == 1 or sync_varying) and not behind:
            e.barrier()
        self._reset()

    def _rotated_loop(self, loop: list[int], R: int, it0: Idx, reg_inits, ahead: int) -> list[str]:
        """The loop rotated (`_rotate_ok`), as FlashAttention-3 overlaps its two matmuls:
        before the loop, the first matmul of iteration 0 and the ops on its fragments;
        iteration i issues the first matmul of i + 1, then the register accumulators'
        matmuls of i (on the rounded fragments the loop carries), waits for the first
        (one group in flight), runs the ops on its fragments while the tensor cores run
        the others, and waits for those. Nothing is in flight across the back edge; the
        last iteration's accumulating matmuls run after the loop. Returns the register
        accumulators' fragments."""
        e = self.e
        first = self.tb.ops[loop[0]]
        nreg = len(reg_inits)
        self._ring_views(0, 0, first)
        carried = self._after_first(loop, self._issue_first(loop[0]), 0)
        ctype = (self.p.frag_fuse[id(first)] or first).outputs[0].dtype.mlir
        # the register accumulators start undefined: their first matmul ignores them (`acc_first`)
        undef = e.op(f"vector.broadcast {e.op('llvm.mlir.undef : f32', 'u')} : f32 to vector<2x2xf32>", "u")
        accs = [undef] * nreg
        if R > 1:
            nc = nreg + len(carried)
            it, args, res, close = e.for_iter(0, R - 1, 1, [(undef, t) for _, t in reg_inits]
                                              + [(c, ctype) for c in carried] + [(v, "f32") for v in self._parts()])
            self._set_parts(args[nc:])
            self._ring_top(it, R, it0, ahead, [], [], first)
            self.acc_first = e.op(f"arith.index_cast {e.minui(it, 1)} : index to i32", "f")
            frags = self._issue_first(loop[0])
            accs = self._issue_accs(loop, args[:nreg], args[nreg:nc])
            nxt = self._after_first(loop, frags, 1)
            self.wgmma_wait()
            close(accs + nxt + self._parts())
            accs, carried = res[:nreg], res[nreg:nc]
            self._set_parts(res[nc:])
        # the last iteration: its tiles landed at the wait of the one before (or before the loop)
        self._ring_views((R - 1) % self.p.S, None, first)
        self.acc_first = int(R > 1)
        accs = self._issue_accs(loop, accs, carried)
        self.acc_first = 1
        self.wgmma_wait()
        return accs

    def _row_sum_count(self, op: Op) -> int:
        """A thread's rows of register `sum` accumulator `op` (2 of each of its warp's 16-row
        blocks of the matmul fragments it sums)."""
        src = self.p.sum_regs[id(op)]
        mm = next(m for m in self.tb.ops if id(m) in self.p.frag_fuse
                  and id((self.p.frag_fuse[id(m)] or m).outputs[0]) == src)
        M, K, N, MT, NT, T, tpw = self.p.mma_geometry(mm)
        return 2 * (tpw // NT)

    def _parts(self) -> list[str]:
        return [v for vs in self.row_parts.values() for v in vs]

    def _set_parts(self, vals) -> None:
        i = 0
        for k, vs in self.row_parts.items():
            self.row_parts[k], i = list(vals[i:i + len(vs)]), i + len(vs)

    def _ring_views(self, slot: Idx, first_slot: Idx | None, first: Op | None) -> None:
        """Views of the ring's tiles in `slot`; those the rotated loop's first matmul
        reads (`first`) in `first_slot` (None: leave them)."""
        for k in self.p.varying_async:
            t = self.tb.inputs[k].stensor
            sl = slot
            if first is not None and any(x is t for x in first.inputs):
                if first_slot is None:
                    continue
                sl = first_slot
            tile = self.p.tiles[id(t)]
            boff = self.e.add(tile.offset, self.e.mul(sl, tile.stage_bytes))
            self.views[id(t)] = self._make_view(tile, boff)
            self.views2d[id(t)] = self._make_view(tile, boff, True)

    def _issue_first(self, j: int) -> list[str]:
        """Issue the rotated loop's first matmul (op j) without waiting: its raw fragments."""
        op = self.tb.ops[j]
        self.hazard(j, op.inputs, [])
        self.readset.update(id(t) for t in op.inputs)
        return self.mma(op, None, issue_only=True)

    def _after_first(self, loop: list[int], frags: list[str], pending: int) -> list[str]:
        """The rotated loop's first matmul's fragments `frags`, once at most `pending`
        groups are in flight: rounded (and its fused unary op applied) as `run_op` would,
        then the loop's ops on them other than the accumulating matmuls. Returns the
        rounded values the accumulating matmuls read."""
        self.wait_groups(pending)
        op = self.tb.ops[loop[0]]
        u = self.p.frag_fuse[id(op)]
        NT, vals = self.p.mma_geometry(op)[4], self.frag_unary(op, u, frags)
        self.reg_vals[id((u or op).outputs[0])] = (NT, vals)
        for j in loop[1:]:
            if id(self.tb.ops[j]) not in self.p.reg_acc:
                self.run_op(j)
        return [r for quad in vals for r, _ in quad]

    def _issue_accs(self, loop: list[int], accs: list[str], rounded: list[str]) -> list[str]:
        """Issue the rotated loop's accumulating matmuls on the accumulators' fragments
        `accs` and the first matmul's rounded values `rounded` (not waited for)."""
        op = self.tb.ops[loop[0]]
        NT = self.p.mma_geometry(op)[4]
        self.reg_vals[id((self.p.frag_fuse[id(op)] or op).outputs[0])] = \
            (NT, [[(r, None) for r in rounded[4 * f:4 * f + 4]] for f in range(len(rounded) // 4)])
        self.frag_args, self.new_frags = accs, list(accs)
        self.wgmma_pending = None
        for j in loop[1:]:
            if id(self.tb.ops[j]) in self.p.reg_acc:
                self.run_op(j)
        return self.new_frags

    def _rotate_ok(self, loop: list[int]) -> bool:
        """Whether a loop that `_overlap_ok` (one warpgroup, whose waits cover every reader
        of the ring; a ring of three or more stages, which the first matmul reads one
        iteration ahead) rotates (`_rotated_loop`): the first op a warpgroup matmul whose
        fragments stay in registers (`frag_fuse`) and that reads the ring and nothing the
        loop writes; the others only the register accumulators of warpgroup matmuls on
        its (rounded) fragments, reading ring tiles it does not, and `sum` accumulators of
        its fragments; no output saved in the loop. Its fragments, their rounded copy, its
        A operand's fragments (unless read through a descriptor) and the accumulators must
        fit in `ROTATE_FRAG_REGS` registers."""
        p, ops = self.p, self.tb.ops
        first = ops[loop[0]]
        if p.kstage or id(first) not in p.frag_fuse or any(rec.forloop_dim != -1 for rec in self.tb.outputs):
            return False
        chain = id((p.frag_fuse[id(first)] or first).outputs[0])
        ring = {id(self.tb.inputs[k].stensor) for k in p.varying_async}
        mine = {id(t) for t in first.inputs}
        if not mine & ring:
            return False
        accs = 0
        for j in loop[1:]:
            op = ops[j]
            mm = p.reg_acc.get(id(op))
            if mm is not None:
                if id(mm) not in p.wgmma or p.a_from_regs.get(id(mm)) != chain or any(id(t) in mine for t in mm.inputs):
                    return False
                accs += 4 * p.mma_geometry(mm)[-1]
            elif not (id(op) in p.fused_unary or p.sum_regs.get(id(op)) == chain
                      or any(p.reg_acc.get(id(a)) is op for a in ops)):
                return False
        a_regs = 0 if p.a_desc_ok(first) else first.inputs[0].shape[-1] // 4  # A's fragments, loaded once
        return accs > 0 and 6 * p.mma_geometry(first)[4] + accs + a_regs <= ROTATE_FRAG_REGS

    def _overlap_ok(self, loop: list[int]) -> bool:
        """Whether the loop's accumulating warpgroup matmuls stay in flight into the next
        iteration, until the wait of its first op, a warpgroup matmul: the tensor cores
        run them beside the next iteration's barrier and issue, and the ring refills the
        slot of two iterations back, one stage fewer in flight. One warpgroup (its wait
        covers every reader of the ring), a ring of three or more stages, and only
        warpgroup matmuls read the ring's tiles."""
        p, ops = self.p, self.tb.ops
        if p.S < 3 or p.nthreads != 128 or not loop or p.kstage:
            return False
        first = ops[loop[0]]
        deferred = {id(m) for m in p.reg_acc.values()}
        if first.kind != "matmul" or id(first) not in p.wgmma or id(first) in deferred:
            return False
        if not any(m in p.wgmma for m in deferred):
            return False
        ring = {id(self.tb.inputs[k].stensor) for k in p.varying_async}
        return all(op.kind == "matmul" and id(op) in p.wgmma for op in ops
                   if any(id(t) in ring for t in op.inputs))

    def wgmma_wait(self) -> None:
        """Wait for the warpgroup matmuls issued since the last wait (before their
        accumulators are read or their shared-memory operands overwritten)."""
        if self.wgmma_pending:
            self.wait_groups(0)
        self.wgmma_pending = False

    def wait_groups(self, pending: int) -> None:
        """Wait until at most `pending` warpgroup-matmul groups are in flight."""
        self.e.line(f'llvm.inline_asm has_side_effects "wgmma.wait_group.sync.aligned {pending};", "" : () -> ()')

    def cp_wait(self, pending: int) -> None:
        """Wait until at most `pending` cp.async groups are in flight; where wgmma reads the
        tiles (the async proxy), fence this thread's landed copies for it before the
        barrier that follows."""
        self.e.line(f"nvvm.cp.async.wait.group {pending}")
        if self.p.wgmma:
            self.e.line('llvm.inline_asm has_side_effects "fence.proxy.async.shared::cta;", "" : () -> ()')

    # -- split for-loop: workspace of raw f32 accumulators --

    def _finish(self) -> KernelInfo:
        e = self.e
        bx, by, bz = self.p.block
        g = list(self.tb.grid_dim)
        if self.mode == "partial":
            g[2] *= self.split
        args = self.ins + ([self.ws] if self.ws is not None else []) + self.outs
        args_sig = ", ".join(f"{a.name}: {a.mtype}" for a in args)
        cluster = f", nvvm.cluster_dim = array<i32: 1, 1, {self.p.cluster}>" if self.p.cluster else ""
        head = (f"gpu.func @{self.name}({args_sig}) kernel attributes "
                f"{{known_block_size = array<i32: {bx}, {by}, {bz}>, "
                f"known_grid_size = array<i32: {g[0]}, {g[1]}, {g[2]}>{cluster}}} {{")
        body = e.text()
        if self.p.pdl:  # wait before the first access to memory; let the next grid launch at the end
            body = ["      nvvm.griddepcontrol wait"] + body + ["      nvvm.griddepcontrol launch_dependents"]
        text = "\n".join(["    " + head] + body + ["      gpu.return", "    }"])
        self.notes["split"] = self.split
        if self.p.cluster:
            self.notes["cluster"] = self.p.cluster
        return KernelInfo(self.name, tuple(g), tuple(self.p.block), self.p.smem, text, dict(self.notes))
