"""Lax partitioning (paper §5): split a program into Lax subprograms and non-Lax
remainders, search each subprogram, and stitch the results.

*Barriers* are the ops left as pre-defined kernel ops in the result:

- `partition="auto"` (default): ops the search cannot model or the verifier cannot
  bound: non-Lax reductions (`reduce_max`), layout ops (`reshape`, `transpose`,
  `concat`, `repeat`), ops without an abstract expression, and an `exp` on a path that
  already went through an `exp` (Lax allows one per path, Definition 5.1). Non-Lax
  element-wise activations (silu, gelu, relu, sigmoid) stay in the subprograms: the
  verifier models them as uninterpreted functions (docs/verify.md) and the search fuses
  them (GatedMLP's silu).
- `partition="strict"`: every op that `mirage.verify.lax` reports as not Lax.
- `partition="split"`: as `auto`, and the program is also cut where a computed tensor
  enters a matmul as an operand (a norm or an activation before a projection): each
  side is searched on its own, the producer's side as a kernel that ends in that tensor.
  This is the fallback of the default search (driver.py): it fuses what the whole-program
  search cannot reach within its limits (LayerNorm before a matmul, a norm in front of a
  gated MLP, two matmuls with an activation between).
- `partition="off"`: search the program whole.

Subprograms are the connected components of the non-barrier ops that have the same
*level* (barriers counted as late as possible: an op's level is its earliest
consumer's, less one if the op is a barrier or the edge to that consumer is cut); a
path that leaves a component through a barrier or a cut and comes back would have to
raise the level, so every component is convex and the components and barriers have a
topological order. Each subprogram becomes a KNGraph (its external tensors are its inputs; what the rest of the
program or the outputs use are its outputs) and is searched with the same limits (the
preset chosen per subprogram when it is `auto`); the best plan of each (verified against
its subprogram) is stitched into one plan over the original inputs, which is built and
checked against the whole reference by one float64 trial (`_stitched` says why that
suffices).
"""
from __future__ import annotations

import sys
import time

from ..core import ops as O
from ..core.graph import KNGraph
from . import build as B
from . import measure as M
from .cost import cost
from .result import Candidate, SearchResult, order, reference_candidate

LAYOUT = ("reshape", "transpose", "concat", "repeat")
SEARCH_SHARE = 0.6  # of the time limit, for the subprograms' searches


def barriers(ref: KNGraph, mode: str = "auto") -> set:
    """Indices (into ref.ops) of the ops left as pre-defined kernel ops."""
    out = set()
    exps: dict = {id(t): 0 for t in ref.inputs}
    for k, op in enumerate(ref.ops):
        n = max((exps.get(id(t), 0) for t in op.inputs), default=0)
        if op.kind == "exp":
            n += 1
        d = O.OPS.get(op.kind)
        bar = False
        if op.kind == "graph_def" or d is None:
            bar = True
        elif op.kind == "reduce_max" or op.kind in LAYOUT or d.absexpr is None:
            bar = True
        elif op.kind == "exp" and n > 1:
            bar = True
        elif mode == "strict" and d.lax == "nonlax":
            bar = True
        if bar:
            out.add(k)
            if op.kind == "exp":
                n -= 1  # the barrier's exp starts a new Lax region
        for t in op.outputs:
            exps[id(t)] = 0 if bar else n
    return out


def cuts(ref: KNGraph, mode: str, bars: set) -> set:
    """Edges (producer, consumer) between op indices that `mode` cuts: with "split", a
    computed tensor entering a matmul as an operand, and a matmul's result entering ops
    that lead to a reduction without passing a matmul or a barrier (a residual add and the
    norm after a projection: a row program, which the row seeds fuse whole; searched with
    the matmul, Mistral's down projection, add and RMSNorm stayed 9 kernels)."""
    if mode != "split":
        return set()
    producer = {id(t): k for k, op in enumerate(ref.ops) for t in op.outputs}
    out = {(producer[id(t)], k) for k, op in enumerate(ref.ops) if op.kind == "matmul"
           for t in op.inputs if id(t) in producer and producer[id(t)] not in bars}
    users: dict = {}
    for k, op in enumerate(ref.ops):
        for t in op.inputs:
            if id(t) in producer:
                users.setdefault(producer[id(t)], []).append(k)
    reduces: dict = {}  # op index -> whether a reduction follows it within one row region

    def leads_to_reduction(k: int) -> bool:
        if k not in reduces:
            op = ref.ops[k]
            reduces[k] = k not in bars and op.kind != "matmul" and (
                op.kind == "reduction" or any(leads_to_reduction(u) for u in users.get(k, [])))
        return reduces[k]

    for k in reversed(range(len(ref.ops))):  # consumers first: no deep recursion
        leads_to_reduction(k)
    out |= {(p, k) for p, op in enumerate(ref.ops) if op.kind == "matmul" and p not in bars
            for k in users.get(p, []) if reduces[k]}
    return out


def subprograms(ref: KNGraph, mode: str = "auto"):
    """(units, barrier set): units in topological order, each ("sub", [op indices]) or
    ("op", op index)."""
    bars = barriers(ref, mode)
    cut = cuts(ref, mode, bars)
    producer = {}
    for k, op in enumerate(ref.ops):
        for t in op.outputs:
            producer[id(t)] = k
    level = {}
    for k, op in enumerate(ref.ops):
        lv = 0
        for t in op.inputs:
            p = producer.get(id(t))
            if p is not None:
                lv = max(lv, level[p] + (1 if p in bars or (p, k) in cut else 0))
        level[k] = lv
    # as late as possible (ops join the subprogram of their consumers: a matmul that
    # only feeds the op after a barrier is searched with that op)
    top = max(level.values(), default=0) + 1
    consumers: dict = {}
    for k, op in enumerate(ref.ops):
        for t in op.inputs:
            p = producer.get(id(t))
            if p is not None:
                consumers.setdefault(p, []).append(k)
    for k in reversed(range(len(ref.ops))):
        cs = consumers.get(k, [])
        level[k] = min((level[c] - (1 if (k, c) in cut else 0) for c in cs), default=top) \
            - (1 if k in bars else 0)
    parent = {k: k for k in range(len(ref.ops)) if k not in bars}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for k, op in enumerate(ref.ops):
        if k in bars:
            continue
        for t in op.inputs:
            p = producer.get(id(t))
            if p is not None and p not in bars and (p, k) not in cut and level[p] == level[k]:
                a, b = find(p), find(k)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    groups: dict = {}
    for k in parent:
        groups.setdefault(find(k), []).append(k)
    unit_of = {}
    units = []
    for k in range(len(ref.ops)):
        if k in bars:
            unit_of[k] = len(units)
            units.append(("op", k))
        elif find(k) == k:
            for j in groups[k]:
                unit_of[j] = len(units)
            units.append(("sub", sorted(groups[k])))
    # topological order of the units (Kahn, ties by first op index: deterministic)
    deps = {u: set() for u in range(len(units))}
    for k, op in enumerate(ref.ops):
        for t in op.inputs:
            p = producer.get(id(t))
            if p is not None and unit_of[p] != unit_of[k]:
                deps[unit_of[k]].add(unit_of[p])
    order, done = [], set()
    while len(order) < len(units):
        ready = [u for u in range(len(units)) if u not in done and deps[u] <= done]
        if not ready:
            raise RuntimeError("partition: the subprograms are not convex (internal error)")
        u = min(ready, key=lambda u: units[u][1] if units[u][0] == "op" else units[u][1][0])
        order.append(units[u])
        done.add(u)
    return order, bars


def _nonunit(shape) -> tuple:
    return tuple(n for n in shape if n != 1)


def _unit_reshape(shape, to) -> bool:
    """Whether a reshape from `shape` to `to` only drops or inserts dims of size 1."""
    return tuple(shape) != tuple(to) and _nonunit(shape) == _nonunit(to)


def _operand_shape(x, out, to):
    """The shape operand `x` of an element-wise op with result shape `out` takes when the
    op is computed in `to` (`out` up to unit dims): x's dims, as they broadcast against
    `out`, placed at `to`'s dims; None where that is not x up to unit dims."""
    pos = [d for d, n in enumerate(out) if n != 1]  # out's non-unit dims, in order
    tpos = [d for d, n in enumerate(to) if n != 1]
    new = [1] * len(to)
    off = len(out) - len(x)
    for d, td in zip(pos, tpos):
        if d >= off:
            new[td] = x[d - off]
    new = tuple(new)
    return new if _nonunit(new) == _nonunit(x) else None


def hoist_unit_reshapes(ref: KNGraph) -> KNGraph:
    """`ref` with each reshape that only drops or inserts unit dims (PyTorch's
    `x.view(8, 4096)` of an `8x1x4096` norm before its projection) moved up to the inputs:
    the element-wise ops, last-dim reductions and norms before it are computed in its
    shape instead, on reshaped inputs (a view: no kernel, cost.py and the lowering skip a
    reshape of row-major memory) and constants of that shape. A reshape is a partition
    barrier: left in the middle, it split the norm from its matmul. Only where each op so
    moved has no other user (nothing is computed twice); the same inputs and outputs,
    the same elements computed (exact)."""
    producer = {id(t): op for op in ref.ops for t in op.outputs}
    users: dict = {}
    for op in ref.ops:
        for t in op.inputs:
            users.setdefault(id(t), []).append(op)
    outs = {id(t) for t in ref.outputs}

    def operand_to(x, t, to):
        """x's shape when its user t is computed in `to`; a broadcast input (a norm's
        gain, imported as 1x1xh) without its leading unit dims (as the search fuses it)."""
        xs = _operand_shape(x.shape, t.shape, to)
        if xs is not None and id(x) not in producer and len(_nonunit(xs)) < len(_nonunit(to)):
            while len(xs) > 1 and xs[0] == 1:
                xs = xs[1:]
        return xs

    def chain(t, to, acc):
        """Collect into `acc` the ops that compute t in shape `to`; False where one cannot."""
        if tuple(t.shape) == tuple(to):
            return True
        if _nonunit(t.shape) != _nonunit(to):
            return False
        op = producer.get(id(t))
        if op is None or op.kind == "constant":
            return True
        if id(t) in outs or op.kind not in O.ELEMENTWISE + ("reduction", "reduce_max", "rms_norm"):
            return False
        acc.add(id(op))
        if op.kind in ("reduction", "reduce_max", "rms_norm"):
            x = op.inputs[0]
            last = op.kind == "rms_norm" or op.attrs["dim"] in (-1, len(x.shape) - 1)
            if not last or to[-1] != t.shape[-1]:  # only the last dim keeps its place
                return False
            return chain(x, tuple(to[:-1]) + (x.shape[-1],), acc)
        for x in op.inputs:
            xs = operand_to(x, t, to)
            if xs is None or not chain(x, xs, acc):
                return False
        return True

    hoisted = set()  # id of the reshape ops moved
    skip = set()  # id of the ops computed in a moved reshape's shape instead
    for op in ref.ops:
        if op.kind != "reshape" or not _unit_reshape(op.inputs[0].shape, op.outputs[0].shape):
            continue
        acc: set = set()
        if not chain(op.inputs[0], tuple(op.outputs[0].shape), acc) or not acc:
            continue
        moved = acc | {id(op)}
        if all(id(u) in moved for o in ref.ops if id(o) in acc for u in users.get(id(o.outputs[0]), [])):
            hoisted.add(id(op))
            skip |= acc
    if not hoisted:
        return ref
    g = KNGraph(ref.name)
    g.smem_capacity = ref.smem_capacity
    env = {}
    for k, t in enumerate(ref.inputs):
        env[id(t)] = g.new_input(t.shape, ref.strides.get(k), t.dtype)
    made: dict = {}  # (id(old tensor), shape) -> new tensor computing it in that shape

    def value(t):
        if id(t) not in env:  # a constant, made where it is used (the moved ops' are not)
            c = producer[id(t)]
            env[id(t)] = g.constant(c.attrs["value"], tuple(t.shape), t.dtype)
        return env[id(t)]

    def rebuild(t, to):
        to = tuple(to)
        if to == tuple(t.shape):
            return value(t)
        key = (id(t), to)
        if key not in made:
            op = producer.get(id(t))
            if op is None:
                made[key] = g._op("reshape", [env[id(t)]], t.dtype, shape=to)
            elif op.kind == "constant":
                made[key] = g.constant(op.attrs["value"], to, t.dtype)
            elif op.kind in ("reduction", "reduce_max", "rms_norm"):
                x = op.inputs[0]
                nx = rebuild(x, to[:-1] + (x.shape[-1],))
                attrs = dict(op.attrs)
                if op.kind != "rms_norm":
                    attrs["dim"] = len(to) - 1
                made[key] = g._op(op.kind, [nx], t.dtype, **attrs)
            else:
                made[key] = g._op(op.kind, [rebuild(x, operand_to(x, t, to)) for x in op.inputs],
                                  t.dtype, **op.attrs)
        return made[key]

    for op in ref.ops:
        if id(op) in hoisted:
            env[id(op.outputs[0])] = rebuild(op.inputs[0], op.outputs[0].shape)
            continue
        if id(op) in skip or op.kind == "constant":
            continue
        env[id(op.outputs[0])] = g._op(op.kind, [value(t) for t in op.inputs], op.outputs[0].dtype, **op.attrs)
    for t in ref.outputs:
        g.mark_output(value(t))
    return g


def private_constants(ref: KNGraph) -> KNGraph:
    """`ref` with a constant used by several ops copied for each of them (same inputs and
    outputs, same values): shared, it joined one subprogram and was an output of it, an
    input of the others (the 1/768 of BERT's two LayerNorms), and a row seed cannot save a
    tile that every block would write."""
    uses: dict = {}
    for op in ref.ops:
        for t in op.inputs:
            uses[id(t)] = uses.get(id(t), 0) + 1
    if not any(op.kind == "constant" and uses.get(id(op.outputs[0]), 0) > 1 for op in ref.ops):
        return ref
    made = {id(op.outputs[0]): op for op in ref.ops if op.kind == "constant"}
    g = KNGraph(ref.name)
    g.smem_capacity = ref.smem_capacity
    env = {id(t): g.new_input(t.shape, ref.strides.get(k), t.dtype) for k, t in enumerate(ref.inputs)}

    def value(t):
        c = made.get(id(t))
        return env[id(t)] if c is None else g.constant(c.attrs["value"], c.attrs["shape"], t.dtype)

    for op in ref.ops:
        if op.kind != "constant":
            env[id(op.outputs[0])] = g._op(op.kind, [value(t) for t in op.inputs], op.outputs[0].dtype, **op.attrs)
    for t in ref.outputs:
        g.mark_output(value(t))
    return g


def needs_partition(ref: KNGraph, mode: str = "auto") -> bool:
    if mode == "off" or any(op.kind == "graph_def" for op in ref.ops):
        return False
    bars = barriers(ref, mode)
    return bool(bars or cuts(ref, mode, bars))


def _subgraph(ref: KNGraph, ops_idx: list, name: str):
    """The KNGraph of ref.ops[ops_idx]: (graph, external input tensors, output tensors)."""
    inside = {id(t) for k in ops_idx for t in ref.ops[k].outputs}
    used_outside = {id(t) for t in ref.outputs}
    sel = set(ops_idx)
    for k, op in enumerate(ref.ops):
        if k not in sel:
            used_outside |= {id(t) for t in op.inputs}
    g = KNGraph(name)
    env = {}
    ext = []
    for k in ops_idx:
        for t in ref.ops[k].inputs:
            if id(t) not in inside and id(t) not in env:
                env[id(t)] = g.new_input(t.shape, dtype=t.dtype)
                ext.append(t)
    outs = []
    for k in ops_idx:
        op = ref.ops[k]
        xs = [env[id(t)] for t in op.inputs]
        if op.kind == "constant":
            y = g.constant(op.attrs["value"], op.attrs["shape"], op.outputs[0].dtype)
        else:
            y = getattr(g, op.kind)(*xs, **op.attrs)
        env[id(op.outputs[0])] = y
        if id(op.outputs[0]) in used_outside:
            outs.append(op.outputs[0])
    for t in outs:
        g.mark_output(env[id(t)])
    return g, ext, outs


def _reference_result(sub, cfg, verbose, device):
    from .generator import Stats

    return SearchResult(sub, [reference_candidate(sub, device)], Stats(), 0.0, cfg)


def partitioned_search(ref: KNGraph, cfg, verbose: bool, device, preset, search, deadline: float | None = None):
    """Search each Lax subprogram of `ref` (`search`: the driver's), stitch the best plans
    and check the result (`_stitched`) if `deadline` (default: the end of `cfg`'s time
    limit) has not passed; a SearchResult."""
    from .generator import Stats
    from .config import auto_config, make_config

    t0 = time.monotonic()
    deadline = t0 + cfg.time_limit if deadline is None else deadline
    # same inputs and outputs: plans of one are plans of the other
    full, ref = ref, private_constants(hoist_unit_reshapes(ref))
    units, bars = subprograms(ref, cfg.partition)
    index = {id(t): k for k, t in enumerate(ref.inputs)}
    n = len(ref.inputs)
    plan_ops = []
    stats = Stats()
    notes = []
    # without a GPU to time the stitched program, each subprogram's pick is the first of its
    # candidates whose kernels do not spill registers (`measure.demote_spilling`, as the
    # program's ranking then does): GPT-2's block with one kernel spilling 60 bytes ranked
    # after its reference, losing every subprogram's fusion
    gpu = M.gpu_available()
    n_sub = sum(u[0] == "sub" and len(u[1]) > 1 for u in units)
    done_sub = 0
    weight = sum(len(u[1]) for u in units if u[0] == "sub" and len(u[1]) > 1)  # of those left
    for u in units:
        if u[0] == "op" or len(u[1]) == 1:  # a barrier, or one op alone: nothing to fuse
            op = ref.ops[u[1] if u[0] == "op" else u[1][0]]
            attrs = tuple(sorted(op.attrs.items()))
            plan_ops.append(("op", op.kind, tuple(index[id(t)] for t in op.inputs), attrs))
            index[id(op.outputs[0])] = n
            n += 1
            if u[0] == "op":
                notes.append(f"kept {op.kind} (not Lax / not searchable) as a pre-defined kernel op")
            continue
        sub, ext, outs = _subgraph(ref, u[1], f"{ref.name}_part{done_sub}")
        if stats.stopped == "interrupted":  # after Ctrl-C the rest keeps the reference's ops
            search = _reference_result
        # the subprograms share the first part of the time limit (the rest is a margin for
        # the stitched program's check and the caller's ranking), each by its ops: a
        # small one's search ends early, leaving its time to those after it, but a large
        # one before small ones took an even share (GPT-2's MLP, matmul + bias + GELU,
        # 21 ops beside a projection's 2 in its split baseline, was cut at random with
        # the machine's load and kept its reference)
        share = len(u[1]) / max(1, weight)
        left = max(1.0, (t0 + SEARCH_SHARE * cfg.time_limit - time.monotonic()) * share)
        weight -= len(u[1])
        done_sub += 1
        if preset == "auto":
            name, adapted = auto_config(sub)
            scfg = make_config(name, **adapted).with_(
                **{k: getattr(cfg, k) for k in ("workers", "executor", "seed", "prune", "checker", "max_states", "verify")})
        else:
            scfg = cfg
        scfg = scfg.with_(time_limit=left, partition="off", top_k=1)
        if verbose:
            print(f"[partition] subprogram {done_sub}/{n_sub}: {len(u[1])} op(s) "
                  f"({', '.join(ref.ops[k].kind for k in u[1])})", file=sys.stderr, flush=True)
        res = search(sub, scfg, verbose, device)
        stats.merge(res.stats)
        if not gpu:  # a pick whose kernels spill, stitched in, ranked the whole program after the reference
            res = M.demote_spilling(res, deadline=deadline)
            notes += [f"subprogram {done_sub}: {n}" for n in res.notes if "spill" in n]  # its own pieces' too
        best = res.candidates[0]
        plan = best.plan if best.plan is not None else B.reference_plan(sub)
        sops, souts = plan
        # remap the subprogram's plan indices into the stitched plan
        remap = {k: index[id(t)] for k, t in enumerate(ext)}
        m = len(ext)
        for op in sops:
            if op[0] == "op":
                plan_ops.append((op[0], op[1], tuple(remap[i] for i in op[2]), op[3]))
                remap[m] = n
                m += 1
                n += 1
            else:
                plan_ops.append((op[0], tuple(remap[i] for i in op[1])) + tuple(op[2:]))
                for _ in op[7]:
                    remap[m] = n
                    m += 1
                    n += 1
        for t, k in zip(outs, souts):
            index[id(t)] = remap[k]
        notes.append(f"subprogram {done_sub} ({len(u[1])} ops): best {best.cost.summary()}")
    plan = (tuple(plan_ops), tuple(index[id(t)] for t in ref.outputs))
    cands = [reference_candidate(full, device)]
    if plan not in (B.reference_plan(ref), B.reference_plan(full)):
        stitched = _stitched(full, plan, cfg, device, notes, deadline)  # checked against the program given
        if stitched is not None:
            cands = sorted(cands + [stitched], key=order)
    notes.insert(0, f"Lax partitioning ({cfg.partition}): {n_sub} subprogram(s), {len(bars)} op(s) kept")
    if ref is not full:
        notes.insert(1, "unit-dim reshapes moved up to the inputs (hoist_unit_reshapes)")
    return SearchResult(full, cands, stats, time.monotonic() - t0, cfg, notes=notes)


def _stitched(ref: KNGraph, plan, cfg, device, notes: list, deadline: float):
    """The stitched program as a candidate, or None (with a note saying why).

    Each subprogram's pick passed the float64 check and the formal verifier against its
    subprogram (the float64 check alone where `check.USE_FORMAL_VERIFIER` is off: the
    label says which), and the other ops are the reference's own: the stitched program
    computes the composition of equivalent functions, so it is equivalent to `ref` and
    verifying it whole again proves nothing new. What could still be wrong is the stitching (a plan
    index mapped to another tensor); one float64 trial on random inputs catches that (a
    mis-wired tensor changes the outputs) at a fraction of the cost of the whole-program
    verifier, which on a full-size decoder layer took ~40 s CPU and ran out of the time
    limit (the float64 trial: ~3 s)."""
    from . import check as CHK

    g = B.build(ref, plan)  # the builder's checks of the whole (shapes, memory, maps)
    c = Candidate(g, cost(g, device), B.plan_key(plan), plan)
    if not cfg.verify:
        c.verification = "unverified (verify=False)"
        return c
    if time.monotonic() >= deadline:  # the time limit bounds the whole call, this check included
        notes.append("the time limit was reached before the stitched μGraph's check (kept the reference)")
        return None
    try:
        ok = CHK.float_equivalent(ref, g, cfg.seed, trials=1)
    except KeyboardInterrupt:
        notes.append("Ctrl-C stopped the check of the stitched μGraph (kept the reference)")
        return None
    if not ok:
        notes.append("the stitched μGraph failed its float64 check (kept the reference)")
        return None
    # the subprograms' picks were checked as `check.USE_FORMAL_VERIFIER` says (driver._check_item)
    c.verification = ("equivalent: each subprogram formally verified, the stitched program float64-checked"
                      if CHK.USE_FORMAL_VERIFIER else
                      "float64 check: each subprogram and the stitched program (the formal verifier is off)")
    return c
