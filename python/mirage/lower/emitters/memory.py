"""Shared-memory views, input iterators (cp.async, evict_first), output savers and
16-byte chunk moves.

A mixin of `BlockLowering` (`lower/block.py`): its methods use the kernel's plan
(`self.p`), emitter (`self.e`) and emit-time state."""
from __future__ import annotations

from math import prod

from ...core.graph import STensor
from ..emitter import SMEM, Idx
from ..kernel_plan import GlobalArg, Tile


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


# most 16-byte chunks of one tile a thread copies unrolled (`thread_chunks`)
UNROLL_CHUNKS = 32

# 16-byte chunks a thread has in flight when it gathers unaligned rows (`_gather_rows`)
GATHER_BATCH = 4


def _split_axes(rank, dmap, loop_dim):
    per_dim = [[] for _ in range(rank)]
    for axis, d in enumerate(tuple(dmap) + (loop_dim,)):
        if d != -1:
            per_dim[d].append(axis)
    return per_dim


class TileIO:
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
        if g.offset:
            blk = e.add(blk, g.offset)
        it = sum(c * s for (_, c), s in zip(bases, g.strides))
        return blk, it

    def load_input(self, k: int, it: Idx, stage: Idx | None, chunk: tuple[int, Idx] | None = None):
        """Issue the copies of input k for iteration `it` into ring slot `stage`; with
        `chunk` = (dim, start), only the part of its tile from `start` along `dim` that
        its (staged, `KStage`) tile holds."""
        e = self.e
        rec = self.tb.inputs[k]
        g = self.ins[k]
        tile = self.p.tiles[id(rec.stensor)]
        shape = rec.stensor.shape
        blk, itc = self.in_base[k]
        base = e.add(blk, e.mul(it, itc)) if itc else blk
        if chunk is not None:
            shape = tile.shape
            base = e.add(base, e.mul(chunk[1], g.strides[chunk[0]]))
        view = self.views[id(rec.stensor)] if stage is None else self._make_view(
            tile, e.add(tile.offset, e.mul(stage, tile.stage_bytes)))
        vec = self.p.async_in[k]
        if vec and not tile.inner_last:
            # chunks along the tile's inner dim, which is the global's contiguous one
            # (a transposed view): consecutive threads take consecutive chunks of it
            d = tile.inner % len(shape)
            order = [j for j in range(len(shape)) if j != d] + [d]
            ext = [shape[j] // vec if j == d else shape[j] for j in order]
            with e.for_(self.tid, prod(ext), self.p.nthreads) as c:
                oc = e.delinearize(c, ext)
                cs = [None] * len(shape)
                for j, x in zip(order, oc):
                    cs[j] = e.mul(x, vec) if j == d else x
                self._cp_async(g, e.add(base, e.dot(cs, g.strides)), view, tile, tile.offset_of(e, cs), vec)
        elif vec:
            cpr = shape[-1] // vec
            for row, ck in self.thread_chunks(tile.rows * cpr, cpr):
                col = e.mul(ck, vec)
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
                    self._cp_async(g, goff, view, tile, soff, vec)
        elif self.p.gather_in[k]:
            self._gather_rows(g, base, view, tile, shape, self.p.gather_in[k])
        else:
            def body(cs):
                goff = e.add(base, e.dot(cs, g.strides))
                v = e.load(g.name, g.mtype, goff, g.elt)
                e.store(v, view, tile.mtype, tile.offset_of(e, cs), tile.elt)
            self.elementwise(shape, body)

    def thread_chunks(self, n: int, cpr: int):
        """(row, chunk in the row) of this thread's chunks c = tid, tid + T, ... < n of rows of
        `cpr` chunks, the caller's body emitted once per value. Where every thread has the
        same n / T chunks and T is a multiple of cpr, they are unrolled: the thread's row
        and chunk are worked out once and the j-th chunk is T / cpr rows further (no loop,
        no division a chunk: the copies of a GEMV's ring are most of its instructions);
        otherwise an scf.for over c."""
        e, T = self.e, self.p.nthreads
        if n % T == 0 and T % cpr == 0 and n // T <= UNROLL_CHUNKS:
            row0, ck = e.div(self.tid, cpr), e.rem(self.tid, cpr)
            for j in range(n // T):
                yield e.add(row0, j * (T // cpr)), ck
            return
        with e.for_(self.tid, n, T) as c:
            yield e.div(c, cpr), e.rem(c, cpr)

    def _gather_rows(self, g: GlobalArg, base: Idx, view: str, tile: Tile, shape, V: int) -> None:
        """Copy tile rows that are contiguous in global memory but not 16-byte aligned (rows of
        4097 keys): each thread loads aligned 16-byte chunks overlapping a row, GATHER_BATCH
        of them before it stores any (a warp issues in order: element copies wait out a
        load's latency at every store, 31 us for 262 KB in 4 blocks on the H100), and stores
        the row's elements of each. Buffers start 16-byte aligned (the runtime checks it), so
        a chunk overlapping a row starts inside the buffer; one that would end past it (the
        buffer's last, partial chunk) is read element by element, at clamped addresses."""
        e = self.e
        L = shape[-1]
        C = -(-L // V) + 1  # chunks a row overlaps, at most
        n = tile.rows * C
        T = self.p.nthreads
        vt = f"vector<{V}x{g.elt}>"
        with e.for_(0, -(-n // (T * GATHER_BATCH)), 1) as r:
            chunks = []
            for u in range(GATHER_BATCH):
                c = e.add(self.tid, e.mul(e.add(e.mul(r, GATHER_BATCH), u), T))  # (row, chunk) flat
                live = e.cmp("ult", c, n)
                c = e.minui(c, n - 1)
                row = e.div(c, C)
                start = e.add(base, e.dot(e.delinearize(row, shape[:-1]), g.strides[:-1]))
                end = e.add(start, L)
                at = e.add(e.op(f"arith.subi {e.idx(start)}, {e.idx(e.rem(start, V))} : index", "x"),
                           e.mul(e.rem(c, C), V))
                live = e.op(f"arith.andi {live}, {e.cmp('ult', at, end)} : i1", "p")
                whole = e.op(f"arith.andi {live}, {e.cmp('ule', e.add(at, V), g.span)} : i1", "p")
                v = e.fresh("vv")
                e.line(f"{v} = scf.if {whole} -> ({vt}) {{")
                e.depth += 1
                ld = e.op(f"vector.load {g.name}[{e.idx(at)}] {{alignment = 16}} : {g.mtype}, {vt}", "vv")
                e.line(f"scf.yield {ld} : {vt}")
                e.depth -= 1
                e.line("} else {")
                e.depth += 1
                xs = [e.op(f"memref.load {g.name}[{e.idx(e.minui(e.add(at, i), g.span - 1))}] : {g.mtype}", "l")
                      for i in range(V)]
                parts = e.op("vector.from_elements " + ", ".join(xs) + f" : {vt}", "vv")
                e.line(f"scf.yield {parts} : {vt}")
                e.depth -= 1
                e.line("}")
                chunks.append((live, row, start, end, at, v))
            for live, row, start, end, at, v in chunks:
                for i in range(V):
                    x = e.add(at, i)
                    inside = e.op(f"arith.andi {e.cmp('uge', x, start)}, {e.cmp('ult', x, end)} : i1", "p")
                    with e.if_(e.op(f"arith.andi {live}, {inside} : i1", "p")):
                        val = e.op(f"vector.extract {v}[{i}] : {g.elt} from {vt}", "l")
                        col = e.op(f"arith.subi {e.idx(x)}, {e.idx(start)} : index", "x")
                        off = tile.offset_rc(e, row, col)
                        if g.elt == tile.elt:
                            e.line(f"memref.store {val}, {view}[{e.idx(off)}] : {tile.mtype}")
                        else:  # through f32, as `Emitter.load` / `store` convert
                            if g.elt != "f32":
                                val = e.op(f"arith.extf {val} : {g.elt} to f32", "f")
                            e.store(val, view, tile.mtype, off, tile.elt)

    def _cp_async(self, g: GlobalArg, goff: Idx, view: str, tile: Tile, soff: Idx, vec: int) -> None:
        e = self.e
        tok = e.fresh("tok")
        bypass = " {bypassL1}" if vec * g.itemsize == 16 else ""
        e.line(f"{tok} = nvgpu.device_async_copy {g.name}[{e.idx(goff)}], {view}[{e.idx(soff)}], "
               f"{vec}{bypass} : {g.mtype} to {tile.mtype}")

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
        if shape and shape[-1] % vec == 0 and tile.ld % vec == 0 and tile.inner_last \
                and g.chunks_along(len(shape) - 1, vec):
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
