"""The Mirage-compatible builder API: names, argument order, shapes, validity rules."""
import pytest

import mirage as mi


def rmsnorm_graph():
    """The reference implementation's demo/reference_mugraphs/rms_norm.py, unchanged but
    for the import (it builds the fused RMSNorm μGraph without G)."""
    graph = mi.new_kernel_graph()
    X = graph.new_input(dims=(16, 4096), dtype=mi.float16)
    W = graph.new_input(dims=(4096, 4096), dtype=mi.float16)
    tb_graph = mi.new_threadblock_graph(grid_dim=(64, 1, 1), block_dim=(128, 1, 1), forloop_range=64,
                                        reduction_dimx=64)
    tX = tb_graph.new_input(dtensor=X, input_map=(-1, -1, -1), forloop_dim=1)
    tW = tb_graph.new_input(dtensor=W, input_map=(1, -1, -1), forloop_dim=0)
    tM = tb_graph.matmul(tX, tW)
    tAccX = tb_graph.forloop_accum(tX, "rms")
    tAccM = tb_graph.forloop_accum(tM)
    tO = tb_graph.div(tAccM, tAccX)
    tb_graph.new_output(stensor=tO, output_map=(1, -1, -1))
    O = graph.customized([X, W], tb_graph)
    graph.mark_output(O[0])
    return graph, tX, tW, tM, tAccX, tO, O


def test_mirage_script_ports_unchanged():
    graph, tX, tW, tM, tAccX, tO, O = rmsnorm_graph()
    assert tX.shape == (16, 64) and tW.shape == (64, 64) and tM.shape == (16, 64)
    assert tAccX.shape == (16, 1)
    assert isinstance(O, list) and O[0].shape == (16, 4096)
    assert O[0].num_dims == 2 and O[0].dim(1) == 4096
    assert O[0].dtype is mi.float16


def test_str_prints_mlir():
    graph = rmsnorm_graph()[0]
    text = str(graph)
    assert "kn.graph_def (%arg0, %arg1) grid [64, 1, 1] block [128, 1, 1] forloop 64 dimx 64" in text
    assert "tb.input %a1 map <x -> 1, i -> 0> : tensor<4096x4096xf16> -> tensor<64x64xf16>" in text
    assert "tb.forloop_accum rms %b0 : tensor<16x64xf16> -> tensor<16x1xf16>" in text
    assert "tb.output %b5 map <x -> 1> : tensor<16x64xf16>" in text


def test_dot_shows_nested_graphs_and_maps(tmp_path):
    graph = rmsnorm_graph()[0]
    dot = graph.to_dot()
    assert dot.startswith('digraph "main"')
    assert "subgraph cluster_k0" in dot and "grid [64, 1, 1]" in dot
    assert "map <x -> 1, i -> 0>" in dot and "forloop_accum rms" in dot
    path = graph.visualize(str(tmp_path / "g"))
    assert open(path).read() == dot


def test_strides_and_dtypes():
    g = mi.new_kernel_graph()
    A = g.new_input((4, 8), strides=(1, 4), dtype=mi.bfloat16)
    g.mark_output(g.exp(A))
    assert "{kn.strides = array<i64: 1, 4>}" in str(g) and "bf16" in str(g)
    assert mi.float32.itemsize == 4 and mi.bfloat16.mlir == "bf16"


@pytest.mark.parametrize("make,rule", [
    (lambda g, tb, X: tb.new_input(X, (0, -1, -1), -1), "divisibility"),  # 15 rows over 4 blocks
    (lambda g, tb, X: tb.new_input(X, (5, -1, -1), -1), "map"),
    (lambda g, tb, X: tb.new_output(tb.new_input(X, (-1, -1, -1), 0), (-1, -1, -1)), "omap"),
    (lambda g, tb, X: tb.forloop_accum(tb.new_input(X, (-1, -1, -1), -1), "prod"), "accumulator"),
    (lambda g, tb, X: tb.forloop_accum(tb.new_input(X, (-1, -1, -1), 0), "sum_todimx"), "dimx"),
    (lambda g, tb, X: tb.matmul(tb.new_input(X, (-1, -1, -1), -1), tb.new_input(X, (-1, -1, -1), -1)), "shape"),
    (lambda g, tb, X: g.exp(tb.new_input(X, (-1, -1, -1), -1)), "nesting"),
])
def test_builder_rejects_invalid_graphs(make, rule):
    g = mi.new_kernel_graph()
    X = g.new_input((15, 6))
    tb = mi.new_threadblock_graph((4, 1, 1), (128, 1, 1), 3, 4)
    with pytest.raises(mi.GraphError, match=rf"^\[{rule}\]"):
        make(g, tb, X)


def test_accumulator_rule_on_customized():
    g = mi.new_kernel_graph()
    X = g.new_input((8, 64))
    tb = mi.new_threadblock_graph((1, 1, 1), (128, 1, 1), 4, 16)
    t = tb.new_input(X, (-1, -1, -1), 1)
    tb.new_output(tb.exp(t), (-1, -1, -1))  # loop-varying, never accumulated
    with pytest.raises(mi.GraphError, match=r"^\[accumulator\]"):
        g.customized([X], tb)
    tb2 = mi.new_threadblock_graph((1, 1, 1), (128, 1, 1), 4, 16)
    t2 = tb2.forloop_accum(tb2.forloop_accum(tb2.new_input(X, (-1, -1, -1), 1)))
    tb2.new_output(t2, (-1, -1, -1))
    with pytest.raises(mi.GraphError, match=r"passes 2 accumulators"):
        g.customized([X], tb2)


def test_smem_capacity_rule():
    g = mi.new_kernel_graph()
    X = g.new_input((256, 1024))
    tb = mi.new_threadblock_graph((1, 1, 1), (128, 1, 1), 1, 64)
    t = tb.new_input(X, (-1, -1, -1), -1)  # 512 KiB tile
    tb.new_output(t, (-1, -1, -1))
    with pytest.raises(mi.GraphError, match=r"^\[smem\].*capacity 232448"):
        g.customized([X], tb)
