"""Lowering of one graph-defined kernel (a block graph) to a `gpu.func`.

Layout of the generated kernel (one thread block = one block of the μGraph's grid):

- every tile of the block graph lives in dynamic shared memory, row-major with a
  padded row (`ld`) where it feeds the tensor cores; accumulators that are not in
  registers keep an f32 copy there;
- input iterators are 16-byte `cp.async` copies (`nvgpu.device_async_copy`), consecutive
  threads taking consecutive 16-byte chunks (coalesced); loop-varying inputs are
  prefetched `stages - 1` iterations ahead into a ring of `stages` buffers (double
  buffering or deeper), loop-invariant inputs are loaded once before the loop; tiles
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

from contextlib import contextmanager
from dataclasses import dataclass, field
from math import prod

from ..core.graph import Op, STensor, TBGraph
from . import scalar
from .emitter import SMEM, Emitter, Idx
from .kernel_plan import GlobalArg, KernelPlan, LoweringError, Options, Tile, _row_major


# The 16-byte cp.async of an input read once (Options.evict_first), with an L2 evict_first
# cache policy, as inline PTX ($0: shared address, $1: global address).
#
# Workaround for a ptxas bug (CUDA 13.0: offline ptxas 13.0.88 and the 580 driver's JIT):
# when the shared address is a per-thread register plus a uniform, non-constant term (the
# dynamic-smem base plus a ring slot offset in a fully unrolled loop), ptxas folds the
# uniform term and the policy into one uniform register pair, `LDGSTS [Ra+URb],
# desc[URb+1]`, and if that pair is UR16 or above it encodes it as UR0:UR1, which the
# kernel never writes: the copy runs with a garbage shared offset and cache policy
# ("an illegal instruction was encountered"; seen on GatedMLP search candidate c3 of
# benchmarks/results/profile_select.md, split kernel with the layout plan on). Scaling the
# 32-bit shared address by a per-thread 1 that ptxas cannot fold (popc of %lanemask_eq)
# makes the whole address one per-thread register, so ptxas emits `LDGSTS [Ra+imm]` and
# never that form. Cost: one IMAD per copy (the popc is common to all of them).
EVICT_FIRST_COPY = ("{.reg .b64 pol; .reg .b32 sa, one, lm; "
                    "createpolicy.fractional.L2::evict_first.b64 pol, 1.0; "
                    "mov.u32 lm, %lanemask_eq; popc.b32 one, lm; cvt.u32.u64 sa, $0; mul.lo.u32 sa, sa, one; "
                    "cp.async.cg.shared.global.L2::cache_hint [sa], [$1], 16, pol;}")


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
    state carried across for-loop iterations other than tb.forloop_accum's, i.e. a
    rescaling accumulator, or a running max (tb.reduction_max) that the loop updates."""
    varying = tb.accum_counts()  # per tile: accumulators on the paths from loop-varying inputs
    for j, op in enumerate(tb.ops):
        if op.kind == "forloop_accum_rescale":
            raise LoweringError(
                f"[lowering] kernel {kernel}: tb.forloop_accum_rescale (#{j}, Mirage's online-softmax "
                f"accumulator) has no GPU lowering yet; the interpreter and the verifier support it "
                f"(docs/lowering.md)")
        c = varying.get(id(op.inputs[0])) if op.kind == "reduction_max" else None
        if tb.forloop_range > 1 and c is not None and c[1] == 0:  # changes from iteration to iteration
            raise LoweringError(
                f"[lowering] kernel {kernel}: tb.reduction_max (#{j}) inside a for-loop of "
                f"{tb.forloop_range} iterations keeps a running max across them, which has no GPU "
                f"lowering yet (outside the loop it lowers as reduce_max; docs/lowering.md)")


def _split_axes(rank, dmap, loop_dim):
    per_dim = [[] for _ in range(rank)]
    for axis, d in enumerate(tuple(dmap) + (loop_dim,)):
        if d != -1:
            per_dim[d].append(axis)
    return per_dim


class BlockLowering:
    """Emits one kernel from its `KernelPlan` (`self.p`): the decisions are read there,
    this class only writes MLIR (the emit-time state: views, register values, barriers)."""

    def __init__(self, tb: TBGraph, name: str, ins: list[GlobalArg], outs: list[GlobalArg], opts: Options,
                 mode: str = "full", split: int = 1, ws: GlobalArg | None = None):
        self.p = KernelPlan(tb, ins, opts, mode, split, bool(outs), name)
        self.tb, self.name, self.ins, self.outs, self.opts = tb, name, ins, outs, self.p.opts
        self.mode, self.split, self.ws = mode, split, ws
        self.e = Emitter()
        self.views: dict[int, str] = {}
        self.views2d: dict[int, str] = {}
        self.scratch_views: dict[int, str] = {}
        self.reg_vals: dict[int, list] = {}  # register tensors (fused fragments) -> values
        self.notes = self.p.notes
        self.written_by: dict[int, int] = {}  # tile id -> chunk width of the element loop that wrote it

    # ------------------------------------------------------------------ helpers
    def view(self, t: STensor) -> str:
        return self.views[id(t)]

    def _make_view(self, tile: Tile, byte_off: Idx, two_d: bool = False) -> str:
        e = self.e
        ty = tile.mtype2d if two_d else tile.mtype
        return e.op(f"memref.view {self.smem_base}[{e.idx(byte_off)}][] : memref<?xi8, {SMEM}> to {ty}", "m")

    def read(self, t: STensor, coords, out_shape) -> str:
        """f32 value of tile `t` at the broadcast of output coordinates `coords`."""
        tile = self.p.tiles[id(t)]
        r, R = len(t.shape), len(out_shape)
        cs = list(coords[R - r:])
        cs = [0 if n == 1 else c for c, n in zip(cs, t.shape)]
        return self.e.load(self.view(t), tile.mtype, tile.offset_of(self.e, cs), tile.elt)

    def write(self, t: STensor, coords, v: str) -> None:
        tile = self.p.tiles[id(t)]
        self.e.store(v, self.view(t), tile.mtype, tile.offset_of(self.e, coords), tile.elt)

    def elementwise(self, shape, body) -> None:
        """Thread t handles elements t, t + nthreads, ... of `shape`; body(coords)."""
        e = self.e
        n = prod(shape) if shape else 1
        with e.for_(self.tid, n, self.p.nthreads) as i:
            body(e.delinearize(i, shape))

    def warp_rows(self, rows: int, length: int, value, combine: str, finish) -> None:
        """One warp per row (or, for short rows, `32 // lanes` rows a warp): value(row, j)
        -> f32 over j < length, combined across the row with `combine` (addf | maximumf)
        through shuffles; finish(row, v) in the row's first lane."""
        e = self.e
        nw = self.p.nthreads // 32
        init = e.f32(0.0 if combine == "addf" else float("-inf"))
        self.notes["warp_reductions"] += 1
        wpr = self.p._row_split(rows, length)
        if wpr > 1:
            self.split_rows(rows, length, wpr, value, combine, finish, init)
            return
        lanes = 32
        while lanes > 1 and lanes // 2 >= length and rows % (32 // (lanes // 2)) == 0:
            lanes //= 2
        rpw = 32 // lanes  # rows a warp; every lane of a warp runs the same trips (shuffles)
        if rpw > 1:
            self.notes["rows_per_warp"] = rpw
        sub, ln = (e.div(self.lane, lanes), e.rem(self.lane, lanes)) if rpw > 1 else (0, self.lane)
        with e.for_(self.warp, rows // rpw, nw) as grp:
            r = e.add(e.mul(grp, rpw), sub) if rpw > 1 else grp
            j, args, res, close = e.for_iter(ln, length, lanes, [(init, "f32")])
            close([e.fbin(combine, args[0], value(r, j))])
            v = self.shuffle_reduce(res[0], combine, lanes)
            with e.if_(e.cmp("eq", ln, 0)):
                finish(r, v)

    def split_rows(self, rows, length, wpr, value, combine, finish, init) -> None:
        """`warp_rows` with `wpr` warps per row: each warp reduces every wpr-th 32-element
        chunk of its row through shuffles, lane 0 keeps the warp's partial in shared
        memory, and after a barrier thread r combines row r's partials and finishes it."""
        e = self.e
        self.notes["split_rows"] = wpr
        rv, rm = self.red_view, self.p.red.mtype
        with e.if_(e.cmp("ult", self.warp, rows * wpr)):
            r, part = e.div(self.warp, wpr), e.rem(self.warp, wpr)
            j, args, res, close = e.for_iter(e.add(e.mul(part, 32), self.lane), length, 32 * wpr, [(init, "f32")])
            close([e.fbin(combine, args[0], value(r, j))])
            v = self.shuffle_reduce(res[0], combine)
            with e.if_(e.cmp("eq", self.lane, 0)):
                e.store(v, rv, rm, self.warp, "f32")
        self.combine_partials(rows, wpr, lambda i, p: e.add(e.mul(i, wpr), p) if p else e.mul(i, wpr), combine, finish)

    def combine_partials(self, n: int, parts: int, at, combine: str, finish) -> None:
        """After a barrier, thread i < n combines the `parts` partials of result i (at
        `at(i, p)` in the shared-memory partials) and finishes it; a barrier after, since
        the partials' space is reused by the next reduction."""
        e = self.e
        rv, rm = self.red_view, self.p.red.mtype
        e.barrier()
        with e.if_(e.cmp("ult", self.tid, n)):
            v = e.load(rv, rm, at(self.tid, 0), "f32")
            for p in range(1, parts):
                v = e.fbin(combine, v, e.load(rv, rm, at(self.tid, p), "f32"))
            finish(self.tid, v)
        e.barrier()

    def shuffle_reduce(self, v, combine: str, lanes: int = 32):
        """`v` combined over each aligned group of `lanes` lanes (xor shuffles)."""
        e = self.e
        for s in (16, 8, 4, 2, 1):
            if s >= lanes:
                continue
            sh = e.fresh("s")
            ok = e.fresh("ok")
            e.line(f"{sh}, {ok} = gpu.shuffle xor {v}, {e.const(s, 'i32')}, {e.const(32, 'i32')} : f32")
            v = e.fbin(combine, v, sh)
        return v

    def row_coords(self, r: Idx, shape) -> list:
        return self.e.delinearize(r, shape[:-1]) if len(shape) > 1 else []

    # ------------------------------------------------------------------ global <-> tile
    def _bases(self, shape, tile, dmap, loop_dim):
        """Per tensor dim: (block part of the coordinate, loop coefficient)."""
        per = _split_axes(len(shape), dmap, loop_dim)
        e = self.e
        blocks = [self.bx, self.by, self.bz]
        out = []
        for d, axes in enumerate(per):
            base: Idx = 0
            loop_coef = 0
            for j, a in enumerate(axes):
                inner = prod(self.p.lead[b] for b in axes[j + 1:]) * tile[d]
                if a == 3:
                    loop_coef = inner
                else:
                    base = e.add(base, e.mul(blocks[a], inner))
            out.append((base, loop_coef))
        return out

    def _global_base(self, g: GlobalArg, tile_shape, dmap, loop_dim):
        bases = self._bases(g.shape, tile_shape, dmap, loop_dim)
        e = self.e
        blk = e.dot([b for b, _ in bases], g.strides)
        it = sum(c * s for (_, c), s in zip(bases, g.strides))
        return blk, it

    def load_input(self, k: int, it: Idx, stage: Idx | None):
        """Issue the copies of input k for iteration `it` into ring slot `stage`."""
        e = self.e
        rec = self.tb.inputs[k]
        g = self.ins[k]
        tile = self.p.tiles[id(rec.stensor)]
        shape = rec.stensor.shape
        blk, itc = self.in_base[k]
        base = e.add(blk, e.mul(it, itc)) if itc else blk
        view = self.views[id(rec.stensor)] if stage is None else self._make_view(
            tile, e.add(tile.offset, e.mul(stage, tile.stage_bytes)))
        vec = self.p.async_in[k]
        if vec:
            cpr = shape[-1] // vec
            n = tile.rows * cpr
            with e.for_(self.tid, n, self.p.nthreads) as c:
                row = e.div(c, cpr)
                col = e.mul(e.rem(c, cpr), vec)
                rc = e.delinearize(row, shape[:-1])
                goff = e.add(base, e.add(e.dot(rc, g.strides[:-1]), col))
                soff = tile.offset_rc(e, row, col)
                if self.p._streamed(k) and vec * g.itemsize == 16:
                    ga = e.op(f"arith.index_cast {e.idx(e.add(self._gptr(k), e.mul(goff, g.itemsize)))} : index to i64", "ga")
                    sp = e.op(f"memref.extract_aligned_pointer_as_index {view} : {tile.mtype} -> index", "sp")
                    sa = e.op(f"arith.index_cast {e.idx(e.add(sp, e.mul(soff, g.itemsize)))} : index to i64", "sa")
                    e.line(f'llvm.inline_asm has_side_effects "{EVICT_FIRST_COPY}", '
                           f'"l,l" {sa}, {ga} : (i64, i64) -> ()')
                else:
                    tok = e.fresh("tok")
                    bypass = " {bypassL1}" if vec * g.itemsize == 16 else ""
                    e.line(f"{tok} = nvgpu.device_async_copy {g.name}[{e.idx(goff)}], {view}[{e.idx(soff)}], "
                           f"{vec}{bypass} : {g.mtype} to {tile.mtype}")
        else:
            def body(cs):
                goff = e.add(base, e.dot(cs, g.strides))
                v = e.load(g.name, g.mtype, goff, g.elt)
                e.store(v, view, tile.mtype, tile.offset_of(e, cs), tile.elt)
            self.elementwise(shape, body)


    def _gptr(self, k: int) -> str:
        """Byte address (index) of input k's global buffer, computed once at entry."""
        if k not in self.gptrs:
            g = self.ins[k]
            self.gptrs[k] = self.e.op(f"memref.extract_aligned_pointer_as_index {g.name} : {g.mtype} -> index", "gp")
        return self.gptrs[k]

    def save_output(self, k: int, it: Idx) -> None:
        e = self.e
        rec = self.tb.outputs[k]
        g = self.outs[k]
        t = rec.stensor
        tile = self.p.tiles[id(t)]
        blk, itc = self.out_base[k]
        base = e.add(blk, e.mul(it, itc)) if itc else blk
        shape = t.shape
        vec = 16 // g.itemsize
        if shape and shape[-1] % vec == 0 and tile.ld % vec == 0 and tile.inner_last:
            cpr = shape[-1] // vec
            with e.for_(self.tid, tile.rows * cpr, self.p.nthreads) as c:
                row = e.div(c, cpr)
                col = e.mul(e.rem(c, cpr), vec)
                rc = e.delinearize(row, shape[:-1])
                goff = e.add(base, e.add(e.dot(rc, g.strides[:-1]), col))
                soff = tile.offset_rc(e, row, col)
                vt = f"vector<{vec}x{g.elt}>"
                v = e.op(f"vector.load {self.view(t)}[{e.idx(soff)}] {{alignment = 16}} : {tile.mtype}, {vt}", "vv")
                e.line(f"vector.store {v}, {g.name}[{e.idx(goff)}] {{alignment = 16}} : {g.mtype}, {vt}")
        else:
            def body(cs):
                v = self.read(t, cs, shape)
                e.store(v, g.name, g.mtype, e.add(base, e.dot(cs, g.strides)), g.elt)
            self.elementwise(shape, body)

    # ------------------------------------------------------------------ ops
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
                self.elementwise_vec(op, lambda args: [scalar.apply(e, k, args, op.attrs)])
                return True

            def body(cs):
                args = [self.read(t, cs, out.shape) for t in op.inputs]
                self.write(out, cs, scalar.apply(e, k, args, op.attrs))
            self.elementwise(out.shape, body)
            return True
        if k == "thread_graph":
            self.thread_graph(op)
            return True
        if k in ("reduction", "reduce_max"):
            self.reduction(op, "addf" if k == "reduction" else "maximumf")
            return True
        if k == "reduction_max":
            # run once (`unsupported` rejects it inside a loop of several iterations): the
            # running max is this tile's max and the change (diff) is 0
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

    @contextmanager
    def chunk_loop(self, shape, V: int):
        """Thread t takes the V-element chunks t, t + nthreads, ... of `shape` (along the
        last dim); yields (flat row, coordinates of the chunk's first element)."""
        e = self.e
        per_row = shape[-1] // V
        with e.for_(self.tid, prod(shape[:-1]) * per_row, self.p.nthreads) as c:
            row = e.div(c, per_row)
            yield row, self.row_coords(row, shape) + [e.mul(e.rem(c, per_row), V)]

    def elementwise_vec(self, op: Op, fn) -> None:
        """The element loop of `op` over 16-byte chunks: each thread loads a chunk of each
        full operand (one vector load), computes the chunk's elements in f32 with
        `fn(args) -> [value per output]`, and stores each output chunk (one vector store)."""
        e = self.e
        V = self.p.vec_width(op)
        shape = op.outputs[0].shape
        n = shape[-1]
        self.notes["vector_loops"] = self.notes.get("vector_loops", 0) + 1
        with self.chunk_loop(shape, V) as (_, cs):
            lanes = []
            for t in op.inputs:
                r = len(t.shape)
                if t.shape and t.shape[-1] == n and n > 1:
                    tl = self.p.tiles[id(t)]
                    coords = [0 if m == 1 else x for x, m in zip(cs[len(cs) - r:], t.shape)]
                    lanes.append(self.load_chunk(self.view(t), tl, tl.offset_of(e, coords), V))
                else:
                    lanes.append([self.read(t, cs, shape)] * V)
            vals = [fn([a[i] for a in lanes]) for i in range(V)]
            for k, o in enumerate(op.outputs):
                tl = self.p.tiles[id(o)]
                self.store_chunk([v[k] for v in vals], self.view(o), tl, tl.offset_of(e, cs))

    def load_chunk(self, view: str, tl: Tile, off: Idx, V: int) -> list[str]:
        e = self.e
        v = e.op(f"vector.load {view}[{e.idx(off)}] {{alignment = 16}} : {tl.mtype}, vector<{V}x{tl.elt}>", "vv")
        if tl.elt != "f32":
            v = e.op(f"arith.extf {v} : vector<{V}x{tl.elt}> to vector<{V}xf32>", "vf")
        return [e.op(f"vector.extract {v}[{i}] : f32 from vector<{V}xf32>", "f") for i in range(V)]

    def store_chunk(self, vals: list[str], view: str, tl: Tile, off: Idx) -> None:
        e = self.e
        V = len(vals)
        v = e.op(f"vector.from_elements {', '.join(vals)} : vector<{V}xf32>", "vf")
        if tl.elt != "f32":
            v = e.op(f"arith.truncf {v} : vector<{V}xf32> to vector<{V}x{tl.elt}>", "vv")
        e.line(f"vector.store {v}, {view}[{e.idx(off)}] {{alignment = 16}} : {tl.mtype}, vector<{V}x{tl.elt}>")

    def rowwise(self, a: STensor, combine: str, square: bool, finish) -> None:
        """Reduce each row (last dim) of tile `a`; finish(row_index, f32)."""
        e = self.e
        V = self.p.chunk(a)
        L = a.shape[-1] // V  # elements, or 16-byte chunks
        rows = prod(a.shape[:-1])
        tile = self.p.tiles.get(id(a))

        def value(r, j):
            if V == 1:
                xs = [self.read(a, self.row_coords(r, a.shape) + [j], a.shape)]
            else:
                xs = self.load_chunk(self.view(a), tile, tile.offset_of(e, self.row_coords(r, a.shape) + [e.mul(j, V)]), V)
            if square:
                xs = [e.fbin("mulf", x, x) for x in xs]
            while len(xs) > 1:  # a tree, so the chunk's terms do not wait on each other
                xs = [e.fbin(combine, xs[i], xs[i + 1]) for i in range(0, len(xs) - 1, 2)] + xs[len(xs) & ~1:]
            return xs[0]

        if self.p.nthreads % 32 == 0:
            self.warp_rows(rows, L, value, combine, finish)
        else:
            init = e.f32(0.0 if combine == "addf" else float("-inf"))
            with e.for_(self.tid, rows, self.p.nthreads) as r:
                j, args, res, close = e.for_iter(0, L, 1, [(init, "f32")])
                close([e.fbin(combine, args[0], value(r, j))])
                finish(r, res[0])

    def reduction(self, op: Op, combine: str) -> None:
        e = self.e
        a, out = op.inputs[0], op.outputs[0]
        d = op.attrs["dim"] % len(a.shape)
        if d == len(a.shape) - 1:
            otile = self.p.tiles[id(out)]
            self.rowwise(a, combine, False, lambda r, v: e.store(
                v, self.view(out), otile.mtype, otile.offset_of(e, self.row_coords(r, a.shape) + [0]), otile.elt))
            return
        init = e.f32(0.0 if combine == "addf" else float("-inf"))
        n, L = prod(out.shape), a.shape[d]
        g = self.p._col_split(n, L)
        if g > 1:  # g threads an output, each a strided part of the dim; partials in shared memory
            self.notes["col_split"] = g
            rv, rm = self.red_view, self.p.red.mtype
            with e.if_(e.cmp("ult", self.tid, n * g)):
                src = e.delinearize(e.rem(self.tid, n), out.shape)
                j, args, res, close = e.for_iter(e.div(self.tid, n), L, g, [(init, "f32")])
                src[d] = j
                close([e.fbin(combine, args[0], self.read(a, src, a.shape))])
                e.store(res[0], rv, rm, self.tid, "f32")
            self.combine_partials(n, g, lambda i, p: e.add(i, p * n) if p else i, combine,
                                  lambda i, v: self.write(out, e.delinearize(i, out.shape), v))
            return

        def body(cs):
            j, args, res, close = e.for_iter(0, a.shape[d], 1, [(init, "f32")])
            src = list(cs)
            src[d] = j
            close([e.fbin(combine, args[0], self.read(a, src, a.shape))])
            self.write(out, cs, res[0])
        self.elementwise(out.shape, body)

    def concat(self, op: Op) -> None:
        e = self.e
        a, b = op.inputs
        out = op.outputs[0]
        d = op.attrs["dim"] % len(out.shape)
        na = a.shape[d]

        def body(cs):
            p = e.cmp("ult", cs[d], na)
            r = e.fresh("sel")
            e.line(f"{r} = scf.if {p} -> (f32) {{")
            e.depth += 1
            va = self.read(a, cs, out.shape)
            e.line(f"scf.yield {va} : f32")
            e.depth -= 1
            e.line("} else {")
            e.depth += 1
            cb = list(cs)
            cb[d] = e.op(f"arith.subi {e.idx(cs[d])}, {e.idx(na)} : index", "x")
            vb = self.read(b, cb, out.shape)
            e.line(f"scf.yield {vb} : f32")
            e.depth -= 1
            e.line("}")
            self.write(out, cs, r)
        self.elementwise(out.shape, body)

    def thread_graph(self, op: Op) -> None:
        e = self.e
        th = op.body
        out_shape = op.outputs[0].shape
        if self.p.vec_width(op) > 1:
            def fn(args):
                env = {id(s): a for s, a in zip(th.inputs, args)}
                for o in th.ops:
                    env[id(o.outputs[0])] = scalar.apply(e, o.kind, [env[id(x)] for x in o.inputs], o.attrs)
                return [env[id(s)] for s in th.outputs]
            self.elementwise_vec(op, fn)
            return

        def body(cs):
            env = {id(s): self.read(t, cs, out_shape) for s, t in zip(th.inputs, op.inputs)}
            for o in th.ops:
                env[id(o.outputs[0])] = scalar.apply(e, o.kind, [env[id(x)] for x in o.inputs], o.attrs)
            for s, t in zip(th.outputs, op.outputs):
                self.write(t, cs, env[id(s)])
        self.elementwise(out_shape, body)

    def matmul_generic(self, op: Op) -> None:
        e = self.e
        a, b = op.inputs
        out = op.outputs[0]
        K = a.shape[-1]

        def body(cs):
            k, args, res, close = e.for_iter(0, K, 1, [(e.f32(0.0), "f32")])
            va = self.read(a, list(cs[:-1]) + [k], a.shape)
            vb = self.read(b, list(cs[:-2]) + [k, cs[-1]], b.shape)
            close([e.op(f"math.fma {va}, {vb}, {args[0]} : f32", "f")])
            self.write(out, cs, res[0])
        self.elementwise(out.shape, body)

    # ------------------------------------------------------------------ tensor cores

    def _frag_tiles(self, op: Op):
        e = self.e
        M, K, N, MT, NT, T, tpw = self.p.mma_geometry(op)
        res = []
        for j in range(tpw):
            t = e.add(e.mul(self.warp, tpw), j)
            tc = e.minui(t, T - 1)
            res.append((t, e.div(tc, NT), e.rem(tc, NT)))
        return res

    def mma(self, op: Op, acc: list[str] | None) -> list[str]:
        """C (+)= A @ B on the tensor cores; returns this warp's fragments. An A operand
        kept in registers (`a_from_regs`) is taken from its fragments instead of ldmatrix."""
        e = self.e
        self.notes["mma"] += 1
        a, b = op.inputs
        M, K, N, MT, NT, T, tpw = self.p.mma_geometry(op)
        areg = self.reg_vals.get(self.p.a_from_regs[id(op)]) if id(op) in self.p.a_from_regs else None
        ta, tb_ = (None if areg else self.p.tiles[id(a)]), self.p.tiles[id(b)]
        va, vb = (None if areg else self.views2d[id(a)]), self.views2d[id(b)]
        elt = tb_.elt
        tiles = self._frag_tiles(op)
        zero = e.const("0.000000e+00", "vector<2x2xf32>")
        init = acc or [zero] * tpw
        arow = e.rem(self.lane, 16)
        acol0 = e.mul(e.div(self.lane, 16), 8)

        def step(k0, cs):
            acol = e.add(k0, acol0)
            brow = e.add(k0, arow)
            outs = []
            for jj, ((t, mt, nt), c) in enumerate(zip(tiles, cs)):
                if areg is not None:
                    fa = self.a_frag_from_regs(areg, jj // NT, k0 // 16, elt)
                else:
                    ar = e.add(e.mul(mt, 16), arow)
                    fa = e.op(f"nvgpu.ldmatrix {va}[{e.idx(ar)}, {e.idx(ta.chunk_col(e, ar, acol))}] "
                              f"{{numTiles = 4 : i32, transpose = false}} : {ta.mtype2d} -> vector<4x2x{elt}>", "fa")
                fb = e.op(f"nvgpu.ldmatrix {vb}[{e.idx(brow)}, {e.idx(tb_.chunk_col(e, brow, e.mul(nt, 8)))}] "
                          f"{{numTiles = 2 : i32, transpose = true}} : {tb_.mtype2d} -> vector<2x2x{elt}>", "fb")
                if elt == "bf16":
                    outs.append(self.mma_bf16(fa, fb, c))
                    continue
                outs.append(e.op(f"nvgpu.mma.sync({fa}, {fb}, {c}) {{mmaShape = [16, 8, 16]}} : "
                                 f"(vector<4x2x{elt}>, vector<2x2x{elt}>, vector<2x2xf32>) -> vector<2x2xf32>", "acc"))
            return outs

        nk = K // 16
        if areg is not None or nk <= self.opts.unroll_k:
            # unrolled, two independent accumulator chains (even / odd k-steps) per tile,
            # so consecutive mma.sync do not wait on each other
            chains = [list(init), [zero] * tpw] if nk > 1 else [list(init)]
            for ks in range(nk):
                c = chains[ks % len(chains)]
                chains[ks % len(chains)] = step(ks * 16, c)
            if len(chains) == 1:
                return chains[0]
            return [e.op(f"arith.addf {x}, {y} : vector<2x2xf32>", "acc") for x, y in zip(*chains)]
        ks, args, res, close = e.for_iter(0, nk, 1, [(f, "vector<2x2xf32>") for f in init])
        close(step(e.mul(ks, 16), args))
        return res

    def mma_bf16(self, fa: str, fb: str, c: str) -> str:
        """D = A @ B + C, m16n8k16, bf16 operands, f32 accumulators, as inline PTX (the
        fragments of nvgpu.ldmatrix: A 4 and B 2 registers of 2 x bf16, C 2x2 f32)."""
        e = self.e

        def regs(frag, n):
            out = []
            for i in range(n):
                v = e.op(f"vector.extract {frag}[{i}] : vector<2xbf16> from vector<{n}x2xbf16>", "bv")
                w = e.op(f"vector.bitcast {v} : vector<2xbf16> to vector<1xi32>", "bw")
                out.append(e.op(f"vector.extract {w}[0] : i32 from vector<1xi32>", "br"))
            return out

        ra, rb = regs(fa, 4), regs(fb, 2)
        rc = [e.op(f"vector.extract {c}[{h}, {q}] : f32 from vector<2x2xf32>", "f") for h in (0, 1) for q in (0, 1)]
        st = "!llvm.struct<(f32, f32, f32, f32)>"
        r = e.op('llvm.inline_asm has_side_effects "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 '
                 '{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};", '
                 '"=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f" '
                 f'{", ".join(ra + rb + rc)} : ({", ".join(["i32"] * 6 + ["f32"] * 4)}) -> {st}', "mm")
        d = [e.op(f"llvm.extractvalue {r}[{i}] : {st}", "f") for i in range(4)]
        return e.op(f"vector.from_elements {', '.join(d)} : vector<2x2xf32>", "acc")

    def frag_unary(self, mm: Op, u: Op, frags: list[str]) -> list:
        """Apply the unary op `u` to the matmul's C fragments, rounding as the tiles would
        (matmul result to its dtype, then u's result to its dtype); per fragment the four
        values [h][q] as (rounded value, its f32)."""
        e = self.e
        s_elt, o_elt = mm.outputs[0].dtype.mlir, u.outputs[0].dtype.mlir
        vals = []
        for f in frags:
            quad = []
            for h in (0, 1):
                for q in (0, 1):
                    v = e.op(f"vector.extract {f}[{h}, {q}] : f32 from vector<2x2xf32>", "f")
                    v = e.op(f"arith.extf {e.op(f'arith.truncf {v} : f32 to {s_elt}', 't')} : {s_elt} to f32", "f")
                    r = e.op(f"arith.truncf {scalar.apply(e, u.kind, [v], u.attrs)} : f32 to {o_elt}", "t")
                    quad.append((r, e.op(f"arith.extf {r} : {o_elt} to f32", "f")))
            vals.append(quad)
        return vals

    def a_frag_from_regs(self, vals, rb: int, ks: int, elt: str) -> str:
        """A operand (16x16, k-step ks) of row block rb of this warp from the C fragments of
        the 16x8 tiles 2ks and 2ks+1: registers a0..a3 = (row g | g+8) x (k-half 0 | 1)."""
        NT, vals = vals
        t0, t1 = vals[rb * NT + 2 * ks], vals[rb * NT + 2 * ks + 1]
        xs = [t0[0][0], t0[1][0], t0[2][0], t0[3][0], t1[0][0], t1[1][0], t1[2][0], t1[3][0]]
        return self.e.op(f"vector.from_elements {', '.join(xs)} : vector<4x2x{elt}>", "fa")

    def frag_row_sums(self, op: Op, vals) -> None:
        """`sum` accumulator of a register tile: per row, the thread's values, then the 4
        lanes of the quad (shuffles xor 1, 2); lane 4g adds rows g and g+8 of each row block
        to the f32 scratch (each row is owned by one warp)."""
        e = self.e
        sc = self.p.scratch[id(op)]
        sv = self.scratch_views[id(op)]
        NT, vals = vals
        rpw = len(vals) // NT
        g = e.div(self.lane, 4)
        lead = e.cmp("eq", e.rem(self.lane, 4), 0)
        for rb in range(rpw):
            for h in (0, 1):
                v = None
                for j in range(rb * NT, (rb + 1) * NT):
                    for q in (0, 1):
                        x = vals[j][2 * h + q][1]
                        v = x if v is None else e.fbin("addf", v, x)
                for s_ in (1, 2):
                    sh = e.fresh("s")
                    ok = e.fresh("ok")
                    e.line(f"{sh}, {ok} = gpu.shuffle xor {v}, {e.const(s_, 'i32')}, {e.const(32, 'i32')} : f32")
                    v = e.fbin("addf", v, sh)
                row = e.add(e.mul(e.add(e.mul(self.warp, rpw), rb), 16), e.add(g, 8 * h))
                with e.if_(lead):
                    e.store(e.fbin("addf", e.load(sv, sc.mtype, row, "f32"), v), sv, sc.mtype, row, "f32")

    def store_frags(self, op: Op, frags: list[str], out: STensor, scale=None) -> None:
        """Write this warp's C fragments (rows < M) to tile `out`."""
        e = self.e
        M, K, N, MT, NT, T, tpw = self.p.mma_geometry(op)
        tile = self.p.tiles[id(out)]
        g = e.div(self.lane, 4)
        c0 = e.mul(e.rem(self.lane, 4), 2)
        for (t, mt, nt), f in zip(self._frag_tiles(op), frags):
            valid = e.cmp("ult", t, T) if tpw * (self.p.nthreads // 32) > T else None
            ctx = e.if_(valid) if valid else None
            if ctx:
                ctx.__enter__()
            for h in (0, 1):
                row = e.add(e.add(e.mul(mt, 16), g), 8 * h)
                ok = e.cmp("ult", row, M) if MT * 16 > M else None
                ctx2 = e.if_(ok) if ok else None
                if ctx2:
                    ctx2.__enter__()
                for q in (0, 1):
                    v = e.op(f"vector.extract {f}[{h}, {q}] : f32 from vector<2x2xf32>", "f")
                    if scale is not None:
                        v = scale(v)
                    col = e.add(e.add(e.mul(nt, 8), c0), q)
                    e.store(v, self.view(out), tile.mtype, tile.offset_rc(e, row, col), tile.elt)
                if ctx2:
                    ctx2.__exit__(None, None, None)
            if ctx:
                ctx.__exit__(None, None, None)

    # ------------------------------------------------------------------ accumulators
    def accum_update(self, op: Op) -> None:
        e = self.e
        kind = op.attrs["kind"]
        x = op.inputs[0]
        sc = self.p.scratch[id(op)]
        sv = self.scratch_views[id(op)]
        if kind in ("none", "max"):
            comb = "addf" if kind == "none" else "maximumf"

            def body(cs):
                off = e.dot(cs, _row_major(sc.shape))
                e.store(e.fbin(comb, e.load(sv, sc.mtype, off, "f32"), self.read(x, cs, x.shape)), sv, sc.mtype, off, "f32")
            self.elementwise(x.shape, body)
        elif kind in ("sum", "mean", "rms"):
            def fin(r, v):
                e.store(e.fbin("addf", e.load(sv, sc.mtype, r, "f32"), v), sv, sc.mtype, r, "f32")
            self.rowwise(x, "addf", kind == "rms", fin)
        elif kind == "sum_todimx":
            dimx = self.tb.reduction_dimx
            L = x.shape[-1]

            def body(cs):
                j, args, res, close = e.for_iter(0, L // dimx, 1, [(e.f32(0.0), "f32")])
                close([e.fbin("addf", args[0], self.read(x, list(cs[:-1]) + [e.add(e.mul(j, dimx), cs[-1])], x.shape))])
                off = e.dot(cs, _row_major(sc.shape))
                e.store(e.fbin("addf", e.load(sv, sc.mtype, off, "f32"), res[0]), sv, sc.mtype, off, "f32")
            self.elementwise(sc.shape, body)
        else:
            raise LoweringError(f"[lowering] accumulator '{kind}' has no GPU lowering")

    def accum_init(self, op: Op) -> None:
        e = self.e
        sc = self.p.scratch[id(op)]
        sv = self.scratch_views[id(op)]
        v = e.f32(float("-inf") if op.attrs["kind"] == "max" else 0.0)
        self.elementwise(sc.shape, lambda cs: e.store(v, sv, sc.mtype, e.dot(cs, _row_major(sc.shape)), "f32"))

    def accum_finish(self, op: Op) -> None:
        e = self.e
        kind = op.attrs["kind"]
        sc = self.p.scratch[id(op)]
        sv = self.scratch_views[id(op)]
        out = op.outputs[0]
        count = float(self.p.R * op.inputs[0].shape[-1])

        def body(cs):
            v = e.load(sv, sc.mtype, e.dot(cs, _row_major(sc.shape)), "f32")
            self.write(out, cs, self.finish_mean_rms(kind, v, count))
        self.elementwise(out.shape, body)

    def finish_mean_rms(self, kind: str, v, count: float):
        """The accumulated sum `v` -> the accumulator's value: sum / count for `mean`,
        sqrt(sum of squares / count) for `rms`, unchanged otherwise."""
        e = self.e
        if kind == "mean":
            return e.fbin("divf", v, e.f32(count))
        if kind == "rms":
            return e.op(f"math.sqrt {e.fbin('divf', v, e.f32(count))} : f32", "f")
        return v

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
        if split > 1:
            zid = e.op("gpu.block_id z", "bid")
            self.bz = e.rem(zid, g[2]) if g[2] > 1 else 0
            self.sp = e.div(zid, g[2])
        else:
            self.bz = e.op("gpu.block_id z", "bid") if g[2] > 1 else 0
        self.blin = e.add(self.bx, e.mul(g[0], e.add(self.by, e.mul(g[1], self.bz))))
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

        counts = tb.accum_counts(varying_only=False)
        post = set()
        for op in tb.ops:
            if op.kind != "forloop_accum" and any((counts.get(id(t)) or (0, 0))[1] >= 1 for t in op.outputs):
                post.add(id(op))
        accs = [op for op in tb.ops if op.kind == "forloop_accum"]
        pre_ops = [op for op in tb.ops if op.kind != "forloop_accum" and id(op) not in post]
        post_ops = [op for op in tb.ops if id(op) in post]
        inv = [k for k, rec in enumerate(tb.inputs) if rec.forloop_dim == -1]

        if self.mode == "combine":
            for k in inv:
                self.load_input(k, 0, None)
            if any(self.p.async_in[k] for k in inv):
                e.line("nvvm.cp.async.commit.group")
                e.line("nvvm.cp.async.wait.group 0")
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
        itg = e.add(it0, it)
        # loads of this iteration
        if S > 1:
            nxt = e.add(it, S - 1)
            with e.if_(e.cmp("ult", nxt, R)):
                for k in self.p.varying_async:
                    self.load_input(k, e.add(it0, nxt), e.rem(nxt, S))
            e.line("nvvm.cp.async.commit.group")
            e.line(f"nvvm.cp.async.wait.group {S - 1}")
            slot = e.rem(it, S)
            for k in self.p.varying_async:
                t = tb.inputs[k].stensor
                tile = self.p.tiles[id(t)]
                boff = e.add(tile.offset, e.mul(slot, tile.stage_bytes))
                self.views[id(t)] = self._make_view(tile, boff)
                self.views2d[id(t)] = self._make_view(tile, boff, True)
        sync_varying = [k for k, rec in enumerate(tb.inputs)
                        if rec.forloop_dim != -1 and (S == 1 or k not in self.p.varying_async)]
        for k in sync_varying:
            self.load_input(k, itg, None)
        if S == 1 and any(self.p.async_in[k] for k in sync_varying):
            e.line("nvvm.cp.async.commit.group")
            e.line("nvvm.cp.async.wait.group 0")
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
        if op.kind == "forloop_accum":
            if id(op) in self.p.reg_acc:
                mm = self.p.reg_acc[id(op)]
                self.hazard(self.tb.ops.index(mm), mm.inputs, [])
                self.readset.update(id(t) for t in mm.inputs)
                n = self.p.mma_geometry(mm)[-1]
                pos = self.reg_pos[id(op)]
                self.new_frags[pos:pos + n] = self.mma(mm, self.frag_args[pos:pos + n])
                return
            self.hazard(j, op.inputs, [id(op)])
            if id(op) in self.p.sum_regs:
                self.frag_row_sums(op, self.reg_vals[self.p.sum_regs[id(op)]])
            else:
                self.accum_update(op)
            self.readset.update(id(t) for t in op.inputs)
            if op.attrs["kind"] in ("sum", "mean", "rms"):  # rows combined by warps, lane 0 writes
                self.dirty.add(id(op))
            return
        if id(op) in self.p.mma_ops and any(self.p.reg_acc.get(id(a)) is op for a in self.tb.ops):
            return  # computed by its register accumulator
        if id(op) in self.p.fused_unary:
            return  # applied to the fragments of its matmul
        if id(op) in self.p.frag_fuse:
            self.hazard(j, op.inputs, [])
            u = self.p.frag_fuse[id(op)]
            self.reg_vals[id(u.outputs[0])] = (self.p.mma_geometry(op)[4], self.frag_unary(op, u, self.mma(op, None)))
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

    def loop_setup(self, accs, inv, split: int, wait_invariant: bool):
        """Before the for-loop: initialise the shared-memory accumulators, load the
        loop-invariant inputs (with `wait_invariant`, wait for them behind a barrier;
        the scheduled path lets its hazard analysis place that barrier), and issue the
        cp.async ring's prologue (iterations 0 .. S-2). Returns the iterations this block
        runs, its first iteration, the register accumulators and their loop-carried zero
        initial values (`self.reg_pos` maps each to its first fragment)."""
        e = self.e
        for op in accs:
            if id(op) not in self.p.reg_acc:
                self.accum_init(op)
        for k in inv:
            self.load_input(k, 0, None)
        if any(self.p.async_in[k] for k in inv):
            e.line("nvvm.cp.async.commit.group")
            if wait_invariant:
                e.line("nvvm.cp.async.wait.group 0")
        if wait_invariant:
            e.barrier()
        R = self.p.R // split  # iterations run by this block
        it0 = e.mul(self.sp, R)
        if self.p.S > 1:
            for s in range(self.p.S - 1):
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
        iteration i + S - 1 into the slot iteration i - 1 read: the barrier covers both)."""
        e = self.e
        tb = self.tb
        order = self.p.exec_order()
        pre = [j for j in order if self.p.region[j] == "pre"]
        loop = [j for j in order if self.p.region[j] == "loop"]
        post = [j for j in order if self.p.region[j] == "post"]
        self._reset()
        R, it0, reg_ops, reg_inits = self.loop_setup(accs, inv, split, wait_invariant=False)
        S = self.p.S
        if pre:  # hoisted ops: the invariant copies (the oldest group) land, then they run once
            if any(self.p.async_in[k] for k in inv):
                e.line(f"nvvm.cp.async.wait.group {S - 1 if S > 1 else 0}")
            e.barrier()
            self._reset()
            for j in pre:
                self.run_op(j)
            # the loop starts with a barrier (ring wait, or R > 1 / S == 1): the results are visible
        it, args, res, close = e.for_iter(0, R, 1, reg_inits or [(e.f32(0.0), "f32")])
        self.frag_args = args
        self.new_frags = list(args) if reg_inits else []
        itg = e.add(it0, it)
        sync_varying = [k for k, rec in enumerate(tb.inputs)
                        if rec.forloop_dim != -1 and (S == 1 or k not in self.p.varying_async)]
        if S > 1:
            e.line(f"nvvm.cp.async.wait.group {S - 2}")
            e.barrier()
            nxt = e.add(it, S - 1)
            with e.if_(e.cmp("ult", nxt, R)):
                for k in self.p.varying_async:
                    self.load_input(k, e.add(it0, nxt), e.rem(nxt, S))
            e.line("nvvm.cp.async.commit.group")
            slot = e.rem(it, S)
            for k in self.p.varying_async:
                t = tb.inputs[k].stensor
                tile = self.p.tiles[id(t)]
                boff = e.add(tile.offset, e.mul(slot, tile.stage_bytes))
                self.views[id(t)] = self._make_view(tile, boff)
                self.views2d[id(t)] = self._make_view(tile, boff, True)
        elif R > 1:
            e.barrier()  # the previous iteration is done with the tiles these copies overwrite
        for k in sync_varying:
            self.load_input(k, itg, None)
        if S == 1 and any(self.p.async_in[k] for k in sync_varying + inv):
            e.line("nvvm.cp.async.commit.group")
            e.line("nvvm.cp.async.wait.group 0")
        if S == 1 or sync_varying:
            e.barrier()
        self._reset()
        for j in loop:
            self.run_op(j)
        for k, rec in enumerate(tb.outputs):
            if rec.forloop_dim != -1:
                if id(rec.stensor) in self.dirty:
                    self.sync()
                self.save_output(k, itg)
                self.readset.add(id(rec.stensor))
        close(self.new_frags or [args[0]])
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
            return self._finish()
        self.post_region(post)
        return self._finish()

    # -- split for-loop: workspace of raw f32 accumulators --
    def ws_index(self, op: Op, split_idx: Idx, elem: Idx) -> Idx:
        e = self.e
        n = prod(op.outputs[0].shape)
        nblocks = prod(self.tb.grid_dim)
        return e.add(self.p.ws_off[id(op)], e.add(e.mul(e.add(e.mul(split_idx, nblocks), self.blin), n), elem))

    def frags_to_ws(self, mm: Op, frags, op: Op) -> None:
        e = self.e
        M, K, N, MT, NT, T, tpw = self.p.mma_geometry(mm)
        ws = self.ws
        gq = e.div(self.lane, 4)
        c0 = e.mul(e.rem(self.lane, 4), 2)
        for (t, mt, nt), f in zip(self._frag_tiles(mm), frags):
            with e.if_(e.cmp("ult", t, T)):
                for h in (0, 1):
                    row = e.add(e.add(e.mul(mt, 16), gq), 8 * h)
                    with e.if_(e.cmp("ult", row, M)):
                        for q in (0, 1):
                            v = e.op(f"vector.extract {f}[{h}, {q}] : f32 from vector<2x2xf32>", "f")
                            col = e.add(e.add(e.mul(nt, 8), c0), q)
                            e.store(v, ws.name, ws.mtype, self.ws_index(op, self.sp, e.add(e.mul(row, N), col)), "f32")

    def scratch_to_ws(self, op: Op) -> None:
        e = self.e
        sc = self.p.scratch[id(op)]
        sv = self.scratch_views[id(op)]
        ws = self.ws
        e.barrier()

        def body(cs):
            i = e.dot(cs, _row_major(sc.shape))
            e.store(e.load(sv, sc.mtype, i, "f32"), ws.name, ws.mtype, self.ws_index(op, self.sp, i), "f32")
        self.elementwise(sc.shape, body)

    def fold_combine(self, accs, post_ops) -> None:
        """Last-block combine (threadFenceReduction pattern): every thread fences its
        partials to device scope; thread 0 counts the block's arrival with an atomic add
        on the group's counter; the block that arrives last fences again, sums the
        partials of its group, finishes the accumulators, runs the epilogue and resets the
        counter to 0 for the next launch (the runtime zeroes buffers once at allocation)."""
        e = self.e
        ws = self.ws
        fence = 'llvm.inline_asm has_side_effects "fence.acq_rel.gpu;", "" : () -> ()'
        e.line(fence)
        e.barrier()
        cnt = e.add(self.p.cnt_off, self.blin)
        fm = self.p.flag.mtype
        with e.if_(e.cmp("eq", self.tid, 0)):
            old = e.op(f"memref.atomic_rmw addf {e.f32(1.0)}, {ws.name}[{e.idx(cnt)}] : (f32, {ws.mtype}) -> f32", "f")
            e.store(old, self.flag_view, fm, 0, "f32")
        e.barrier()
        arrived = e.load(self.flag_view, fm, 0, "f32")
        last = e.op(f"arith.cmpf oeq, {arrived}, {e.f32(float(self.split - 1))} : f32", "p")
        with e.if_(last):
            e.line(fence)
            for op in accs:
                self.combine_acc(op)
            e.barrier()
            self.epilogue(post_ops)
            with e.if_(e.cmp("eq", self.tid, 0)):
                e.store(e.f32(0.0), ws.name, ws.mtype, cnt, "f32")

    def combine_acc(self, op: Op) -> None:
        e = self.e
        kind = op.attrs["kind"]
        out = op.outputs[0]
        ws = self.ws
        comb = "maximumf" if kind == "max" else "addf"
        init = e.f32(float("-inf") if kind == "max" else 0.0)
        count = float(self.p.R * op.inputs[0].shape[-1])

        def body(cs):
            i = e.dot(cs, _row_major(out.shape))
            j, args, res, close = e.for_iter(0, self.split, 1, [(init, "f32")])
            close([e.fbin(comb, args[0], e.load(ws.name, ws.mtype, self.ws_index(op, j, i), "f32"))])
            v = res[0]
            self.write(out, cs, self.finish_mean_rms(kind, v, count))
        self.elementwise(out.shape, body)

    def _finish(self) -> KernelInfo:
        e = self.e
        bx, by, bz = self.p.block
        g = list(self.tb.grid_dim)
        if self.mode == "partial":
            g[2] *= self.split
        args = self.ins + ([self.ws] if self.ws is not None else []) + self.outs
        args_sig = ", ".join(f"{a.name}: {a.mtype}" for a in args)
        head = (f"gpu.func @{self.name}({args_sig}) kernel attributes "
                f"{{known_block_size = array<i32: {bx}, {by}, {bz}>, "
                f"known_grid_size = array<i32: {g[0]}, {g[1]}, {g[2]}>}} {{")
        text = "\n".join(["    " + head] + e.text() + ["      gpu.return", "    }"])
        self.notes["split"] = self.split
        return KernelInfo(self.name, tuple(g), tuple(self.p.block), self.p.smem, text, dict(self.notes))
