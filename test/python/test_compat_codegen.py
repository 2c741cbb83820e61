"""Mirage's code-generation and launch API as its scripts use it (demo/reference_mugraphs/
and benchmark/ of mirage-project/mirage): `graph.cygraph`, `mi.generate_cuda_program`,
`graph(inputs=..., outputs=..., <Mirage's compile options>)`, `mirage.visualizer`,
bundles built elsewhere for machines without MLIR, and MIRAGE_SEARCH_TIME_LIMIT.
The graphs are written here in Mirage's style (not copied). See docs/compat.md."""
import json
import os
import warnings

import numpy as np
import pytest

import mirage as mi
import mirage.cuda_program as CP
from mirage.core.graph import GraphError


@pytest.fixture(autouse=True)
def user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MIRAGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("MIRAGE_CACHE", raising=False)
    monkeypatch.delenv("MIRAGE_SEARCH_TIME_LIMIT", raising=False)
    return tmp_path / "cache"


def rms_linear(m=4, k=256, n=128, mark=True):
    """RMSNorm fused into a matmul, as Mirage's rms_norm demo writes it (smaller)."""
    graph = mi.new_kernel_graph()
    X = graph.new_input(dims=(m, k), dtype=mi.float16)
    W = graph.new_input(dims=(k, n), dtype=mi.float16)
    tb_graph = mi.new_threadblock_graph(grid_dim=(2, 1, 1), block_dim=(128, 1, 1), forloop_range=4,
                                        reduction_dimx=64)
    tX = tb_graph.new_input(dtensor=X, input_map=(-1, -1, -1), forloop_dim=1)
    tW = tb_graph.new_input(dtensor=W, input_map=(1, -1, -1), forloop_dim=0)
    tO = tb_graph.div(tb_graph.forloop_accum(tb_graph.matmul(tX, tW)), tb_graph.forloop_accum(tX, "rms"))
    tb_graph.new_output(stensor=tO, output_map=(1, -1, -1))
    O = graph.customized([X, W], tb_graph)
    if mark:
        graph.mark_output(O[0])
    return graph, O


def numpy_rms_linear(x, w):
    return (x / np.sqrt((x * x).mean(-1, keepdims=True))) @ w


def test_cygraph_accessors_report_declared_strides():
    graph = mi.new_kernel_graph()
    X = graph.new_input(dims=(1, 64), dtype=mi.bfloat16)
    W = graph.new_input(dims=(64, 96), strides=(1, 64), dtype=mi.bfloat16)  # column-major, as Qwen's demo
    graph.mark_output(graph.matmul(X, W))
    cy = graph.cygraph
    assert cy.get_num_inputs() == 2 and cy.get_num_outputs() == 1
    dts = cy.get_input_dtensors()
    assert [cy.get_input_dtensor_shape_and_stride(t) for t in dts] == [((1, 64), (64, 1)), ((64, 96), (1, 64))]
    assert cy.get_owner_independent_hash() == graph.get_owner_independent_hash()
    with pytest.raises(AttributeError, match="get_input_dtensor_layout.*get_input_dtensor_shape_and_stride"):
        cy.get_input_dtensor_layout(dts[0])


@pytest.mark.parametrize("cc,target", [(86, "sm_80"), (80, "sm_80"), (90, "sm_90")])
def test_generate_cuda_program_gives_ptx_for_the_target(cc, target):
    graph, _ = rms_linear()
    x, w = np.random.default_rng(0).standard_normal((4, 256)), np.random.default_rng(1).standard_normal((256, 128))
    np.testing.assert_allclose(graph.evaluate([x, w])[0], numpy_rms_linear(x, w), rtol=1e-9)
    p = mi.generate_cuda_program(graph.cygraph, target_cc=cc, input_strides=[(256, 1), (128, 1)])
    assert p["target"] == target
    assert f".target {target}" in p["code"] and ".entry" in p["code"]
    with open(os.path.join(p["bundle"], "manifest.json")) as f:
        man = json.load(f)
    assert man["target"] == target and [t["shape"] for t in man["inputs"]] == [[4, 256], [256, 128]]
    assert 0 < p["max_smem_size"] == max(k["smem_bytes"] for k in man["kernels"])


@pytest.mark.parametrize("kw,error,message", [
    (dict(target_cc=75, input_strides=[(256, 1), (128, 1)]), ValueError, "target_cc=75"),
    (dict(target_cc=86, input_strides=[(256, 1)]), ValueError, "one entry per input"),
    (dict(target_cc=86, input_strides=[(1, 4), (128, 1)]), ValueError, r"input 0 has strides \(1, 4\)"),
])
def test_generate_cuda_program_bad_arguments(kw, error, message):
    graph, _ = rms_linear()
    with pytest.raises(error, match=message):
        mi.generate_cuda_program(graph.cygraph, **kw)


def test_call_takes_mirages_arguments_before_any_gpu_work():
    from mirage.api import prepare_call

    graph, _ = rms_linear()
    x, w = np.ones((4, 256)), np.ones((256, 128))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        target, inputs, kw = prepare_call(graph, inputs=[x, w], enable_online_softmax=True, num_warp_groups=2,
                                          target_cc=86)
    assert (target, len(inputs), kw) == ("sm_80", 2, {})
    assert len(caught) == 1 and "enable_online_softmax=True" in str(caught[0].message) \
        and "num_warp_groups=2" in str(caught[0].message)
    with pytest.raises(TypeError, match="unexpected keyword argument.*bogus"):
        prepare_call(graph, inputs=[x, w], bogus=1)
    with pytest.raises(ValueError, match="1 tensors given, the graph has 2 inputs"):
        prepare_call(graph, inputs=[x])
    with pytest.raises(ValueError, match=r"input 1 has shape \(128, 256\), the graph's is \(256, 128\)"):
        prepare_call(graph, inputs=[x, w.T])
    with pytest.raises(GraphError, match="outputs= must list them"):
        prepare_call(graph, inputs=[x, w], outputs=[graph.inputs[0]])


def test_call_outputs_mark_a_graph_without_outputs():
    """Older Mirage scripts (the Chameleon demo) name the outputs at the call."""
    graph, O = rms_linear(mark=False)
    from mirage.api import prepare_call

    prepare_call(graph, inputs=[np.ones((4, 256)), np.ones((256, 128))], outputs=O)
    assert graph.outputs == [O[0]]
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((4, 256)), rng.standard_normal((256, 128))
    np.testing.assert_allclose(graph.evaluate([x, w])[0], numpy_rms_linear(x, w), rtol=1e-9)


def test_without_mlir_a_call_runs_the_bundle_built_elsewhere(monkeypatch):
    """A GPU machine with only the runtime: the call finds the bundle built for this graph
    (same program, built by another process: a new graph object) and launches it."""
    graph, _ = rms_linear()
    built = CP.prebuilt_bundle(graph, "sm_90", build=True)
    monkeypatch.setattr(CP, "mlir_available", lambda: False)
    import mirage.api as api
    import mirage.runtime as runtime

    loaded = []
    monkeypatch.setattr(runtime, "load", lambda path: loaded.append(path) or (lambda *xs, **kw: ("ran", len(xs))))
    monkeypatch.setattr(api, "_LOADED", {})
    again, _ = rms_linear()
    assert again(inputs=[np.ones((4, 256)), np.ones((256, 128))]) == ("ran", 2)
    assert loaded == [built]
    other, _ = rms_linear(n=64)
    with pytest.raises(RuntimeError, match="MLIR Python bindings are not installed.*no bundle was built"):
        other(inputs=[np.ones((4, 256)), np.ones((256, 64))])
    # generate_cuda_program reads the bundle too
    assert ".entry" in mi.generate_cuda_program(again.cygraph, target_cc=90,
                                                input_strides=[(256, 1), (128, 1)])["code"]


def test_visualizer_module_writes_dot(tmp_path):
    from mirage import visualizer

    graph, _ = rms_linear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no Graphviz program for the PNG on a bare machine
        paths = visualizer.visualizer(str(tmp_path / "g")).draw_graphs(graph.cygraph)
    assert paths[0] == str(tmp_path / "g.dot")
    assert open(paths[0]).read() == graph.to_dot()
    with pytest.raises(TypeError, match="expected a kernel graph"):
        visualizer.visualizer("x").draw_graphs({"ops": []})


def test_search_time_limit_from_the_environment(monkeypatch):
    g = mi.new_kernel_graph()
    X = g.new_input(dims=(8, 64), dtype=mi.float16)
    g.mark_output(g.exp(g.exp(X)))
    monkeypatch.setenv("MIRAGE_SEARCH_TIME_LIMIT", "7.5")
    best = g.superoptimize(use_cached_graphs=False, workers=1, measure=False)
    assert best.search.config.time_limit == 7.5
    best = g.superoptimize(use_cached_graphs=False, workers=1, measure=False, time_limit=9)
    assert best.search.config.time_limit == 9  # the script's own value wins
    x = np.random.default_rng(3).standard_normal((8, 64))
    np.testing.assert_allclose(best.evaluate([x])[0], np.exp(np.exp(x)), rtol=1e-9)
    monkeypatch.setenv("MIRAGE_SEARCH_TIME_LIMIT", "soon")
    with pytest.raises(ValueError, match="MIRAGE_SEARCH_TIME_LIMIT='soon'"):
        g.superoptimize(use_cached_graphs=False)
