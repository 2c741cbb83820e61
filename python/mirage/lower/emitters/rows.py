"""A block graph of row-wise ops kept in registers (`KernelPlan.rows`, a `RowPlan`).

Each thread loads its 16-byte chunks of every input straight from device memory (all
loads first, so they are in flight together), computes every op on them in f32, rounds
each op's result to its tensor's type (as the shared-memory path does on store), and
stores its chunks of the outputs. Row reductions sum in-thread, then over the row's
threads by xor shuffles; where a row spans several warps, lane 0 of each warp leaves its
partial in shared memory (its own words per reduction: no barrier before reuse) and one
barrier later every thread of the row reads them. That barrier is the only one.

A mixin of `BlockLowering` (`lower/block.py`): its methods use the kernel's plan
(`self.p`), emitter (`self.e`) and emit-time state."""
from __future__ import annotations

from math import prod

from ...core.graph import Op, STensor
from .. import scalar
from ..emitter import SMEM


class RowsEmitter:
    def lower_rows(self):
        e, rp, tb = self.e, self.p.rows, self.tb
        V, tpr = rp.V, rp.tpr
        sub, lane = e.div(self.tid, tpr), e.rem(self.tid, tpr)
        # the thread's chunks: (pass, coordinates of the chunk's first element in `shape`)
        self.chunks = []
        for p in range(rp.passes):
            row = e.add(e.mul(p, rp.threads // tpr), sub)
            rc = e.delinearize(row, rp.shape[:-1])
            for i in range(rp.per_row):
                self.chunks.append((p, rc + [e.mul(e.add(lane, i * tpr), V)]))
        self.row_sub = sub
        self.vals: dict[int, dict] = {}  # tensor id -> chunk key -> f32 values (V, or 1 if last dim 1)
        if rp.smem:
            base = e.op(f"gpu.dynamic_shared_memory : memref<?xi8, {SMEM}>", "smem")
            self.partials = e.op(f"memref.view {base}[{e.idx(0)}][] : memref<?xi8, {SMEM}> to "
                                 f"memref<{rp.smem // 4}xf32, {SMEM}>", "m")
        self.next_slots = 0
        for k, rec in enumerate(tb.inputs):
            blk, _ = self._global_base(self.ins[k], rec.stensor.shape, rec.imap, rec.forloop_dim)
            self.vals[id(rec.stensor)] = {key: self.global_chunk(self.ins[k], rec.stensor, blk, cs, None)
                                          for key, cs in self.keyed(rec.stensor)}
        for op in tb.ops:
            self.row_op(op)
        for k, rec in enumerate(tb.outputs):
            t, g = rec.stensor, self.outs[k]
            blk, _ = self._global_base(g, t.shape, rec.omap, rec.forloop_dim)
            # one thread stores a value that others hold too: the row's first for a per-row
            # value, the first row's for a tensor of one row
            guard = ([lane] if t.shape[-1] == 1 else []) + ([sub] if prod(t.shape[:-1]) == 1 and rp.threads > tpr else [])
            for key, cs in self.keyed(t):
                if guard:
                    with e.if_(self._all_zero(guard)):
                        self.global_chunk(g, t, blk, cs, self.vals[id(t)][key])
                else:
                    self.global_chunk(g, t, blk, cs, self.vals[id(t)][key])
        return self._finish()

    # -- chunks --
    def _all_zero(self, idxs) -> str:
        e = self.e
        c = e.cmp("eq", idxs[0], 0)
        for x in idxs[1:]:
            c = e.op(f"arith.andi {c}, {e.cmp('eq', x, 0)} : i1", "p")
        return c

    def keyed(self, t: STensor):
        """(key, coordinates in t) of the thread's chunks of `t`: t's values for a chunk of
        `shape` are its broadcast there, computed once per distinct key (a tensor of one row
        is the same in every pass, one of last dim 1 the same in every chunk of a row)."""
        shape = self.p.rows.shape
        r = len(t.shape)
        seen = set()
        for n, (_, cs) in enumerate(self.chunks):
            key = self.key_of(t, n)
            if key in seen:
                continue
            seen.add(key)
            tc = [0 if m == 1 else c for c, m in zip(cs[len(shape) - r:], t.shape)]
            yield key, tc

    def key_of(self, t: STensor, n: int):
        """The key of t's values at the thread's n-th chunk (see `keyed`)."""
        p, i = n // self.p.rows.per_row, n % self.p.rows.per_row
        return (p if prod(t.shape[:-1]) > 1 else 0, i if t.shape[-1] > 1 else 0)

    def global_chunk(self, g, t: STensor, blk, coords, vals):
        """Load (vals None: returns its f32 values) or store the chunk of `t` at `coords`
        in device tensor `g` (base offset `blk`): V elements in one vector access, or one
        element where t's last dim is 1."""
        e = self.e
        off = e.add(blk, e.dot(coords, g.strides))
        if t.shape[-1] == 1:
            if vals is None:
                return [e.load(g.name, g.mtype, off, g.elt)]
            e.store(vals[0], g.name, g.mtype, off, g.elt)
            return None
        V = self.p.rows.V
        vt = f"vector<{V}x{g.elt}>"
        if vals is None:
            v = e.op(f"vector.load {g.name}[{e.idx(off)}] {{alignment = 16}} : {g.mtype}, {vt}", "vv")
            if g.elt != "f32":
                v = e.op(f"arith.extf {v} : {vt} to vector<{V}xf32>", "vf")
            return [e.op(f"vector.extract {v}[{j}] : f32 from vector<{V}xf32>", "f") for j in range(V)]
        v = e.op(f"vector.from_elements {', '.join(vals)} : vector<{V}xf32>", "vf")
        if g.elt != "f32":
            v = e.op(f"arith.truncf {v} : vector<{V}xf32> to {vt}", "vv")
        e.line(f"vector.store {v}, {g.name}[{e.idx(off)}] {{alignment = 16}} : {g.mtype}, {vt}")
        return None

    def rounded(self, v: str, t: STensor) -> str:
        """`v` rounded to t's element type (the value a tile of that type would hold)."""
        elt = t.dtype.mlir
        if elt == "f32":
            return v
        r = self.e.op(f"arith.truncf {v} : f32 to {elt}", "t")
        return self.e.op(f"arith.extf {r} : {elt} to f32", "f")

    # -- ops --
    def row_op(self, op: Op) -> None:
        e = self.e
        k = op.kind
        if k in ("reduction", "reduce_max", "rms_norm"):
            x, out = op.inputs[0], op.outputs[0]
            combine = "maximumf" if k == "reduce_max" else "addf"
            per_pass = self.row_combine(x, combine, square=k == "rms_norm")
            if k == "rms_norm":
                L = x.shape[-1]
                rms = {p: e.op(f"math.sqrt {e.fbin('divf', v, e.f32(float(L)))} : f32", "f") for p, v in per_pass.items()}
                self.vals[id(out)] = {key: [self.rounded(e.fbin("divf", a, rms[key[0]]), out) for a in self.vals[id(x)][key]]
                                      for key in self.vals[id(x)]}
            else:
                self.vals[id(out)] = {(p, 0): [self.rounded(v, out)] for p, v in per_pass.items()}
            return
        outs = op.outputs
        keys = {}
        for n in range(len(self.chunks)):
            keys.setdefault(self.key_of(outs[0], n), n)
        for o in outs:
            self.vals[id(o)] = {}
        for key, n in keys.items():
            lanes = [self.vals[id(t)][self.key_of(t, n)] for t in op.inputs]
            width = self.p.rows.V if outs[0].shape[-1] > 1 else 1
            for j in range(width):
                args = [a[j] if len(a) > 1 else a[0] for a in lanes]
                res = self.thread_values(op, args)
                for o, v in zip(outs, res):
                    self.vals[id(o)].setdefault(key, []).append(self.rounded(v, o))

    def thread_values(self, op: Op, args: list) -> list:
        """The f32 results of element-wise op or thread graph `op` on one element."""
        e = self.e
        if op.kind != "thread_graph":
            return [scalar.apply(e, op.kind, args, op.attrs, op.outputs[0].dtype.mlir)]
        th = op.body
        env = {id(s): a for s, a in zip(th.inputs, args)}
        for o in th.ops:
            env[id(o.outputs[0])] = scalar.apply(e, o.kind, [env[id(i)] for i in o.inputs], o.attrs,
                                                 o.outputs[0].dtype.mlir)
        return [env[id(s)] for s in th.outputs]

    def row_combine(self, x: STensor, combine: str, square: bool) -> dict:
        """Per pass, the row's combination of x's values (squared with `square`), known to
        every thread of the row."""
        e, rp = self.e, self.p.rows
        parts: dict = {}
        for n in range(len(self.chunks)):
            p = n // rp.per_row
            xs = list(self.vals[id(x)][self.key_of(x, n)])
            if square:
                xs = [e.fbin("mulf", a, a) for a in xs]
            while len(xs) > 1:  # a tree, so the terms do not wait on each other
                xs = [e.fbin(combine, xs[i], xs[i + 1]) for i in range(0, len(xs) - 1, 2)] + xs[len(xs) & ~1:]
            parts[p] = e.fbin(combine, parts[p], xs[0]) if p in parts else xs[0]
        self.notes["warp_reductions"] += 1
        parts = {p: self.shuffle_reduce(v, combine, min(rp.tpr, 32)) for p, v in parts.items()}
        if rp.tpr <= 32:
            return parts
        wpr, nw = rp.tpr // 32, rp.threads // 32
        base = self.next_slots
        self.next_slots += rp.slots
        with e.if_(e.cmp("eq", self.lane, 0)):
            for p, v in parts.items():
                e.store(v, self.partials, f"memref<{rp.smem // 4}xf32, {SMEM}>", e.add(base + p * nw, self.warp), "f32")
        e.barrier()
        first = e.mul(self.row_sub, wpr)
        out = {}
        for p in parts:
            v = None
            for q in range(wpr):
                w = e.load(self.partials, f"memref<{rp.smem // 4}xf32, {SMEM}>", e.add(base + p * nw + q, first), "f32")
                v = w if v is None else e.fbin(combine, v, w)
            out[p] = v
        return out
