"""For-loop accumulators in shared memory, and a split for-loop's workspace:
partials out, the last-arriving block's combine (or the combine kernel's, or each
cluster block's share of it).

A mixin of `BlockLowering` (`lower/block.py`): its methods use the kernel's plan
(`self.p`), emitter (`self.e`) and emit-time state."""
from __future__ import annotations

from math import prod

from ...core.graph import Op
from ..emitter import SMEM, Idx
from ..kernel_plan import LoweringError, _row_major


class AccumulatorEmitter:
    def accum_update(self, op: Op) -> None:
        if op.kind == "forloop_accum_rescale":
            return self.rescale_update(op)
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

    def rescale_update(self, op: Op) -> None:
        """Mirage's rescaling accumulator, one iteration: acc = acc * B + A (`sum`: A's
        rows summed first); B broadcasts to the accumulator's shape."""
        e = self.e
        x, b = op.inputs
        out = op.outputs[0]
        sc = self.p.scratch[id(op)]
        sv = self.scratch_views[id(op)]

        def update(i, cs, v):
            acc = e.load(sv, sc.mtype, i, "f32")
            e.store(e.fbin("addf", e.fbin("mulf", acc, self.read(b, cs, out.shape)), v), sv, sc.mtype, i, "f32")
        if op.attrs["acc"] == "sum":  # one lane a row writes the row's state
            self.rowwise(x, "addf", False, lambda r, v: update(r, self.row_coords(r, x.shape) + [0], v))
        else:  # each element's state stays with the thread of the element loop
            self.elementwise(out.shape, lambda cs: update(e.dot(cs, _row_major(sc.shape)), cs, self.read(x, cs, out.shape)))

    def accum_init(self, op: Op) -> None:
        """Zero the f32 state (-inf for a max accumulator or a running max)."""
        e = self.e
        sc = self.p.scratch[id(op)]
        sv = self.scratch_views[id(op)]
        low = op.kind == "reduction_max" or (op.kind == "forloop_accum" and op.attrs["kind"] == "max")
        v = e.f32(float("-inf") if low else 0.0)
        self.elementwise(sc.shape, lambda cs: e.store(v, sv, sc.mtype, e.dot(cs, _row_major(sc.shape)), "f32"))

    def accum_finish(self, op: Op) -> None:
        e = self.e
        kind = op.attrs["kind"] if op.kind == "forloop_accum" else "none"  # a rescaling one holds its value
        sc = self.p.scratch[id(op)]
        sv = self.scratch_views[id(op)]
        out = op.outputs[0]
        count = float(self.p.R * op.inputs[0].shape[-1])

        def body(cs):
            v = e.load(sv, sc.mtype, e.dot(cs, _row_major(sc.shape)), "f32")
            self.write(out, cs, self.finish_mean_rms(kind, v, count))
        self.elementwise(out.shape, body)

    def ws_index(self, op: Op, split_idx: Idx, elem: Idx) -> Idx:
        e = self.e
        n = prod(op.outputs[0].shape)
        nblocks = prod(self.tb.grid_dim)
        return e.add(self.p.ws_off[id(op)], e.add(e.mul(e.add(e.mul(split_idx, nblocks), self.blin), n), elem))

    def frags_to_ws(self, mm: Op, frags, op: Op) -> None:
        """A register accumulator's partial: to the workspace, or in a cluster to its
        shared-memory part (`KernelPlan.place_parts`), which overlays the loop's tiles: a
        barrier first, so no warp still reads them (with ops after the loop, the parts lie
        past the tiles: no barrier)."""
        e = self.e
        M, K, N, MT, NT, T, tpw = self.p.mma_geometry(mm)
        if self.p.cluster:
            part = self.p.parts[id(op)]
            name, mtype = self._make_view(part, part.offset), part.mtype
            if not self.p.cluster_post:
                e.barrier()
        else:
            name, mtype = self.ws.name, self.ws.mtype
        gq = e.div(self.lane, 4)
        c0 = e.mul(e.rem(self.lane, 4), 2)
        for (t, mt, nt), f in zip(self._frag_tiles(mm), frags):
            with e.if_(e.cmp("ult", t, T)):
                for h in (0, 1):
                    row = e.add(e.add(e.mul(mt, 16), gq), 8 * h)
                    with e.if_(e.cmp("ult", row, M)):  # the pair of adjacent columns: one 8-byte store
                        v = e.op(f"vector.extract {f}[{h}] : vector<2xf32> from vector<2x2xf32>", "f")
                        col = e.add(e.mul(nt, 8), c0)
                        i = (e.add(e.mul(row, part.ld), col) if self.p.cluster
                             else self.ws_index(op, self.sp, e.add(e.mul(row, N), col)))
                        e.line(f"vector.store {v}, {name}[{e.idx(i)}] {{alignment = 8}} : {mtype}, vector<2xf32>")

    def scratch_to_ws(self, op: Op) -> None:
        e = self.e
        if self.p.cluster:  # the scratch tile is the partial the cluster reads
            return
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

    def cluster_combine(self, accs, post_ops=None) -> None:
        """The split blocks of a cluster (`KernelPlan.cluster`, `cluster_split`) wait for
        each other's partials at the cluster barrier (release / acquire at cluster scope:
        the shared-memory stores before it are seen after it); then block `sp` of the
        cluster (its rank) sums rows [sp, sp + 1) * rows / split of every accumulator over
        the partials in the blocks' shared memory (distributed shared memory: `mapa` gives
        a peer's address of the part, `ld.shared::cluster` reads it), four elements a
        thread at a time where the rows allow, and stores them as the output tile's rows,
        or, with ops after the loop (`KernelPlan.cluster_post`), into the accumulator's
        tile in the first block's shared memory, where that block runs them once a second
        barrier has made every block's share visible. That second cluster barrier also
        keeps every block's shared memory until the others have read it (without ops
        after the loop, a relaxed arrive: only the wait matters)."""
        e = self.e
        s = self.p.cluster
        post = self.p.cluster_post
        e.line("nvvm.cluster.arrive")
        e.line("nvvm.cluster.wait")
        base = e.op(f"memref.extract_aligned_pointer_as_index {self.smem_base} : memref<?xi8, {SMEM}> -> index", "sp")

        def cluster_addr(offset, rank: int):
            local = e.op(f"arith.index_cast {e.idx(e.add(base, offset))} : index to i64", "sa")
            return e.op(f'llvm.inline_asm "mapa.shared::cluster.u64 $0, $1, $2;", "=l,l,r" {local}, '
                        f'{e.op(f"arith.constant {rank} : i32", "c")} : (i64, i32) -> i64', "pa")

        first = cluster_addr(0, 0) if post else None
        # (accumulator, the output it is saved as; None: the first block's epilogue reads its tile)
        combined = ([(op, None) for op in accs] if post else
                    [(next(a for a in accs if a.outputs[0] is rec.stensor), k) for k, rec in enumerate(self.tb.outputs)])
        for op, k in combined:
            part = self.p.parts[id(op)]
            peers = [cluster_addr(part.offset, j) for j in range(s)]
            shape = op.outputs[0].shape
            per, cols = prod(shape[:-1]) // s, shape[-1]
            w = 4 if cols % 4 == 0 else 1
            with e.for_(self.tid, per * cols // w, self.p.nthreads) as c:
                row = e.add(e.mul(self.sp, per), e.div(c, cols // w))
                col = e.mul(e.rem(c, cols // w), w)
                off = e.op(f"arith.index_cast {e.idx(e.mul(e.add(e.mul(row, part.ld), col), 4))} : index to i64", "o")
                v = None
                for x in [self._cluster_load(e.op(f"llvm.add {pa}, {off} : i64", "a"), w) for pa in peers]:
                    v = x if v is None else e.op(f"arith.addf {v}, {x} : vector<{w}xf32>", "vf")  # all loads first
                if post:
                    self._cluster_store(first, self.p.tiles[id(op.outputs[0])], shape, row, col, v, w)
                else:
                    self._store_rows(k, row, col, v)
        if not post:  # the reads are done (their values are stored): no ordering needed, only the wait
            e.line('llvm.inline_asm has_side_effects "barrier.cluster.arrive.relaxed.aligned;", "" : () -> ()')
            e.line("nvvm.cluster.wait")
            return
        e.line("nvvm.cluster.arrive")
        e.line("nvvm.cluster.wait")
        with e.if_(e.cmp("eq", self.sp, 0)):
            self.epilogue(post_ops)

    def _cluster_load(self, addr, w: int):
        """`w` (1 or 4) f32 at cluster address `addr`, as a vector<w x f32>."""
        e = self.e
        if w == 1:
            x = e.op(f'llvm.inline_asm has_side_effects "ld.shared::cluster.f32 $0, [$1];", "=f,l" {addr} : (i64) -> f32', "f")
            return e.op(f"vector.from_elements {x} : vector<1xf32>", "vf")
        st = "!llvm.struct<(f32, f32, f32, f32)>"
        r = e.op(f'llvm.inline_asm has_side_effects "ld.shared::cluster.v4.f32 {{$0, $1, $2, $3}}, [$4];", '
                 f'"=f,=f,=f,=f,l" {addr} : (i64) -> {st}', "ld")
        return e.op(f"vector.from_elements {', '.join(e.op(f'llvm.extractvalue {r}[{q}] : {st}', 'f') for q in range(4))}"
                    " : vector<4xf32>", "vf")

    def _cluster_store(self, first, tile, shape, row, col, v, w: int) -> None:
        """Elements col..col + w of row `row` of `tile` (of `shape`) in the cluster's first
        block (`first`: the cluster address of its shared memory), one at a time (the tile's
        layout may swizzle them apart)."""
        e = self.e
        coords = e.delinearize(row, shape[:-1])
        for q in range(w):
            x = e.op(f"vector.extract {v}[{q}] : f32 from vector<{w}xf32>", "x")
            at = e.add(tile.offset, e.mul(tile.offset_of(e, coords + [e.add(col, q)]), tile.itemsize))  # bytes
            addr = e.op(f"llvm.add {first}, {e.op(f'arith.index_cast {e.idx(at)} : index to i64', 'o')} : i64", "a")
            if tile.elt == "f32":
                e.line(f'llvm.inline_asm has_side_effects "st.shared::cluster.f32 [$0], $1;", "l,f" {addr}, {x} : (i64, f32) -> ()')
            else:
                h = e.op(f"arith.bitcast {e.op(f'arith.truncf {x} : f32 to {tile.elt}', 'h')} : {tile.elt} to i16", "h")
                e.line(f'llvm.inline_asm has_side_effects "st.shared::cluster.b16 [$0], $1;", "l,h" {addr}, {h} : (i64, i16) -> ()')

    def _store_rows(self, k: int, row, col, v) -> None:
        """Four combined f32 of output `k`'s row `row` from column `col` on, to device memory."""
        e = self.e
        g = self.outs[k]
        shape = self.tb.outputs[k].stensor.shape
        goff = e.add(self.out_base[k][0], e.dot(e.delinearize(row, shape[:-1]) + [col], g.strides))
        if g.elt != "f32":
            v = e.op(f"arith.truncf {v} : vector<4xf32> to vector<4x{g.elt}>", "vv")
        if g.chunks_along(len(shape) - 1, 4):
            e.line(f"vector.store {v}, {g.name}[{e.idx(goff)}] {{alignment = {4 * g.itemsize}}} : "
                   f"{g.mtype}, vector<4x{g.elt}>")
        else:
            for q in range(4):
                x = e.op(f"vector.extract {v}[{q}] : {g.elt} from vector<4x{g.elt}>", "x")
                e.line(f"memref.store {x}, {g.name}[{e.idx(e.add(goff, q * g.strides[-1]))}] : {g.mtype}")

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
