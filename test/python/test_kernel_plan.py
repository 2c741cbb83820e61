"""The lowering's plan (`lower/kernel_plan.py`) as data: its decisions checked without
emitting or compiling anything (no MLIR needed)."""
import os
import sys

import mirage as mi
from mirage.core.graph import Op
from mirage.lower.kernel_plan import GlobalArg, KernelPlan, Options, RowPlan, choose_split
from mirage.lower.predefined import default_block_graph

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))

from benchmarks import BENCHMARKS  # noqa: E402


def plan_of(g, opts=None, k=0):
    op = g.ops[k]
    tb = op.body if op.kind == "graph_def" else default_block_graph(op)
    def args(ts, p):
        return [GlobalArg(f"%{p}{j}", t.shape, mi.core.graph.row_major_strides(t.shape), t.dtype.mlir, t.dtype.itemsize)
                for j, t in enumerate(ts)]
    return KernelPlan(tb, args(op.inputs, "in"), opts or Options(), outs=args(op.outputs, "out"))


def test_gemv_plan():
    p = plan_of(BENCHMARKS["gated_mlp"].fused(1))
    mms = [op for op in p.tb.ops if op.kind == "matmul"]
    assert all(id(m) in p.mma_ops for m in mms)
    assert sorted(id(m) for m in p.reg_acc.values()) == sorted(id(m) for m in mms)  # fragments across the loop
    assert p.S == 4 and all(p.async_in.values())
    assert [p._streamed(k) for k in range(3)] == [False, True, True]  # the weights stream, X is shared
    assert p.smem <= Options().smem_capacity
    text = p.describe()
    assert "tensor cores, registers across the loop" in text and "4 stages" in text and "evict_first" in text


def test_ring_depth_follows_the_options():
    g = BENCHMARKS["gated_mlp"].fused(1)
    assert plan_of(g, Options(stages=2)).S == 2
    assert plan_of(g, Options(async_copy=False)).S == 1
    assert not plan_of(g, Options(tensor_cores=False)).mma_ops


def test_ring_depth_costs_no_extra_wave():
    # QKNorm flash decoding with 128-row query tiles at batch 8: 16 x 8 x 2 = 256 blocks on
    # 132 SMs. Four stages leave room for one block an SM (two waves), three for two (one
    # wave): the plan takes three. With 64 blocks (4 heads), four stages cost no wave and stay.
    def flash(grid, loop):
        h = grid[0]
        g = mi.new_kernel_graph()
        Q, K, V = g.new_input((h, 256, 64)), g.new_input((h, 64, 4096)), g.new_input((h, 4096, 64))
        tb = mi.new_threadblock_graph(grid, (128, 1, 1), loop)
        q = tb.new_input(Q, (0, -1, 1), -1)
        k = tb.new_input(K, (0, 2, -1), 2)
        v = tb.new_input(V, (0, 1, -1), 1)
        q = tb.mul(tb.rms_norm(q), tb.constant(0.125, (1, 1, 1)))
        k = tb.div(k, tb.sqrt(tb.div(tb.reduction(tb.square(k), 1), tb.constant(64.0, (1, 1, 1)))))
        e = tb.exp(tb.matmul(q, k))
        tb.new_output(tb.forloop_accum(tb.matmul(e, v)), (0, 2, 1))
        tb.new_output(tb.forloop_accum(e, "sum"), (0, 2, 1))
        g.customized([Q, K, V], tb)
        return g

    p = plan_of(flash((16, 8, 2), 8))
    assert p.S == 3
    assert 2 * (p.smem + 1024) <= Options().smem_per_sm < 2 * (p._place(p.varying_async, 4) + 1024)
    assert plan_of(flash((4, 8, 2), 8)).S == 4


def test_split_for_small_grids():
    tb = BENCHMARKS["rmsnorm_linear"].fused(1).ops[0].body
    assert choose_split(tb, Options()) == 4          # 96 blocks < 3/4 of 132 SMs: split the loop
    assert choose_split(tb, Options(split=1)) == 1
    tb = BENCHMARKS["gated_mlp"].fused(1).ops[0].body
    assert choose_split(tb, Options()) == 1          # 128 blocks: no split


def test_predefined_plans():
    g = BENCHMARKS["ntrans"].reference(1)
    smem = Options(row_registers=False)               # rows in shared memory (else: test_row_plan)
    norm = plan_of(g, smem)                           # rms_norm of (8, 4096): one row a block
    assert norm.tb.grid_dim == (8, 1, 1) and norm._row_split(1, 4096) == 4
    ew = plan_of(g, smem, k=1)                        # sub, in 16-byte chunks
    assert all(ew.vec_width(op) == 8 for op in ew.tb.ops)
    assert plan_of(g, Options(vectorize=False, row_registers=False), k=1).vec_width(ew.tb.ops[0]) == 1
    assert plan_of(g, k=1).rows.V == 8
    mm = plan_of(BENCHMARKS["lora"].reference(1))    # X @ W: tensor cores, accumulated in registers
    assert mm.mma_ops and mm.reg_acc


def test_copy_plan():
    x = mi.new_kernel_graph("c").new_input((8, 4096))
    p = KernelPlan(default_block_graph(Op("copy", [x], [x])), [GlobalArg("%in0", (8, 4096), (4096, 1), "f16", 2)], Options())
    assert p.async_in[0] == 8 and "cp.async" in p.describe()


def test_threads_option_overrides_the_block():
    g = BENCHMARKS["ntrans"].fused(1)                 # block_dim 256
    assert plan_of(g).nthreads == 256
    p = plan_of(g, Options(threads=512))
    assert p.block == (512, 1, 1) and p._row_split(1, 512) == 16   # 16 warps share the row


def test_one_target_description():
    """The builder's [smem] rule, the search's limits, its cost model and the lowering read
    their hardware figures from `mirage.target`."""
    from mirage.core.graph import DEFAULT_SMEM
    from mirage.search.config import SearchConfig
    from mirage.search.cost import cost
    from mirage.target import A100, DEFAULT, H200

    assert DEFAULT_SMEM == DEFAULT.smem_per_block == Options().smem_capacity == SearchConfig().smem_capacity
    assert Options().sms == SearchConfig().sms == DEFAULT.sms and Options().smem_per_sm == DEFAULT.smem_per_sm
    g = BENCHMARKS["gated_mlp"].fused(1)  # memory-bound: faster with H200's bandwidth, slower on an A100
    assert cost(g, H200).time < cost(g).time < cost(g, A100).time


def _rows_graph(rows, cols, grid, threads, build):
    g = mi.new_kernel_graph()
    X = g.new_input((rows, cols))
    tb = mi.new_threadblock_graph((grid, 1, 1), (threads, 1, 1), 1)
    x = tb.new_input(X, (0, -1, -1), -1)
    tb.new_output(build(tb, x), (0, -1, -1), -1)
    g.mark_output(g.customized([X], tb)[0])
    return g


def test_row_plan():
    """Row-wise block graphs without a for-loop keep their rows in registers; the plan says
    how the chunks fall to threads, and adds or removes threads so that each keeps a few."""
    softmax = lambda tb, x: tb.div(tb.exp(x), tb.reduction(tb.exp(x), 1))  # noqa: E731
    # one 1024-element row a block, 128 threads: one 8-element chunk each, 4 warps a row
    p = plan_of(_rows_graph(256, 1024, 256, 128, softmax))
    assert p.rows == RowPlan((1, 1024), 8, 128, 128, 1, 1, 1)
    assert p.smem == 4 * 4 and p.nthreads == 128  # one word a warp for the one reduction
    assert "rows in registers" in p.describe()
    # 2 rows of 4096 a block: 1024 chunks for 128 threads -> 256 threads, 2 chunks of each row
    p = plan_of(_rows_graph(64, 4096, 32, 128, softmax))
    assert (p.rows.threads, p.rows.tpr, p.rows.passes, p.rows.per_row) == (256, 256, 2, 2)
    assert p.smem == 1 * 2 * 8 * 4  # a word a warp and a row
    # a short row (256 elements = 32 chunks): one warp takes it, no shared memory
    p = plan_of(_rows_graph(8, 256, 8, 128, lambda tb, x: tb.exp(x)))
    assert (p.rows.threads, p.rows.tpr, p.smem) == (32, 32, 0)
    # the options fix the threads: 256 threads on one 1024-element row is 128 chunks: no plan
    assert plan_of(_rows_graph(256, 1024, 256, 128, softmax), Options(threads=256)).rows is None
    assert plan_of(_rows_graph(256, 1024, 256, 128, softmax), Options(threads=64)).rows.per_row == 2


def test_row_plan_does_not_apply():
    g = _rows_graph(256, 1024, 256, 128, lambda tb, x: tb.exp(x))
    assert plan_of(g, Options(row_registers=False)).rows is None
    assert plan_of(g, Options(vectorize=False)).rows is None
    # a reduction over another dim than the last
    assert plan_of(_rows_graph(256, 1024, 64, 128, lambda tb, x: tb.reduction(x, 0))).rows is None
    # a for-loop, a matmul
    assert plan_of(BENCHMARKS["rmsnorm_linear"].fused(1)).rows is None
    # a pre-defined rms_norm: its default block graph is row-wise
    assert plan_of(BENCHMARKS["ntrans"].reference(1)).rows is not None
    # rows that are not whole 16-byte chunks (1000 elements)
    assert plan_of(_rows_graph(16, 1000, 16, 128, lambda tb, x: tb.exp(x))).rows is None


def test_recorded_smem_is_taken_and_checked():
    """Offsets and a ring depth recorded for the kernel (`tb.recorded_smem`, what the
    importer reads from `tb.smem`) replace the planned ones: the plan's own record gives
    the same plan, a buffer moved to a free place moves, and a record the kernel cannot
    honour is a LoweringError naming the block graph, checked before anything is emitted."""
    import pytest

    from mirage.lower.kernel_plan import LoweringError

    g = BENCHMARKS["gqa"].fused(1)
    tb = g.ops[0].body
    p = plan_of(g)
    S, offsets = p.smem_record()
    assert S == p.S and set(offsets) == {n for n, _ in p.buffers()} and "scratch4" in offsets
    try:
        tb.recorded_smem = {"full": (S, offsets)}
        same = plan_of(g)
        assert same.smem_record() == (S, offsets) and same.smem == p.smem
        top = -(-p.smem // 128) * 128 + 128
        tb.recorded_smem = {"full": (S, {**offsets, "op3": top})}
        moved = plan_of(g)
        op3 = next(t for n, t in moved.buffers() if n == "op3")
        assert op3.offset == top and moved.smem == top + op3.bytes
        for rec, why in [((S, {**offsets, "op3": offsets["in1"]}), "overlap"),
                         ((S, {**offsets, "op3": top + 64}), "multiple of 128"),
                         ((S + 1, offsets), f"stages = {S + 1}"),
                         ((S, {n: o for n, o in offsets.items() if n != "red" and n != "op3"}), "no offset for buffer op3")]:
            tb.recorded_smem = {"full": rec}
            with pytest.raises(LoweringError, match=why) as e:
                plan_of(g)
            assert e.value.tb is tb
        # smem_plan off (one region per buffer) takes no record, as layout off takes no layouts
        tb.recorded_smem = {"full": (S, {**offsets, "op3": 0})}
        unplanned = plan_of(g, Options(smem_plan=False)).smem_record()
        tb.recorded_smem = {}
        assert unplanned == plan_of(g, Options(smem_plan=False)).smem_record() != (S, offsets)
    finally:
        tb.recorded_smem = {}


def test_a_cluster_split_takes_a_shallower_ring_where_its_partials_do_not_fit():
    # a split loop whose blocks combine in a cluster keeps their partials in shared memory
    # beside the ring: where the deepest ring that fits alone leaves no room for them, the
    # plan takes fewer stages (a GPT-2 MLP pick at hidden 768 did not lower at 4 stages)
    from dataclasses import replace

    from mirage.search.build import build
    from mirage.search.config import SearchConfig
    from mirage.search.mbci import Tiling, find_chain, plan_of as chain_plan

    g = mi.new_kernel_graph("chain")
    A, B, D = g.new_input((1, 512, 256)), g.new_input((1, 256, 2048)), g.new_input((1, 2048, 256))
    e = g.exp(g.mul_scalar(g.matmul(A, B), 0.125))  # attention: the division by the row sums after the loop
    g.mark_output(g.div(g.matmul(e, D), g.reduction(e, 2)))
    g = build(g, chain_plan(find_chain(g), Tiling("n", 64, 64, 64), SearchConfig()))
    op = g.ops[0]
    ins = [GlobalArg(f"%in{j}", t.shape, mi.core.graph.row_major_strides(t.shape), t.dtype.mlir, t.dtype.itemsize)
           for j, t in enumerate(op.inputs)]
    outs = [GlobalArg("%out0", op.outputs[0].shape, mi.core.graph.row_major_strides(op.outputs[0].shape), "f16", 2)]
    deep = KernelPlan(op.body, ins, Options(), "partial", 4, True, "k", outs)
    assert deep.cluster == 4 and deep.cluster_post and deep.S > 1
    tight = Options(smem_capacity=deep.smem - 1)
    p = KernelPlan(op.body, ins, tight, "partial", 4, True, "k", outs)
    assert p.cluster == 4 and p.S < deep.S and p.smem <= tight.smem_capacity
