"""Default block graphs for the pre-defined kernel ops.

A pre-defined kernel op (any op outside a graph-defined kernel: the reference program,
and whatever the search leaves unfused) is lowered as a graph-defined kernel whose block
graph is chosen here. It then goes through the same emitters as the fused kernels:
cp.async rings, tensor-core matmuls with a split for-loop where the grid is small, warp
reductions, vectorized stores. There is no second lowering of the operators.

`default_block_graph(op)` is a plain μGraph rewrite: the block graph computes exactly
the op (tests check it with the interpreter and the verifier), and every choice it
makes (grid, tile, loop) is visible in it. The choices:

- matmul: BM x BN output tiles (64 x 64, smaller where the dims are; a dim without a
  tensor-core divisor, e.g. 4097 = 17 x 241, its largest divisor up to 256), one block per
  tile and batch element, a for-loop over K in BK-row steps accumulated in registers;
  the lowering splits that loop across blocks when the grid is small (GEMV).
- element-wise, layout ops: tiles of about `ELEMWISE_TILE` elements over up to three
  grid dims (outermost first), a for-loop over a fourth when needed.
- reductions and rms_norm: whole rows of the reduced dim per block (for-loop over the
  dim, accumulated, when it is longer than `ROW_TILE`: then one row a block),
  `REDUCE_TILE` elements a block.
"""
from __future__ import annotations

from math import gcd, prod

from ..core import ops as O
from ..core.graph import Op, TBGraph
from ..target import DEFAULT as DEFAULT_TARGET
from .kernel_plan import LoweringError

THREADS = 128
ELEMWISE_TILE = 2048  # elements of the output tile per block (element-wise and layout ops)
REDUCE_TILE = 4096    # elements of the input tile per block (reductions, norms)
# longest reduced extent held in one tile; longer ones loop. A row of 4097 keys (not 16-byte
# aligned, copied element by element) looped in 17 steps of 241 waited out a load latency
# each step: reduce_max over [1, 8, 4, 4097] took 13.3 us on the H100
ROW_TILE = 8192
# preferred BM, BN, BK of a matmul block. At decode sizes a matmul streams its weights:
# narrow, deep tiles (32 columns, 128-row K steps) give twice the blocks of 64 x 64 without
# split-K, unless the 64-wide grid already fills the SMs (N >= 64 x SMs) or the K loop is
# long enough to split it well; then 64-wide tiles read 128-byte rows of W. H100, one
# matmul, cold L2 (benchmarks/results/matmul_sweep.md): 64x32x128 beat 64x64x64 for
# N <= 6144 at K = 4096 (M = 64: 30.6 -> 23.2 us; M = 2, N = 6144: 26.5 -> 25.3), lost at
# N = 14336 (47.9 vs 56.6 us) and at K = 14336 (50.9 vs 53.7)
MM_TILE = (64, 32, 128)
MM_TILE_WIDE = (64, 64, 64)
MM_LONG_K = 8192
MM_TILE_MAX = 256  # largest matmul tile dim where no divisor fits the tensor-core tile
# a matmul without tensor cores and without a K loop narrows its column tiles to reach this
# many blocks, about 4 an SM (Q @ K^T over 4097 keys: 17-key tiles, not 241)
MM_MIN_BLOCKS = 512
VEC = 8  # a last-dim tile of a multiple of 8 elements is copied in 16-byte chunks (f16)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tile(n: int, pref: int, mult: int) -> int:
    """Largest divisor of n that is <= pref and a multiple of `mult`; else (no tensor-core
    tile: a scalar matmul) the largest divisor <= MM_TILE_MAX, so a dim such as 4097 keys
    (17 x 241) is tiled, not held whole in shared memory."""
    ok = [d for d in _divisors(n) if d <= pref and d % mult == 0]
    return max(ok) if ok else max(d for d in _divisors(n) if d <= MM_TILE_MAX)


def _partition(shape, dims, budget: int, last_vec: bool = True) -> list[tuple[int, int]]:
    """(dim, parts) for the dims of `dims` (outermost first) that must be split so that
    the tile has at most `budget` elements. Each split takes the fewest parts that reach
    the budget (or all it can); the last dim keeps a multiple of VEC elements when it has
    one, so copies stay 16-byte wide."""
    tile = list(shape)
    out = []
    last = len(shape) - 1
    for d in dims:
        if prod(tile) <= budget:
            break
        n = tile[d]
        cands = [p for p in _divisors(n) if p > 1]
        if d == last and last_vec and n % VEC == 0:
            cands = [p for p in cands if (n // p) % VEC == 0]
        if not cands:
            continue
        rest = prod(tile) // n
        p = next((p for p in cands if rest * (n // p) <= budget), cands[-1])
        tile[d] = n // p
        out.append((d, p))
    return out


class _Layout:
    """Grid axes and the for-loop of a default block graph: axis k (x, y, z) splits
    output dim `grid[k][0]` into `grid[k][1]` parts; the loop splits `loop[0]`."""

    def __init__(self, splits: list[tuple[int, int]], loop: tuple[int, int] | None = None):
        self.grid = splits[:3]
        rest = splits[3:]
        if rest and loop is None:
            loop = rest[0]
        self.loop = loop

    def new_graph(self) -> TBGraph:
        dims = [p for _, p in self.grid] + [1] * (3 - len(self.grid))
        return TBGraph(grid_dim=dims, block_dim=(THREADS, 1, 1),
                       forloop_range=self.loop[1] if self.loop else 1, reduction_dimx=64)

    def imap(self, to_input) -> tuple[tuple, int]:
        """(input map, for-loop dim) of an input; `to_input(out_dim)` is the input dim
        holding output dim `out_dim`, or -1 (broadcast, or absent)."""
        m = tuple(to_input(d) for d, _ in self.grid) + (-1,) * (3 - len(self.grid))
        return m, (to_input(self.loop[0]) if self.loop else -1)

    def omap(self) -> tuple[tuple, int]:
        return self.imap(lambda d: d)


def _broadcast_dim(in_shape, out_shape):
    """Output dim -> input dim of an operand broadcast to `out_shape` (-1 where broadcast)."""
    off = len(out_shape) - len(in_shape)

    def f(d):
        k = d - off
        return -1 if k < 0 or (in_shape[k] == 1 and out_shape[d] != 1) else k
    return f


def _finish(tb: TBGraph, t, lay: _Layout):
    omap, ofd = lay.omap()
    tb.new_output(t, output_map=omap, forloop_dim=ofd)
    return tb


def _elementwise(op: Op) -> TBGraph:
    out = op.outputs[0].shape
    lay = _Layout(_partition(out, range(len(out)), ELEMWISE_TILE))
    tb = lay.new_graph()
    tiles = []
    for t in op.inputs:
        imap, fd = lay.imap(_broadcast_dim(t.shape, out))
        tiles.append(tb.new_input(t, input_map=imap, forloop_dim=fd))
    if op.kind == "copy":
        # a copy is the identity reshape of the tile (no op stores straight from an input)
        r = tb.reshape(tiles[0], tiles[0].shape)
    elif op.kind == "constant":
        tile = list(out)
        for d, p in lay.grid + ([lay.loop] if lay.loop else []):
            tile[d] //= p
        r = tb.constant(op.attrs["value"], tuple(tile), op.outputs[0].dtype)
    else:
        r = tb._op(op.kind, tiles, None, **op.attrs)
    return _finish(tb, r, lay)


def _reduce_layout(shape, d: int) -> _Layout:
    """Layout of a reduction along dim d: the other dims split to REDUCE_TILE, dim d
    whole or (longer than ROW_TILE) looped over."""
    loop = None
    row = shape[d]
    budget = REDUCE_TILE
    if row > ROW_TILE:
        p = next(p for p in _divisors(row) if row // p <= ROW_TILE)
        loop, row = (d, p), row // p
        # a looped row is long work already: one row a block, so the rows run in parallel
        # (softmax over 4097 keys, 32 rows: 2 blocks of 16 rows took 70 us on the H100)
        budget = row
    tiled = tuple(row if k == d else n for k, n in enumerate(shape))
    return _Layout(_partition(tiled, [k for k in range(len(shape)) if k != d], budget), loop)


def _reduction(op: Op) -> TBGraph:
    a = op.inputs[0]
    d = op.attrs["dim"] % len(a.shape)
    lay = _reduce_layout(a.shape, d)
    grid_only = _Layout(lay.grid)
    tb = lay.new_graph()
    imap, fd = lay.imap(lambda k: k)
    t = tb.new_input(a, input_map=imap, forloop_dim=fd)
    r = tb._op(op.kind, [t], None, dim=d)
    if lay.loop:
        r = tb.forloop_accum(r, "none" if op.kind == "reduction" else "max")
    return _finish(tb, r, grid_only)


def _rms_norm(op: Op) -> TBGraph:
    a = op.inputs[0]
    nd = len(op.attrs["normalized_shape"])
    rank = len(a.shape)
    inner = range(rank - nd, rank)
    lay = _Layout(_partition(a.shape, range(rank - nd), REDUCE_TILE))
    tb = lay.new_graph()
    imap, fd = lay.imap(lambda k: k)
    t = tb.new_input(a, input_map=imap, forloop_dim=fd)
    if nd == 1:
        r = tb.rms_norm(t)
    else:  # x / sqrt(sum of squares over the normalized dims / count)
        s = tb.square(t)
        for k in inner:
            s = tb.reduction(s, k)
        count = tb.constant(float(prod(a.shape[rank - nd:])), (1,) * rank)
        r = tb.div(t, tb.sqrt(tb.div(s, count)))
    return _finish(tb, r, lay)


def _matmul(op: Op, sms: int) -> TBGraph:
    a, b = op.inputs
    rank = len(a.shape)
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    bm, bn, bk = MM_TILE_WIDE if N >= 64 * sms or K >= MM_LONG_K else MM_TILE
    # tensor cores want tile K % 16 == 0 and N % 8 == 0; a dim with no such divisor takes
    # its largest divisor up to MM_TILE_MAX
    BM = M if M <= bm else _tile(M, bm, 16)
    BN = N if N <= bn else _tile(N, bn, 8)
    BK = K if K <= bk else _tile(K, bk, 16)
    if BK % 16 or BN % 8:
        # no tensor cores: an FMA matmul is latency-bound, so it must fill the machine. A K
        # loop is split across blocks (`kernel_plan.choose_split`, one step a block where
        # the steps are prime: 4097 = 17 x 241 keys), so its blocks keep whole rows of B (up
        # to 128 columns); without one, the column tile narrows until there are
        # MM_MIN_BLOCKS blocks. H100, decode attention over 4097 keys: P @ V in 8-column
        # tiles, 17 serial steps a block, took 54 us; Q @ K^T in 136 blocks 12.8 us
        blocks = prod(a.shape[:-2]) * (M // BM)
        if K // BK > 1:
            BN = max(d for d in _divisors(N) if d <= 128)
        else:
            # (16-byte column tiles where N has them)
            cands = [d for d in _divisors(N) if d <= BN and (d % VEC == 0 or N % VEC)]
            fill = [d for d in cands if blocks * (N // d) >= MM_MIN_BLOCKS]
            BN = max(fill) if fill else min(cands)
    splits = [(rank - 1, N // BN), (rank - 2, M // BM)] + [(d, a.shape[d]) for d in range(rank - 2)]
    splits = [(d, p) for d, p in splits if p > 1]
    for whole in (rank - 2, rank - 1):  # more than three parallel axes: keep M, then N, whole
        if len(splits) > 3:
            splits = [s for s in splits if s[0] != whole]
    splits = splits[:3]  # (batch dims beyond that stay in the tile: no tensor cores)
    steps = K // BK  # the for-loop over K (A's last dim, B's second-to-last)
    lay = _Layout(splits)
    tb = TBGraph(grid_dim=[p for _, p in lay.grid] + [1] * (3 - len(lay.grid)), block_dim=(THREADS, 1, 1),
                 forloop_range=steps, reduction_dimx=64)

    def side(is_a):
        def f(d):  # output dim -> operand dim
            if d == rank - 1:
                return -1 if is_a else rank - 1
            if d == rank - 2:
                return rank - 2 if is_a else -1
            return d
        return f

    ta = tb.new_input(a, input_map=lay.imap(side(True))[0], forloop_dim=rank - 1 if steps > 1 else -1)
    tb_ = tb.new_input(b, input_map=lay.imap(side(False))[0], forloop_dim=rank - 2 if steps > 1 else -1)
    r = tb.matmul(ta, tb_)
    if steps > 1:
        r = tb.forloop_accum(r)
    return _finish(tb, r, lay)


def _transpose(op: Op) -> TBGraph:
    a = op.inputs[0]
    perm = op.attrs["permutation"]
    out = op.outputs[0].shape
    lay = _Layout(_partition(out, range(len(out)), ELEMWISE_TILE))
    tb = lay.new_graph()
    imap, fd = lay.imap(lambda d: perm[d])
    return _finish(tb, tb.transpose(tb.new_input(a, input_map=imap, forloop_dim=fd), perm), lay)


def _repeat(op: Op) -> TBGraph:
    a = op.inputs[0]
    reps = op.attrs["repeats"]
    out = op.outputs[0].shape
    lay = _Layout(_partition(out, [k for k in range(len(out)) if reps[k] == 1], ELEMWISE_TILE))
    tb = lay.new_graph()
    imap, fd = lay.imap(lambda k: k)
    return _finish(tb, tb.repeat(tb.new_input(a, input_map=imap, forloop_dim=fd), reps), lay)


def _reshape(op: Op) -> TBGraph:
    """Split the first non-unit dim of input and output alike: block k holds the same
    contiguous range of elements of both, so the tile reshape is the tensor reshape.
    (Dim 0 alone held GPT-2's (1, 128, 12, 64) -> (1, 128, 768) whole in one block: 384 KB
    of shared memory at fp16, more than an SM has.)"""
    a = op.inputs[0]
    out = op.outputs[0].shape
    da = next((d for d, n in enumerate(a.shape) if n != 1), 0)
    do = next((d for d, n in enumerate(out) if n != 1), 0)
    per_row = prod(out) // out[do]
    common = gcd(a.shape[da], out[do])
    p = next((p for p in _divisors(common) if per_row * (out[do] // p) <= ELEMWISE_TILE), common)
    lay = _Layout([(do, p)] if p > 1 else [])
    tb = lay.new_graph()
    imap, fd = lay.imap(lambda k: da)
    t = tb.new_input(a, input_map=imap, forloop_dim=fd)
    return _finish(tb, tb.reshape(t, tuple(n // p if d == do else n for d, n in enumerate(out))), lay)


def default_block_graph(op: Op, sms: int = DEFAULT_TARGET.sms) -> TBGraph:
    """The block graph that computes the pre-defined kernel op `op` (inputs in order) on a
    device of `sms` multiprocessors."""
    k = op.kind
    try:
        if k == "matmul":
            return _matmul(op, sms)
        if k in ("reduction", "reduce_max"):
            return _reduction(op)
        if k == "rms_norm":
            return _rms_norm(op)
        if k == "transpose":
            return _transpose(op)
        if k == "repeat":
            return _repeat(op)
        if k == "reshape":
            return _reshape(op)
        if k == "copy" or k == "constant" or (k in O.OPS and O.OPS[k].arity in (1, 2)):
            return _elementwise(op)
    except Exception as e:  # a bug here must name the op, not surface as a bare traceback
        raise LoweringError(f"[lowering] no default block graph for kernel operator '{k}' on "
                            f"{[list(t.shape) for t in op.inputs]}: {e}") from e
    raise LoweringError(f"[lowering] kernel operator '{k}' has no GPU lowering")
