"""Tensor layout selection as an ILP (paper §6), solved with Z3's Optimize.

For each shared-memory tile t and each candidate layout l = (innermost dim, swizzle)
one boolean B[t,l]; exactly one is true per tile. The costs come from the ops that
read and write the tiles, in units of shared-memory wavefronts (one 128-byte access):

- an input iterator copies its tile from device memory: with the tile's innermost dim
  equal to the device tensor's innermost dim the copy is 16-byte vectors (cp.async),
  otherwise one element per access; the same for output savers (device tensors are
  row-major, their last dim innermost, unless `global_inner` says otherwise);
- a block matmul reads its operands with `ldmatrix` (8 rows of 16 bytes per phase;
  `.trans` covers either innermost dim of a 16-bit tile): the cost is the bank-conflict
  degree of that access under the tile's row length and swizzle, simulated exactly;
  tiles whose rows are under 16 bytes cannot use ldmatrix and pay element-wise loads;
  the matmul output prefers its last dim innermost (mma accumulator fragments hold
  adjacent column pairs);
- element-wise ops (and thread graphs, non-reducing accumulators) want their
  same-shaped operands and result in one layout (a mismatch is a strided, conflicting
  access): a pairwise penalty, linearized through the B variables;
- reductions prefer the reduced dim innermost;
- a swizzle (defined in `TileLayout.offset`) costs a little index arithmetic where nothing needs it.

Only the last two dims are candidates for innermost (the paper's matmul rule); tiles of
rank 1 have one layout. Disabled, every tile is row-major and unswizzled.
"""
from __future__ import annotations

from math import ceil, log2
from typing import Mapping

from ..core import ops as O
from ..core.graph import TBGraph
from .plan import LayoutPlan, TileLayout, atom_bytes, solver_budget, tile_names, tiles

SWIZZLES = (0, 32, 64, 128)
ELEMENTWISE = set(O.ELEMENTWISE)
REDUCING_ACCUM = {"sum", "mean", "rms", "sum_todimx"}


def ldmatrix_ways(row_bytes: int, swizzle: int, inner_last: bool = True) -> int:
    """Bank-conflict degree of one ldmatrix phase: 8 consecutive rows of `row_bytes`,
    16 bytes from each, under the swizzle of `TileLayout.offset` (`inner_last`: rows of
    the last dim, which `atom_bytes` may store as column blocks: 8 rows of one block)."""
    worst = 1
    row_bytes = (atom_bytes(row_bytes, swizzle) if inner_last else 0) or row_bytes
    per_phase = max(1, 128 // row_bytes) if row_bytes else 1
    max_phase = max(1, swizzle // 16)
    for chunk in range(max(1, min(row_bytes // 16, 8))):
        groups = []
        for r in range(8):
            phys = chunk ^ ((r // per_phase) % max_phase) if swizzle else chunk
            groups.append(((r * row_bytes + 16 * phys) >> 4) & 7)
        worst = max(worst, max(groups.count(g) for g in set(groups)))
    return worst


def _wavefronts(t) -> int:
    n = t.dtype.itemsize
    for d in t.shape:
        n *= d
    return max(1, ceil(n / 128))


def _bytes(t) -> int:
    n = t.dtype.itemsize
    for d in t.shape:
        n *= d
    return n


def candidates(t) -> list[tuple[int, int]]:
    r = len(t.shape)
    inners = [0] if r == 1 else [r - 1, r - 2]
    out = []
    for d in inners:
        row = t.shape[d] * t.dtype.itemsize
        for s in SWIZZLES:
            if s and (r == 1 or row % s):
                continue
            out.append((d, s))
    return out


class _Costs:
    def __init__(self, tb: TBGraph, global_inner: Mapping[int, int] | None):
        self.tb = tb
        self.names = tile_names(tb)
        self.unary: dict[str, dict[tuple[int, int], int]] = {}
        self.pairs: list[tuple[str, str, int]] = []  # (tile, tile, mismatch penalty)
        self.swizzle_needed: set[str] = set()
        for t in tiles(tb):
            self.unary[self.names[id(t)]] = {c: 0 for c in candidates(t)}
        gi = dict(global_inner or {})
        for k, r in enumerate(tb.inputs):
            self._copy(r.stensor, gi.get(k, len(r.dtensor.shape) - 1))
        for o in tb.outputs:
            self._copy(o.stensor, len(o.stensor.shape) - 1)
        for op in tb.ops:
            self._op(op)
        for name, costs in self.unary.items():
            for (d, s) in costs:
                if s and name not in self.swizzle_needed:
                    costs[(d, s)] += 1

    def _add(self, t, fn):
        name = self.names[id(t)]
        for c in self.unary[name]:
            self.unary[name][c] += fn(*c)

    def _copy(self, t, g_inner: int):
        b, item = _bytes(t), t.dtype.itemsize

        def cost(d, s):
            if d == g_inner and (t.shape[d] * item) % 16 == 0:
                return ceil(b / 16)
            return ceil(b / item)  # one element per access (transposing copy)
        self._add(t, cost)

    def _matmul_operand(self, t, pos: int):
        self.swizzle_needed.add(self.names[id(t)])
        phases, item = max(1, ceil(_bytes(t) / 128)), t.dtype.itemsize
        # the FMA loop's threads run along the output's columns: a warp reads A at a few
        # rows and one k (rows innermost: adjacent words), B along its columns. Otherwise a
        # tie: P @ V over 4097 keys with P's k innermost ran 63.4 us, rows innermost 59.1
        # (H100, qwen2 decode layer; benchmarks/results/arch_check.md)
        along = len(t.shape) - 2 if pos == 0 else len(t.shape) - 1

        def cost(d, s):
            row = t.shape[d] * item
            if len(t.shape) < 2 or row % 16 or item != 2:
                return ceil(_bytes(t) / item) + (d != along)  # no ldmatrix: element loads
            return phases * ldmatrix_ways(row, s, d == len(t.shape) - 1)
        self._add(t, cost)

    def _op(self, op):
        outs = op.outputs
        if op.kind == "matmul":
            for pos, t in enumerate(op.inputs):
                self._matmul_operand(t, pos)
            c = outs[0]
            w = _wavefronts(c)
            self._add(c, lambda d, s: w if d == len(c.shape) - 1 else 2 * w)
            return
        kind = op.attrs.get("kind") if op.kind == "forloop_accum" else None
        red_dim = None
        if op.kind in ("reduction", "reduce_max"):
            red_dim = op.attrs["dim"] % len(op.inputs[0].shape)
        elif op.kind in ("rms_norm", "reduction_to_dimx") or kind in REDUCING_ACCUM:
            red_dim = len(op.inputs[0].shape) - 1
        if red_dim is not None:
            t = op.inputs[0]
            w = _wavefronts(t)
            self._add(t, lambda d, s: 0 if d == red_dim else w)
            if op.kind == "rms_norm":  # element-wise part: x / rms(x) in x's layout
                self.pairs.append((self.names[id(t)], self.names[id(outs[0])], 4 * _wavefronts(t)))
            return
        if op.kind in ELEMENTWISE or op.kind in ("thread_graph", "forloop_accum", "concat", "repeat"):
            for o in outs:
                for t in op.inputs:
                    if t.shape == o.shape and len(t.shape) >= 2:
                        self.pairs.append((self.names[id(t)], self.names[id(o)], 4 * _wavefronts(o)))

    def total(self, choice: Mapping[str, tuple[int, int]]) -> int:
        c = sum(self.unary[n][choice[n]] for n in self.unary)
        c += sum(p for a, b, p in self.pairs if choice[a][0] != choice[b][0])
        return c


def default_layouts(tb: TBGraph) -> dict[str, tuple[int, int]]:
    names = tile_names(tb)
    return {names[id(t)]: (len(t.shape) - 1, 0) for t in tiles(tb)}


def _plan(tb, choice, costs, optimal, enabled) -> LayoutPlan:
    names = costs.names
    out = {}
    for t in tiles(tb):
        n = names[id(t)]
        d, s = choice[n]
        out[n] = TileLayout(n, tuple(t.shape), t.dtype.mlir, d, s)
    default = costs.total(default_layouts(tb))
    return LayoutPlan(out, costs.total(choice), default, optimal, enabled)


def inner_dim(strides) -> int | None:
    """The innermost (last stride-1) dim of a tensor with these strides, or None."""
    return len(strides) - 1 - list(reversed(strides)).index(1) if 1 in strides else None


def lowering_layouts(tb: TBGraph, enabled: bool = True, global_inner: Mapping[int, int] | None = None) -> LayoutPlan:
    """The layouts `tb` is lowered with: those the IR recorded (`tb.layout`, read into
    `tb.recorded_layouts`; a tile without one is row-major and unswizzled), else the ILP's
    choice (`enabled=False`: row-major, unswizzled)."""
    if not (enabled and tb.recorded_layouts):
        return select_layouts(tb, enabled=enabled, global_inner=global_inner)
    choice = default_layouts(tb)
    choice.update(tb.recorded_layouts)
    return _plan(tb, choice, _Costs(tb, global_inner), False, True)


def select_layouts(tb: TBGraph, enabled: bool = True, global_inner: Mapping[int, int] | None = None,
                   timeout_ms: int = 10_000) -> LayoutPlan:
    """Choose each tile's innermost dim and swizzle minimizing the model cost.

    `global_inner` maps an input iterator index to the innermost dim of the device
    tensor it reads (default: the last dim)."""
    costs = _Costs(tb, global_inner)
    if not enabled:
        return _plan(tb, default_layouts(tb), costs, False, False)
    import z3  # only the optimizer needs z3, never the runtime

    ctx = z3.Context()  # its own: a shared context's earlier terms would steer the search
    opt = z3.Optimize(ctx=ctx)
    solver_budget(opt, timeout_ms)
    B = {n: {c: z3.Bool(f"B[{n},{c[0]},{c[1]}]", ctx) for c in cs} for n, cs in costs.unary.items()}
    terms = []
    for n, vs in B.items():
        opt.add(z3.PbEq([(v, 1) for v in vs.values()], 1))
        for c, v in vs.items():
            if costs.unary[n][c]:
                terms.append(z3.If(v, costs.unary[n][c], 0))

    def inner(n, d):
        vs = [v for (dd, _), v in B[n].items() if dd == d]
        return z3.Or(vs) if vs else z3.BoolVal(False, ctx)

    for k, (a, b, p) in enumerate(costs.pairs):
        # M[a,b] >= In(a,d) - In(b,d) for every d: a linear relaxation of "layouts differ"
        m = z3.Bool(f"M[{k}]", ctx)
        for d in {dd for dd, _ in B[a]}:
            opt.add(z3.Implies(z3.And(inner(a, d), z3.Not(inner(b, d))), m))
        terms.append(z3.If(m, p, 0))
    opt.minimize(z3.Sum(terms) if terms else z3.IntVal(0, ctx))
    res = opt.check()
    if res != z3.sat:
        return _plan(tb, default_layouts(tb), costs, False, True)
    model = opt.model()
    choice = {n: next(c for c, v in vs.items() if z3.is_true(model.eval(v, model_completion=True)))
              for n, vs in B.items()}
    return _plan(tb, choice, costs, True, True)
