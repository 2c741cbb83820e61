"""The μGraph optimizer (paper §6) on small block graphs and on the six benchmarks:
the layout ILP picks the expected layouts, depth scheduling removes barriers, the
shared-memory planner reuses dead tiles and rejects graphs over the capacity."""
import os
import sys

import pytest

import mirage as mi
from mirage.optimize import SmemCapacityError, optimize, optimize_graph
from mirage.optimize.layout import ldmatrix_ways, select_layouts
from mirage.optimize.plan import TileLayout
from mirage.optimize.plan import tile_names
from mirage.optimize.schedule import REGION_RANK, regions, schedule
from mirage.optimize.smem import live_ranges, plan_smem

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from benchmarks import BENCHMARKS  # noqa: E402

pytest.importorskip("z3")


def matmul_graph(m=16, k=64, n=64, loop=4):
    g = mi.new_kernel_graph()
    X, W = g.new_input((m, k * loop)), g.new_input((k * loop, n * 8))
    tb = mi.new_threadblock_graph((8, 1, 1), (128, 1, 1), loop)
    tx = tb.new_input(X, (-1, -1, -1), 1)
    tw = tb.new_input(W, (1, -1, -1), 0)
    tb.new_output(tb.forloop_accum(tb.matmul(tx, tw)), (1, -1, -1))
    g.customized([X, W], tb)
    return g, tb


# ------------------------------------------------------------------------------ layout

def test_ldmatrix_conflicts():
    assert ldmatrix_ways(128, 0) == 8      # 128-byte rows: all 8 rows in one bank group
    assert ldmatrix_ways(128, 128) == 1    # the 128-byte swizzle removes the conflict
    assert ldmatrix_ways(32, 0) == 2 and ldmatrix_ways(32, 32) == 1
    assert ldmatrix_ways(48, 0) == 1       # odd number of 16-byte chunks: no conflict


def test_swizzled_offsets_are_a_permutation_within_rows():
    lay = TileLayout("t", (16, 64), "f16", 1, 128)
    offs = [lay.offset((r, c)) for r in range(16) for c in range(64)]
    assert sorted(offs) == list(range(16 * 64))
    assert all(lay.offset((r, c)) // 64 == r for r in range(16) for c in range(64))
    # 16-byte vectors (8 f16) stay contiguous
    assert all(lay.offset((r, c + 1)) == lay.offset((r, c)) + 1 for r in range(16) for c in range(0, 64, 8)
               for _ in [0] if c % 8 != 7)
    # row-major without swizzle; column-major when dim 0 is innermost
    assert TileLayout("t", (4, 8), "f16", 1).strides == (8, 1)
    assert TileLayout("t", (4, 8), "f16", 0).strides == (1, 4)


def test_ilp_picks_swizzled_row_major_for_matmul_operands():
    _, tb = matmul_graph()
    p = select_layouts(tb)
    assert p.optimal and p.cost < p.default_cost
    # W tile 64x64 f16: 128-byte rows -> last dim innermost (coalesced copy) + 128B swizzle
    assert (p.tiles["in1"].inner_dim, p.tiles["in1"].swizzle) == (1, 128)
    assert (p.tiles["in0"].inner_dim, p.tiles["in0"].swizzle) == (1, 128)
    # the accumulator is not read by ldmatrix: no swizzle
    assert p.tiles["op1"].swizzle == 0


def test_ilp_follows_global_layout():
    # W stored column-major in device memory (dim 0 innermost): the tile follows it
    _, tb = matmul_graph()
    p = select_layouts(tb, global_inner={1: 0})
    assert p.tiles["in1"].inner_dim == 0 and p.tiles["in1"].swizzle == 128


def test_ilp_keeps_elementwise_chain_in_one_layout():
    g = mi.new_kernel_graph()
    X = g.new_input((64, 64))
    Y = g.new_input((64, 64), strides=(1, 64))  # column-major
    tb = mi.new_threadblock_graph((1, 1, 1), (128, 1, 1), 1)
    tx, ty = tb.new_input(X, (-1, -1, -1), -1), tb.new_input(Y, (-1, -1, -1), -1)
    tb.new_output(tb.exp(tb.add(tx, ty)), (-1, -1, -1))
    g.customized([X, Y], tb)
    p = optimize_graph(g)[0].layouts
    assert p.tiles["in1"].inner_dim == 0  # copied coalesced from the column-major tensor
    assert p.tiles["op0"].inner_dim == p.tiles["op1"].inner_dim  # add and exp agree


def test_layout_disabled_is_row_major():
    _, tb = matmul_graph()
    p = select_layouts(tb, enabled=False)
    assert not p.enabled and p.cost == p.default_cost
    assert all(t.inner_dim == len(t.shape) - 1 and t.swizzle == 0 for t in p.tiles.values())


# ---------------------------------------------------------------------------- schedule

def test_depth_schedule_groups_independent_ops():
    # two independent matmul -> reduce chains built one after the other
    g = mi.new_kernel_graph()
    A, B, C = g.new_input((64, 64)), g.new_input((64, 64)), g.new_input((64, 64))
    tb = mi.new_threadblock_graph((1, 1, 1), (128, 1, 1), 1)
    ta, tb_, tc = (tb.new_input(t, (-1, -1, -1), -1) for t in (A, B, C))
    r1 = tb.reduction(tb.matmul(ta, tb_), 1)
    r2 = tb.reduction(tb.matmul(ta, tc), 1)
    r3 = tb.reduction(tb.matmul(tb_, tc), 1)
    tb.new_output(tb.add(tb.add(r1, r2), r3), (-1, -1, -1))
    g.customized([A, B, C], tb)
    s = schedule(tb)
    # program order: |mm red| mm |red| mm |red| add add | savers: 6 barriers
    assert s.barriers_program_order == 6
    # by depth: {3 matmuls} | {3 reductions} | {add, add fused element-wise} | savers
    assert s.barriers == 4
    kinds = [[tb.ops[j].kind for j in st.ops] for st in s.stages]
    assert kinds == [["matmul"] * 3, ["reduction"] * 3, ["add", "add"]]
    assert all(st.barrier_before for st in s.stages)
    assert schedule(tb, enabled=False).barriers == 6


def test_schedule_regions_and_benchmarks():
    tb = BENCHMARKS["gated_mlp"].fused(1).ops[0].body
    s = schedule(tb)
    assert (s.barriers_program_order, s.barriers) == (5, 4)
    assert [st.region for st in s.stages] == ["loop", "loop", "post"]
    for b in BENCHMARKS.values():
        for op in b.fused(1).ops:
            s = schedule(op.body)
            assert s.barriers <= s.barriers_program_order
            assert sorted(s.order) == list(range(len(op.body.ops)))
            pos = {j: p for p, j in enumerate(s.order)}  # topological
            prod = {id(t): j for j, o in enumerate(op.body.ops) for t in o.outputs}
            for j, o in enumerate(op.body.ops):
                assert all(pos[prod[id(t)]] < pos[j] for t in o.inputs if id(t) in prod)


def test_loop_invariant_ops_are_hoisted_before_the_loop():
    # QKNorm's block graph: the Q tile has no for-loop dim, so its rms_norm and scaling run
    # once before the loop ("pre"); the K normalization reads the loop-varying K tile
    tb = [op for op in BENCHMARKS["qknorm_attention"].fused(1).ops if op.kind == "graph_def"][0].body
    reg = regions(tb)
    kinds = {(op.kind, r) for op, r in zip(tb.ops, reg)}
    assert ("rms_norm", "pre") in kinds and ("matmul", "loop") in kinds
    assert all(r != "pre" for op, r in zip(tb.ops, reg) if op.kind in ("forloop_accum", "square", "exp"))
    s = schedule(tb)
    assert [st.region for st in s.stages][0] == "pre"
    ranks = [REGION_RANK[reg[j]] for j in s.order]
    assert ranks == sorted(ranks)
    # the hoisted result is read by every iteration: live across the whole loop
    names = tile_names(tb)
    bufs = live_ranges(tb, s.order)
    loop_end = max(p + 1 for p, j in enumerate(s.order) if reg[j] == "loop")
    read_in_loop = {id(t) for j, op in enumerate(tb.ops) if reg[j] == "loop" for t in op.inputs}
    hoisted = [op.outputs[0] for j, op in enumerate(tb.ops) if reg[j] == "pre" and id(op.outputs[0]) in read_in_loop]
    assert hoisted
    assert all(bufs[names[id(t)]].end >= loop_end for t in hoisted)


def _invariant_ops(sqrt_of_exp: bool) -> dict:
    """Regions of e = exp(w) (invariant, read after the loop) and s = sqrt(w or e) (read
    in the loop) in a block graph with a 4-step loop."""
    g = mi.new_kernel_graph()
    X, W = g.new_input((16, 256)), g.new_input((16, 64))
    tb = mi.new_threadblock_graph((1, 1, 1), (128, 1, 1), 4)
    tx = tb.new_input(X, (-1, -1, -1), 1)
    tw = tb.new_input(W, (-1, -1, -1), -1)
    e = tb.exp(tw)
    s = tb.sqrt(e if sqrt_of_exp else tw)
    acc = tb.forloop_accum(tb.add(tx, s))
    tb.new_output(tb.add(acc, e), (-1, -1, -1))
    g.customized([X, W], tb)
    return {op.kind: r for op, r in zip(tb.ops, regions(tb)) if op.kind in ("exp", "sqrt")}


def test_invariant_op_read_after_the_loop_stays_in_the_loop():
    # a split loop's combine kernel runs only the post region: an invariant op that a post
    # op reads must not be hoisted (it would not exist there)
    assert _invariant_ops(sqrt_of_exp=False) == {"exp": "loop", "sqrt": "pre"}


def test_a_hoisted_op_reads_only_hoisted_results():
    # e stays in the loop (read after it); s = sqrt(e) feeds the loop: it must stay in the
    # loop too, or it would run before e exists
    assert _invariant_ops(sqrt_of_exp=True) == {"exp": "loop", "sqrt": "loop"}


# ------------------------------------------------------------------------------- smem

def test_planner_reuses_dead_tiles():
    g = mi.new_kernel_graph()
    X = g.new_input((16, 512))
    tb = mi.new_threadblock_graph((1, 1, 1), (128, 1, 1), 1)
    t = tb.new_input(X, (-1, -1, -1), -1)
    for _ in range(4):
        t = tb.sqrt(tb.exp(t))
    tb.new_output(t, (-1, -1, -1))
    g.customized([X], tb)
    p = plan_smem(tb, schedule(tb))
    size = 16 * 512 * 2
    assert p.no_reuse_bytes == 9 * size
    assert p.total_bytes == 2 * size  # a chain needs only two live tiles at a time
    assert p.optimal
    bufs = list(p.buffers.values())
    for i, a in enumerate(bufs):
        for b in bufs[i + 1:]:
            if a.start <= b.end and b.start <= a.end:
                assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset
    assert all(b.offset % 128 == 0 for b in bufs)
    assert plan_smem(tb, enabled=False).total_bytes == 9 * size


def test_accumulators_and_double_buffering():
    _, tb = matmul_graph()
    p = plan_smem(tb, schedule(tb))
    assert p.buffers["in0"].copies == 2 and p.buffers["in0"].size == 2 * 16 * 64 * 2
    acc = p.buffers["op1"]
    assert acc.start == 0  # lives across the whole loop
    assert not (p.buffers["op0"].offset == acc.offset)
    single = plan_smem(tb, schedule(tb), double_buffer=False)
    assert single.total_bytes < p.total_bytes


def test_over_capacity_rejected():
    _, tb = matmul_graph(m=64, k=128, n=128)
    with pytest.raises(SmemCapacityError, match=r"\[smem\] .* more than the capacity 65536.*in1"):
        plan_smem(tb, capacity=64 * 1024)
    assert plan_smem(tb).total_bytes <= 227 * 1024


def test_optimize_benchmarks_all_fit_and_reuse():
    for b in BENCHMARKS.values():
        for bs in (1, 8):
            for j, plan in optimize_graph(b.fused(bs)).items():
                assert plan.smem.total_bytes <= plan.smem.no_reuse_bytes <= 2 * 227 * 1024
                assert plan.smem.total_bytes <= 227 * 1024
                assert plan.layouts.cost <= plan.layouts.default_cost
                assert set(plan.layouts.tiles) == set(plan.names.values())


def test_ablation_switches():
    tb = BENCHMARKS["gated_mlp"].fused(1).ops[0].body
    on, off = optimize(tb), optimize(tb, layout=False, schedule_ops=False, smem=False)
    assert not (off.layouts.enabled or off.schedule.enabled or off.smem.enabled)
    assert off.smem.total_bytes == on.smem.no_reuse_bytes >= on.smem.total_bytes
    assert off.schedule.barriers >= on.schedule.barriers
    assert off.layouts.cost > on.layouts.cost


def test_smem_plan_with_the_lowerings_sizes_and_extra_buffers():
    # the lowering's view: its own bytes per tile (padding, deeper rings) and its own
    # buffers (f32 scratch) on the same live ranges; no overlap of live buffers
    tb = BENCHMARKS["gated_mlp"].fused(1).ops[0].body
    base = plan_smem(tb, schedule(tb))
    sizes = {n: b.size * 2 for n, b in base.buffers.items() if n.startswith("in")}
    p = plan_smem(tb, schedule(tb), sizes=sizes, extra={"scratch": (4096, 0, 3)}, timeout_ms=0)
    assert p.buffers["scratch"].size == 4096 and p.total_bytes > base.total_bytes
    for n, s in sizes.items():
        assert p.buffers[n].size == s
    bufs = list(p.buffers.values())
    for i, a in enumerate(bufs):
        for b in bufs[i + 1:]:
            if a.start <= b.end and b.start <= a.end:
                assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset, (a, b)
