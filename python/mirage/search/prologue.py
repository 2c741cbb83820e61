"""Input prologues: per-input normalizations searched as inputs and folded back.

A *prologue* of reference input X is the set of reference ops that depend on X alone
(plus constants): element-wise ops, reductions and rms_norm, ending in one tensor
`X'` of X's shape that is all the rest of the program reads of X (QKNorm: `Q' =
rms_norm(Q) * 0.125`, `K' = K / sqrt(sum(K², 1) / 64)`). Searching the program with the
prologue ops in the block-graph space makes the space explode (raw-input products are
subexpressions of the normalized ones, so abstract-expression pruning keeps them); so
the search runs on the *core* program, whose inputs are the X' (same shapes), and every
complete candidate is folded back before it is built, costed and verified against the
whole reference:

- a graph-defined kernel that reads X' with a tile in which every dim the prologue
  reduces is whole (not split by a grid dim or the for-loop) gets the prologue ops as
  block ops right after its input iterator (the norm is recomputed per block, as in the
  hand-written QKNorm μGraph);
- otherwise (a pre-defined op reads X', or some reader splits a reduced dim) the
  prologue runs once before the candidate, as one graph-defined kernel whose tiles hold
  the reduced dims whole (`variants` offers this form beside the folded one).

Enabled by `SearchConfig.prologues` (the `attention` preset). Candidates are still
checked against the reference (float64 + formal verifier) like every other.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from ..core.graph import KNGraph

ALLOWED = ("add", "sub", "mul", "div", "sqrt", "rsqrt", "square", "reduction", "rms_norm")


@dataclass
class Prologue:
    input: int  # reference input index
    ops: list  # reference op indices (constants included), in program order
    frontier: object  # the tensor X'
    reduced: tuple  # dims the prologue reduces over


@dataclass
class Prologues:
    ref: KNGraph
    core: KNGraph
    prologues: dict  # input index -> Prologue
    aliases: dict = field(default_factory=dict)  # core input index (past the reference's) -> reference input

    def variants(self, plan) -> list:
        return variants(self, plan)


def hoist_scales(ref: KNGraph) -> KNGraph:
    """`ref`, or an equivalent program in which every product of a matmul with a constant
    scalar, `(A @ B) * c`, reads `(A * c) @ B` instead (attention's 1/sqrt(d) on the
    scores): the scale becomes part of A's prologue, and the core program is the one
    without it. The matmul's result must have no other reader."""
    const = {id(op.outputs[0]) for op in ref.ops if op.kind == "constant"
             and all(n == 1 for n in op.outputs[0].shape)}
    readers: dict = {}
    for op in ref.ops:
        for t in op.inputs:
            readers[id(t)] = readers.get(id(t), 0) + 1
    mm = {id(op.outputs[0]): op for op in ref.ops if op.kind == "matmul"}
    scale = {}  # id(mul output) -> (matmul op, constant tensor)
    for op in ref.ops:
        if op.kind == "mul":
            a, b = op.inputs
            if id(b) in mm and id(a) in const:
                a, b = b, a
            if id(a) in mm and id(b) in const and readers[id(a)] == 1 \
                    and len(b.shape) <= len(mm[id(a)].inputs[0].shape):
                scale[id(op.outputs[0])] = (mm[id(a)], b)
    if not scale:
        return ref
    skip = {id(m) for m, _ in scale.values()}
    g = KNGraph(ref.name)
    env = {id(x): g.new_input(x.shape, dtype=x.dtype) for x in ref.inputs}
    for k, st in ref.strides.items():
        g.strides[k] = st
    for op in ref.ops:
        if id(op) in skip:
            continue
        if id(op.outputs[0]) in scale:
            m, c = scale[id(op.outputs[0])]
            a, b = (env[id(t)] for t in m.inputs)
            y = g.matmul(g.mul(a, env[id(c)]), b)
        elif op.kind == "constant":
            y = g.constant(op.attrs["value"], op.attrs["shape"], op.outputs[0].dtype)
        else:
            y = getattr(g, op.kind)(*(env[id(t)] for t in op.inputs), **op.attrs)
        env[id(op.outputs[0])] = y
    for t in ref.outputs:
        g.mark_output(env[id(t)])
    return g


def analyze(ref: KNGraph) -> Prologues | None:
    """The prologues of `ref` and its core program, or None if it has none."""
    if any(op.kind == "graph_def" for op in ref.ops):
        return None
    ref = hoist_scales(ref)
    const_of = {id(op.outputs[0]): j for j, op in enumerate(ref.ops) if op.kind == "constant"}
    found = {}
    claimed: set = set()
    for k, X in enumerate(ref.inputs):
        D = {id(X)}
        ops_in = []
        for j, op in enumerate(ref.ops):
            if op.kind == "constant":
                continue
            nonconst = [t for t in op.inputs if id(t) not in const_of]
            if nonconst and all(id(t) in D for t in nonconst) and op.kind in ALLOWED:
                D.add(id(op.outputs[0]))
                ops_in.append(j)
        if not ops_in:
            continue
        sel = set(ops_in)
        boundary = {id(t) for t in ref.outputs if id(t) in D}
        for j, op in enumerate(ref.ops):
            if j not in sel and op.kind != "constant":
                boundary |= {id(t) for t in op.inputs if id(t) in D}
        if len(boundary) != 1:
            continue
        fr = next(op.outputs[0] for j, op in enumerate(ref.ops) if id(op.outputs[0]) in boundary) \
            if id(X) not in boundary else None
        if fr is None or tuple(fr.shape) != tuple(X.shape):
            continue
        # keep only the ops the frontier needs, with their constants
        need = {id(fr)}
        keep = []
        for j in reversed(range(len(ref.ops))):
            op = ref.ops[j]
            if id(op.outputs[0]) in need and (j in sel or op.kind == "constant"):
                keep.append(j)
                need |= {id(t) for t in op.inputs}
        keep.reverse()
        red = set()
        for j in keep:
            op = ref.ops[j]
            r = len(op.inputs[0].shape) if op.inputs else 0
            if op.kind == "reduction":
                red.add(op.attrs["dim"] % r)
            elif op.kind == "rms_norm":
                ns = op.attrs.get("normalized_shape") or (1,)
                red |= set(range(r - len(ns), r))
        found[k] = Prologue(k, keep, fr, tuple(sorted(red)))
        claimed |= {j for j in keep if ref.ops[j].kind != "constant"}
    if not found:
        return None
    # the core program: the frontiers become the inputs
    core = KNGraph(ref.name)
    env = {}
    for k, X in enumerate(ref.inputs):
        t = core.new_input(X.shape, dtype=X.dtype)
        env[id(found[k].frontier) if k in found else id(X)] = t
    for k, s in ref.strides.items():
        core.strides[k] = s
    for j, op in enumerate(ref.ops):
        if j in claimed:
            continue
        if op.kind == "constant":
            if not any(id(op.outputs[0]) in {id(t) for t in o.inputs}
                       for jj, o in enumerate(ref.ops) if jj not in claimed):
                continue
            env[id(op.outputs[0])] = core.constant(op.attrs["value"], op.attrs["shape"], op.outputs[0].dtype)
            continue
        xs = [env[id(t)] for t in op.inputs]
        env[id(op.outputs[0])] = getattr(core, op.kind)(*xs, **op.attrs)
    for t in ref.outputs:
        core.mark_output(env[id(t)])
    return Prologues(ref, core, found)


def aliased(ref: KNGraph) -> Prologues | None:
    """`ref` with a second input for each input that a matmul contracts and another op
    reads too (a residual `x @ W + x`), or None where there is none. In the reference both
    readers share x's dims, so the contraction dim and the output columns fall into one
    dimension class and no schedule splits the columns; in the core program the other
    readers read the alias, whose dims are classed by them alone. Folding maps the alias back
    to the input: the fused kernel reads x twice (two input iterators, two maps)."""
    if any(op.kind == "graph_def" for op in ref.ops):
        return None
    contracted = {id(op.inputs[0]) for op in ref.ops if op.kind == "matmul"}
    other = {}  # input index -> its non-matmul readers
    for k, X in enumerate(ref.inputs):
        if id(X) in contracted:
            readers = [j for j, op in enumerate(ref.ops) if op.kind != "matmul"
                       and any(t is X for t in op.inputs)]
            if readers:
                other[k] = set(readers)
    if not other:
        return None
    core = KNGraph(ref.name)
    env = {}
    for X in ref.inputs:
        env[id(X)] = core.new_input(X.shape, dtype=X.dtype)
    alias, aliases = {}, {}
    for k in sorted(other):
        X = ref.inputs[k]
        alias[k] = core.new_input(X.shape, dtype=X.dtype)
        aliases[len(core.inputs) - 1] = k
    for k, s in ref.strides.items():
        core.strides[k] = s
    index = {id(X): k for k, X in enumerate(ref.inputs)}
    for j, op in enumerate(ref.ops):
        xs = [alias[index[id(t)]] if j in other.get(index.get(id(t)), ()) else env[id(t)] for t in op.inputs]
        if op.kind == "constant":
            env[id(op.outputs[0])] = core.constant(op.attrs["value"], op.attrs["shape"], op.outputs[0].dtype)
        else:
            env[id(op.outputs[0])] = getattr(core, op.kind)(*xs, **op.attrs)
    for t in ref.outputs:
        core.mark_output(env[id(t)])
    return Prologues(ref, core, {}, aliases)


def _prologue_ops(P: Prologues, p: Prologue, first: int, src: int):
    """The prologue as plan ops over a tensor list whose next index is `first`, reading
    the raw input at index `src`: (ops as (kind, ins, attrs), index of X')."""
    ref = P.ref
    idx = {id(ref.inputs[p.input]): src}
    out = []
    n = first
    for j in p.ops:
        op = ref.ops[j]
        attrs = tuple(sorted(op.attrs.items()))
        out.append((op.kind, tuple(idx[id(t)] for t in op.inputs), attrs))
        idx[id(op.outputs[0])] = n
        n += 1
    return out, idx[id(p.frontier)]


def _foldable(p: Prologue, grid, forloop, imap, fmap) -> bool:
    for g, d in zip(grid, imap):
        if g > 1 and d in p.reduced:
            return False
    if forloop > 1 and fmap in p.reduced:
        return False
    return True


PROLOGUE_TILE = 4096  # elements of a prologue kernel's tile, as a pre-defined element-wise kernel's


def _prologue_kernel(P: Prologues, p: Prologue, src: int):
    """The prologue as one graph-defined kernel reading raw input `src`: the grid splits
    the dims it does not reduce (outer first, up to three) until a tile holds about
    PROLOGUE_TILE elements; every reduced dim stays whole in the tile."""
    shape = list(P.ref.inputs[p.input].shape)
    tile, grid = list(shape), []
    for d in [d for d in range(len(shape)) if d not in p.reduced]:
        if len(grid) == 3 or prod(tile) <= PROLOGUE_TILE:
            break
        rest = prod(tile) // tile[d]
        fits = [c for c in range(1, shape[d] + 1) if shape[d] % c == 0 and c * rest <= PROLOGUE_TILE]
        if d == len(shape) - 1:  # keep 16-byte chunks along the last dim where it can
            fits = [c for c in fits if c % 8 == 0] or fits
        c = max(fits) if fits else 1
        if c < shape[d]:
            tile[d] = c
            grid.append((d, shape[d] // c))
    imap = tuple(d for d, _ in grid) + (-1,) * (3 - len(grid))
    sizes = tuple(n for _, n in grid) + (1,) * (3 - len(grid))
    bops, fr = _prologue_ops(P, p, 1, 0)
    return ("graph_def", (src,), sizes, 1, 64, ((imap, -1),), tuple(bops), ((fr, imap),))


def variants(P: Prologues, plan) -> list:
    """The plans that a core-program plan stands for: its prologues folded into the kernels
    that read them where they can (recomputed per block), and, for each that reduces a dim
    other than the last (a column norm, an element loop per block), the plan with that one
    run first as a kernel of its own. Which is faster depends on the kernel
    (QKNorm bs8 on an H100: K's norm folded into the attention kernel, 255 registers and
    spills, 58.7 us; as its own kernel, 47.7 us); all are candidates, costed, checked and
    timed alike."""
    folded = fold(P, plan)
    out = [folded]
    for k, p in sorted(P.prologues.items()):
        if all(d == len(P.ref.inputs[k].shape) - 1 for d in p.reduced):
            continue  # a row norm folds into registers (the rows plan): only column norms
        alone = fold(P, plan, separate={k})
        if alone not in out:
            out.append(alone)
    return out


def fold(P: Prologues, plan, separate=()):
    """A core-program plan -> a plan over the reference's inputs (see the module doc);
    the prologues of the inputs in `separate` run first, as kernels of their own."""
    ops, outs = plan
    n = len(P.ref.inputs)
    # which prologues fold into every reader
    fold_in = {}
    for k, p in P.prologues.items():
        ok = k not in separate
        for op in ops:
            if op[0] == "op":
                if k in op[2]:
                    ok = False
            else:
                _, I, grid, forloop, dimx, maps, bops, omaps, *_ = op
                for i, (imap, fmap) in zip(I, maps):
                    if i == k and not _foldable(p, grid, forloop, imap, fmap):
                        ok = False
        fold_in[k] = ok
    prefix = []
    remap = {}
    m = n
    for k, p in sorted(P.prologues.items()):
        if fold_in[k]:
            continue
        prefix.append(_prologue_kernel(P, p, k))
        remap[k] = m
        m += 1
    n_core = len(P.core.inputs)  # the reference's inputs, then the aliases
    shift = m - n_core

    def r(i):
        if i < n:
            return remap.get(i, i)
        if i < n_core:
            return P.aliases[i]
        return i + shift

    new_ops = list(prefix)
    for op in ops:
        if op[0] == "op":
            new_ops.append(("op", op[1], tuple(r(i) for i in op[2]), op[3]))
            continue
        _, I, grid, forloop, dimx, maps, bops, omaps = op
        ni = len(I)
        pre = []
        tile_of = {}
        t = ni
        for pos, i in enumerate(I):
            if i < n and i in P.prologues and fold_in[i]:
                pops, fr = _prologue_ops(P, P.prologues[i], t, pos)
                pre += pops
                t += len(pops)
                tile_of[pos] = fr
        q = t - ni

        def rt(j):
            if j < ni:
                return tile_of.get(j, j)
            return j + q

        nb = pre + [(kind, tuple(rt(j) for j in ins), attrs) for kind, ins, attrs in bops]
        no = tuple((rt(k), om) for k, om in omaps)
        new_ops.append(("graph_def", tuple(r(i) for i in I), grid, forloop, dimx, maps, tuple(nb), no))
    return (tuple(new_ops), tuple(r(i) for i in outs))
