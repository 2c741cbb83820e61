"""μGraph-building parts of scripts written for the reference implementation
(mirage-project/mirage, demo/reference_mugraphs/), in their style and at their sizes,
run unchanged but for the import; each is compared with numpy float64.

Written here (not copied). The online-softmax group-query attention is the μGraph that
needs Mirage's `reduction_max` (running max and its change), `forloop_accum_rescale`
(the accumulator rescaled by exp(change) every iteration) and `forloop_accum_max`;
see docs/compat.md. Tolerances: float64 evaluation differs from numpy only by summation
order (rtol 1e-10); the fp16 evaluation (`dtype="native"`, every tensor rounded to fp16)
stays within 1e-2 of the float64 result relative to its largest value (fp16 has 11
significant bits and every tile is rounded, the rescaled sums included; seen: 2.4e-3).
"""
import numpy as np
import pytest

import mirage as mi


def group_query_attention_online():
    """Kernel 1: per (batch, key chunk, query rows) block a partial online softmax over
    the for-loop's key tiles (numerator, denominator, running max); kernel 2 merges the
    chunks with the same rescaling, iterating over them."""
    graph = mi.new_kernel_graph()
    Q = graph.new_input(dims=(2, 256, 64), dtype=mi.float16)
    K = graph.new_input(dims=(2, 64, 1024), dtype=mi.float16)
    V = graph.new_input(dims=(2, 1024, 64), dtype=mi.float16)

    tbgraph1 = mi.new_threadblock_graph(grid_dim=(2, 16, 4), block_dim=(128, 1, 1), forloop_range=4,
                                        reduction_dimx=64)
    bQ = tbgraph1.new_input(dtensor=Q, input_map=(0, -1, 1), forloop_dim=-1)
    bK = tbgraph1.new_input(dtensor=K, input_map=(0, 2, -1), forloop_dim=2)
    bV = tbgraph1.new_input(dtensor=V, input_map=(0, 1, -1), forloop_dim=1)
    bScores = tbgraph1.matmul(bQ, bK)
    bMax, bDiff = tbgraph1.reduction_max(bScores, dim=2)
    bP = tbgraph1.exp(tbgraph1.sub(bScores, bMax))
    bScale = tbgraph1.exp(bDiff)
    bPV = tbgraph1.matmul(bP, bV)
    bNum = tbgraph1.forloop_accum_rescale(bPV, bScale)
    bDen = tbgraph1.forloop_accum_rescale(bP, bScale, "sum")
    bLocalMax = tbgraph1.forloop_accum_max(bMax)
    tbgraph1.new_output(stensor=bNum, output_map=(0, 2, 1))
    tbgraph1.new_output(stensor=bDen, output_map=(0, 2, 1))
    tbgraph1.new_output(stensor=bLocalMax, output_map=(0, 2, 1))
    O = graph.customized([Q, K, V], tbgraph1)

    tbgraph2 = mi.new_threadblock_graph(grid_dim=(2, 1, 4), block_dim=(128, 1, 1), forloop_range=16,
                                        reduction_dimx=64)
    bNum = tbgraph2.new_input(dtensor=O[0], input_map=(0, -1, 1), forloop_dim=2)
    bDen = tbgraph2.new_input(dtensor=O[1], input_map=(0, -1, 1), forloop_dim=2)
    bLocal = tbgraph2.new_input(dtensor=O[2], input_map=(0, -1, 1), forloop_dim=2)
    bGlobal, bGlobalDiff = tbgraph2.reduction_max(bLocal, dim=2)
    bToGlobal = tbgraph2.exp(tbgraph2.sub(bLocal, bGlobal))
    bScale = tbgraph2.exp(bGlobalDiff)
    bN = tbgraph2.forloop_accum_rescale(tbgraph2.mul(bNum, bToGlobal), bScale)
    bD = tbgraph2.forloop_accum_rescale(tbgraph2.mul(bDen, bToGlobal), bScale, "sum")
    tbgraph2.new_output(stensor=tbgraph2.div(bN, bD), output_map=(0, -1, 1))
    Out = graph.customized(O, tbgraph2)
    graph.mark_output(Out[0])
    return graph


def attention_numpy(q, k, v):
    s = q @ k
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e @ v) / e.sum(-1, keepdims=True)


def test_group_query_attention_online_softmax():
    graph = group_query_attention_online()
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(t.shape) for t in graph.inputs)
    q *= 0.5  # scores of a few units: rows whose max moves from key tile to key tile
    want = attention_numpy(q, k, v)
    got = graph.evaluate([q, k, v])[0]
    assert got.shape == (2, 256, 64)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10 * np.abs(want).max())
    # the rescaling is exercised: in many rows a later key tile raises the running max
    s = (q @ k).reshape(2, 256, 16, 4, 16).max(-1)  # per key chunk (grid y) and loop iteration
    assert (np.diff(np.maximum.accumulate(s, axis=-1), axis=-1) > 0).mean() > 0.2
    half = graph.evaluate([q.astype(np.float16), k.astype(np.float16), v.astype(np.float16)], dtype="native")[0]
    assert np.abs(half - want).max() <= 1e-2 * np.abs(want).max()


def test_group_query_attention_online_softmax_is_verified_against_the_plain_program():
    ref = mi.new_kernel_graph()
    Q = ref.new_input(dims=(2, 256, 64), dtype=mi.float16)
    K = ref.new_input(dims=(2, 64, 1024), dtype=mi.float16)
    V = ref.new_input(dims=(2, 1024, 64), dtype=mi.float16)
    S = ref.matmul(Q, K)
    E = ref.exp(ref.sub(S, ref.reduce_max(S, 2)))
    ref.mark_output(ref.div(ref.matmul(E, V), ref.reduction(E, 2)))
    r = mi.check_equivalence(ref, group_query_attention_online())
    assert r.equivalent  # no bound with a max in the cone (docs/verify.md)


def test_clamp_and_pow_kernel_ops():
    # a kernel-graph script using Mirage's KNGraph.clamp and KNGraph.pow
    graph = mi.new_kernel_graph()
    X = graph.new_input(dims=(16, 1024), dtype=mi.float16)
    P = graph.new_input(dims=(1, 1024), dtype=mi.float16)
    C = graph.clamp(X, 0.0, 6.0)  # ReLU6
    O = graph.pow(graph.add(C, graph.exp(X)), P)
    graph.mark_output(O)
    rng = np.random.default_rng(1)
    x, p = rng.standard_normal((16, 1024)), rng.standard_normal((1, 1024))
    want = np.power(np.clip(x, 0.0, 6.0) + np.exp(x), p)
    np.testing.assert_allclose(graph.evaluate([x, p])[0], want, rtol=1e-12)


@pytest.mark.parametrize("scalar", [0.125, -3.0])
def test_mul_scalar_in_a_block_graph(scalar):
    # TBGraph.mul_scalar as Mirage's scripts scale attention scores by 1/sqrt(d)
    graph = mi.new_kernel_graph()
    X = graph.new_input(dims=(64, 4096), dtype=mi.float16)
    tbgraph = mi.new_threadblock_graph(grid_dim=(64, 1, 1), block_dim=(128, 1, 1), forloop_range=64,
                                       reduction_dimx=64)
    bX = tbgraph.new_input(dtensor=X, input_map=(0, -1, -1), forloop_dim=1)
    bS = tbgraph.forloop_accum(tbgraph.mul_scalar(tbgraph.square(bX), scalar), "sum")
    tbgraph.new_output(stensor=bS, output_map=(0, -1, -1))
    graph.mark_output(graph.customized([X], tbgraph)[0])
    x = np.random.default_rng(2).standard_normal((64, 4096))
    want = (x * x * scalar).sum(-1, keepdims=True)
    np.testing.assert_allclose(graph.evaluate([x])[0], want, rtol=1e-10)
