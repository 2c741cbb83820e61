"""Mirage's operators beyond the core set (issue 18, issue 14's online softmax):
`clamp`, `pow`, `mul_scalar` (all levels), `TBGraph.reduction_max` -> (max, diff),
`forloop_accum_max` and the rescaling accumulator `forloop_accum_rescale`.

Each op against numpy float64 on fresh random non-zero inputs through the interpreter
(the float64 interpreter differs from numpy only by summation order: rtol 1e-12 for
element-wise ops, 1e-10 where sums are involved); the stateful block-level ops against a
block-by-block, iteration-by-iteration numpy loop written here from docs/ir.md; MLIR and
JSON round trips; the builder's errors; the verifier's model of each op; PTX for the
element-wise ops, the online-softmax state, and a clear LoweringError for what the
lowering lacks.
"""
import numpy as np
import pytest

import mirage as mi
from mirage.core.graph import GraphError

RTOL_EW = 1e-12
RTOL_SUM = 1e-10


def close(a, b, rtol):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert np.isfinite(b).all()
    assert np.abs(a - b).max() <= rtol * max(np.abs(b).max(), 1e-300)


def nonzero(rng, shape, lo=0.1):
    """Standard normal values pushed away from 0 (|x| >= lo)."""
    x = rng.standard_normal(shape)
    return np.where(x >= 0, x + lo, x - lo)


# -- element-wise ops, every level ---------------------------------------------------------

def test_kernel_clamp_pow_mul_scalar_match_numpy():
    rng = np.random.default_rng(1)
    x, y = nonzero(rng, (8, 32)), nonzero(rng, (1, 32))
    g = mi.new_kernel_graph()
    X, Y = g.new_input((8, 32)), g.new_input((1, 32))
    c = g.clamp(X, -0.5, 0.75)
    p = g.pow(g.add(g.mul(X, X), g.constant(0.5, (1, 1))), Y)  # a positive base: real powers
    m = g.mul_scalar(X, -0.375)
    for t in (c, p, m):
        g.mark_output(t)
    oc, op_, om = g.evaluate([x, y])
    close(oc, np.minimum(np.maximum(x, -0.5), 0.75), RTOL_EW)
    close(op_, np.power(x * x + 0.5, y), RTOL_EW)
    close(om, x * -0.375, RTOL_EW)
    # some values are really clamped on each side, others pass
    assert (x < -0.5).any() and (x > 0.75).any() and ((x > -0.5) & (x < 0.75)).any()


def test_clamp_with_min_above_max_is_max_as_in_torch():
    g = mi.new_kernel_graph()
    X = g.new_input((5,))
    g.mark_output(g.clamp(X, 2.0, 1.0))
    x = np.array([-3.0, 0.5, 1.5, 2.5, 9.0])
    np.testing.assert_array_equal(g.evaluate([x])[0], np.full(5, 1.0))


def test_block_and_thread_level_ops_match_numpy():
    rng = np.random.default_rng(2)
    x, y = nonzero(rng, (64, 128)), np.abs(nonzero(rng, (64, 128)))
    g = mi.new_kernel_graph()
    X, Y = g.new_input((64, 128)), g.new_input((64, 128))
    tb = mi.new_threadblock_graph((4, 1, 1), (128, 1, 1), 2, 64)
    tx = tb.new_input(X, (0, -1, -1), 1)
    ty = tb.new_input(Y, (0, -1, -1), 1)
    a = tb.mul_scalar(tb.clamp(tx, -1.0, 1.0), 3.0)
    b = tb.pow(ty, a)
    th = mi.new_thread_graph([mi.float16, mi.float16])
    s0, s1 = th.inputs
    th.output(th.mul_scalar(th.pow(th.clamp(s1, 0.25, 2.0), s0), 0.5))
    (c,) = tb.thread_graph([tx, ty], th)
    tb.new_output(b, (0, -1, -1), 1)
    tb.new_output(c, (0, -1, -1), 1)
    for o in g.customized([X, Y], tb):
        g.mark_output(o)
    ob, oc = g.evaluate([x, y])
    a_ref = np.clip(x, -1, 1) * 3.0
    close(ob, np.power(y, a_ref), RTOL_EW)
    close(oc, 0.5 * np.power(np.clip(y, 0.25, 2.0), x), RTOL_EW)


# -- reduction_max, the accumulators -------------------------------------------------------

def _loop_graph(R=4, dim=1, acc=None):
    """x (8, 4*16) split by the for-loop along dim 1, grid x over the rows: per block and
    iteration a (4, 16) tile; outputs the loop-saved (max, diff) and the accumulators."""
    g = mi.new_kernel_graph()
    X = g.new_input((8, 16 * R))
    tb = mi.new_threadblock_graph((2, 1, 1), (128, 1, 1), R, 16)
    t = tb.new_input(X, (0, -1, -1), 1)
    m, d = tb.reduction_max(t, dim)
    e = tb.exp(tb.sub(t, m))
    r = tb.exp(d)
    tb.new_output(m, (0, -1, -1), 1)  # saved every iteration (maps i): the running max itself
    tb.new_output(d, (0, -1, -1), 1)
    tb.new_output(tb.forloop_accum_rescale(e, r), (0, -1, -1))
    tb.new_output(tb.forloop_accum_rescale(e, r, "sum"), (0, -1, -1))
    tb.new_output(tb.forloop_accum_max(m), (0, -1, -1))
    for o in g.customized([X], tb):
        g.mark_output(o)
    return g


def _loop_reference(x, R):
    """The same, block by block and iteration by iteration (docs/ir.md)."""
    rows, blocks, W = x.shape[0] // 2, 2, x.shape[1] // R
    ms, ds = np.zeros((x.shape[0], R)), np.zeros((x.shape[0], R))
    acc_n, acc_s, acc_m = np.zeros((x.shape[0], W)), np.zeros((x.shape[0], 1)), np.zeros((x.shape[0], 1))
    for b in range(blocks):
        rs = slice(b * rows, (b + 1) * rows)
        run = None
        n, s, mx = np.zeros((rows, W)), np.zeros((rows, 1)), None
        for k in range(R):
            tile = x[rs, k * W:(k + 1) * W]
            new = tile.max(1, keepdims=True) if run is None else np.maximum(run, tile.max(1, keepdims=True))
            diff = np.zeros_like(new) if run is None else run - new
            run = new
            e = np.exp(tile - new)
            n = n * np.exp(diff) + e
            s = s * np.exp(diff) + e.sum(1, keepdims=True)
            mx = new if mx is None else np.maximum(mx, new)
            ms[rs, k], ds[rs, k] = new[:, 0], diff[:, 0]
        acc_n[rs], acc_s[rs], acc_m[rs] = n, s, mx
    return ms, ds, acc_n, acc_s, acc_m


def test_reduction_max_running_max_and_rescale_accumulators():
    R = 4
    rng = np.random.default_rng(3)
    x = nonzero(rng, (8, 16 * R)) * 3
    x[:, 16 * 2:16 * 3] += 20.0  # a later iteration raises the max: diff < 0 there
    outs = _loop_graph(R).evaluate([x])
    ms, ds, n, s, mx = _loop_reference(x, R)
    close(outs[0], ms, RTOL_EW)
    close(outs[1], ds, RTOL_EW)
    assert (outs[1] <= 0).all() and (outs[1][:, 0] == 0).all() and (outs[1][:, 2] < 0).all()
    close(outs[2], n, RTOL_SUM)
    close(outs[3], s, RTOL_SUM)
    close(outs[4], mx, RTOL_EW)
    # the online softmax of each row: numerator / denominator is softmax over all iterations
    rowmax = x.max(1, keepdims=True)
    close(outs[4], rowmax, RTOL_EW)
    e = np.exp(x - rowmax)
    close(outs[3], e.sum(1, keepdims=True), RTOL_SUM)


def test_reduction_max_outside_the_loop_is_max_with_zero_diff():
    rng = np.random.default_rng(4)
    x = nonzero(rng, (4, 6, 10))
    g = mi.new_kernel_graph()
    X = g.new_input((4, 6, 10))
    tb = mi.new_threadblock_graph((2, 1, 1), (128, 1, 1), 1)
    t = tb.new_input(X, (0, -1, -1), -1)
    m, d = tb.reduction_max(t, dim=1)
    tb.new_output(m, (0, -1, -1))
    tb.new_output(d, (0, -1, -1))
    om, od = [o for o in g.customized([X], tb)]
    g.mark_output(om)
    g.mark_output(od)
    vm, vd = g.evaluate([x])
    close(vm, x.max(1, keepdims=True), RTOL_EW)
    np.testing.assert_array_equal(vd, np.zeros((4, 1, 10)))


def test_rescale_with_a_loop_invariant_factor_is_a_geometric_sum():
    # acc = acc * r + x with r constant over the iterations: sum_k x_k r^(R-1-k)
    R = 3
    rng = np.random.default_rng(5)
    x, r = nonzero(rng, (4, 8 * R)), nonzero(rng, (4, 1))
    g = mi.new_kernel_graph()
    X, Rt = g.new_input((4, 8 * R)), g.new_input((4, 1))
    tb = mi.new_threadblock_graph((1, 1, 1), (128, 1, 1), R)
    tx = tb.new_input(X, (-1, -1, -1), 1)
    tr = tb.new_input(Rt, (-1, -1, -1), -1)
    tb.new_output(tb.forloop_accum_rescale(tx, tr, "sum"), (-1, -1, -1))
    g.mark_output(g.customized([X, Rt], tb)[0])
    parts = [x[:, 8 * k:8 * (k + 1)].sum(1, keepdims=True) for k in range(R)]
    want = sum(p * r ** (R - 1 - k) for k, p in enumerate(parts))
    close(g.evaluate([x, r])[0], want, RTOL_SUM)


# -- builder errors ------------------------------------------------------------------------

def test_builder_rejects_bad_arguments_with_clear_errors():
    g = mi.new_kernel_graph()
    X, Y = g.new_input((4, 8)), g.new_input((4, 3))
    with pytest.raises(GraphError, match=r"\[shape\] clamp: min_val must be finite"):
        g.clamp(X, float("-inf"), 1.0)
    with pytest.raises(GraphError, match=r"\[shape\] mul_scalar: scalar must be a real number, got '2'"):
        g.mul_scalar(X, "2")
    with pytest.raises(GraphError, match=r"\[shape\] pow: shapes \[4, 8\] and \[4, 3\] do not broadcast"):
        g.pow(X, Y)
    with pytest.raises(GraphError, match=r"\[nesting\] operator 'reduction_max' does not exist at the kn level"):
        g._op("reduction_max", [X], dim=1)
    tb = mi.new_threadblock_graph((1, 1, 1), (128, 1, 1), 2)
    t = tb.new_input(g.new_input((4, 16)), (-1, -1, -1), 1)
    with pytest.raises(GraphError, match=r"\[shape\] reduction_max: dim 2 out of range for rank 2"):
        tb.reduction_max(t, 2)
    with pytest.raises(GraphError, match=r"\[accumulator\] unknown rescale accumulator 'mean'"):
        tb.forloop_accum_rescale(t, t, "mean")
    with pytest.raises(GraphError, match=r"rescale factor \[4, 8\] must broadcast to the accumulator's shape \[4, 1\]"):
        tb.forloop_accum_rescale(t, t, "sum")


def test_rescale_accumulator_counts_for_the_accumulator_rule():
    g = mi.new_kernel_graph()
    X = g.new_input((4, 16))
    tb = mi.new_threadblock_graph((1, 1, 1), (128, 1, 1), 2)
    t = tb.new_input(X, (-1, -1, -1), 1)
    m, d = tb.reduction_max(t, 1)
    acc = tb.forloop_accum_rescale(t, tb.exp(d), "sum")
    tb.new_output(tb.forloop_accum(acc), (-1, -1, -1))
    with pytest.raises(GraphError, match=r"\[accumulator\] output 0: a path passes 2 accumulators"):
        g.customized([X], tb)


# -- MLIR and JSON round trips -------------------------------------------------------------

def _all_ops_graph():
    g = _loop_graph(4)
    X = g.inputs[0]
    k = g.mul_scalar(g.pow(g.clamp(X, 0.25, 4.0), g.constant(1.5, (1, 1))), 1e-06)
    g.mark_output(k)
    return g


def test_mlir_round_trip():
    pytest.importorskip("mlir.ir")
    g = _all_ops_graph()
    text = g.to_mlir()
    for piece in ("tb.reduction_max", "tb.forloop_accum_rescale none", "tb.forloop_accum_rescale sum",
                  "tb.forloop_accum max", "kn.clamp %arg0 min 0.25 max 4.0", "kn.pow", "mul_scalar %", ", 1.0e-06"):
        assert piece in text
    g2 = mi.parse_mlir(text)[0]  # through the C++ parser and verifiers
    assert g2.to_mlir() == text
    x = np.abs(nonzero(np.random.default_rng(6), (8, 64)))
    for a, b in zip(g.evaluate([x]), g2.evaluate([x])):
        np.testing.assert_array_equal(a, b)


def test_json_round_trip():
    g = _all_ops_graph()
    g2 = mi.from_json(g.to_json())
    assert g2.get_owner_independent_hash() == g.get_owner_independent_hash()
    x = np.abs(nonzero(np.random.default_rng(7), (8, 64)))
    for a, b in zip(g.evaluate([x]), g2.evaluate([x])):
        np.testing.assert_array_equal(a, b)


# -- the verifier's model ------------------------------------------------------------------

def _kn(fn, shapes):
    g = mi.new_kernel_graph()
    ins = [g.new_input(s) for s in shapes]
    g.mark_output(fn(g, *ins))
    return g


def test_verifier_models_each_op():
    from mirage.verify import lax

    # mul_scalar is linear and exact in the field: x * 0.5 == x / 2 == x * constant(0.5)
    a = _kn(lambda g, x: g.mul_scalar(x, 0.5), [(4, 8)])
    b = _kn(lambda g, x: g.div(x, g.constant(2.0, (1, 1))), [(4, 8)])
    r = mi.check_equivalence(a, b)
    assert r.equivalent and r.bound_met and lax.analyze(a).lax
    assert not mi.check_equivalence(a, _kn(lambda g, x: g.mul_scalar(x, 0.25), [(4, 8)])).equivalent
    # clamp: a random function keyed by its bounds (equal bounds: equal; other bounds: not)
    c1 = _kn(lambda g, x: g.clamp(g.add(x, x), 0.0, 1.0), [(4, 8)])
    c2 = _kn(lambda g, x: g.clamp(g.mul_scalar(x, 2.0), 0.0, 1.0), [(4, 8)])
    c3 = _kn(lambda g, x: g.clamp(g.add(x, x), 0.0, 2.0), [(4, 8)])
    assert mi.check_equivalence(c1, c2).equivalent
    assert not mi.check_equivalence(c1, c3).equivalent
    assert "clamp" in lax.analyze(c1).explain()
    # pow: a random function of both arguments (argument order matters)
    p1 = _kn(lambda g, x, y: g.pow(x, y), [(4, 8), (4, 8)])
    p2 = _kn(lambda g, x, y: g.pow(y, x), [(4, 8), (4, 8)])
    assert mi.check_equivalence(p1, p1).equivalent
    assert not mi.check_equivalence(p1, p2).equivalent


def test_smt_models_clamp_exactly():
    pytest.importorskip("z3")
    from mirage.verify.smt import prove_equivalence

    a = _kn(lambda g, x: g.clamp(x, 0.0, 1.0), [(2, 3)])
    b = _kn(lambda g, x: g.clamp(g.clamp(x, -1.0, 1.0), 0.0, 2.0), [(2, 3)])
    c = _kn(lambda g, x: g.clamp(x, 0.0, 2.0), [(2, 3)])
    assert prove_equivalence(a, b).status == "proved"
    assert prove_equivalence(a, c).status == "refuted"


def _gqa_naive(B=2, S=16, D=8, N=64):
    g = mi.new_kernel_graph("gqa")
    Q, K, V = g.new_input((B, S, D)), g.new_input((B, D, N)), g.new_input((B, N, D))
    A = g.matmul(Q, K)
    E = g.exp(g.sub(A, g.reduce_max(A, 2)))
    g.mark_output(g.div(g.matmul(E, V), g.reduction(E, 2)))
    return g


def _gqa_online(B=2, S=16, D=8, N=64, R=4, rescale=True):
    g = mi.new_kernel_graph("gqa_online")
    Q, K, V = g.new_input((B, S, D)), g.new_input((B, D, N)), g.new_input((B, N, D))
    tb = mi.new_threadblock_graph((B, 1, 1), (128, 1, 1), R)
    q = tb.new_input(Q, (0, -1, -1), -1)
    k = tb.new_input(K, (0, -1, -1), 2)
    v = tb.new_input(V, (0, -1, -1), 1)
    a = tb.matmul(q, k)
    m, d = tb.reduction_max(a, 2)
    e = tb.exp(tb.sub(a, m))
    if rescale:
        num = tb.forloop_accum_rescale(tb.matmul(e, v), tb.exp(d))
        den = tb.forloop_accum_rescale(e, tb.exp(d), "sum")
    else:  # the plain sums: each iteration's terms keep their own max
        num, den = tb.forloop_accum(tb.matmul(e, v)), tb.forloop_accum(e, "sum")
    tb.new_output(tb.div(num, den), (0, -1, -1))
    g.mark_output(g.customized([Q, K, V], tb)[0])
    return g


def test_verifier_accepts_online_softmax_and_rejects_it_without_rescaling():
    ref = _gqa_naive()
    r = mi.check_equivalence(ref, _gqa_online())
    # equal through exp(a - b) = exp(a) / exp(b) and a max that is a random total order; a
    # max in the cone leaves no bound (docs/verify.md)
    assert r.equivalent and not r.bound_met
    assert not mi.check_equivalence(ref, _gqa_online(rescale=False)).equivalent


# -- lowering -------------------------------------------------------------------------------

def test_elementwise_ops_lower_to_ptx():
    pytest.importorskip("mlir.ir")
    from mirage.lower import to_ptx

    g = _kn(lambda g, x, y: g.mul_scalar(g.pow(g.clamp(x, -1.0, 2.0), y), 0.125), [(64, 256), (1, 256)])
    low, ptx = to_ptx(g)
    assert [k["notes"]["kind"] for k in low.kernels] == ["clamp", "pow", "mul_scalar"]
    def body(name):
        i = ptx.index(f".entry {name}(")
        j = ptx.find(".entry ", i + 1)
        return ptx[i:j if j > 0 else len(ptx)]
    clamp, pw, mul = (body(k["name"]) for k in low.kernels)
    # clamp: max then min with the bounds -1.0 (0fBF800000) and 2.0 (0f40000000)
    assert "max.NaN.f32" in clamp and "0fBF800000" in clamp and "min.NaN.f32" in clamp and "0f40000000" in clamp
    assert "mul.rn.f32" in mul and "0f3E000000" in mul  # x 0.125
    # pow: math.powf expanded inline (a log2/exp2 polynomial with rounding steps), no libdevice call
    assert "cvt.rni.f32.f32" in pw and "fma.rn.f32" in pw and "call" not in ptx
    # in a block graph and a thread graph; reduction_max run once (no loop) as a reduce_max
    g = mi.new_kernel_graph("tbk")
    X, Y = g.new_input((64, 256)), g.new_input((64, 256))
    tb = mi.new_threadblock_graph((4, 1, 1), (128, 1, 1), 1)
    tx, ty = tb.new_input(X, (0, -1, -1), -1), tb.new_input(Y, (0, -1, -1), -1)
    m, d = tb.reduction_max(tx, 1)
    th = mi.new_thread_graph([mi.float16, mi.float16])
    th.output(th.mul_scalar(th.pow(th.clamp(th.inputs[0], 0.0, 4.0), th.inputs[1]), 0.5))
    (z,) = tb.thread_graph([tb.sub(tx, m), ty], th)
    tb.new_output(z, (0, -1, -1))
    tb.new_output(d, (0, -1, -1))
    for o in g.customized([X, Y], tb):
        g.mark_output(o)
    low, ptx = to_ptx(g)
    assert low.kernels[0]["notes"]["warp_reductions"] == 1 and "max.NaN.f32" in ptx and "call" not in ptx


def test_online_softmax_lowers_without_a_split():
    # the running max and the rescaling accumulators keep f32 state across the for-loop in
    # shared memory; partial results of a split loop would need each other's maxima, so
    # the loop is never split (the numbers are checked on the GPU:
    # benchmarks/gpu_check_compat_ops.py)
    pytest.importorskip("mlir.ir")
    from mirage.lower import Options, to_ptx
    from mirage.lower.kernel_plan import running_maxima, split_ok

    g = _gqa_online()
    tb = g.ops[0].body
    assert [op.kind for op in running_maxima(tb)] == ["reduction_max"] and not split_ok(tb)
    low, ptx = to_ptx(g, options=Options(split=4))
    assert low.kernels and all(k["notes"]["split"] == 1 for k in low.kernels)
    assert "max.NaN.f32" in ptx and "call" not in ptx


def test_running_max_over_another_dim_is_named():
    pytest.importorskip("mlir.ir")
    from mirage.lower import LoweringError, to_ptx

    g = mi.new_kernel_graph()
    X = g.new_input((8, 64))
    tb = mi.new_threadblock_graph((1, 1, 1), (128, 1, 1), 4)
    m, _ = tb.reduction_max(tb.new_input(X, (-1, -1, -1), 1), 0)  # over the rows of each (8, 16) tile
    tb.new_output(tb.forloop_accum_max(m), (-1, -1, -1))
    g.mark_output(g.customized([X], tb)[0])
    with pytest.raises(LoweringError, match=r"tb.reduction_max \(#0\) keeps a running max across the for-loop "
                                            r"over dim 0"):
        to_ptx(g)
