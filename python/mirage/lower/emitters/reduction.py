"""Reductions and norms: warp shuffles per row, rows split over warps, partials
combined through shared memory, column reductions.

A mixin of `BlockLowering` (`lower/block.py`): its methods use the kernel's plan
(`self.p`), emitter (`self.e`) and emit-time state."""
from __future__ import annotations

from math import prod

from ...core.graph import Op, STensor
from ..emitter import Idx


class ReductionEmitter:
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

    def running_max(self, op: Op) -> None:
        """Mirage's reduction_max inside the for-loop: per row, the max of this iteration's
        tile and of the earlier ones (f32 state in shared memory, one lane a row), and its
        change (diff: previous - new, 0 at the first iteration)."""
        e = self.e
        a = op.inputs[0]
        mx, diff = op.outputs
        sc = self.p.scratch[id(op)]
        sv = self.scratch_views[id(op)]
        lowest = e.f32(float("-inf"))
        zero = e.f32(0.0)

        def finish(r, v):
            old = e.load(sv, sc.mtype, r, "f32")
            new = e.fbin("maximumf", old, v)
            first = e.op(f"arith.cmpf oeq, {old}, {lowest} : f32", "c")
            d = e.op(f"arith.select {first}, {zero}, {e.fbin('subf', old, new)} : f32", "f")
            e.store(new, sv, sc.mtype, r, "f32")
            cs = self.row_coords(r, a.shape) + [0]
            self.write(mx, cs, new)
            self.write(diff, cs, d)
        self.rowwise(a, "maximumf", False, finish)

    def finish_mean_rms(self, kind: str, v, count: float):
        """The accumulated sum `v` -> the accumulator's value: sum / count for `mean`,
        sqrt(sum of squares / count) for `rms`, unchanged otherwise."""
        e = self.e
        if kind == "mean":
            return e.fbin("divf", v, e.f32(count))
        if kind == "rms":
            return e.op(f"math.sqrt {e.fbin('divf', v, e.f32(count))} : f32", "f")
        return v
