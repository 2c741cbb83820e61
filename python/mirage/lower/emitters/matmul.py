"""Matmuls: tensor cores (ldmatrix + mma.sync m16n8k16, f16 and bf16), fragments kept
in registers, fused unary ops and row sums on fragments, and the f32 FMA fallback.

A mixin of `BlockLowering` (`lower/block.py`): its methods use the kernel's plan
(`self.p`), emitter (`self.e`) and emit-time state."""
from __future__ import annotations

from math import prod

from ...core.graph import Op, STensor
from .. import scalar
from ..kernel_plan import k_lanes


class MatmulEmitter:
    def matmul_generic(self, op: Op) -> None:
        e = self.e
        a, b = op.inputs
        out = op.outputs[0]
        K = a.shape[-1]
        n = prod(out.shape)
        lanes = k_lanes(n, K, self.p.nthreads)

        def k_sum(cs, lb, ub, step):  # f32 sum over k = lb, lb + step, ... < ub of A[.., k] B[k, ..]
            k, args, res, close = e.for_iter(lb, ub, step, [(e.f32(0.0), "f32")])
            va = self.read(a, list(cs[:-1]) + [k], a.shape)
            vb = self.read(b, list(cs[:-2]) + [k, cs[-1]], b.shape)
            close([e.op(f"math.fma {va}, {vb}, {args[0]} : f32", "f")])
            return res[0]
        if lanes == 1:
            self.elementwise(out.shape, lambda cs: self.write(out, cs, k_sum(cs, 0, K, 1)))
            return
        # thread t: output (i // lanes), keys i % lanes, i % lanes + lanes, ...; every thread
        # runs the same trips (the shuffles take whole warps), idle ones sum nothing
        T = self.p.nthreads
        with e.for_(self.tid, -(-n * lanes // T) * T, T) as i:
            active = e.cmp("ult", i, n * lanes)
            o = e.minui(e.div(i, lanes), n - 1)  # (clamped: an idle thread's address stays in the tile)
            cs = e.delinearize(o, out.shape)
            ub = e.op(f"arith.select {active}, {e.idx(K)}, {e.idx(0)} : index", "x")
            v = self.shuffle_reduce(k_sum(cs, e.rem(i, lanes), ub, lanes), "addf", lanes)
            first = e.op(f"arith.andi {active}, {e.cmp('eq', e.rem(i, lanes), 0)} : i1", "p")
            with e.if_(first):
                self.write(out, cs, v)

    def _frag_tiles(self, op: Op):
        e = self.e
        M, K, N, MT, NT, T, tpw = self.p.mma_geometry(op)
        res = []
        for j in range(tpw):
            t = e.add(e.mul(self.warp, tpw), j)
            tc = e.minui(t, T - 1)
            res.append((t, e.div(tc, NT), e.rem(tc, NT)))
        return res

    def mma(self, op: Op, acc: list[str] | None, issue_only: bool = False) -> list[str]:
        """C (+)= A @ B on the tensor cores; returns this warp's fragments. An A operand
        kept in registers (`a_from_regs`) is taken from its fragments instead of ldmatrix.
        `issue_only` (a warpgroup matmul): no wait, the caller waits, and A's fragments are
        kept for the next issue (the rotated loop's first matmul, `BlockLowering._rotated_loop`)."""
        if id(op) in self.p.wgmma:
            return self.wgmma(op, acc, issue_only)
        if id(op) in self.p.kstage:
            return self.mma_staged(op, acc)
        e = self.e
        self.notes["mma"] += 1
        a, b = op.inputs
        M, K, N, MT, NT, T, tpw = self.p.mma_geometry(op)
        areg = self.reg_vals.get(self.p.a_from_regs[id(op)]) if id(op) in self.p.a_from_regs else None
        ta, tb_ = (None if areg else self.p.tile_of(a)), self.p.tile_of(b)
        va, vb = (None if areg else self.views2d[id(a)]), self.views2d[id(b)]
        elt = tb_.elt
        tiles = self._frag_tiles(op)
        zero = e.const("0.000000e+00", "vector<2x2xf32>")
        init = acc or [zero] * tpw
        arow = e.rem(self.lane, 16)
        acol0 = e.mul(e.div(self.lane, 16), 8)
        # a warp's tiles j, j+1 (j even) are columns nt, nt+1 of one row of tiles when no tile
        # index is clamped and the counts are even: one ldmatrix.x4 loads both B fragments
        # (lanes 16-31 address the second's rows), half the B loads of one x2 a tile
        paired = T == tpw * (self.p.nthreads // 32) and tpw % 2 == 0 and NT % 2 == 0

        def b_frags(brow, nt) -> list[str]:
            n = 4 if paired else 2
            col = e.add(e.mul(nt, 8), acol0) if paired else e.mul(nt, 8)
            lr, lc = tb_.ldm_index(e, brow, col)
            f = e.op(f"nvgpu.ldmatrix {vb}[{e.idx(lr)}, {e.idx(lc)}] "
                     f"{{numTiles = {n} : i32, transpose = true}} : {tb_.mtype2d} -> vector<{n}x2x{elt}>", "fb")
            if not paired:
                return [f]
            return [e.op(f"vector.shuffle {f}, {f} [{o}, {o + 1}] : vector<4x2x{elt}>, vector<4x2x{elt}>", "fb")
                    for o in (0, 2)]

        def step(k0, cs):
            acol = e.add(k0, acol0)
            brow = e.add(k0, arow)
            outs = []
            fbs: list = []
            for jj, ((t, mt, nt), c) in enumerate(zip(tiles, cs)):
                if areg is not None:
                    fa = self.a_frag_from_regs(areg, jj // NT, k0 // 16, elt)
                else:
                    ar = e.add(e.mul(mt, 16), arow)
                    lr, lc = ta.ldm_index(e, ar, acol)
                    fa = e.op(f"nvgpu.ldmatrix {va}[{e.idx(lr)}, {e.idx(lc)}] "
                              f"{{numTiles = 4 : i32, transpose = false}} : {ta.mtype2d} -> vector<4x2x{elt}>", "fa")
                if not paired or jj % 2 == 0:
                    fbs = b_frags(brow, nt)
                fb = fbs[jj % 2 if paired else 0]
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

    def mma_staged(self, op: Op, acc: list[str] | None) -> list[str]:
        """C (+)= A @ B with A and B staged in chunks of K (`KStage`): a ring of S slots,
        the first chunks issued ahead; step c waits for chunk c, barrier, refills the slot
        every warp is done with and runs the chunk's matmul, the fragments carried across
        the steps. On wgmma (S > 2) a chunk's matmul is left running while the next
        step waits and copies (`wgmma.wait_group 1`: chunk c - 1 done), so the refilled
        slot is c - 2's and the copies run S - 2 chunks ahead; else S - 1."""
        e = self.e
        ks = self.p.kstage[id(op)]
        S, nc = ks.stages, op.inputs[0].shape[-1] // ks.kc
        (ka, kb), (sa, sb) = ks.inputs, ks.sub.inputs
        ta, tb_ = self.p.tile_of(sa), self.p.tile_of(sb)
        r = len(op.inputs[1].shape)
        defer = id(ks.sub) in self.p.wgmma and S > 2
        ahead = S - 2 if defer else S - 1

        def issue(c: Idx, slot: Idx) -> None:
            start = e.mul(c, ks.kc)
            self.load_input(ka, self.itg, slot, (len(op.inputs[0].shape) - 1, start))
            self.load_input(kb, self.itg, slot, (r - 2, start))

        e.barrier()  # the ring's slots are free: every warp is done with this matmul's last chunks
        for c in range(ahead):
            issue(c, c)
            e.line("nvvm.cp.async.commit.group")
        zero = e.const("0.000000e+00", "vector<2x2xf32>")
        init = acc or [zero] * self.p.mma_geometry(op)[-1]
        c, args, res, close = e.for_iter(0, nc, 1, [(f, "vector<2x2xf32>") for f in init])
        self.cp_wait(ahead - 1)
        e.barrier()
        nxt = e.add(c, ahead)
        with e.if_(e.cmp("ult", nxt, nc)):
            issue(nxt, e.rem(nxt, S))
        e.line("nvvm.cp.async.commit.group")
        slot = e.rem(c, S)
        for t, tile in ((sa, ta), (sb, tb_)):
            off = e.add(tile.offset, e.mul(slot, tile.stage_bytes))
            self.views[id(t)], self.views2d[id(t)] = self._make_view(tile, off), self._make_view(tile, off, True)
        if not defer:
            close(self.mma(ks.sub, args))
            return res
        out = self.wgmma(ks.sub, args, issue_only=True)
        self.wait_groups(1)
        close(out)
        return self.wait_groups_on(res)

    def wgmma(self, op: Op, acc: list[str] | None, issue_only: bool = False) -> list[str]:
        """C (+)= A @ B on the warpgroups (each 4 of the block's warps, 64 rows,
        `KernelPlan._wgmma_ok`), one wgmma.mma_async m64nNk16 per 16 rows of K (each
        warpgroup its own, on the same B tile): A's fragments loaded by ldmatrix as
        for mma.sync (warp w: rows 16w..16w+15) or taken from the fragments of the matmul
        before it (`a_from_regs`), B read from shared memory through a descriptor. All of
        K's steps are one asm statement, between a fence and the wait for the group, so
        the accumulators stay in their registers while the tensor cores run; the result
        is this warp's fragments in the mma.sync C layout (the wgmma D layout for m64:
        d[4j + 2h + q] = row 8h + lane/4, column 8j + 2(lane%4) + q). In the loop body
        (`wgmma_pending` None or True) the wait of a matmul whose accumulators the loop
        carries is left to the body's end, so the body's matmuls run together, and a
        second such matmul of the same A view reuses its fragments."""
        e = self.e
        self.notes["mma"] += 1
        a, b = op.inputs
        M, K, N, MT, NT, T, tpw = self.p.mma_geometry(op)
        tb_ = self.p.tile_of(b)
        elt = tb_.elt

        # deferred only for accumulators carried across the loop (read after it)
        carried = self.wgmma_pending is not False and any(m is op for m in self.p.reg_acc.values())
        aregs: list[str] = []
        adesc = None
        if id(op) in self.p.a_from_regs:
            vals = self.reg_vals[self.p.a_from_regs[id(op)]]
            for ks in range(K // 16):
                aregs += self.frag_regs(self.a_frag_from_regs(vals, 0, ks, elt), 4, elt)
        elif self.p.a_desc_ok(op):
            adesc = self.a_descriptor(op)
        else:
            ta, va = self.p.tile_of(a), self.views2d[id(a)]
            aregs = self.a_frags.get(va, []) if carried or issue_only else []
            ar = e.add(e.mul(self.warp, 16), e.rem(self.lane, 16))
            acol0 = e.mul(e.div(self.lane, 16), 8)
            for ks in range(K // 16 if not aregs else 0):
                lr, lc = ta.ldm_index(e, ar, e.add(ks * 16, acol0))
                aregs += self.frag_regs(e.op(f"nvgpu.ldmatrix {va}[{e.idx(lr)}, {e.idx(lc)}] {{numTiles = 4 : i32, "
                                             f"transpose = false}} : {ta.mtype2d} -> vector<4x2x{elt}>", "fa"), 4, elt)
            if carried or issue_only:
                self.a_frags[va] = aregs
        # B's descriptor: start address / 16, the leading and stride byte offsets / 16, the
        # swizzle mode
        pitch, lead, stride = tb_.mn_major_offsets()
        sp = e.op(f"memref.extract_aligned_pointer_as_index {self.views[id(b)]} : {tb_.mtype} -> index", "bp")
        addr = e.op(f"arith.index_cast {sp} : index to i64", "ba")
        mode = {128: 1, 64: 2, 32: 3}[tb_.swizzle]
        bits = (lead // 16 << 16) | (stride // 16 << 32) | (mode << 62)
        hi = e.op(f"arith.constant {bits - (1 << 64) if bits >= 1 << 63 else bits} : i64", "bd")  # as signed i64
        four, mask = e.op("arith.constant 4 : i64", "c"), e.op("arith.constant 16383 : i64", "c")
        lo = e.op(f"arith.andi {e.op(f'arith.shrui {addr}, {four} : i64', 'bs')}, {mask} : i64", "bl")
        desc = e.op(f"arith.ori {lo}, {hi} : i64", "bd")
        # the first k-step's scale-d predicate z: true accumulates onto the accumulators
        # (tied inputs); false ignores them: a fresh C (none, so no register is set to zero
        # before the issue), or a carried accumulator's first iteration (`acc_first`: 0, or
        # an i32 operand that is 0 there), whose initial values are undefined
        first = (self.acc_first if carried else 1) if acc else 0
        flag = [first] if isinstance(first, str) else []
        dv = self.acc_scalars(acc) if acc else []
        a_ops, a_types = (aregs, ["i32"] * len(aregs)) if adesc is None else ([adesc], ["i64"])
        nd, na = 4 * NT, len(a_ops)
        a0 = nd + len(dv)  # operand number of A's first register (or its descriptor)
        dl = ", ".join(f"${i}" for i in range(nd))
        shape = f"m64n{N}k16.f32.{elt}.{elt}"
        z = f"setp.ne.b32 z, ${a0 + na + 1}, 0;" if flag else f"setp.{'ne' if first else 'eq'}.b32 z, one, 0;"
        body = ["{ .reg .pred p, z; .reg .b32 one; .reg .b64 d, da; mov.b32 one, 1; setp.ne.b32 p, one, 0;",
                z, f"mov.b64 d, ${a0 + na};", "fence.proxy.async.shared::cta; wgmma.fence.sync.aligned;"]
        if adesc is not None:
            body.insert(3, f"mov.b64 da, ${a0};")
        for ks in range(K // 16):
            scale = "p" if ks else "z"
            if adesc is None:
                ra = ", ".join(f"${a0 + 4 * ks + i}" for i in range(4))
                body.append(f"wgmma.mma_async.sync.aligned.{shape} {{{dl}}}, {{{ra}}}, d, {scale}, 1, 1, 1;")
            else:  # A K-major (transpose 0), B MN-major (1)
                body.append(f"wgmma.mma_async.sync.aligned.{shape} {{{dl}}}, da, d, {scale}, 1, 1, 0, 1;")
                if ks + 1 < K // 16:  # the next 16 columns: 32 bytes on, or the next column block
                    body.append(f"add.s64 da, da, {self.a_step(op, ks + 1) - self.a_step(op, ks)};")
            if ks + 1 < K // 16:
                body.append(f"add.s64 d, d, {16 * pitch // 16};")
        defer = carried or issue_only
        body.append("wgmma.commit_group.sync.aligned;" + ("" if defer else " wgmma.wait_group.sync.aligned 0;") + " }")
        if carried:
            self.wgmma_pending = True
        cons = ",".join(["=f"] * nd + [str(i) for i in range(len(dv))] + ["r" if adesc is None else "l"] * na + ["l"]
                        + ["r"] * len(flag))
        st = f"!llvm.struct<({', '.join(['f32'] * nd)})>"
        r = e.op(f'llvm.inline_asm has_side_effects "{" ".join(body)}", "{cons}" {", ".join(dv + a_ops + [desc] + flag)} : '
                 f'({", ".join(["f32"] * len(dv) + a_types + ["i64"] + ["i32"] * len(flag))}) -> {st}', "wg")
        return self.acc_frags(r, st, nd)

    def acc_scalars(self, accs: list[str]) -> list[str]:
        """The f32 values of accumulator fragments (vector<2x2xf32> each), in order."""
        return [self.e.op(f"vector.extract {c}[{h}, {q}] : f32 from vector<2x2xf32>", "d")
                for c in accs for h in (0, 1) for q in (0, 1)]

    def acc_frags(self, r: str, st: str, n: int) -> list[str]:
        """The n f32 results of an asm statement (`r`, of struct type `st`) as fragments."""
        d = [self.e.op(f"llvm.extractvalue {r}[{i}] : {st}", "f") for i in range(n)]
        return [self.e.op(f"vector.from_elements {', '.join(d[j:j + 4])} : vector<2x2xf32>", "acc")
                for j in range(0, n, 4)]

    def wait_groups_on(self, accs: list[str]) -> list[str]:
        """Wait for every warpgroup matmul, the accumulator fragments `accs` passed through
        the wait, so that nothing reads them before it."""
        vals = self.acc_scalars(accs)
        n = len(vals)
        st = f"!llvm.struct<({', '.join(['f32'] * n)})>"
        cons = ",".join(["=f"] * n + [str(i) for i in range(n)])
        r = self.e.op(f'llvm.inline_asm has_side_effects "wgmma.wait_group.sync.aligned 0;", "{cons}" '
                      f'{", ".join(vals)} : ({", ".join(["f32"] * n)}) -> {st}', "wg")
        return self.acc_frags(r, st, n)

    def a_step(self, op: Op, ks: int) -> int:
        """Descriptor units (16 bytes) from A's first k-step to k-step `ks`: 32 bytes a step
        within a 64-column block of `Tile.atom`, then the next block."""
        ta = self.p.tile_of(op.inputs[0])
        atom = ta.atom or ta.cols  # (a chunk's tile: one block)
        return ((ks * 16 // atom) * ta.rows_alloc * 128 + (ks * 16 % atom) * ta.itemsize) // 16

    def a_descriptor(self, op: Op) -> str:
        """This warpgroup's descriptor of A's first k-step (`KernelPlan.a_desc_ok`): the
        start address / 16 of its 64 rows, leading byte offset 1 (unused: K-major and
        swizzled), the stride of 8-row groups (1024 bytes) / 16, the 128-byte swizzle."""
        e = self.e
        ta = self.p.tile_of(op.inputs[0])
        sp = e.op(f"memref.extract_aligned_pointer_as_index {self.views[id(op.inputs[0])]} : {ta.mtype} -> index", "ap")
        start = e.add(sp, e.mul(e.div(self.warp, 4), 64 * 128))
        addr = e.op(f"arith.index_cast {e.idx(start)} : index to i64", "aa")
        bits = (1 << 16) | (1024 // 16 << 32) | (1 << 62)
        hi = e.op(f"arith.constant {bits} : i64", "ad")
        four, mask = e.op("arith.constant 4 : i64", "c"), e.op("arith.constant 16383 : i64", "c")
        lo = e.op(f"arith.andi {e.op(f'arith.shrui {addr}, {four} : i64', 'as')}, {mask} : i64", "al")
        return e.op(f"arith.ori {lo}, {hi} : i64", "ad")

    def mma_bf16(self, fa: str, fb: str, c: str) -> str:
        """D = A @ B + C, m16n8k16, bf16 operands, f32 accumulators, as inline PTX (the
        fragments of nvgpu.ldmatrix: A 4 and B 2 registers of 2 x bf16, C 2x2 f32)."""
        e = self.e
        ra, rb = self.frag_regs(fa, 4, "bf16"), self.frag_regs(fb, 2, "bf16")
        rc = self.acc_scalars([c])
        st = "!llvm.struct<(f32, f32, f32, f32)>"
        r = e.op('llvm.inline_asm has_side_effects "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 '
                 '{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};", '
                 '"=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f" '
                 f'{", ".join(ra + rb + rc)} : ({", ".join(["i32"] * 6 + ["f32"] * 4)}) -> {st}', "mm")
        return self.acc_frags(r, st, 4)[0]

    def frag_regs(self, frag: str, n: int, elt: str) -> list[str]:
        """The n 32-bit registers (i32, two 16-bit elements each) of a fragment
        vector<n x 2 x elt>, as inline PTX takes them."""
        e = self.e
        out = []
        for i in range(n):
            v = e.op(f"vector.extract {frag}[{i}] : vector<2x{elt}> from vector<{n}x2x{elt}>", "fv")
            w = e.op(f"vector.bitcast {v} : vector<2x{elt}> to vector<1xi32>", "fw")
            out.append(e.op(f"vector.extract {w}[0] : i32 from vector<1xi32>", "fr"))
        return out

    def frag_unary(self, mm: Op, u: Op, frags: list[str]) -> list:
        """Apply the unary op `u` (or a thread graph that chains unary ops, evaluated in f32
        as its element loop does) to the matmul's C fragments, rounding as the tiles would
        (matmul result to its dtype, then u's result to its dtype); per fragment the four
        values [h][q] as (rounded value, its f32). `u` None (a GEMM chain): the fragments
        rounded to the matmul's dtype."""
        e = self.e
        s_elt = mm.outputs[0].dtype.mlir
        o_elt = (u or mm).outputs[0].dtype.mlir
        chain = [] if u is None else u.body.ops if u.kind == "thread_graph" else [u]
        vals = []
        for f in frags:
            quad = []
            for h in (0, 1):
                for q in (0, 1):
                    v = e.op(f"vector.extract {f}[{h}, {q}] : f32 from vector<2x2xf32>", "f")
                    r = e.op(f"arith.truncf {v} : f32 to {s_elt}", "t")
                    if chain:
                        v = e.op(f"arith.extf {r} : {s_elt} to f32", "f")
                        for o in chain:  # a chain of unary ops, in f32
                            v = scalar.apply(e, o.kind, [v], o.attrs, o.outputs[0].dtype.mlir)
                        r = e.op(f"arith.truncf {v} : f32 to {o_elt}", "t")
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
        """`sum` accumulator of a register tile: per row, the thread's values. In a loop
        that keeps the rows' partial sums in registers (`row_parts`), added to them;
        else combined and added to the scratch at once (`row_sums_to_scratch`)."""
        e = self.e
        NT, vals = vals
        sums = []
        for rb in range(len(vals) // NT):
            for h in (0, 1):
                v = None
                for j in range(rb * NT, (rb + 1) * NT):
                    for q in (0, 1):
                        x = vals[j][2 * h + q][1]
                        v = x if v is None else e.fbin("addf", v, x)
                sums.append(v)
        if id(op) in self.row_parts:
            self.row_parts[id(op)] = [e.fbin("addf", p, v) for p, v in zip(self.row_parts[id(op)], sums)]
        else:
            self.row_sums_to_scratch(op, sums)

    def row_sums_to_scratch(self, op: Op, sums: list[str]) -> None:
        """Add a thread's partial sums of its rows (rows g and g + 8 of each of its warp's
        16-row blocks, g = lane / 4) to the f32 scratch: the 4 lanes of the quad combined
        (shuffles xor 1, 2), lane 4g adds (each row is owned by one warp)."""
        e = self.e
        sc = self.p.scratch[id(op)]
        sv = self.scratch_views[id(op)]
        rpw = len(sums) // 2
        g = e.div(self.lane, 4)
        lead = e.cmp("eq", e.rem(self.lane, 4), 0)
        for i, v in enumerate(sums):
            rb, h = divmod(i, 2)
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
