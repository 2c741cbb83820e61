"""Simple kernels for the pre-defined kernel ops (outside any graph-defined kernel).

One thread per output element (256 threads a block), reading device memory directly,
computing in f32 and rounding on store. Correct for every shape and stride; fast only
where the op is element-wise. The reference programs run through these; the fused
μGraphs do not need them.
"""
from __future__ import annotations

from math import prod

from ..core.graph import Op
from . import scalar
from .block import GlobalArg, KernelInfo, LoweringError, _row_major
from .emitter import Emitter

THREADS = 256


def lower_kn_op(op: Op, name: str, ins: list[GlobalArg], out: GlobalArg) -> KernelInfo:
    e = Emitter()
    shape = out.shape
    n = prod(shape)
    tid = e.op("gpu.thread_id x", "tid")
    bid = e.op("gpu.block_id x", "bid")
    lin = e.add(e.mul(bid, THREADS), tid)
    k = op.kind

    def rd(g: GlobalArg, cs) -> str:
        return e.load(g.name, g.mtype, e.dot(cs, g.strides), g.elt)

    def bcast(g: GlobalArg, cs):
        r = len(g.shape)
        return [0 if d == 1 else c for c, d in zip(cs[len(cs) - r:], g.shape)]

    with e.if_(e.cmp("ult", lin, n)):
        cs = e.delinearize(lin, shape)
        if k in scalar.BINARY or k in scalar.UNARY or k == "constant" or k == "copy":
            if k == "copy":
                v = rd(ins[0], cs)
            else:
                v = scalar.apply(e, k, [rd(g, bcast(g, cs)) for g in ins], op.attrs)
        elif k == "matmul":
            a, b = ins
            K = a.shape[-1]
            j, args, res, close = e.for_iter(0, K, 1, [(e.f32(0.0), "f32")])
            va = rd(a, list(cs[:-1]) + [j])
            vb = rd(b, list(cs[:-2]) + [j, cs[-1]])
            close([e.op(f"math.fma {va}, {vb}, {args[0]} : f32", "f")])
            v = res[0]
        elif k in ("reduction", "reduce_max"):
            a = ins[0]
            d = op.attrs["dim"] % len(a.shape)
            comb = "addf" if k == "reduction" else "maximumf"
            init = e.f32(0.0 if k == "reduction" else float("-inf"))
            j, args, res, close = e.for_iter(0, a.shape[d], 1, [(init, "f32")])
            src = list(cs)
            src[d] = j
            close([e.fbin(comb, args[0], rd(a, src))])
            v = res[0]
        elif k == "rms_norm":
            a = ins[0]
            nd = len(op.attrs["normalized_shape"])
            inner = a.shape[len(a.shape) - nd:]
            cnt = prod(inner)
            j, args, res, close = e.for_iter(0, cnt, 1, [(e.f32(0.0), "f32")])
            src = list(cs[:len(cs) - nd]) + e.delinearize(j, inner)
            x = rd(a, src)
            close([e.op(f"math.fma {x}, {x}, {args[0]} : f32", "f")])
            r = e.op(f"math.sqrt {e.fbin('divf', res[0], e.f32(float(cnt)))} : f32", "f")
            v = e.fbin("divf", rd(a, cs), r)
        elif k == "concat":
            a, b = ins
            d = op.attrs["dim"] % len(shape)
            na = a.shape[d]
            p = e.cmp("ult", cs[d], na)
            v = e.fresh("sel")
            e.line(f"{v} = scf.if {p} -> (f32) {{")
            e.depth += 1
            e.line(f"scf.yield {rd(a, cs)} : f32")
            e.depth -= 1
            e.line("} else {")
            e.depth += 1
            cb = list(cs)
            cb[d] = e.op(f"arith.subi {e.idx(cs[d])}, {e.idx(na)} : index", "x")
            e.line(f"scf.yield {rd(b, cb)} : f32")
            e.depth -= 1
            e.line("}")
        elif k == "reshape":
            src = e.delinearize(lin, ins[0].shape)
            v = rd(ins[0], src)
        elif k == "transpose":
            src = [None] * len(cs)
            for j, p in enumerate(op.attrs["permutation"]):
                src[p] = cs[j]
            v = rd(ins[0], src)
        elif k == "repeat":
            v = rd(ins[0], [e.rem(c, d) for c, d in zip(cs, ins[0].shape)])
        else:
            raise LoweringError(f"[lowering] kernel operator '{k}' has no GPU lowering")
        e.store(v, out.name, out.mtype, e.dot(cs, out.strides), out.elt)

    args_sig = ", ".join(f"{a.name}: {a.mtype}" for a in ins + [out])
    grid = (-(-n // THREADS), 1, 1)
    head = (f"gpu.func @{name}({args_sig}) kernel attributes "
            f"{{known_block_size = array<i32: {THREADS}, 1, 1>}} {{")
    text = "\n".join(["    " + head] + e.text() + ["      gpu.return", "    }"])
    return KernelInfo(name, grid, (THREADS, 1, 1), 0, text, {"kind": k})


__all__ = ["lower_kn_op", "_row_major"]
