"""One set of validity rules, two checkers: the Python builder (mirage.core.rules, called
by mirage.core.graph) and the C++ verifiers of the kn/tb/th dialects must accept and
reject the same μGraphs, with the same rule tag (docs/ir.md, "Validity rules").

Every case is a small graph described as data. The Python verdict is what the builder
says when the graph is built through the builder API. The C++ verdict is what
`mlir.ir.Module.parse` (the dialects' verifiers) says about the same graph printed by
the model's printer from model objects assembled directly, bypassing every builder check
(`raw_graph`). Where C++ accepts, the importer (`parse_mlir`) must rebuild the graph and
print the same text.

The corpus has, for each rule, graphs that break it and graphs just inside it (the
`CASES` table, each with the verdict docs/ir.md gives), and a seeded random corpus of
block graphs (maps, grids, for-loop ranges, op chains, accumulators) checked for
agreement only.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

import pytest

mlir_ir = pytest.importorskip("mlir.ir")

from mirage.core import ops as O  # noqa: E402
from mirage.core import rules  # noqa: E402
from mirage.core.dtypes import float16, float32  # noqa: E402
from mirage.core.graph import (DTensor, GraphError, KNGraph, Op, STensor, TBGraph, TBInput,  # noqa: E402
                               TBOutput)
from mirage.mlir.importer import MLIRImportError, parse_mlir  # noqa: E402
from mirage.core.mlir_text import print_module  # noqa: E402
from mirage.mlir.dialects import make_context  # noqa: E402

F16, F32 = float16, float32
R = -1  # a replica in a map


@dataclass
class Block:
    """A graph-defined kernel: `ins` (kernel input index, (x, y, z) map, loop dim[, k_chunk]), `ops`
    (kind, operand tile indices, attrs; tiles are numbered inputs first, then each op's
    results), `outs` (tile index, (x, y, z) map, loop dim)."""
    ins: list
    ops: list = field(default_factory=list)
    outs: list = field(default_factory=list)
    grid: tuple = (1, 1, 1)
    block: tuple = (128, 1, 1)
    forloop: int = 1
    dimx: int = 64


@dataclass
class Case:
    name: str
    expect: str | None  # the rule tag docs/ir.md gives (None: valid); None for random cases
    inputs: list  # (shape, dtype) of the kernel inputs
    block: Block | None = None
    kn_ops: list = field(default_factory=list)  # (kind, operand indices, attrs); tensors: inputs, then ops
    cap: int | None = None  # the module's kn.smem_capacity
    text_fix: tuple = ()  # (old, new) replacements of the printed text (what the printer cannot write)
    check: bool = True  # with expect None and check False: agreement only (random cases)


TAG = re.compile(r"\[([a-z]+)\]")


def tag_of(message: str) -> str | None:
    m = TAG.search(message)
    return m.group(1) if m else None


# -- the Python verdict: the builder ------------------------------------------------------

def build(case: Case) -> KNGraph:
    g = KNGraph("f")
    g.smem_capacity = case.cap
    ts = [g.new_input(s, dtype=dt) for s, dt in case.inputs]
    if case.block is not None:
        b = case.block
        tb = TBGraph(b.grid, b.block, b.forloop, b.dimx)
        tiles = [tb.new_input(ts[k], m, fd, k_chunk=kc[0] if kc else 0) for k, m, fd, *kc in b.ins]
        for kind, refs, attrs in b.ops:
            xs = [tiles[r] for r in refs]
            if kind == "forloop_accum":
                t = tb.forloop_accum(xs[0], attrs["kind"])
            elif kind == "forloop_accum_rescale":
                t = tb.forloop_accum_rescale(xs[0], xs[1], attrs["acc"])
            elif kind == "reduction_to_dimx":
                t = tb.reduction_to_dimx(xs[0])
            else:
                t = tb._op(kind, xs, **attrs)  # as the importer does
            tiles += t.producer.outputs
        for r, m, fd in b.outs:
            tb.new_output(tiles[r], m, fd)
        outs = g.customized([ts[i[0]] for i in b.ins], tb)
    else:
        outs = []
    for kind, refs, attrs in case.kn_ops:
        ts.append(g._op(kind, [ts[r] for r in refs], **attrs))
    for t in outs or ts[len(case.inputs):]:
        g.mark_output(t)
    return g


def python_verdict(case: Case) -> tuple[str | None, str]:
    try:
        build(case)
    except GraphError as e:
        return tag_of(str(e)), str(e)
    return None, ""


# -- the C++ verdict: the printed graph, parsed with the dialects ----------------------------

def _lenient(fn, fallback):
    try:
        return tuple(fn())
    except Exception:  # a broken graph: any type will do, the verifier rejects the op anyway
        return tuple(fallback)


def _tile(shape, m, fd, grid, forloop):
    tile = list(shape)
    for n, d in zip(tuple(grid) + (forloop,), tuple(m) + (fd,)):
        if 0 <= d < len(tile):
            tile[d] = max(1, tile[d] // max(n, 1))
    return tuple(tile)


def _grown(tile, m, fd, grid, forloop):
    out = list(tile)
    for n, d in zip(tuple(grid) + (forloop,), tuple(m) + (fd,)):
        if 0 <= d < len(out):
            out[d] *= n
    return tuple(out)


def _raw_op(kind, xs, attrs, tensor_cls, graph, dimx):
    shapes = [x.shape for x in xs]
    fallback = attrs["shape"] if "shape" in attrs else shapes[0]  # reshape, constant: the attribute
    attrs = dict(attrs)
    if kind == "forloop_accum":
        shape = _lenient(lambda: O.accum_shape(attrs["kind"], shapes[0], dimx), fallback)
    elif kind == "forloop_accum_rescale":
        shape = _lenient(lambda: O._rescale_shape(shapes, attrs), fallback)
    else:
        if kind == "reduction_to_dimx":
            attrs["dimx"] = dimx
        shape = _lenient(lambda: O.OPS[kind].shape(shapes, attrs), fallback)
    n = O.OPS[kind].results if kind in O.OPS else 1
    outs = [tensor_cls(shape, xs[0].dtype if xs else attrs.get("dtype", F16), None, j, graph=graph)
            for j in range(n)]
    op = Op(kind, list(xs), outs, {k: v for k, v in attrs.items() if k != "dtype"})
    for t in outs:
        t.producer = op
    return op


def raw_graph(case: Case) -> KNGraph:
    """The model objects of `case`, assembled without any builder check."""
    g = KNGraph("f")
    g.smem_capacity = case.cap
    g.inputs = [DTensor(tuple(s), dt, "input", k, graph=g) for k, (s, dt) in enumerate(case.inputs)]
    ts = list(g.inputs)
    outs = []
    if case.block is not None:
        b = case.block
        tb = TBGraph.__new__(TBGraph)
        tb.ops, tb.inputs, tb.outputs = [], [], []
        tb.grid_dim, tb.block_dim = tuple(b.grid), tuple(b.block)
        tb.forloop_range, tb.reduction_dimx = b.forloop, b.dimx
        tiles = []
        for k, m, fd, *kc in b.ins:
            rec = TBInput(ts[k], tuple(m), fd, k_chunk=kc[0] if kc else 0)
            rec.stensor = STensor(_tile(ts[k].shape, m, fd, b.grid, b.forloop), ts[k].dtype, rec, 0, graph=tb)
            tb.inputs.append(rec)
            tiles.append(rec.stensor)
        for kind, refs, attrs in b.ops:
            op = _raw_op(kind, [tiles[r] for r in refs], attrs, STensor, tb, b.dimx)
            tb.ops.append(op)
            tiles += op.outputs
        for r, m, fd in b.outs:
            tb.outputs.append(TBOutput(tiles[r], tuple(m), fd))
        gd = Op("graph_def", [ts[i[0]] for i in b.ins], [], {}, tb)
        for j, o in enumerate(tb.outputs):
            t = tiles[b.outs[j][0]]
            gd.outputs.append(DTensor(_grown(t.shape, o.omap, o.forloop_dim, b.grid, b.forloop), t.dtype, gd, j,
                                      graph=g))
        g.ops.append(gd)
        outs = gd.outputs
    for kind, refs, attrs in case.kn_ops:
        op = _raw_op(kind, [ts[r] for r in refs], attrs, DTensor, g, 64)
        g.ops.append(op)
        ts.append(op.outputs[0])
    g.outputs = list(outs or ts[len(case.inputs):] or g.inputs[:1])
    return g


def mlir_text(case: Case) -> str:
    text = print_module([raw_graph(case)])
    for old, new in case.text_fix:
        assert old in text, (old, text)
        text = text.replace(old, new)
    return text


_CTX = None


def cpp_verdict(text: str) -> tuple[str | None, str]:
    global _CTX
    if _CTX is None:
        _CTX = make_context()
    try:
        mlir_ir.Module.parse(text, _CTX)
    except mlir_ir.MLIRError as e:
        msg = e.error_diagnostics[0].message if e.error_diagnostics else str(e)
        return tag_of(msg), msg
    return None, ""


# -- the corpus ------------------------------------------------------------------------------

X = [((64, 64), F16)]


def blk(**kw) -> Block:
    """One input read whole, its tile written out: the valid base the cases vary."""
    kw.setdefault("ins", [(0, (R, R, R), R)])
    kw.setdefault("outs", [(0, (R, R, R), R)])
    return Block(**kw)


def pair(name: str, rule: str, inside: dict, outside: dict) -> list[Case]:
    """A graph just inside `rule` (valid) and one that breaks it."""
    return [Case(f"{name}-ok", None, **inside), Case(f"{name}-bad", rule, **outside)]


def launch_cases() -> list[Case]:
    small = [((4, 4), F16)]
    out = []
    for axis, top in enumerate(rules.MAX_GRID):
        grid_ok, grid_bad = [1, 1, 1], [1, 1, 1]
        grid_ok[axis], grid_bad[axis] = top, top + 1
        m = [R, R, R]
        m[axis] = 0
        out += pair(f"grid-{'xyz'[axis]}-limit", "launch",
                    dict(inputs=small, block=blk(grid=tuple(grid_ok), outs=[(0, tuple(m), R)])),
                    dict(inputs=small, block=blk(grid=tuple(grid_bad), outs=[(0, tuple(m), R)])))
    for axis, top in enumerate(rules.MAX_BLOCK):
        ok, bad = [1, 1, 1], [1, 1, 1]
        ok[axis], bad[axis] = top, top + 1
        out += pair(f"block-{'xyz'[axis]}-limit", "launch", dict(inputs=X, block=blk(block=tuple(ok))),
                    dict(inputs=X, block=blk(block=tuple(bad))))
    out += pair("block-threads", "launch", dict(inputs=X, block=blk(block=(32, 32, 1))),
                dict(inputs=X, block=blk(block=(32, 33, 1))))
    out += pair("grid-positive", "launch", dict(inputs=X, block=blk(grid=(1, 1, 1))),
                dict(inputs=X, block=blk(grid=(1, 0, 1))))
    out += pair("block-positive", "launch", dict(inputs=X, block=blk(block=(1, 1, 1))),
                dict(inputs=X, block=blk(block=(128, 1, 0))))
    out += pair("forloop-positive", "launch", dict(inputs=X, block=blk(forloop=1)),
                dict(inputs=X, block=blk(forloop=0)))
    # a loop-invariant input may be read after the loop without an accumulator
    out += pair("forloop-limit", "launch", dict(inputs=X, block=blk(forloop=rules.MAX_GRID[0])),
                dict(inputs=X, block=blk(forloop=rules.MAX_GRID[0] + 1)))
    out += pair("dimx-positive", "launch", dict(inputs=X, block=blk(dimx=1)), dict(inputs=X, block=blk(dimx=0)))
    # a kernel without results: the printer writes `%0:0 = kn.graph_def ... -> ()`
    out += pair("has-output", "launch", dict(inputs=X, block=blk()),
                dict(inputs=X, block=blk(outs=[]), text_fix=(("%0:0 = kn.graph_def", "kn.graph_def"),)))
    return out


def map_cases() -> list[Case]:
    out = pair("input-map-x", "map",
               dict(inputs=X, block=blk(grid=(2, 1, 1), ins=[(0, (1, R, R), R)], outs=[(0, (1, R, R), R)])),
               dict(inputs=X, block=blk(grid=(2, 1, 1), ins=[(0, (2, R, R), R)], outs=[(0, (1, R, R), R)])))
    out += pair("input-map-i", "map",
                dict(inputs=X, block=blk(forloop=2, ins=[(0, (R, R, R), 1)],
                                         ops=[("forloop_accum", [0], {"kind": "none"})], outs=[(1, (R, R, R), R)])),
                dict(inputs=X, block=blk(forloop=2, ins=[(0, (R, R, R), 2)],
                                         ops=[("forloop_accum", [0], {"kind": "none"})], outs=[(1, (R, R, R), R)])))
    out += pair("output-map-y", "map",
                dict(inputs=X, block=blk(grid=(1, 2, 1), ins=[(0, (R, 0, R), R)], outs=[(0, (R, 1, R), R)])),
                dict(inputs=X, block=blk(grid=(1, 2, 1), ins=[(0, (R, 0, R), R)], outs=[(0, (R, 2, R), R)])))
    out += pair("output-map-i", "map", dict(inputs=X, block=blk(forloop=2, outs=[(0, (R, R, R), 1)])),
                dict(inputs=X, block=blk(forloop=2, outs=[(0, (R, R, R), 2)])))
    # every mapped dim is checked before divisibility, on both sides
    out.append(Case("input-map-before-divisibility", "map", X,
                    blk(grid=(3, 1, 1), ins=[(0, (0, R, R), 5)], outs=[(0, (0, R, R), R)])))
    # a map entry below -1 (the printer writes it; the #tb.map parser rejects it)
    out.append(Case("map-entry-negative", "map", X, blk(ins=[(0, (-2, R, R), R)])))
    return out


def divisibility_cases() -> list[Case]:
    out = pair("grid-split", "divisibility",
               dict(inputs=X, block=blk(grid=(4, 1, 1), ins=[(0, (1, R, R), R)], outs=[(0, (1, R, R), R)])),
               dict(inputs=X, block=blk(grid=(3, 1, 1), ins=[(0, (1, R, R), R)], outs=[(0, (1, R, R), R)])))
    acc = [("forloop_accum", [0], {"kind": "none"})]
    out += pair("loop-split", "divisibility",
                dict(inputs=X, block=blk(forloop=4, ins=[(0, (R, R, R), 0)], ops=acc, outs=[(1, (R, R, R), R)])),
                dict(inputs=X, block=blk(forloop=3, ins=[(0, (R, R, R), 0)], ops=acc, outs=[(1, (R, R, R), R)])))
    # grid x and the loop split the same dim: 64 / 4 / 16 = 1, 64 / 4 = 16 is not split by 32
    out += pair("grid-and-loop-split", "divisibility",
                dict(inputs=X, block=blk(grid=(4, 1, 1), forloop=16, ins=[(0, (1, R, R), 1)], ops=acc,
                                         outs=[(1, (1, R, R), R)])),
                dict(inputs=X, block=blk(grid=(4, 1, 1), forloop=32, ins=[(0, (1, R, R), 1)], ops=acc,
                                         outs=[(1, (1, R, R), R)])))
    return out


def omap_cases() -> list[Case]:
    out = pair("grid-x-unmapped", "omap",
               dict(inputs=X, block=blk(grid=(2, 1, 1), ins=[(0, (0, R, R), R)], outs=[(0, (0, R, R), R)])),
               dict(inputs=X, block=blk(grid=(2, 1, 1), ins=[(0, (0, R, R), R)], outs=[(0, (R, R, R), R)])))
    out += pair("grid-z-unmapped", "omap",
                dict(inputs=X, block=blk(grid=(2, 1, 2), ins=[(0, (0, R, 1), R)], outs=[(0, (0, R, 1), R)])),
                dict(inputs=X, block=blk(grid=(2, 1, 2), ins=[(0, (0, R, 1), R)], outs=[(0, (0, R, R), R)])))
    # a grid dim of size 1 may stay unmapped
    out.append(Case("grid-size-1-unmapped-ok", None, X, blk(grid=(1, 1, 1), outs=[(0, (R, R, R), R)])))
    return out


def accumulator_cases() -> list[Case]:
    vin = [(0, (R, R, R), 1)]  # loop-varying
    inv = [(0, (R, R, R), R)]  # loop-invariant
    none = {"kind": "none"}
    out = pair("varying-needs-one", "accumulator",
               dict(inputs=X, block=blk(forloop=4, ins=vin, ops=[("forloop_accum", [0], none)],
                                        outs=[(1, (R, R, R), R)])),
               dict(inputs=X, block=blk(forloop=4, ins=vin, ops=[("exp", [0], {})], outs=[(1, (R, R, R), R)])))
    out += pair("not-two", "accumulator",
                dict(inputs=X, block=blk(forloop=4, ins=vin, ops=[("forloop_accum", [0], {"kind": "max"}),
                                                                   ("exp", [1], {})], outs=[(2, (R, R, R), R)])),
                dict(inputs=X, block=blk(forloop=4, ins=vin, ops=[("forloop_accum", [0], {"kind": "max"}),
                                                                   ("forloop_accum", [1], none)],
                                         outs=[(2, (R, R, R), R)])))
    # a second accumulator that reaches no output (C++ rejected it, Python accepted it)
    out += pair("not-two-dead", "accumulator",
                dict(inputs=X, block=blk(forloop=4, ins=vin, ops=[("forloop_accum", [0], none),
                                                                   ("exp", [1], {})], outs=[(1, (R, R, R), R)])),
                dict(inputs=X, block=blk(forloop=4, ins=vin, ops=[("forloop_accum", [0], none),
                                                                   ("forloop_accum", [1], none)],
                                         outs=[(1, (R, R, R), R)])))
    out += pair("not-two-rescale", "accumulator",
                dict(inputs=X, block=blk(forloop=4, ins=vin, ops=[("forloop_accum_rescale", [0, 0], {"acc": "none"})],
                                         outs=[(1, (R, R, R), R)])),
                dict(inputs=X, block=blk(forloop=4, ins=vin, ops=[("forloop_accum_rescale", [0, 0], {"acc": "none"}),
                                                                   ("forloop_accum", [1], none)],
                                         outs=[(1, (R, R, R), R)])))
    out += pair("rescale-kind", "accumulator",
                dict(inputs=X, block=blk(forloop=4, ins=vin, ops=[("reduction", [0], {"dim": 1}),
                                                                   ("forloop_accum_rescale", [0, 1], {"acc": "sum"})],
                                         outs=[(2, (R, R, R), R)])),
                dict(inputs=X, block=blk(forloop=4, ins=vin, ops=[("forloop_accum_rescale", [0, 0], {"acc": "max"})],
                                         outs=[(1, (R, R, R), R)])))
    out.append(Case("invariant-needs-none-ok", None, X, blk(forloop=4, ins=inv, ops=[("exp", [0], {})],
                                                             outs=[(1, (R, R, R), R)])))
    # an output that maps i is saved inside the loop: no accumulator on the way to it
    for forloop in (4, 1):
        out += pair(f"saved-every-iteration-forloop{forloop}", "accumulator",
                    dict(inputs=X, block=blk(forloop=forloop, ins=vin, ops=[("exp", [0], {})],
                                             outs=[(1, (R, R, R), 1)])),
                    dict(inputs=X, block=blk(forloop=forloop, ins=vin, ops=[("forloop_accum", [0], none)],
                                             outs=[(1, (R, R, R), 1)])))
    out.append(Case("saved-every-iteration-invariant-bad", "accumulator", X,
                    blk(forloop=4, ins=inv, ops=[("forloop_accum", [0], {"kind": "max"})], outs=[(1, (R, R, R), 1)])))
    # forloop 1: an accumulator is optional on the way to an output that does not map i
    for ops in ([], [("forloop_accum", [0], {"kind": "rms"})]):
        out.append(Case(f"forloop1-{len(ops)}-accumulators-ok", None, X,
                        blk(forloop=1, ins=vin, ops=ops, outs=[(len(ops), (R, R, R), R)])))
    return out


def smem_cases() -> list[Case]:
    cap = rules.DEFAULT_SMEM  # 232448 bytes: a 227x256 f32 tile fills it
    out = pair("default-capacity", "smem", dict(inputs=[((227, 256), F32)], block=blk()),
               dict(inputs=[((228, 256), F32)], block=blk()))
    # the tiles: the input (4096 bytes) and the exp (4096 bytes)
    exp = dict(ins=[(0, (R, R, R), R)], ops=[("exp", [0], {})], outs=[(1, (R, R, R), R)])
    out += pair("module-capacity", "smem", dict(inputs=[((64, 32), F16)], block=blk(**exp), cap=8192),
                dict(inputs=[((64, 32), F16)], block=blk(**exp), cap=8190))
    # a module capacity above the default (the importer checked the default)
    out += pair("module-capacity-above-default", "smem",
                dict(inputs=[((228, 256), F32)], block=blk(), cap=cap + 1024),
                dict(inputs=[((229, 256), F32)], block=blk(), cap=cap + 1024))
    return out


def stage_cases() -> list[Case]:
    """Staged inputs (k_chunk): a matmul of two, the chunk's rules, and [smem] counting two
    chunks of each (A and B [64, 2048] x [2048, 64]: 512 KB whole, 32 KB staged)."""
    ab = [((64, 2048), F16), ((2048, 64), F16)]
    mm = [("matmul", [0, 1], {})]

    def staged(kc_a=64, kc_b=64, inputs=ab, ops=mm):
        return dict(inputs=inputs, block=blk(ins=[(0, (R, R, R), R, kc_a), (1, (R, R, R), R, kc_b)], ops=ops,
                                             outs=[(2, (R, R, R), R)]))
    out = pair("staged-pair", "stage", staged(), staged(kc_b=0))
    out += pair("staged-chunk-multiple-of-16", "stage", staged(32, 32), staged(24, 24))
    small = [((64, 256), F16), ((256, 64), F16)]
    out += pair("staged-two-chunks", "stage", staged(128, 128, small), staged(256, 256, small))
    out.append(Case("staged-read-by-other-op-bad", "stage", ab,
                    blk(ins=[(0, (R, R, R), R, 64), (1, (R, R, R), R, 64)], ops=mm + [("exp", [0], {})],
                        outs=[(2, (R, R, R), R), (3, (R, R, R), R)])))
    big = [((1024, 2048), F16), ((2048, 64), F16)]  # A's two chunks: 256 KB
    out += pair("staged-smem", "smem", staged(), staged(inputs=big))
    return out


def dimx_cases() -> list[Case]:
    out = pair("reduction-to-dimx", "dimx",
               dict(inputs=X, block=blk(dimx=32, ops=[("reduction_to_dimx", [0], {})], outs=[(1, (R, R, R), R)])),
               dict(inputs=X, block=blk(dimx=48, ops=[("reduction_to_dimx", [0], {})], outs=[(1, (R, R, R), R)])))
    todimx = [("forloop_accum", [0], {"kind": "sum_todimx"})]
    out += pair("sum-todimx", "dimx",
                dict(inputs=X, block=blk(dimx=16, forloop=2, ins=[(0, (R, R, R), 0)], ops=todimx,
                                         outs=[(1, (R, R, R), R)])),
                dict(inputs=X, block=blk(dimx=24, forloop=2, ins=[(0, (R, R, R), 0)], ops=todimx,
                                         outs=[(1, (R, R, R), R)])))
    return out


def shape_dtype_nesting_cases() -> list[Case]:
    A, B = ((64, 32), F16), ((32, 16), F16)
    out = pair("kn-matmul", "shape", dict(inputs=[A, B], kn_ops=[("matmul", [0, 1], {})]),
               dict(inputs=[A, ((16, 16), F16)], kn_ops=[("matmul", [0, 1], {})]))
    out += pair("tb-matmul", "shape",
                dict(inputs=[A, B], block=blk(ins=[(0, (R, R, R), R), (1, (R, R, R), R)],
                                              ops=[("matmul", [0, 1], {})], outs=[(2, (R, R, R), R)])),
                dict(inputs=[A, ((16, 16), F16)], block=blk(ins=[(0, (R, R, R), R), (1, (R, R, R), R)],
                                                            ops=[("matmul", [0, 1], {})], outs=[(2, (R, R, R), R)])))
    out += pair("kn-broadcast", "shape", dict(inputs=[A, ((1, 32), F16)], kn_ops=[("add", [0, 1], {})]),
                dict(inputs=[A, ((2, 32), F16)], kn_ops=[("add", [0, 1], {})]))
    out += pair("tb-reduction-dim", "shape",
                dict(inputs=X, block=blk(ops=[("reduction", [0], {"dim": 1})], outs=[(1, (R, R, R), R)])),
                dict(inputs=X, block=blk(ops=[("reduction", [0], {"dim": 2})], outs=[(1, (R, R, R), R)])))
    out += pair("kn-concat", "shape", dict(inputs=[A, ((64, 8), F16)], kn_ops=[("concat", [0, 1], {"dim": 1})]),
                dict(inputs=[A, ((32, 8), F16)], kn_ops=[("concat", [0, 1], {"dim": 1})]))
    out += pair("kn-reshape", "shape", dict(inputs=[A], kn_ops=[("reshape", [0], {"shape": (32, 64)})]),
                dict(inputs=[A], kn_ops=[("reshape", [0], {"shape": (32, 32)})]))
    out += pair("kn-transpose", "shape", dict(inputs=[A], kn_ops=[("transpose", [0], {"permutation": (1, 0)})]),
                dict(inputs=[A], kn_ops=[("transpose", [0], {"permutation": (1, 1)})]))
    out += pair("kn-rms-norm", "shape", dict(inputs=[A], kn_ops=[("rms_norm", [0], {"normalized_shape": (32,)})]),
                dict(inputs=[A], kn_ops=[("rms_norm", [0], {"normalized_shape": (64,)})]))
    out += pair("kn-dtype", "dtype", dict(inputs=[A, A], kn_ops=[("add", [0, 1], {})]),
                dict(inputs=[A, ((64, 32), F32)], kn_ops=[("add", [0, 1], {})]))
    out += pair("tb-dtype", "dtype",
                dict(inputs=[A, A], block=blk(ins=[(0, (R, R, R), R), (1, (R, R, R), R)],
                                              ops=[("mul", [0, 1], {})], outs=[(2, (R, R, R), R)])),
                dict(inputs=[A, ((64, 32), F32)], block=blk(ins=[(0, (R, R, R), R), (1, (R, R, R), R)],
                                                            ops=[("mul", [0, 1], {})], outs=[(2, (R, R, R), R)])))
    out += pair("rescale-dtype", "dtype",
                dict(inputs=[A, ((32, 32), F16)], block=blk(forloop=2, ins=[(0, (R, R, R), 0), (1, (R, R, R), R)],
                                              ops=[("forloop_accum_rescale", [0, 1], {"acc": "none"})],
                                              outs=[(2, (R, R, R), R)])),
                dict(inputs=[A, ((32, 32), F32)], block=blk(forloop=2, ins=[(0, (R, R, R), 0), (1, (R, R, R), R)],
                                                            ops=[("forloop_accum_rescale", [0, 1], {"acc": "none"})],
                                                            outs=[(2, (R, R, R), R)])))
    # a block-level operator in the kernel graph: `kn.reduction_max` does not exist, so the
    # IR spelling of the builder's kn-level reduction_max is a tb op outside a kn.graph_def
    out += pair("tb-op-level", "nesting",
                dict(inputs=[A], block=blk(ops=[("reduction_max", [0], {"dim": 1})], outs=[(1, (R, R, R), R)])),
                dict(inputs=[A], kn_ops=[("reduction_max", [0], {"dim": 1})],
                     text_fix=(("kn.reduction_max", "tb.reduction_max"),)))
    return out


CASES = (launch_cases() + map_cases() + divisibility_cases() + omap_cases() + accumulator_cases()
         + stage_cases() + smem_cases() + dimx_cases() + shape_dtype_nesting_cases())


def random_case(seed: int) -> Case:
    """A small random block graph: grid, for-loop, maps, a chain of ops with accumulators."""
    rng = random.Random(seed)
    rank = rng.choice([2, 3])
    shape = tuple(rng.choice([12, 24, 48]) for _ in range(rank))  # split evenly by 1..4, mostly
    grid = tuple(rng.choice([1, 1, 1, 2, 3, 4]) for _ in range(3))
    forloop = rng.choice([1, 2, 3, 4])
    # tensor dims, replicas, now and then a dim that does not exist
    mapped = lambda: rng.choice([R, R, R, 0, 1, rank - 1] * 4 + [rank])  # noqa: E731
    ins = [(k, (mapped(), mapped(), R), mapped()) for k in range(rng.choice([1, 2]))]
    ntiles, ops = len(ins), []
    for _ in range(rng.randint(0, 4)):
        kind = rng.choice(["exp", "add", "mul", "forloop_accum", "forloop_accum", "reduction", "reduction_to_dimx",
                           "forloop_accum_rescale"])
        a, b = rng.randrange(ntiles), rng.randrange(ntiles)
        if kind in ("add", "mul"):
            ops.append((kind, [a, b], {}))
        elif kind == "forloop_accum":
            ops.append((kind, [a], {"kind": rng.choice(["none", "sum", "max", "sum_todimx"])}))
        elif kind == "forloop_accum_rescale":
            ops.append((kind, [a, b], {"acc": rng.choice(["none", "sum"])}))
        elif kind == "reduction":
            ops.append((kind, [a], {"dim": rng.randrange(rank)}))
        else:
            ops.append((kind, [a], {}))
        ntiles += 1
    # output maps: a grid dim of size > 1 is mostly mapped (else [omap] would dominate)
    omap = lambda: tuple(rng.choice([0, rank - 1, mapped()]) if n > 1 and rng.random() < 0.9 else mapped()  # noqa: E731
                         for n in grid)
    outs = [(rng.randrange(ntiles), omap(), rng.choice([R, R, R, 0])) for _ in range(rng.choice([1, 1, 2]))]
    return Case(f"random-{seed}", None, [(shape, F16), (shape, F16)],
                Block(ins, ops, outs, grid, (128, 1, 1), forloop, rng.choice([1, 2, 4, 5, 6, 12])), check=False)


RANDOM = [random_case(s) for s in range(300)]


def _check(case: Case):
    py_tag, py_msg = python_verdict(case)
    text = mlir_text(case)
    cpp_tag, cpp_msg = cpp_verdict(text)
    where = f"\n{text}\nPython: {py_msg or 'accepted'}\nC++: {cpp_msg or 'accepted'}"
    assert (py_tag is None) == (py_msg == ""), "a Python rejection without a [rule] tag" + where
    assert (cpp_tag is None) == (cpp_msg == ""), "a C++ rejection without a [rule] tag" + where
    assert py_tag == cpp_tag, "the two checkers disagree" + where
    if case.check:
        assert py_tag == case.expect, f"expected {case.expect or 'valid'}" + where
    if cpp_tag is None:  # the importer rebuilds what C++ accepts, with the same text
        (g,) = parse_mlir(text)
        assert g.to_mlir() == text
    return py_tag


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rule_corpus(case):
    _check(case)


def test_corpus_covers_every_rule_both_ways():
    tags = {c.expect for c in CASES}
    assert {"launch", "map", "divisibility", "omap", "accumulator", "stage", "smem", "dimx", "shape", "dtype",
            "nesting"} <= tags
    for t in tags - {None}:
        names = {c.name.rsplit("-", 1)[0] for c in CASES if c.expect == t}
        assert any(f"{n}-ok" in {c.name for c in CASES} for n in names), t


def test_random_corpus_agrees():
    verdicts = [_check(c) for c in RANDOM]
    # the random corpus exercises both verdicts and several rules (a corpus that only
    # produced valid or only broken graphs would test little)
    assert verdicts.count(None) >= 20
    assert len({v for v in verdicts if v}) >= 4, sorted({v for v in verdicts if v})


def test_importer_reports_rule_and_place():
    """Graphs C++ accepts and the model rejects get a tagged error at the op, no traceback
    from the bindings: a kn.smem_capacity the importer honours (before: the default)."""
    case = Case("cap", None, [((228, 256), F32)], blk(), cap=rules.DEFAULT_SMEM + 1024)
    (g,) = parse_mlir(mlir_text(case))
    assert g.smem_capacity == rules.DEFAULT_SMEM + 1024
    bad = Case("cap", None, [((229, 256), F32)], blk(), cap=rules.DEFAULT_SMEM + 1024)
    with pytest.raises((mlir_ir.MLIRError, MLIRImportError), match=r"\[smem\]"):
        parse_mlir(mlir_text(bad))


def test_input_of_a_tile_is_a_map_error():
    """docs/ir.md: `tb.input` reads a region argument (a device tensor) is the [map] rule,
    as the C++ verifier says; the builder said [nesting]."""
    g = KNGraph("f")
    x = g.new_input((64, 64))
    tb = TBGraph((1, 1, 1), (128, 1, 1), 1, 64)
    t = tb.new_input(x, (R, R, R), R)
    with pytest.raises(GraphError, match=r"^\[map\] new_input reads a device tensor"):
        tb.new_input(t, (R, R, R), R)
