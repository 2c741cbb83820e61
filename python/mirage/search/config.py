"""Search limits, presets and schedule candidates (the reference's DimStrategy).

Schedules are proposed from *dimension classes*: every dim of the reference's inputs
is put in a class by union-find over the reference program (a matmul ties A's last dim
to B's second-to-last, element-wise ops tie aligned dims, ...), so a class is one
logical loop index (rows, hidden dim, output columns, KV sequence, ...). A schedule
splits some classes over grid dims (each split class gets one grid dim; tile sizes from
`tile_sizes`, block count bounded by `max_blocks`, sized from the SM count) and at most
one *reduced* class over the for-loop; the imap/fmap of every input then follows (the
input's dim of that class, or replica). The caller can instead give explicit lists
(Mirage's `griddims`, `imaps`, `fmaps`, `franges`), which are enumerated as a product.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from itertools import product
from typing import Sequence

from ..target import DEFAULT as _T
from ..core import ops as O


# after Ctrl-C the checks in flight get this long (seconds) before the verified results so
# far (or the reference) are returned
INTERRUPT_GRACE = 1.5


@dataclass(frozen=True)
class SearchConfig:
    max_kernel_ops: int = 2  # kernel ops of a candidate (pre-defined + graph-defined)
    max_graph_defs: int = 2  # graph-defined kernels of a candidate
    max_block_ops: int = 11  # block-graph ops, counting input iterators and output savers
    max_block_inputs: int = 4
    max_block_outputs: int = 2
    max_grid_dims: int = 3
    tile_sizes: tuple = (1, 16, 32, 64, 128)  # candidate per-block/per-iteration tile extents
    # further per-block extents for classes that are not reduced (split over the grid only,
    # e.g. query rows): cheap to add, since they multiply no for-loop choices
    grid_tile_sizes: tuple = ()
    max_blocks: int = 2 * _T.sms
    sms: int = _T.sms
    reduction_dimx: int = 64
    block_dim: tuple = (128, 1, 1)
    grid_reduced: bool = True  # allow splitting a reduced class over the grid (split-K)
    min_split_reduced: int = 0  # reduced classes smaller than this stay whole (head dims)
    min_split_extent: int = 0  # classes of extent in (small_extent, this) stay whole
    small_extent: int = 16  # classes up to this extent (batch, heads) may split into tiles of 1
    min_loop_tile: int = 1  # smallest per-iteration tile of the for-loop class
    block_reductions: bool = True  # reduction ops in block graphs (for combining split-K partials)
    predefined_ops: bool = True  # allow pre-defined kernel ops in candidates
    kernel_op_kinds: tuple | None = None  # default: the reference's kinds
    block_op_kinds: tuple | None = None  # default: derived from the reference
    accum_kinds: tuple | None = None  # default: derived from the reference
    prune: bool = True  # abstract-expression pruning (§4.3)
    checker: str = "fast"  # "fast" (normal forms) or "z3"
    smem_capacity: int = _T.smem_per_block
    time_limit: float = 600.0
    max_states: int | None = None  # cap on visited states (for the no-pruning runs)
    workers: int = 0  # 0: all cores (of the Ray cluster with executor="ray")
    executor: str = "local"  # where work items and checks run: "local" processes or "ray" (search/executor.py)
    seed: int = 0
    top_k: int = 3  # candidates formally verified and kept (best first)
    verify: bool = True
    partition: str = "auto"  # Lax partitioning: auto | split | strict | off (search/partition.py)
    # timing on the GPU (search/measure.py), as Mirage's superoptimize arguments: runs of each
    # candidate before timing, and timed runs
    warmup_iters: int = 16
    profile_iters: int = 1000
    prologues: bool = False  # search per-input norms as inputs, fold them back (search/prologue.py)
    # explicit schedule lists (Mirage API); None: derived from dimension classes
    griddims: tuple | None = None
    imaps: tuple | None = None
    omaps: tuple | None = None
    fmaps: tuple | None = None
    franges: tuple | None = None

    def with_(self, **kw) -> "SearchConfig":
        unknown = sorted(set(kw) - {f.name for f in fields(self)})
        if unknown:  # a misspelt option would otherwise end in dataclasses' TypeError
            raise ValueError(f"search config: unknown option(s) {', '.join(unknown)} "
                             f"(options: {', '.join(f.name for f in fields(self))})")
        return replace(self, **{k: v for k, v in kw.items() if v is not None})

    def __post_init__(self):
        """Reject limits that would be ignored or misread, naming the field."""
        def bad(name, what):
            raise ValueError(f"search config: {name}={getattr(self, name)!r}: {what}")

        def count(v, low):
            return isinstance(v, int) and not isinstance(v, bool) and v >= low

        if isinstance(self.time_limit, bool) or not isinstance(self.time_limit, (int, float)) \
                or not self.time_limit > 0:
            bad("time_limit", "must be a number of seconds > 0")
        for name in ("max_kernel_ops", "max_graph_defs", "max_block_ops", "max_block_inputs",
                     "max_block_outputs", "max_grid_dims", "max_blocks", "top_k", "reduction_dimx"):
            if not count(getattr(self, name), 1):
                bad(name, "must be an integer >= 1")
        if not count(self.workers, 0):
            bad("workers", "must be an integer >= 0 (0: all cores)")
        if self.max_states is not None and not count(self.max_states, 1):
            bad("max_states", "must be None or an integer >= 1")
        for name in ("tile_sizes", "grid_tile_sizes"):
            if not all(count(t, 1) for t in getattr(self, name)):
                bad(name, "must be integers >= 1")
        if self.partition not in ("auto", "split", "strict", "off"):
            bad("partition", "must be 'auto', 'split', 'strict' or 'off'")
        if self.executor not in ("local", "ray"):
            bad("executor", "must be 'local' or 'ray'")
        if self.checker not in ("fast", "z3"):
            bad("checker", "must be 'fast' or 'z3'")
        for g in self.griddims or ():
            if not (isinstance(g, (tuple, list)) and 1 <= len(g) <= 3 and all(count(x, 1) for x in g)):
                bad("griddims", f"each grid must be 1 to 3 integers >= 1, not {g!r}")
        for m in self.imaps or ():
            if not (isinstance(m, (tuple, list)) and 1 <= len(m) <= 3 and all(count(x, -1) for x in m)):
                bad("imaps", f"each map must be 1 to 3 dims (-1: replicated), not {m!r}")
        if not all(count(f, -1) for f in self.fmaps or ()):
            bad("fmaps", "must be dims >= -1 (-1: no for-loop dim)")
        if not all(count(f, 1) for f in self.franges or ()):
            bad("franges", "must be integers >= 1")


PRESETS = {
    # one grid dim over output columns, loop over the contraction (Mirage's "mlp"/"lora")
    # (K steps up to 256 rows: GatedMLP at batch 8 ran 5-7% faster with 256 than with 128 on
    # the H100 and H200; RMSNorm+Linear 5-8% slower: the runtime's timing of the top
    # candidates tells them apart, the cost model does not)
    "mlp": dict(max_grid_dims=1, grid_reduced=False, max_kernel_ops=1, max_graph_defs=1,
                tile_sizes=(16, 32, 64, 128, 256), max_block_outputs=1, block_reductions=False),
    "lora": dict(max_grid_dims=1, grid_reduced=False, max_kernel_ops=1, max_graph_defs=1,
                 tile_sizes=(16, 32, 64, 128), max_block_outputs=1, block_reductions=False),
    # several grid dims, split of the KV sequence over blocks + a reduction kernel
    # grid over batch / query rows / a split of the KV sequence, loop over KV chunks; the
    # head dims (reduced classes < 128) stay whole
    "attention": dict(max_grid_dims=3, grid_reduced=True, max_kernel_ops=2, max_graph_defs=2,
                      tile_sizes=(1, 16, 64), grid_tile_sizes=(128,), max_block_outputs=2, predefined_ops=False,
                      min_split_reduced=128, min_split_extent=128, min_loop_tile=16, prologues=True),
    # programs without matmul (element-wise chains, norms, softmax): one kernel, whole rows
    # a block, no for-loop; `max_block_ops` adapts to the program ("auto")
    # (columns no op reduces may split too, so that a short element-wise program still
    # fills the SMs)
    "rows": dict(max_kernel_ops=1, max_graph_defs=1, max_block_outputs=1, tile_sizes=(1,), franges=(1,),
                 grid_tile_sizes=(128, 256, 512, 1024), predefined_ops=False),
}


def auto_preset(ref) -> str | None:
    """The preset that fits the reference program (used when none is given, `"auto"`):
    exp with matmuls -> attention; a chain of matmuls (a matmul of a matmul) -> lora;
    other matmul programs -> mlp; programs without matmul -> rows."""
    kinds = [op.kind for op in ref.ops]
    if "matmul" not in kinds:
        return "rows"
    if "exp" in kinds:
        return "attention"
    made = {id(op.outputs[0]) for op in ref.ops if op.kind == "matmul"}
    if any(op.kind == "matmul" and any(id(t) in made for t in op.inputs) for op in ref.ops):
        return "lora"
    return "mlp"


def auto_config(ref) -> tuple[str, dict]:
    """The preset for `ref` (`auto_preset`) and the limits adapted to its size."""
    name = auto_preset(ref)
    adapted = {}
    if name == "rows":  # room for every op of the program plus iterators and saver
        adapted["max_block_ops"] = max(9, len(ref.ops) + 4)
    return name, adapted


def make_config(config=None, **overrides) -> SearchConfig:
    if isinstance(config, SearchConfig):
        base = config
    elif config is None or config == "generic":
        base = SearchConfig()
    elif config in PRESETS:
        base = SearchConfig(**PRESETS[config])
    else:
        raise ValueError(f"unknown search preset {config!r} (presets: auto, generic, {', '.join(PRESETS)})")
    return base.with_(**overrides)


# -- dimension classes -------------------------------------------------------------------

class _UF:
    def __init__(self):
        self.p: dict = {}

    def find(self, x):
        self.p.setdefault(x, x)
        while self.p[x] != x:
            self.p[x] = self.p[self.p[x]]
            x = self.p[x]
        return x

    def union(self, a, b):
        a, b = self.find(a), self.find(b)
        if a != b:
            self.p[max(a, b)] = min(a, b)


def dim_classes(g, explicit: bool = False, also=()) -> tuple[list[tuple], set, set]:
    """Class of every dim of each input of KNGraph `g`, then of each tensor of `also`
    (tuples of class names, None for size-1 dims), the set of reduced classes (contracted
    or reduced somewhere; with `explicit`, only those reduced by a reduction op, not by a
    matmul contraction) and the set of batch classes (a matmul's leading dims:
    independent problems)."""
    uf = _UF()
    key = {}
    order = []

    def k(t, d):
        kk = (id(t), d)
        if kk not in key:
            key[kk] = len(order)
            order.append(kk)
        return key[kk]

    for t in g.inputs:
        for d in range(len(t.shape)):
            k(t, d)
    reduced = []
    batch = []
    for op in g.ops:
        ins, out = op.inputs, op.outputs[0] if op.outputs else None
        if op.kind == "matmul":
            a, b = ins
            r = len(a.shape)
            for d in range(r - 2):
                batch.append(k(out, d))
                uf.union(k(a, d), k(out, d))
                uf.union(k(b, d), k(out, d))
            uf.union(k(a, r - 2), k(out, r - 2))
            uf.union(k(b, r - 1), k(out, r - 1))
            uf.union(k(a, r - 1), k(b, r - 2))
            if not explicit:
                reduced.append(k(a, r - 1))
        elif op.kind in ("reduction", "reduce_max"):
            d0 = op.attrs["dim"] % len(ins[0].shape)
            for d in range(len(ins[0].shape)):
                if d != d0:
                    uf.union(k(ins[0], d), k(out, d))
            reduced.append(k(ins[0], d0))
        elif op.kind == "rms_norm":
            x = ins[0]
            n = len(op.attrs.get("normalized_shape") or (1,))
            for d in range(len(x.shape)):
                uf.union(k(x, d), k(out, d))
                if d >= len(x.shape) - n:
                    reduced.append(k(x, d))
        elif out is not None and op.kind in O.BINARY + O.UNARY:
            r = len(out.shape)
            for x in ins:
                off = r - len(x.shape)
                for d in range(len(x.shape)):
                    if x.shape[d] == out.shape[off + d] and x.shape[d] > 1:
                        uf.union(k(x, d), k(out, off + d))
    names: dict = {}
    classes = []
    for t in list(g.inputs) + list(also):
        cs = []
        for d, n in enumerate(t.shape):
            if n == 1:
                cs.append(None)
                continue
            root = uf.find(k(t, d))
            names.setdefault(root, f"c{len(names)}")
            cs.append(names[root])
        classes.append(tuple(cs))
    red = {names[uf.find(r)] for r in reduced if uf.find(r) in names}
    return classes, red, {names[uf.find(b)] for b in batch if uf.find(b) in names} - red


# -- schedules ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Schedule:
    grid: tuple  # (x, y, z)
    forloop: int
    maps: tuple  # per input: (imap (x, y, z), fmap)
    grid_classes: tuple = ()  # class split by each grid dim (informational)
    loop_class: object = None

    def describe(self) -> str:
        return f"grid {list(self.grid)} forloop {self.forloop} maps {list(self.maps)}"


def _tile_ok(tile: int, extent: int, cfg: SearchConfig, reduced: bool = True) -> bool:
    return tile == extent or tile in cfg.tile_sizes or (not reduced and tile in cfg.grid_tile_sizes)


def schedules(shapes: Sequence[tuple], classes: Sequence[tuple], reduced: set, cfg: SearchConfig,
              loop_needed: bool | None = None, batch: set = frozenset()) -> list[Schedule]:
    """Schedule candidates for a graph-defined kernel over inputs of `shapes`. Batch
    classes (independent problems, e.g. batch x heads of attention) may always split into
    tiles of 1: the extent rules below are for the dims of one problem."""
    if cfg.griddims is not None or cfg.imaps is not None or cfg.fmaps is not None:
        return _explicit_schedules(shapes, cfg)
    extent: dict = {}
    for sh, cs in zip(shapes, classes):
        for n, c in zip(sh, cs):
            if c is None:
                continue
            if extent.setdefault(c, n) != n:
                extent[c] = -1  # inconsistent sizes: never split
    cls = [c for c in sorted(extent, key=_class_order) if extent[c] > 0]
    opts = {}
    for c in cls:
        n = extent[c]
        if c not in batch and ((c in reduced and n < cfg.min_split_reduced)
                               or cfg.small_extent < n < cfg.min_split_extent):
            opts[c] = [1]
            continue
        divs = [d for d in range(1, n + 1) if n % d == 0 and d <= cfg.max_blocks
                and (cfg.min_split_extent == 0 or n <= cfg.small_extent or n // d > 1 or c in batch)]
        grid_opts = [1] + [d for d in divs if d > 1 and (cfg.grid_reduced or c not in reduced)]
        opts[c] = grid_opts
    out = []
    franges = cfg.franges
    loop_opts: dict = {}  # (class, extent per block) -> its loop lengths: the same for many grids

    def loop_lengths(c, rem):
        key = (c, rem)
        if key not in loop_opts:
            loop_opts[key] = [r for r in range(2, rem + 1) if rem % r == 0 and rem // r >= cfg.min_loop_tile
                              and _tile_ok(rem // r, extent[c], cfg)]
        return loop_opts[key]

    for gsplit in _grid_splits([opts[c] for c in cls], cfg.max_grid_dims, cfg.max_blocks):
        split = [(c, s) for c, s in zip(cls, gsplit) if s > 1]
        gs = dict(zip(cls, gsplit))
        loops = [(None, 1)]
        for c in cls:
            if c not in reduced or extent[c] < cfg.min_split_reduced:
                continue
            loops += [(c, r) for r in loop_lengths(c, extent[c] // gs[c])]
        for lc, lr in loops:
            if franges is not None and lr not in franges:
                continue
            if loop_needed is False and lr > 1:
                continue
            ok = True
            for c in cls:
                t = extent[c] // gs[c] // (lr if c == lc else 1)
                if not _tile_ok(t, extent[c], cfg, c in reduced):
                    ok = False
                    break
            if not ok:
                continue
            grid = tuple(s for _, s in split) + (1,) * (3 - len(split))
            maps = []
            for sh, cs in zip(shapes, classes):
                imap = []
                for c, _ in split:
                    imap.append(cs.index(c) if c in cs else -1)
                imap += [-1] * (3 - len(imap))
                fmap = cs.index(lc) if lc is not None and lc in cs else -1
                maps.append((tuple(imap), fmap))
            if lr > 1 and all(f == -1 for _, f in maps):
                continue
            out.append(Schedule(grid, lr, tuple(maps), tuple(c for c, _ in split), lc))
    return out


def _grid_splits(options: list, max_dims: int, max_blocks: int) -> list[tuple]:
    """The tuples of `product(*options)` (all entries >= 1) with at most `max_dims` entries
    > 1 and a product <= `max_blocks`, in `product`'s order. Built prefix by prefix and
    pruned there: the full product has millions of tuples for programs with many
    dimension classes (seconds, before any time limit applies)."""
    out = []
    cur: list = []

    def extend(k: int, nsplit: int, blocks: int) -> None:
        if k == len(options):
            out.append(tuple(cur))
            return
        for s in options[k]:
            if nsplit + (s > 1) <= max_dims and blocks * s <= max_blocks:
                cur.append(s)
                extend(k + 1, nsplit + (s > 1), blocks * s)
                cur.pop()

    extend(0, 0, 1)
    return out


def _class_order(c):
    return (0, int(c[1:])) if isinstance(c, str) and c[1:].isdigit() else (1, repr(c))


def _explicit_schedules(shapes, cfg: SearchConfig) -> list[Schedule]:
    grids = [tuple(g) + (1,) * (3 - len(g)) for g in (cfg.griddims or [(1, 1, 1)])]
    imaps = [tuple(m) + (-1,) * (3 - len(m)) for m in (cfg.imaps or [(-1, -1, -1)])]
    fmaps = list(cfg.fmaps or [-1])
    franges = list(cfg.franges or [1])
    out = []
    for grid in grids:
        for fr in franges:
            per_input = []
            for sh in shapes:
                opts = []
                for im in imaps:
                    for fm in fmaps:
                        if _divides(sh, grid, im, fm, fr):
                            opts.append((im, fm))
                per_input.append(opts)
            for maps in product(*per_input):
                if fr > 1 and all(f == -1 for _, f in maps):
                    continue
                out.append(Schedule(grid, fr, tuple(maps)))
    return out


def _divides(shape, grid, imap, fmap, fr) -> bool:
    tile = list(shape)
    for g, d in zip(grid, imap):
        if d == -1:
            continue
        if d >= len(shape) or tile[d] % g:
            return False
        tile[d] //= g
    if fmap != -1:
        if fmap >= len(shape) or tile[fmap] % fr:
            return False
    return True
