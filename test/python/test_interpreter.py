"""The reference interpreter against independent numpy computations.

Kernel-level ops are compared with direct numpy formulas; block graphs with a naive
block-by-block, iteration-by-iteration executor written here from the spec in
docs/ir.md (it shares no code with the vectorized interpreter). Inputs are fresh
standard-normal arrays; all comparisons are float64, so the tolerance is 1e-10
relative (only summation order differs).
"""
import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import mirage as mi

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from benchmarks import BENCHMARKS  # noqa: E402

RTOL = 1e-10


def close(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    scale = max(np.abs(b).max(), 1e-300)
    assert np.abs(a - b).max() / scale < RTOL


def rng_arrays(rng, *shapes):
    return [rng.standard_normal(s) for s in shapes]


SILU = lambda x: x / (1 + np.exp(-x))  # noqa: E731
NUMPY_UNARY = {
    "exp": np.exp, "sqrt": lambda x: np.sqrt(np.abs(x)), "square": np.square,
    "silu": SILU, "relu": lambda x: np.maximum(x, 0), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "rsqrt": lambda x: 1 / np.sqrt(np.abs(x)),
}


@pytest.mark.parametrize("name", sorted(NUMPY_UNARY))
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4)])
def test_unary(name, shape):
    rng = np.random.default_rng(hash((name, shape)) % 2**32)
    x = rng.standard_normal(shape)
    if name in ("sqrt", "rsqrt"):
        x = np.abs(x) + 0.1
    g = mi.new_kernel_graph()
    X = g.new_input(shape)
    g.mark_output(getattr(g, name)(X))
    close(g.evaluate([x])[0], NUMPY_UNARY[name](x))


def test_gelu_erf_form():
    x = np.linspace(-4, 4, 33)
    g = mi.new_kernel_graph()
    g.mark_output(g.gelu(g.new_input(x.shape)))
    ref = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    close(g.evaluate([x])[0], ref)


@pytest.mark.parametrize("name,fn", [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                                     ("div", np.divide)])
@pytest.mark.parametrize("sa,sb", [((4, 6), (4, 6)), ((4, 6), (1, 6)), ((4, 6), (4, 1)), ((2, 4, 6), (6,)),
                                   ((1, 5), (3, 1))])
def test_binary_broadcast(name, fn, sa, sb):
    rng = np.random.default_rng(1)
    a, b = rng_arrays(rng, sa, sb)
    g = mi.new_kernel_graph()
    A, B = g.new_input(sa), g.new_input(sb)
    g.mark_output(getattr(g, name)(A, B))
    close(g.evaluate([a, b])[0], fn(a, b))


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 6)), ((2, 2, 1, 8), (2, 2, 8, 3))])
def test_matmul(sa, sb):
    a, b = rng_arrays(np.random.default_rng(2), sa, sb)
    g = mi.new_kernel_graph()
    g.mark_output(g.matmul(g.new_input(sa), g.new_input(sb)))
    close(g.evaluate([a, b])[0], a @ b)


@pytest.mark.parametrize("shape,dim", [((5, 6), 0), ((5, 6), 1), ((2, 3, 4), 1), ((2, 3, 4), -1)])
def test_reductions(shape, dim):
    x = np.random.default_rng(3).standard_normal(shape)
    g = mi.new_kernel_graph()
    X = g.new_input(shape)
    g.mark_output(g.reduction(X, dim))
    g.mark_output(g.reduce_max(X, dim))
    s, m = g.evaluate([x])
    close(s, x.sum(axis=dim, keepdims=True))
    close(m, x.max(axis=dim, keepdims=True))


@pytest.mark.parametrize("shape,ns", [((4, 16), (16,)), ((2, 3, 8), (3, 8)), ((2, 3, 8), (8,))])
def test_rms_norm(shape, ns):
    x = np.random.default_rng(4).standard_normal(shape)
    g = mi.new_kernel_graph()
    g.mark_output(g.rms_norm(g.new_input(shape), ns))
    axes = tuple(range(len(shape) - len(ns), len(shape)))
    close(g.evaluate([x])[0], x / np.sqrt((x * x).mean(axis=axes, keepdims=True)))


def test_data_movement():
    rng = np.random.default_rng(5)
    a, b = rng_arrays(rng, (2, 3, 4), (2, 5, 4))
    g = mi.new_kernel_graph()
    A, B = g.new_input(a.shape), g.new_input(b.shape)
    C = g.concat(A, B, 1)
    g.mark_output(C)
    g.mark_output(g.reshape(C, (4, 16)))
    g.mark_output(g.transpose(A, (2, 0, 1)))
    g.mark_output(g.repeat(A, (1, 2, 3)))
    g.mark_output(g.add(A, g.constant(0.5, (1, 1, 1))))
    c, r, t, p, k = g.evaluate([a, b])
    close(c, np.concatenate([a, b], 1))
    close(r, np.concatenate([a, b], 1).reshape(4, 16))
    close(t, a.transpose(2, 0, 1))
    close(p, np.tile(a, (1, 2, 3)))
    close(k, a + 0.5)


def test_shape_errors_name_the_rule():
    g = mi.new_kernel_graph()
    A, B = g.new_input((3, 4)), g.new_input((5, 6))
    with pytest.raises(mi.GraphError, match=r"\[shape\] matmul"):
        g.matmul(A, B)
    with pytest.raises(mi.GraphError, match=r"\[shape\] add"):
        g.add(A, B)
    with pytest.raises(mi.GraphError, match=r"\[dtype\]"):
        g.add(A, g.new_input((3, 4), dtype=mi.float32))


# -- block graphs against a naive executor -------------------------------------------------

NAIVE_OPS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "matmul": np.matmul,
    "exp": np.exp, "sqrt": np.sqrt, "square": np.square, "silu": SILU, "relu": lambda x: np.maximum(x, 0),
}


def naive_slice(x, tb, dmap, loop_dim, coords, it, tile):
    """The tile of `x` for block `coords` at iteration `it` (docs/ir.md, tb.input)."""
    idx = []
    for d in range(x.ndim):
        pos = 0
        for g, n, c in zip("xyzi", tuple(tb.grid_dim) + (tb.forloop_range,), tuple(coords) + (it,)):
            if (tuple(dmap) + (loop_dim,))["xyzi".index(g)] == d:
                pos = pos * n + c
        idx.append(slice(pos * tile[d], (pos + 1) * tile[d]))
    return tuple(idx)


def naive_block_graph(tb, xs):
    outs = [np.full(tb.output_shape(o), np.nan) for o in tb.outputs]
    for coords in itertools.product(*(range(n) for n in tb.grid_dim)):
        acc = {}
        post = {id(t) for op in tb.ops for t in op.outputs if tb.is_post_loop(t)}
        for it in range(tb.forloop_range):
            env = {}
            for rec, x in zip(tb.inputs, xs):
                env[id(rec.stensor)] = x[naive_slice(x, tb, rec.imap, rec.forloop_dim, coords, it, rec.stensor.shape)]
            for op in tb.ops:
                if op.kind == "forloop_accum":
                    v = env[id(op.inputs[0])]
                    k = op.attrs["kind"]
                    contrib = {"none": v, "max": v, "sum": v.sum(-1, keepdims=True),
                               "mean": v.sum(-1, keepdims=True), "rms": (v * v).sum(-1, keepdims=True)}[k]
                    old = acc.get(id(op))
                    acc[id(op)] = contrib if old is None else (np.maximum(old, contrib) if k == "max" else old + contrib)
                elif id(op.outputs[0]) not in post:
                    env[id(op.outputs[0])] = NAIVE_OPS[op.kind](*[env[id(t)] for t in op.inputs])
            for o, out in zip(tb.outputs, outs):
                if o.forloop_dim != -1:
                    out[naive_slice(out, tb, o.omap, o.forloop_dim, coords, it, o.stensor.shape)] = env[id(o.stensor)]
        for op in tb.ops:
            if op.kind == "forloop_accum":
                k, v = op.attrs["kind"], acc[id(op)]
                n = tb.forloop_range * op.inputs[0].shape[-1]
                env[id(op.outputs[0])] = v / n if k == "mean" else (np.sqrt(v / n) if k == "rms" else v)
            elif id(op.outputs[0]) in post:
                env[id(op.outputs[0])] = NAIVE_OPS[op.kind](*[env[id(t)] for t in op.inputs])
        for o, out in zip(tb.outputs, outs):
            if o.forloop_dim == -1:
                out[naive_slice(out, tb, o.omap, -1, coords, 0, o.stensor.shape)] = env[id(o.stensor)]
    return outs


def _run_both(build, shapes, seed=0):
    rng = np.random.default_rng(seed)
    xs = rng_arrays(rng, *shapes)
    g = mi.new_kernel_graph()
    ins = [g.new_input(s) for s in shapes]
    tb = build(ins)
    for o in g.customized(ins, tb):
        g.mark_output(o)
    got = g.evaluate(xs)
    want = naive_block_graph(tb, xs)
    for a, b in zip(got, want):
        assert not np.isnan(b).any()
        close(a, b)


@pytest.mark.parametrize("grid,imap,floop,fdim", [
    ((4, 1, 1), (1, -1, -1), 1, -1), ((2, 3, 1), (0, 1, -1), 1, -1), ((2, 1, 1), (1, -1, -1), 3, 1),
    ((1, 1, 1), (-1, -1, -1), 4, 0), ((2, 2, 2), (1, 0, 1), 1, -1),
])
def test_imap_omap_roundtrip(grid, imap, floop, fdim):
    """input -> output with the same map (and the loop dim saved per iteration) copies."""
    def build(ins):
        tb = mi.new_threadblock_graph(grid, (128, 1, 1), floop, 4)
        t = tb.new_input(ins[0], imap, fdim)
        tb.new_output(tb.exp(t), imap, fdim)
        return tb
    _run_both(build, [(12, 24)])


@pytest.mark.parametrize("acc", [None, "sum", "mean", "rms", "max"])
def test_accumulators(acc):
    def build(ins):
        tb = mi.new_threadblock_graph((2, 1, 1), (128, 1, 1), 4, 8)
        x = tb.new_input(ins[0], (0, -1, -1), 1)
        tb.new_output(tb.forloop_accum(tb.mul(x, x) if acc == "max" else x, acc), (0, -1, -1))
        return tb
    _run_both(build, [(6, 32)], seed=7)


def test_matmul_split_k_with_post_loop_ops():
    def build(ins):
        tb = mi.new_threadblock_graph((3, 2, 1), (128, 1, 1), 4, 8)
        a = tb.new_input(ins[0], (-1, 0, -1), 1)
        b = tb.new_input(ins[1], (1, -1, -1), 0)
        c = tb.new_input(ins[2], (1, -1, -1), -1)  # loop-invariant, used after the loop
        s = tb.forloop_accum(tb.matmul(a, b))
        tb.new_output(tb.silu(tb.add(s, c)), (1, 0, -1))
        return tb
    _run_both(build, [(4, 16), (16, 9), (1, 9)], seed=3)


def test_sum_todimx_matches_numpy():
    g = mi.new_kernel_graph()
    X = g.new_input((2, 64))
    tb = mi.new_threadblock_graph((2, 1, 1), (32, 1, 1), 2, 8)
    t = tb.new_input(X, (0, -1, -1), 1)
    tb.new_output(tb.forloop_accum(t, "sum_todimx"), (0, -1, -1))
    g.mark_output(g.customized([X], tb)[0])
    x = np.random.default_rng(0).standard_normal((2, 64))
    close(g.evaluate([x])[0], x.reshape(2, 8, 8).sum(1))


def test_thread_graph_fuses_elementwise_chain():
    g = mi.new_kernel_graph()
    X, Y = g.new_input((8, 16)), g.new_input((8, 1))
    tb = mi.new_threadblock_graph((2, 1, 1), (128, 1, 1), 1, 16)
    tx, ty = tb.new_input(X, (0, -1, -1), -1), tb.new_input(Y, (0, -1, -1), -1)
    th = mi.new_thread_graph([mi.float16, mi.float16])
    a, b = th.inputs
    th.output(th.silu(th.div(a, b)))
    th.output(th.mul(a, th.constant(2.0)))
    r1, r2 = tb.thread_graph([tx, ty], th)
    tb.new_output(r1, (0, -1, -1))
    tb.new_output(r2, (0, -1, -1))
    for o in g.customized([X, Y], tb):
        g.mark_output(o)
    x, y = rng_arrays(np.random.default_rng(9), (8, 16), (8, 1))
    o1, o2 = g.evaluate([x, y])
    close(o1, SILU(x / y))
    close(o2, 2 * x)


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
@pytest.mark.parametrize("bs", [1, 2])
def test_benchmark_mugraphs_match_numpy(name, bs):
    b = BENCHMARKS[name]
    xs = b.random_inputs(bs, np.random.default_rng(bs))
    want = b.numpy(*xs)
    for build in (b.reference, b.fused):
        close(build(bs).evaluate(xs)[0], want)


def test_rmsnorm_linear_fused_done_when():
    """Issue 2's done-when: the fused RMSNorm+Linear μGraph equals rms_norm(X)·G @ W."""
    b = BENCHMARKS["rmsnorm_linear"]
    g = b.fused(8)
    assert [op.kind for op in g.ops] == ["graph_def"]
    x, gamma, w = b.random_inputs(8, np.random.default_rng(42))
    ref = (x / np.sqrt((x * x).mean(-1, keepdims=True)) * gamma) @ w
    got = g.evaluate([x, gamma, w])[0]
    assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-10


def test_working_precision_rounds():
    x = np.random.default_rng(0).standard_normal((4, 64))
    g = mi.new_kernel_graph()
    g.mark_output(g.exp(g.new_input(x.shape, dtype=mi.float16)))
    got = g.evaluate([x], dtype="native")[0]
    assert np.array_equal(got, got.astype(np.float16).astype(np.float64))
    assert np.abs(got - np.exp(x)).max() / np.exp(x).max() < 2e-3
    bf = g.evaluate([x], dtype="bfloat16")[0]
    assert 1e-4 < np.abs(bf - np.exp(x)).max() / np.exp(x).max() < 1e-2


def test_numpy_dtypes_name_the_arithmetic():
    # np.float64 is exact float64 (it was taken as bfloat16); np.float16 rounds like "float16"
    g = mi.new_kernel_graph("t")
    x = g.new_input((4, 8))
    g.mark_output(g.exp(x))
    xs = [np.random.default_rng(2).standard_normal((4, 8)) / 3]
    exact = g.evaluate(xs)[0]
    np.testing.assert_array_equal(g.evaluate(xs, dtype=np.float64)[0], exact)
    np.testing.assert_array_equal(g.evaluate(xs, dtype=np.float16)[0], g.evaluate(xs, dtype="float16")[0])
    assert not np.array_equal(g.evaluate(xs, dtype="bfloat16")[0], exact)
    with pytest.raises(ValueError, match="unsupported element type 'int32'"):
        g.evaluate(xs, dtype=np.int32)
