"""Chains of compute-intensive ops (MCFuser, ../shared/papers/mcfuser-paper.txt): seeds
that fuse `E = f(A @ B) @ D` — a GEMM chain, an activation between two GEMMs, or
exp-normalized attention `(exp(s·A@B) @ D) / sum(exp(s·A@B))` — into one graph-defined
kernel whose intermediate never leaves the block.

The paper's search, mapped onto μGraphs:

- **Tiling expressions** (§III-A): the loops m, n, k, h of `C = A @ B` (M x K @ K x N)
  and `E = C @ D` (N x H), plus the batch. Rule 1 (deduplication) binds the spatial loops
  m, h and the batch to the grid, which leaves the sub-tiling over the reduction loops
  n and k per block. A block graph has one for-loop, so two sub-tilings are expressible:
  `n` (k whole: the A tile is loaded once per block, MCFuser's hoisting of L_A out of
  loop n, §III-B; B and D stream over n; E accumulates) and `k` (n whole: A and B stream
  over k, C accumulates, f and the second GEMM run after the loop on a D tile loaded
  once). The nested form nk (loop n, and k inside it) is the form `n` with A and B
  staged in chunks of K (`tb.input` k_chunk, [stage]: the first GEMM reads them a chunk
  at a time, L_A inside loop n), taken where the whole tiles do not fit (G6: A 64 x 1024);
  kn needs two loop levels and is counted as not expressible.
- **Pruning** (§III-C): rule 1 above; rule 3, tile sizes that are multiples of 16 (or
  the whole dim) and divide it (every dim of the tables is a power of two or 80, so no
  padding is ever needed); rule 4, shared memory by eq. (1) above 1.2x the capacity;
  grids with fewer blocks than half the SMs when a finer tiling exists; and, of the
  explored tilings of a GEMM chain the model ties that differ only in the loop tile, all
  but the longest (`longest_loops`: the H100 ran the fewest iterations fastest). Counts
  go to the search report (`Stats.pruned["mbci ..."]`).
- **Analytical model** (§IV-A, eqs. 2-5): t = (t_mem + t_comp) * alpha, t_mem the bytes
  each load and store moves times its trip count over the DRAM bandwidth, t_comp the
  FLOPs over the tensor-core throughput, alpha = (blocks + SMs) / blocks; the target's
  constants (`mirage.target`).
- **Exploration** (§IV-B, Algorithm 1): a population of candidates ranked by the model;
  the top few are "measured" — here by the search's own cost model on the built μGraph
  (this runs on the CPU machine; with a GPU present the search times its top verified
  candidates afterwards, `search.measure`) — and the population mutates one loop's tile
  size per candidate, drawn with weight 1/t, until the measured best moves by less than
  epsilon. The draw is seeded by the chain's shape: the same program gives the same seeds.

The seeds (`with_resident`) add to the explored best up to RESIDENT warp-resident tilings,
whose first GEMM's result the lowering keeps in the mma fragments (the profile's verdict,
benchmarks/results/mbci.md). The seeds are plans like `seed.py`'s: built, verified and ranked with every other
candidate, so a wrong seed is rejected, never returned.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from ..core import ops as O
from ..core.rules import chunks_ok
from ..lower.kernel_plan import K_CHUNK
from ..target import DEFAULT, Target
from .config import SearchConfig

POPULATION = 32   # N of Algorithm 1
MEASURED = 4      # n: candidates "measured" per generation
EPSILON = 0.01    # convergence: relative change of the measured best
GENERATIONS = 12  # a bound on the loop (the paper's has none)
SEEDS = 4         # plans handed to the search
RESIDENT = 2      # and up to this many more that keep C in the warps' registers (`with_resident`)
RESIDENT_TILE = 128  # their loop and E tiles at most this: C's and E's fragments, tl/2 + th/2 f32 registers a thread
LOOP_TILE = 128  # the largest warp-resident loop tile `longest_loops` takes among tilings the model ties
# attention's loop tile (exp and row sums on the fragments besides C and E): 64, the tiles
# timed there; its E tile as a GEMM chain's (S6's head dim of 80, one E tile beside a loop
# tile of 64: 172 registers a thread, no spill, ptxas sm_90a)
ATTENTION_RESIDENT_TILE = 64


@dataclass(frozen=True)
class Chain:
    """`E = f(A @ B) @ D` found in a program: input indices, sizes, the unary ops f
    (kind, attrs) and whether E is divided by the row sums of f(A @ B) (attention)."""
    a: int
    b: int
    d: int
    batch: int  # 0: 2-d operands, else the shared leading extent
    M: int
    K: int
    N: int
    H: int
    between: tuple
    normalized: bool
    itemsize: int


@dataclass(frozen=True)
class Tiling:
    form: str  # "n": loop over n, k whole; "k": loop over k, n whole
    tm: int
    tl: int    # the loop's tile: Tn (form n) or Tk (form k)
    th: int
    kc: int = 0  # form n: A and B staged in chunks of kc of K inside each iteration (0: whole)


def find_chain(core) -> Chain | None:
    """The chain `core` computes, if it is exactly one (a single output), else None."""
    if len(core.outputs) != 1 or len(core.inputs) != 3:
        return None
    made = {id(op.outputs[0]): op for op in core.ops}
    idx = {id(t): k for k, t in enumerate(core.inputs)}
    out = core.outputs[0]
    top = made.get(id(out))
    normalized = False
    if top is not None and top.kind == "div":
        num, den = top.inputs
        red = made.get(id(den))
        if red is None or red.kind != "reduction" or red.attrs["dim"] % len(den.shape) != len(den.shape) - 1:
            return None
        top, normalized, summed = made.get(id(num)), True, red.inputs[0]
    if top is None or top.kind != "matmul":
        return None
    u, dd = top.inputs
    between, x = [], u
    while id(x) in made and made[id(x)].kind in O.UNARY:
        op = made[id(x)]
        between.append((op.kind, tuple(sorted(op.attrs.items()))))
        x = op.inputs[0]
    first = made.get(id(x))
    if first is None or first.kind != "matmul" or (normalized and (summed is not u or not between)):
        return None
    a, b = first.inputs
    if not all(id(t) in idx for t in (a, b, dd)) or len({id(a), id(b), id(dd)}) != 3:
        return None
    used = {id(t) for op in core.ops for t in op.inputs}
    n_ops = 2 + len(between) + (2 if normalized else 0)
    if len(core.ops) != n_ops or not {id(t) for t in core.inputs} <= used:
        return None
    r = len(a.shape)
    if r not in (2, 3) or len(b.shape) != r or len(dd.shape) != r or (r == 3 and not a.shape[0] == b.shape[0] == dd.shape[0]):
        return None
    M, K = a.shape[-2:]
    N, H = b.shape[-1], dd.shape[-1]
    if b.shape[-2] != K or dd.shape[-2] != N or a.dtype.mlir not in ("f16", "bf16"):
        return None
    return Chain(idx[id(a)], idx[id(b)], idx[id(dd)], a.shape[0] if r == 3 else 0, M, K, N, H,
                 tuple(reversed(between)), normalized, a.dtype.itemsize)


def tile_options(n: int) -> list[int]:
    """Rule 3: multiples of 16 that divide n (no padding), and n itself."""
    return sorted({t for t in range(16, n + 1, 16) if n % t == 0} | {n})


def smem_estimate(c: Chain, t: Tiling) -> int:
    """Eq. (1): the tiles a block holds (f16 operands, f32 accumulators; A and B staged:
    two chunks of each, as [smem] counts them)."""
    s = c.itemsize
    if t.form == "n":
        k = 2 * t.kc if t.kc else c.K
        return s * (t.tm * k + k * t.tl + t.tl * t.th + t.tm * t.tl) + 4 * t.tm * t.th + 4 * t.tm
    return s * (t.tm * t.tl + t.tl * c.N + c.N * t.th + t.tm * c.N) + 4 * t.tm * c.N + 4 * t.tm * t.th


def staged_ok(c: Chain) -> bool:
    """Whether the loop-over-n form can stage A and B in chunks of K_CHUNK ([stage])."""
    return chunks_ok(c.K, K_CHUNK)


def blocks(c: Chain, t: Tiling) -> int:
    return max(c.batch, 1) * (c.M // t.tm) * (c.H // t.th)


def launched_blocks(c: Chain, t: Tiling, sms: int) -> int:
    """Blocks the lowering launches: `blocks`, times the split of the for-loop over blocks
    that it chooses for a grid under 3/4 of the SMs (`lower.kernel_plan.default_split`, the
    rule of `choose_split`, with the loop's `loop_intensity`). The chain's accumulators are
    plain sums, so its loop splits; a GEMM chain's loop over n, whose only op after the loop
    is E's accumulator, combines in a cluster (`cluster_rows`: E's tm rows), as does
    attention's, whose division by the row sums runs on the cluster's first block."""
    from ..lower.kernel_plan import default_split

    nb = blocks(c, t)
    if t.form == "n":  # B [K, tl] and D [tl, th] stream (and a staged A [tm, K]); C = A @ B, then C @ D
        flops, streamed = 2 * t.tm * t.tl * (c.K + t.th), t.tl * (c.K + t.th) + (t.tm * c.K if t.kc else 0)
    else:  # A [tm, tl] and B [tl, N] stream; C += A @ B
        flops, streamed = 2 * t.tm * t.tl * c.N, t.tl * (t.tm + c.N)
    intensity = flops / (streamed * c.itemsize)
    rows = t.tm if t.form == "n" and (c.normalized or t.th % 4 == 0) else 0
    return nb * default_split(nb, (c.N if t.form == "n" else c.K) // t.tl, sms, intensity, rows)


def warp_resident(c: Chain, t: Tiling, warps: int) -> bool:
    """Each of the block's warps owns 16 whole rows of C and E (tm = 16 x warps, loop over
    n): the lowering keeps C (or f(C)) in the mma fragments as the second GEMM's A operand
    and E in registers across the loop (`frag_fusion`); no shared-memory round trip and no
    barrier between the GEMMs."""
    return t.form == "n" and t.tm == 16 * warps


def model_time(c: Chain, t: Tiling, dev: Target = DEFAULT) -> float:
    """Eqs. (2)-(5): per block, L_A once (hoisted; staged, once an iteration of loop n),
    L_B and L_D over the whole loop, S_E once; C and E's FLOPs; times the blocks, slowed
    by alpha."""
    nb = blocks(c, t)
    a_loads = c.N // t.tl if t.form == "n" and t.kc else 1
    per_block = c.itemsize * (t.tm * c.K * a_loads + c.K * c.N + c.N * t.th + t.tm * t.th)
    flops = 2 * t.tm * c.N * (c.K + t.th)
    t_mem = nb * per_block / dev.dram_bw
    t_comp = nb * flops / dev.tensor_flops
    return (t_mem + t_comp) * (nb + dev.sms) / nb


def space(c: Chain, cfg: SearchConfig, pruned: dict, split_aware: bool = False) -> list[Tiling]:
    """The pruned candidates; `pruned` counts what each rule removed. `split_aware`: the
    parallelism rule counts the blocks the lowering launches after splitting the loop
    (`launched_blocks`) instead of the tiling's grid (the space of `with_resident`), and
    keeps grids from a quarter of the SMs on: a cluster-combined split fills up to half of
    them (`default_split`)."""
    nblocks = (lambda t: launched_blocks(c, t, cfg.sms)) if split_aware else (lambda t: blocks(c, t))
    least = cfg.sms // 4 if split_aware else cfg.sms // 2
    out = []
    pruned["mbci nested tiling kn (one loop level)"] = pruned.get("mbci nested tiling kn (one loop level)", 0) + 1
    for form, L in (("n", c.N), ("k", c.K)):
        for tm in tile_options(c.M):
            for tl in tile_options(L):
                if tl == L:
                    continue  # no loop: the other form's degenerate case
                for th in tile_options(c.H):
                    t = Tiling(form, tm, tl, th)
                    ts = [t]
                    if smem_estimate(c, t) > cfg.smem_capacity and form == "n" and staged_ok(c):
                        # the deep tiling: A and B stream over k; beside the whole one where eq. (1)
                        # overestimates only a little (the whole may still fit: G5's 64 x 128 x 128
                        # does not, 235520 bytes, and its staged twin ran faster than the reference)
                        deep = Tiling(form, tm, tl, th, K_CHUNK)
                        ts = [deep] if smem_estimate(c, t) > 1.2 * cfg.smem_capacity else [t, deep]
                    for t in ts:
                        if smem_estimate(c, t) > 1.2 * cfg.smem_capacity:
                            pruned["mbci smem"] = pruned.get("mbci smem", 0) + 1
                        elif blocks(c, t) > cfg.max_blocks:
                            pruned["mbci blocks"] = pruned.get("mbci blocks", 0) + 1
                        else:
                            out.append(t)
    few = [t for t in out if nblocks(t) < least]
    if len(few) < len(out):  # finer tilings exist: few SMs busy is not worth it
        pruned["mbci parallelism"] = pruned.get("mbci parallelism", 0) + len(few)
        out = [t for t in out if nblocks(t) >= least]
    return out


def plan_of(c: Chain, t: Tiling, cfg: SearchConfig):
    """The one-kernel plan of tiling `t` (the format of `search.build`)."""
    bat = c.batch > 1
    r = 3 if c.batch else 2
    rows, last = r - 2, r - 1  # the row and column dims of every operand
    grid = (c.batch if bat else 1, c.M // t.tm, c.H // t.th)
    gm, gh = grid[1] > 1, grid[2] > 1
    b0 = 0 if bat else -1
    amap = (b0, rows if gm else -1, -1)
    bmap = (b0, -1, -1)
    dmap = (b0, -1, last if gh else -1)
    I = (c.a, c.b, c.d)
    if t.form == "n":
        maps = ((amap, -1, t.kc), (bmap, last, t.kc), (dmap, rows)) if t.kc else ((amap, -1), (bmap, last), (dmap, rows))
        loop = c.N // t.tl
    else:
        maps = ((amap, last), (bmap, rows), (dmap, -1))
        loop = c.K // t.tl
    bops = [("matmul", (0, 1), ())]
    if t.form == "k":
        bops.append(("accum", (3,), (("kind", "none"),)))
    for kind, attrs in c.between:
        bops.append((kind, (len(bops) + 2,), attrs))
    u = len(bops) + 2
    bops.append(("matmul", (u, 2), ()))
    e = len(bops) + 2
    if t.form == "n":
        bops.append(("accum", (e,), (("kind", "none"),)))
        e = len(bops) + 2
        if c.normalized:
            bops.append(("accum", (u,), (("kind", "sum"),)))
            bops.append(("div", (e, len(bops) + 2), ()))
            e = len(bops) + 2
    elif c.normalized:
        bops.append(("reduction", (u,), (("dim", r - 1),)))
        bops.append(("div", (e, len(bops) + 2), ()))
        e = len(bops) + 2
    omap = (b0, rows if gm else -1, last if gh else -1)
    kernel = ("graph_def", I, grid, loop, cfg.reduction_dimx, maps, tuple(bops), ((e, omap),))
    return (kernel,), (3,)


def _warps(cfg: SearchConfig) -> int:
    return max(1, (cfg.block_dim[0] * cfg.block_dim[1] * cfg.block_dim[2]) // 32)


def explore(c: Chain, cands: list[Tiling], measure, dev: Target = DEFAULT) -> list[Tiling]:
    """Algorithm 1 over `cands` with the analytical model; `measure(tiling)` -> seconds
    (inf if it does not build). Returns the measured tilings, best first."""
    rng = random.Random(repr((c.batch, c.M, c.K, c.N, c.H, c.between, c.normalized)))
    est = {t: model_time(c, t, dev) for t in cands}
    opts = {"tm": tile_options(c.M), "th": tile_options(c.H)}
    by_key = {(t.form, t.tm, t.tl, t.th): t for t in cands}
    population = cands if len(cands) <= POPULATION else rng.sample(cands, POPULATION)
    measured: dict = {}
    best = float("inf")
    for _ in range(GENERATIONS):
        population = sorted(set(population), key=lambda t: (est[t], t.form, t.tm, t.tl, t.th))
        for t in population[:MEASURED]:
            if t not in measured:
                measured[t] = measure(t)
        top = min(measured.values())
        if top < float("inf") and abs(top - best) <= EPSILON * top:
            break
        best = min(best, top)
        weights = [1.0 / est[t] for t in population]
        nxt = []
        for t in rng.choices(population, weights, k=POPULATION):  # mutate one loop's tile size
            field = rng.choice(("tm", "tl", "th"))
            values = opts.get(field) or tile_options(c.N if t.form == "n" else c.K)
            cur = getattr(t, field)
            i = values.index(cur) if cur in values else 0
            j = min(max(i + rng.choice((-1, 1)), 0), len(values) - 1)
            k = dict(form=t.form, tm=t.tm, tl=t.tl, th=t.th)
            k[field] = values[j]
            nxt.append(by_key.get((k["form"], k["tm"], k["tl"], k["th"]), t))
        population = nxt
    return sorted((t for t, v in measured.items() if v < float("inf")), key=lambda t: measured[t])


def mbci_seeds(core, cfg: SearchConfig, measure, pruned: dict | None = None, dev: Target = DEFAULT) -> list:
    """One-kernel plans for the chain `core` computes ([] if it is not one), best first by
    `measure(plan)` (seconds; the search's cost model on the built μGraph)."""
    c = find_chain(core)
    if c is None:
        return []
    return [plan_of(c, t, cfg) for t in seed_tilings(c, cfg, measure, pruned, dev)]


def seed_tilings(c: Chain, cfg: SearchConfig, measure, pruned: dict | None = None,
                 dev: Target = DEFAULT) -> list[Tiling]:
    """The tilings of `mbci_seeds`: Algorithm 1's best (`explore`) with the loop tiles the
    model ties taken long (`longest_loops`), then the warp-resident ones (`with_resident`)."""
    pruned = {} if pruned is None else pruned
    cands = space(c, cfg, pruned)
    measured: dict = {}

    def cost_of(t: Tiling) -> float:
        if t not in measured:
            measured[t] = measure(plan_of(c, t, cfg))
        return measured[t]

    warps = _warps(cfg)
    tilings = explore(c, cands, cost_of, dev)
    if not c.normalized:  # timed on the GEMM chains only
        tilings = longest_loops(tilings, cands, cost_of, pruned, warps)
    out = []
    for t in with_resident(c, space(c, cfg, {}, True), tilings, cfg, dev):
        if t.form == "n" and not t.kc and staged_ok(c) and cost_of(t) == float("inf"):
            t = Tiling(t.form, t.tm, t.tl, t.th, K_CHUNK)  # the whole tiles do not fit after all: staged
        if t not in out:
            out.append(t)
    return out


def longest_loops(tilings: list[Tiling], cands: list[Tiling], cost_of, pruned: dict,
                  warps: int = 4) -> list[Tiling]:
    """`tilings` (best first) with each loop-over-n tiling replaced by its sibling (same tm
    and th) of the longest loop tile that costs no more by `cost_of` (at most LOOP_TILE
    for a warp-resident one, whose C fragments take tl/2 registers a thread), duplicates
    dropped (counted as `pruned["mbci loop tile"]`). The search's cost model charges
    nothing for an iteration, so it ties tilings that differ only in the loop tile; H100 (benchmarks/results/mbci.md, 2026-11-25 04:33), at one model cost the
    fewest iterations ran fastest: G4 32 x {32, 64, 128} x 32 17.5, 15.6, 11.9 us; G5
    32 x {16, 32, 64} x 32 33.1, 26.8, 21.3; G8 64 x {64, 128} x 16 11.9, 10.4; G10 18.0,
    15.0. Warp-resident loop tiles of 256 spilled registers (G8-G10's 64 x 256 tilings:
    436-512 bytes)."""
    out = []
    for t in tilings:
        if t.form == "n":
            sib = {x.tl: x for x in cands if (x.form, x.tm, x.th) == (t.form, t.tm, t.th)}  # (staged or not)
            tls = sorted(sib)
            most = LOOP_TILE if t.tm == 16 * warps else max(tls, default=t.tl)
            # longer tiles; for a warp-resident tile over LOOP_TILE, those up to it
            other = [x for x in tls if x <= most and (x > t.tl or t.tl > most)]
            for tl in sorted(other, reverse=True):  # the longest that costs no more (ties to rounding)
                s = sib[tl]
                if cost_of(s) <= cost_of(t) * (1 + 1e-9):
                    t = s
                    break
        if t in out:
            pruned["mbci loop tile"] = pruned.get("mbci loop tile", 0) + 1
        else:
            out.append(t)
    return out


def with_resident(c: Chain, cands: list[Tiling], tilings: list[Tiling], cfg: SearchConfig,
                  dev: Target = DEFAULT) -> list[Tiling]:
    """The seeds: the SEEDS explored best (`tilings`, best first), then up to RESIDENT
    warp-resident tilings (`warp_resident`) of `cands` (the split-aware space: a grid of
    few blocks is split over the loop by the lowering) of loop tile and E tile at most
    RESIDENT_TILE (attention's loop tile ATTENTION_RESIDENT_TILE) that are not among them,
    in the order of `resident_key`, and for a GEMM chain the one of the widest E tile. (A
    seed of 128 rows in 8 warps, two warpgroups, ran faster than these on G4, G7, G8 and
    G10 with the partials combined through L2, and slower on all four once they were
    combined in shared memory: benchmarks/results/mbci.md, 2026-11-25 12:45.)
    H100, Nsight Compute on the picks of Tables II/III (benchmarks/results/mbci.md,
    2026-11-25): every fused kernel ran one block of 4 warps an SM (its shared memory),
    latency-bound; with C in the fragments S2 ran 19.1 us against 35.3 for the fastest of
    the four seeds before, which the search's cost model had ranked above it."""
    warps = _warps(cfg)
    most = ATTENTION_RESIDENT_TILE if c.normalized else RESIDENT_TILE
    res = [t for t in cands if warp_resident(c, t, warps) and t.tl <= most and t.th <= RESIDENT_TILE]
    res.sort(key=lambda t: resident_key(c, t, cfg.sms, dev))
    top = tilings[:SEEDS]
    out = []
    for t in res:
        # a GEMM chain's: one loop tile a grid, the longest (the model ties them, `longest_loops`)
        longer = [x for x in top + out if x.form == "n" and (x.tm, x.th) == (t.tm, t.th) and x.tl >= t.tl]
        if t not in top and len(out) < RESIDENT and (c.normalized or not longer):
            out.append(t)
    # and a GEMM chain's with the widest E tile (fewest recomputations of C), the longest
    # loop tile of it: the lowering splits its few blocks' loop over a cluster each. H100
    # (benchmarks/results/mbci.md, 2026-11-25 09:40): G7 64 x 128 x 64 in 16 blocks split 4,
    # 8.9 us, against 9.5 for the reference and 9.7 for the fastest seed before
    wide = sorted((t for t in res if t.form == "n"), key=lambda t: (-t.th, -t.tl, model_time(c, t, dev)))
    if not c.normalized and wide and wide[0] not in top + out:
        out.append(wide[0])
    return top + out


def resident_key(c: Chain, t: Tiling, sms: int, dev: Target = DEFAULT) -> tuple:
    """The order of the warp-resident seeds of a GEMM chain: a grid of at most one block an SM first (no
    second wave, no loop split and its combine), the largest loop tile (fewest iterations:
    barriers and ring waits), the grid nearest the SMs (E's tile as small as that takes:
    each block recomputes its rows of C for its E tile), then the model.
    H100, the 4-warp warp-resident tilings of G3-G12 timed side by side (benchmarks/
    results/mbci.md, 2026-11-25 05:00): the fastest of each row had a loop tile of 128 and
    exactly 128 blocks (G3 64x128x16, G8-G10 64x128x{16,16,32}, G11 64x128x64, G12
    64x128x128: 7.6, 10.4, 11.8, 15.0, 20.1, 23.4 us); 64x64x64, the first seed before,
    ran 13.1-30.7 us on G4, G5 and G8-G12."""
    if c.normalized:  # attention: the largest tiles first (64 x 64 x 64 was the fastest on S2, S3)
        return (-t.tl, -t.th, model_time(c, t, dev))
    nb = blocks(c, t)
    one_wave = nb <= sms
    return (not one_wave, -t.tl, -nb if one_wave else nb, -t.th, model_time(c, t, dev))
