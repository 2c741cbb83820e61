"""Pre-defined kernel ops lowered through default block graphs (`lower/predefined.py`).

Each default block graph is a μGraph rewrite of one op: checked here against the op
itself with the float64 interpreter on fresh random inputs (and against numpy for a
few), proved by the verifier for the benchmark programs' ops, and its PTX checked for
the instructions that make it fast (tensor cores, cp.async, shuffles, 16-byte stores).
"""
from __future__ import annotations

import os
import re
import sys

from math import prod

import numpy as np
import pytest

import mirage as mi
from mirage.core.graph import Op
from mirage.lower.predefined import MM_TILE, default_block_graph

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))

from benchmarks import BENCHMARKS  # noqa: E402


def expanded(g: mi.KNGraph) -> mi.KNGraph:
    """`g` with every pre-defined op replaced by a graph-defined kernel running its
    default block graph (what the lowering does)."""
    h = mi.new_kernel_graph(g.name)
    env = {}
    for k, t in enumerate(g.inputs):
        env[id(t)] = h.new_input(t.shape, g.strides.get(k), t.dtype)
    for op in g.ops:
        tb = op.body if op.kind == "graph_def" else default_block_graph(op)
        outs = h.customized([env[id(t)] for t in op.inputs], tb)
        for t, o in zip(op.outputs, outs):
            env[id(t)] = o
    for t in g.outputs:
        h.mark_output(env[id(t)])
    return h


def same(g: mi.KNGraph, rng, scale=1.0, positive=False):
    xs = [rng.standard_normal(t.shape) * scale for t in g.inputs]
    if positive:
        xs = [np.abs(x) + 0.5 for x in xs]
    want = g.evaluate(xs)
    got = expanded(g).evaluate(xs)
    assert len(want) == len(got)
    for w, o in zip(want, got):
        assert o.shape == w.shape
        np.testing.assert_allclose(o, w, rtol=1e-12, atol=1e-12)
    return xs, got


def one(build, *shapes, **kw):
    g = mi.new_kernel_graph("t")
    ins = [g.new_input(s) for s in shapes]
    g.mark_output(build(g, *ins))
    return g


ELEMWISE = [((4096,), (4096,)), ((8, 4096), (4096,)), ((2, 256, 64), (2, 256, 1)), ((3, 5, 7), (1, 5, 1)),
            ((64, 4096), (64, 1)), ((16, 24), (16, 24))]


@pytest.mark.parametrize("sa,sb", ELEMWISE)
@pytest.mark.parametrize("kind", ["add", "sub", "mul", "div"])
def test_binary(kind, sa, sb):
    same(one(lambda g, a, b: getattr(g, kind)(a, b), sa, sb), np.random.default_rng(1))


@pytest.mark.parametrize("kind", ["exp", "sqrt", "rsqrt", "square", "silu", "gelu", "relu", "sigmoid"])
@pytest.mark.parametrize("shape", [(8, 4096), (2, 256, 4096), (5, 3)])
def test_unary(kind, shape):
    same(one(lambda g, a: getattr(g, kind)(a), shape), np.random.default_rng(2), positive=kind in ("sqrt", "rsqrt"))


@pytest.mark.parametrize("sa,sb", [((2, 4096), (4096, 6144)), ((64, 4096), (4096, 4096)), ((2, 256, 64), (2, 64, 4096)),
                                   ((2, 256, 4096), (2, 4096, 64)), ((16, 16), (16, 4096)), ((3, 20), (20, 12)),
                                   ((2, 3, 2, 32, 32), (2, 3, 2, 32, 16))])
def test_matmul(sa, sb):
    rng = np.random.default_rng(3)
    xs, got = same(one(lambda g, a, b: g.matmul(a, b), sa, sb), rng)
    np.testing.assert_allclose(got[0], xs[0] @ xs[1], rtol=1e-9, atol=1e-9)  # and numpy


def test_matmul_tiles():
    """GEMV: 32-column blocks and a loop over K in 128-row steps; batched: batch on the grid."""
    tb = default_block_graph(one(lambda g, a, b: g.matmul(a, b), (2, 4096), (4096, 6144)).ops[0])
    assert MM_TILE[1:] == (32, 128)
    assert tb.grid_dim == (6144 // 32, 1, 1) and tb.forloop_range == 4096 // 128
    assert [r.stensor.shape for r in tb.inputs] == [(2, 128), (128, 32)]
    tb = default_block_graph(one(lambda g, a, b: g.matmul(a, b), (2, 256, 64), (2, 64, 4096)).ops[0])
    assert tb.grid_dim == (128, 4, 2) and tb.forloop_range == 1
    assert [r.stensor.shape for r in tb.inputs] == [(1, 64, 64), (1, 64, 32)]


@pytest.mark.parametrize("shape,dim", [((8, 4096), 1), ((2, 256, 4096), 2), ((2, 64, 4096), 1), ((4, 8192), 1),
                                       ((3, 5, 7), 0), ((1, 16384), 1)])
@pytest.mark.parametrize("kind", ["reduction", "reduce_max"])
def test_reductions(kind, shape, dim):
    same(one(lambda g, a: getattr(g, kind)(a, dim), shape), np.random.default_rng(4))


def test_long_reduction_loops_over_the_reduced_dim():
    tb = default_block_graph(one(lambda g, a: g.reduction(a, 1), (4, 16384)).ops[0])
    assert tb.forloop_range == 2 and tb.inputs[0].forloop_dim == 1  # rows of up to ROW_TILE = 8192
    assert [op.attrs.get("kind") for op in tb.ops if op.kind == "forloop_accum"] == ["none"]


@pytest.mark.parametrize("shape,ns", [((2, 4096), (4096,)), ((8, 4096), (4096,)), ((2, 256, 64), (64,)),
                                      ((2, 6, 8), (6, 8))])
def test_rms_norm(shape, ns):
    same(one(lambda g, a: g.rms_norm(a, ns), shape), np.random.default_rng(5))


@pytest.mark.parametrize("build,shapes", [
    (lambda g, a: g.transpose(a, (1, 0)), [(64, 96)]),
    (lambda g, a: g.transpose(a, (0, 2, 1)), [(2, 64, 4096)]),
    (lambda g, a: g.reshape(a, (16, 2, 512)), [(32, 512)]),
    (lambda g, a: g.reshape(a, (7, 6)), [(3, 14)]),
    (lambda g, a: g.reshape(a, (1, 12, 128, 64)), [(12, 128, 64)]),  # leading unit dims: split all the same
    (lambda g, a: g.reshape(a, (1, 128, 768)), [(1, 128, 12, 64)]),
    (lambda g, a: g.repeat(a, (1, 4, 1)), [(2, 8, 64)]),
    (lambda g: g.constant(0.125, (1, 1, 1)), []),
    (lambda g: g.constant(2.0, (64, 128)), []),
    (lambda g: g.constant(3.0, (2, 3, 4, 4096)), []),   # four dims split: the last by the for-loop
    (lambda g, a, b: g.add(g.exp(a), b), [(2, 3, 4, 4096), (4096,)]),
])
def test_layout_ops_and_constants(build, shapes):
    same(one(build, *shapes), np.random.default_rng(6))


def test_reshape_behind_unit_dims_is_split_over_blocks():
    # GPT-2's attention output (1, 128, 12, 64) -> (1, 128, 768) at fp16: split on dim 0
    # alone, one block held it whole (384 KB of shared memory with the input's tile)
    tb = default_block_graph(one(lambda g, a: g.reshape(a, (1, 128, 768)), (1, 128, 12, 64)).ops[0])
    assert prod(tb.grid_dim) > 1 and prod(tb.inputs[0].stensor.shape) * prod(tb.grid_dim) == 128 * 768


def test_copy():
    g = one(lambda g, a: g.exp(a), (8, 4096))
    op = Op("copy", [g.inputs[0]], [g.inputs[0]])
    tb = default_block_graph(op)
    h = mi.new_kernel_graph("c")
    x = h.new_input((8, 4096))
    h.mark_output(h.customized([x], tb)[0])
    a = np.random.default_rng(7).standard_normal((8, 4096))
    np.testing.assert_array_equal(h.evaluate([a])[0], a)


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_reference_programs_expand_to_equivalent_block_graphs(name):
    """The lowering's rewrite of every reference program is itself proved (verifier) and
    matches numpy float64 on fresh inputs."""
    from mirage.verify import check_equivalence

    b = BENCHMARKS[name]
    ref = b.reference(1)
    exp = expanded(ref)
    assert all(op.kind == "graph_def" for op in exp.ops)
    res = check_equivalence(ref, exp, input_scales=b.scales or None)  # fp16-finite inputs
    assert res.equivalent, res
    xs = b.random_inputs(1, np.random.default_rng(8))
    np.testing.assert_allclose(exp.evaluate(xs)[0], b.numpy(*xs), rtol=1e-9, atol=1e-9)


# -- the PTX of the pre-defined kernels -----------------------------------------------------

mlir = pytest.importorskip("mlir.ir")


def kernels_of(g, options=None):
    from mirage.lower import to_ptx

    low, ptx = to_ptx(g, options=options)
    bodies = {}
    names = [k["name"] for k in low.kernels]
    for k in names:
        i = ptx.index(f".entry {k}(")
        j = ptx.find(".entry ", i + 1)
        bodies[k] = ptx[i:j if j > 0 else len(ptx)]
    return low, bodies


def test_predefined_matmul_runs_on_tensor_cores_with_a_cp_async_ring_and_split_k():
    low, bodies = kernels_of(BENCHMARKS["gated_mlp"].reference(1))
    mm = [k for k in low.kernels if k["notes"]["kind"] == "matmul"]
    assert len(mm) == 2
    for k in mm:
        body = bodies[k["name"]]
        assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in body and "ldmatrix" in body
        assert "cp.async" in body and k["notes"]["stages"] >= 2
        assert k["grid"] == [128, 1, 1]  # 128 blocks of 32 columns: no split needed
    # a narrower GEMV (32 blocks) splits its loop over blocks
    low, bodies = kernels_of(one(lambda g, a, b: g.matmul(a, b), (8, 4096), (4096, 1024)))
    (k,) = low.kernels
    assert k["name"].endswith("_split") and k["grid"][2] > 1
    assert "mma.sync.aligned.m16n8k16" in bodies[k["name"]]


def test_predefined_elementwise_is_vectorized():
    # rows in registers (the default): 16-byte loads and stores of device memory, nothing shared
    low, bodies = kernels_of(BENCHMARKS["gated_mlp"].reference(1))
    ew = [k for k in low.kernels if k["notes"]["kind"] in ("silu", "mul")]
    assert len(ew) == 2
    for k in ew:
        body = bodies[k["name"]]
        assert "row_registers" in k["notes"] and k["smem_bytes"] == 0
        assert re.search(r"ld\.global\.v4\.(b32|u32|f32)", body) and "shared" not in body
        assert re.search(r"st\.global\.v4\.(b32|u32|f32)", body)
    # rows in shared memory: 16-byte cp.async in, the element loop on chunks, 16-byte stores out
    from mirage.lower import Options
    low, bodies = kernels_of(BENCHMARKS["gated_mlp"].reference(1), Options(row_registers=False))
    for k in low.kernels:
        if k["notes"]["kind"] in ("silu", "mul"):
            body = bodies[k["name"]]
            assert "cp.async.cg.shared.global" in body
            assert "ld.shared.v4" in body and "st.shared.v4" in body
            assert re.search(r"st\.global\.v4\.(b32|u32|f32)", body)


def test_predefined_reductions_use_warp_shuffles():
    low, bodies = kernels_of(BENCHMARKS["ntrans"].reference(1))
    norms = [k for k in low.kernels if k["notes"]["kind"] == "rms_norm"]
    assert norms and all("shfl.sync.bfly" in bodies[k["name"]] for k in norms)
    low, bodies = kernels_of(BENCHMARKS["gqa"].reference(1))
    red = [k for k in low.kernels if k["notes"]["kind"] == "reduction"]
    assert red and all("shfl.sync.bfly" in bodies[k["name"]] for k in red)


def test_few_long_rows_are_split_across_warps():
    """A block with fewer rows than warps (one 4096-element row, 4 or 8 warps) reduces
    each row with every warp: partials through shared memory, then one thread a row."""
    from mirage.lower import Options
    smem = Options(row_registers=False)  # (rows in registers: see test_lower.py::test_row_registers)
    low, bodies = kernels_of(BENCHMARKS["ntrans"].reference(1), smem)
    norms = [k for k in low.kernels if k["notes"]["kind"] == "rms_norm"]
    assert norms and all(k["notes"].get("split_rows") == 4 for k in norms)
    low, _ = kernels_of(BENCHMARKS["ntrans"].fused(1), smem)
    assert low.kernels[0]["notes"].get("split_rows") == 8
    # many rows: one warp a row, no partials
    low, _ = kernels_of(BENCHMARKS["qknorm_attention"].reference(1), smem)
    assert not any("split_rows" in k["notes"] for k in low.kernels if k["notes"]["kind"] == "rms_norm")


def test_fma_matmul_splits_k_over_lanes_when_outputs_are_few():
    # a matmul over 4097 keys (no tensor cores) with 8 columns: 32 outputs a block, 128
    # threads: 4 lanes an output sum its keys and combine by shuffles (checked against torch
    # on an H100: exp_rt/p14)
    from mirage.lower.kernel_plan import k_lanes

    assert [k_lanes(32, 241, 128), k_lanes(32, 241, 256), k_lanes(64, 241, 128), k_lanes(8, 2, 128)] == [4, 8, 1, 1]
    low, bodies = kernels_of(one(lambda g, a, b: g.matmul(a, b), (8, 4, 4097), (8, 4097, 8)))
    (k,) = low.kernels
    body = bodies[k["name"]]
    assert "mma.sync" not in body and body.count("shfl.sync.bfly") == 2  # xor 1, 2: four lanes
    low, bodies = kernels_of(one(lambda g, a, b: g.matmul(a, b), (64, 20), (20, 24)))
    assert "shfl.sync" not in bodies[low.kernels[0]["name"]]  # 1536 outputs: a thread each
