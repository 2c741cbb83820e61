"""Element loops: one element a thread or 16-byte chunks, thread graphs, concat.

A mixin of `BlockLowering` (`lower/block.py`): its methods use the kernel's plan
(`self.p`), emitter (`self.e`) and emit-time state."""
from __future__ import annotations

from contextlib import contextmanager
from math import prod

from ...core.graph import Op
from .. import scalar


class ElementwiseEmitter:
    def elementwise(self, shape, body) -> None:
        """Thread t handles elements t, t + nthreads, ... of `shape`; body(coords)."""
        e = self.e
        n = prod(shape) if shape else 1
        with e.for_(self.tid, n, self.p.nthreads) as i:
            body(e.delinearize(i, shape))

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
                    env[id(o.outputs[0])] = scalar.apply(e, o.kind, [env[id(x)] for x in o.inputs], o.attrs,
                                                         o.outputs[0].dtype.mlir)
                return [env[id(s)] for s in th.outputs]
            self.elementwise_vec(op, fn)
            return

        def body(cs):
            env = {id(s): self.read(t, cs, out_shape) for s, t in zip(th.inputs, op.inputs)}
            for o in th.ops:
                env[id(o.outputs[0])] = scalar.apply(e, o.kind, [env[id(x)] for x in o.inputs], o.attrs,
                                                         o.outputs[0].dtype.mlir)
            for s, t in zip(th.outputs, op.outputs):
                self.write(t, cs, env[id(s)])
        self.elementwise(out_shape, body)
