"""Seed candidates: fusions built without enumeration, which the search must beat.

A program without matmuls (an element-wise chain, a norm, a softmax) fuses into one
graph-defined kernel whose blocks each hold whole rows: the block graph is the
reference's ops in order, on tiles split over the grid only along dimension classes
that no op reduces. The enumeration reaches the same kernel when its limits allow, but
the block graph of a LayerNorm (14 ops) is beyond what it visits in minutes, while a
seed costs one build. Seeds are ranked, checked and formally verified like every other
candidate, so a seed that is wrong for some program is rejected, never returned.
"""
from __future__ import annotations

from ..core import ops as O
from .config import SearchConfig, dim_classes, schedules

# kernel ops whose block-level op has the same meaning on a tile holding whole rows
_ATTRS = {"reduction": ("dim",), "reduce_max": ("dim",), "constant": ("value", "shape"), "rms_norm": ("normalized_shape",),
          "clamp": ("min_val", "max_val")}


def _replayable(ref) -> bool:
    for op in ref.ops:
        d = O.OPS.get(op.kind)
        if d is None or "tb" not in d.levels or op.kind == "matmul":
            return False
        if set(op.attrs) - set(_ATTRS.get(op.kind, ())):
            return False  # attributes the block builder would not pass on
        if op.kind == "rms_norm" and tuple(op.attrs["normalized_shape"]) != tuple(op.inputs[0].shape[-1:]):
            return False
    return bool(ref.ops)


def row_seeds(ref, cfg: SearchConfig) -> list:
    """Plans of one graph-defined kernel replaying `ref`, one per schedule of `cfg` that
    keeps every reduced class whole and has no for-loop, saving every output of `ref`
    (a residual add and the LayerNorm of its sum: both); [] when `ref` has ops the replay
    does not cover (matmuls, layout ops, ops with other attributes)."""
    if not _replayable(ref):  # (any number of outputs: `max_block_outputs` bounds the enumeration, not a seed)
        return []
    classes, reduced, batch = dim_classes(ref, also=ref.outputs)
    n = len(ref.inputs)
    in_classes, out_classes = classes[:n], classes[n:]
    tile = {id(t): k for k, t in enumerate(ref.inputs)}
    bops = []
    for op in ref.ops:
        bops.append((op.kind, tuple(tile[id(t)] for t in op.inputs), tuple(sorted(op.attrs.items()))))
        tile[id(op.outputs[0])] = n + len(bops) - 1
    plans = []
    for s in schedules([t.shape for t in ref.inputs], in_classes, reduced, cfg, loop_needed=False, batch=batch):
        if s.forloop != 1 or set(s.grid_classes) & reduced:
            continue
        omaps = []
        for t, oc in zip(ref.outputs, out_classes):
            omap = [-1, -1, -1]
            for gi, c in enumerate(s.grid_classes):
                if c not in oc:
                    break  # blocks would write the same output tile
                omap[gi] = oc.index(c)
            else:
                omaps.append((tile[id(t)], tuple(omap)))
                continue
            break
        if len(omaps) != len(ref.outputs):
            continue
        plan_op = ("graph_def", tuple(range(n)), s.grid, 1, cfg.reduction_dimx, s.maps, tuple(bops),
                   tuple(omaps))
        plans.append(((plan_op,), tuple(n + k for k in range(len(ref.outputs)))))
    return plans


def attention_seeds(core, cfg: SearchConfig) -> list:
    """FlashDecoding plans for a program that is exp-normalized attention,
    `(exp(Q @ K) @ V) / sum(exp(Q @ K), -1)` over inputs Q (b, m, d), K (b, d, s),
    V (b, s, e) (after input prologues: `prologue.analyze`): kernel 1 splits the KV
    sequence over grid y (and the query rows over z), loops over KV chunks, and saves
    the partial numerators and row sums concatenated; kernel 2 sums the partials and
    divides. One plan per split, row tiling and chunk that fit `cfg`; [] for any other
    program."""
    if sorted(op.kind for op in core.ops) != ["div", "exp", "matmul", "matmul", "reduction"] \
            or len(core.inputs) != 3 or len(core.outputs) != 1:
        return []
    q, k, v = core.inputs
    made = {id(op.outputs[0]): op for op in core.ops}

    def op_of(t, kind, *ins):  # the op of `kind` that made t from exactly `ins`
        op = made.get(id(t))
        return op is not None and op.kind == kind and len(op.inputs) == len(ins) \
            and all(a is b for a, b in zip(op.inputs, ins))

    div = made[id(core.outputs[0])]
    if div.kind != "div" or len(q.shape) != 3:
        return []
    num, den = div.inputs
    e_ = made.get(id(den)).inputs[0] if id(den) in made else None
    s_ = made.get(id(e_)).inputs[0] if id(e_) in made else None
    if not (s_ is not None and op_of(s_, "matmul", q, k) and op_of(e_, "exp", s_) and op_of(num, "matmul", e_, v)
            and op_of(den, "reduction", e_) and made[id(den)].attrs["dim"] % 3 == 2):
        return []
    b, m, _ = q.shape
    s, e = v.shape[1], v.shape[2]

    def divisors(n):
        return [x for x in range(1, n + 1) if n % x == 0]

    def row_tile_ok(t):
        return t == m or t in cfg.tile_sizes or t in cfg.grid_tile_sizes

    plans = []
    z2 = max(z for z in divisors(m) if b * z <= cfg.sms)  # kernel 2: one block per row tile
    for split in divisors(s):
        for z in divisors(m):
            blocks = b * split * z
            if split == 1 or not row_tile_ok(m // z) or not cfg.sms // 2 <= blocks <= cfg.max_blocks:
                continue
            for loop in divisors(s // split):
                chunk = s // split // loop
                if loop == 1 or chunk < cfg.min_loop_tile or chunk not in cfg.tile_sizes:
                    continue
                zq = 1 if z > 1 else -1
                k1 = ("graph_def", (0, 1, 2), (b, split, z), loop, cfg.reduction_dimx,
                      (((0, -1, zq), -1), ((0, 2, -1), 2), ((0, 1, -1), 1)),
                      (("matmul", (0, 1), ()), ("exp", (3,), ()), ("matmul", (4, 2), ()),
                       ("accum", (5,), (("kind", "none"),)), ("accum", (4,), (("kind", "sum"),))),
                      ((6, (0, 2, 1 if z > 1 else -1)), (7, (0, 2, 1 if z > 1 else -1))))
                k2 = ("graph_def", (3, 4), (b, z2, 1), 1, e,
                      (((0, 1 if z2 > 1 else -1, -1), -1), ((0, 1 if z2 > 1 else -1, -1), -1)),
                      (("accum", (0,), (("kind", "sum_todimx"),)), ("accum", (1,), (("kind", "sum"),)),
                       ("div", (2, 3), ())),
                      ((4, (0, 1 if z2 > 1 else -1, -1)),))
                plans.append(((k1, k2), (5,)))
    return plans


MAX_CHUNK = 256  # keys a for-loop step of `softmax_pv_seeds` holds at most


def softmax_pv_seeds(core, cfg: SearchConfig) -> list:
    """Decode attention after its row maximum, `(exp(S - mx) @ V) / sum(exp(S - mx), -1)` or
    the softmax first, `(exp(S - mx) / sum(..)) @ V`, over inputs S (.., m, L), mx (.., m, 1),
    V (.., L, e) with the same batch dims. One graph-defined kernel: blocks over the batch dims (and
    16-column tiles of V), a for-loop over chunks of the L keys with the numerator and the
    row sums accumulated, the division after it; the lowering splits the loop one step a
    block (`kernel_plan.choose_split`). The chunk is the largest divisor of L up to
    MAX_CHUNK, so a KV cache of 4096 positions plus the new one (4097 = 17 x 241 keys, which
    no tile size divides: the enumeration's schedules hold it whole in one block) is looped
    in 17 steps of 241: H100, [1, 8, 4, 4097] scores, 33.8 us held whole in 64 blocks, 19.0
    us looped. [] for any other program."""
    if sorted(op.kind for op in core.ops) != ["div", "exp", "matmul", "reduction", "sub"] \
            or len(core.inputs) != 3 or len(core.outputs) != 1:
        return []
    sub, ex, red, mm, div = (next(op for op in core.ops if op.kind == k)
                             for k in ("sub", "exp", "reduction", "matmul", "div"))
    S, mx = sub.inputs
    e_, sm = ex.outputs[0], red.outputs[0]
    r = len(S.shape)
    if not (ex.inputs[0] is sub.outputs[0] and red.inputs[0] is e_):
        return []
    after = (mm.inputs[0] is e_ and div.inputs[0] is mm.outputs[0] and div.inputs[1] is sm
             and div.outputs[0] is core.outputs[0])  # (exp @ V) / sum
    before = (div.inputs[0] is e_ and div.inputs[1] is sm and mm.inputs[0] is div.outputs[0]
              and mm.outputs[0] is core.outputs[0])  # (exp / sum) @ V: softmax, then P @ V
    if not (after or before):
        return []
    if r < 3 or red.attrs["dim"] % r != r - 1 or tuple(mx.shape) != tuple(S.shape[:-1]) + (1,):
        return []
    V = mm.inputs[1]
    ins = list(core.inputs)
    if {id(t) for t in ins} != {id(S), id(mx), id(V)}:
        return []
    L, e = S.shape[-1], V.shape[-1]
    if len(V.shape) != r or tuple(V.shape[:-2]) != tuple(S.shape[:-2]) or V.shape[-2] != L:
        return []
    chunk = max(c for c in range(1, MAX_CHUNK + 1) if L % c == 0)
    if L // chunk < 2 or chunk < 16:
        return []
    batch = [d for d in range(r - 2) if S.shape[d] > 1][:2]
    plans = []
    for cols in sorted({e} | ({16} if e % 16 == 0 and e > 16 else set())):
        grid_dims = [(d, S.shape[d]) for d in batch] + ([("e", e // cols)] if cols < e else [])
        if len(grid_dims) > 3:
            continue
        grid = tuple(n for _, n in grid_dims) + (1,) * (3 - len(grid_dims))

        def imap(t):  # grid axis -> dim of t (-1: not split along it)
            return tuple([d if d != "e" else (r - 1 if t is V else -1) for d, _ in grid_dims]
                         + [-1] * (3 - len(grid_dims)))
        fmaps = {id(S): r - 1, id(mx): -1, id(V): r - 2}
        maps = tuple((imap(t), fmaps[id(t)]) for t in ins)
        k = {id(t): i for i, t in enumerate(ins)}
        n = len(ins)
        bops = (("sub", (k[id(S)], k[id(mx)]), ()), ("exp", (n,), ()), ("accum", (n + 1,), (("kind", "sum"),)),
                ("matmul", (n + 1, k[id(V)]), ()), ("accum", (n + 3,), (("kind", "none"),)),
                ("div", (n + 4, n + 2), ()))
        # the output (.., m, e) splits as V (.., L, e) does: batch dims and V's columns
        plan_op = ("graph_def", tuple(range(n)), grid, L // chunk, cfg.reduction_dimx, maps, bops, ((n + 5, imap(V)),))
        plans.append(((plan_op,), (n,)))
    return plans
