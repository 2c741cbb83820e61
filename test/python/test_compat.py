"""Mirage's Python API beyond the builder: `superoptimize` with Mirage's arguments and
positional order, `mi.set_gpu_device_id`, `mi.bypass_compile_errors`, and the default
locations (user cache directory, never one shared /tmp folder). See docs/compat.md."""
import inspect
import json
import os
import warnings

import numpy as np
import pytest

import mirage as mi
from mirage.core.graph import KNGraph
from mirage.search import measure as M
from mirage.search.config import PRESETS

# mirage-project/mirage, python/mirage/kernel.py, KNGraph.superoptimize (positional order)
MIRAGE_ORDER = ["imaps", "omaps", "griddims", "blockdims", "fmaps", "franges", "verbose", "config", "backend",
                "warmup_iters", "profile_iters", "use_graph_dataset", "use_cached_graphs", "save_codes",
                "is_formal_verified"]
FAST = dict(workers=1, time_limit=60)


def rmsnorm_linear(m=2, k=256, n=256):
    g = mi.new_kernel_graph("rmsnorm_linear")
    X = g.new_input(dims=(m, k), dtype=mi.float16)
    W = g.new_input(dims=(k, n), dtype=mi.float16)
    g.mark_output(g.matmul(g.rms_norm(X, normalized_shape=(k,)), W))
    return g


def check_numpy(g, seed=0):
    """The μGraph against numpy float64 on fresh random inputs (the float64 interpreter
    differs from numpy only by summation order: rtol 1e-9)."""
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal(g.inputs[0].shape), rng.standard_normal(g.inputs[1].shape)
    want = (x / np.sqrt((x * x).mean(-1, keepdims=True))) @ w
    np.testing.assert_allclose(g.evaluate([x, w])[0], want, rtol=1e-9, atol=1e-9 * np.abs(want).max())


@pytest.fixture(autouse=True)
def user_cache(tmp_path, monkeypatch):
    """The user cache directory of these tests: a fresh folder (nothing lands in ~)."""
    monkeypatch.setenv("MIRAGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("MIRAGE_CACHE", raising=False)
    return tmp_path / "cache"


def test_signature_follows_mirage():
    params = list(inspect.signature(KNGraph.superoptimize).parameters)[1:]
    assert params[:len(MIRAGE_ORDER)] == MIRAGE_ORDER
    defaults = {k: p.default for k, p in inspect.signature(KNGraph.superoptimize).parameters.items()}
    assert defaults["config"] is None and defaults["backend"] == "cuda"
    assert (defaults["warmup_iters"], defaults["profile_iters"]) == (16, 1000)
    assert defaults["use_cached_graphs"] is True and defaults["is_formal_verified"] is False


def test_positional_call_in_mirage_order():
    g = rmsnorm_linear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing ignored in this call: no warning
        best = g.superoptimize([(-1, -1, -1), (1, -1, -1)], [(1, -1, -1)], [(4, 1, 1), (8, 1, 1)], None,
                               [-1, 0, 1], [1, 4], False, "mlp", "cuda", 2, 20, False, False, False, False,
                               measure=False, **FAST)
    cfg = best.search.config
    assert cfg.imaps == ((-1, -1, -1), (1, -1, -1)) and cfg.omaps == ((1, -1, -1),)
    assert cfg.griddims == ((4, 1, 1), (8, 1, 1)) and cfg.fmaps == (-1, 0, 1) and cfg.franges == (1, 4)
    assert (cfg.warmup_iters, cfg.profile_iters) == (2, 20)
    assert len(best.search.candidates) >= 2  # a fused candidate besides the reference
    for c in best.search.candidates:
        for op in c.graph.ops:
            if op.kind == "graph_def":
                assert op.body.grid_dim in ((4, 1, 1), (8, 1, 1)) and op.body.forloop_range in (1, 4)
        check_numpy(c.graph)


def test_default_config_is_bounded_like_mirages():
    """config=None is the preset that fits the program (here: mlp), not the generic limits."""
    best = rmsnorm_linear().superoptimize(measure=False, **FAST)
    cfg = best.search.config
    for k, v in PRESETS["mlp"].items():
        assert getattr(cfg, k) == v, k
    assert cfg.max_kernel_ops == 1 and cfg.max_graph_defs == 1
    assert [op.kind for op in best.ops] == ["graph_def"]
    check_numpy(best)


def test_ignored_arguments_give_one_warning_naming_them():
    with pytest.warns(UserWarning) as rec:
        best = rmsnorm_linear().superoptimize(blockdims=[(256, 1, 1)], backend="triton", use_graph_dataset=True,
                                              is_formal_verified=True, config="mlp", measure=False, **FAST)
    msgs = [str(w.message) for w in rec if "superoptimize" in str(w.message)]
    assert len(msgs) == 1
    for name in ("blockdims=[(256, 1, 1)]", "backend='triton'", "use_graph_dataset=True", "is_formal_verified=True"):
        assert name in msgs[0]
    check_numpy(best)  # still searched, verified and returned
    assert all(c.verification for c in best.search.candidates)


@pytest.mark.parametrize("kw,message", [
    (dict(backend="tpu"), "unknown backend 'tpu'"),
    (dict(warmup_iters=-1), "warmup_iters must be an integer >= 0"),
    (dict(profile_iters=0), "profile_iters must be an integer >= 1"),
    (dict(profile_iters=2.5), "profile_iters must be an integer"),
    (dict(use_cached_graphs="yes"), "use_cached_graphs must be True or False"),
    (dict(use_cached_graphs=False, cache_dir="x"), "cache_dir given with use_cached_graphs=False"),
    (dict(config="fastest"), "unknown search preset 'fastest'"),
])
def test_bad_arguments_are_clear_errors(kw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        rmsnorm_linear().superoptimize(measure=False, **kw)


def test_use_cached_graphs_uses_the_user_cache_directory(user_cache):
    first = rmsnorm_linear().superoptimize(config="mlp", measure=False, **FAST)
    assert not first.search.from_cache
    entries = list((user_cache / "search").glob("*.mlir"))
    assert len(entries) == 1
    again = rmsnorm_linear().superoptimize(config="mlp", measure=False, **FAST)
    assert again.search.from_cache and again.to_mlir() == first.to_mlir()
    check_numpy(again)
    fresh = rmsnorm_linear().superoptimize(config="mlp", use_cached_graphs=False, measure=False, **FAST)
    assert not fresh.search.from_cache and fresh.search.stats.states > 0


def test_user_cache_dir_follows_xdg(monkeypatch, tmp_path):
    from mirage.paths import bundle_dir, search_cache_dir, user_cache_dir

    monkeypatch.delenv("MIRAGE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cache_dir() == str(tmp_path / "xdg" / "mirage")
    assert search_cache_dir() == str(tmp_path / "xdg" / "mirage" / "search")
    assert bundle_dir() == str(tmp_path / "xdg" / "mirage" / "bundles")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_cache_dir() == str(tmp_path / "home" / ".cache" / "mirage")


def test_compile_defaults_to_the_user_cache_directory(user_cache):
    from mirage.lower import clear_cache

    clear_cache()
    g = mi.load_mlir(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "rmsnorm_linear_fused.mlir"))[0]
    bundle = g.compile()
    assert os.path.dirname(bundle.path) == str(user_cache / "bundles")
    manifest = json.loads(open(os.path.join(bundle.path, "manifest.json")).read())
    assert manifest["format"] == "mirage-bundle" and manifest["inputs"][0]["shape"] == [2, 4096]


def test_warmup_and_profile_iters_reach_the_gpu_timing(monkeypatch):
    """With a GPU present the verified candidates are timed with these counts (the timing
    itself is replaced here: this machine may have no GPU)."""
    seen = []

    def fake_measure(res, progress=None):
        seen.append((res.config.warmup_iters, res.config.profile_iters))
        return {i: 10.0 - i for i in range(len(res.candidates))}  # the last candidate fastest

    monkeypatch.setattr(M, "gpu_available", lambda: True)
    monkeypatch.setattr(M, "measure_on_gpu", fake_measure)
    best = rmsnorm_linear().superoptimize(config="mlp", warmup_iters=3, profile_iters=50,
                                          use_cached_graphs=False, **FAST)
    assert seen == [(3, 50)]
    cands = best.search.candidates
    assert [c.measured_us for c in cands] == sorted(c.measured_us for c in cands)
    assert best is cands[0].graph
    check_numpy(best)


@pytest.mark.parametrize("iters,plan", [(1000, (100, 10)), (200, (20, 10)), (15, (2, 10)), (5, (1, 5)), (1, (1, 1))])
def test_timing_plan_times_at_least_profile_iters(iters, plan):
    reps, inner = M.timing_plan(iters)
    assert (reps, inner) == plan and reps * inner >= iters


def test_candidates_that_do_not_lower_are_left_out_of_timing(monkeypatch, tmp_path):
    import mirage.lower as L

    ref = mi.load_mlir(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "rmsnorm_linear.mlir"))[0]
    fused = mi.load_mlir(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "rmsnorm_linear_fused.mlir"))[0]
    real = L.compile

    def compile_or_fail(g, target, out_dir, *a, **k):
        if os.path.basename(out_dir) == "c1":
            raise L.LoweringError("planted: no plan for this block graph")
        return real(g, target, out_dir, *a, **k)

    monkeypatch.setattr(L, "compile", compile_or_fail)
    path, dropped = M.variant_bundle([("c0", fused), ("c1", fused), ("reference", ref)], str(tmp_path / "b"), "reference")
    assert dropped == {"c1": "planted: no plan for this block graph"}
    index = json.loads(open(os.path.join(path, "variants.json")).read())
    assert [v["name"] for v in index["variants"]] == ["c0", "reference"] and index["reference"] == "reference"
    with pytest.raises(L.LoweringError):  # the reference must lower: it is what the others are checked against
        M.variant_bundle([("c1", ref)], str(tmp_path / "b2"), "c1")


def test_set_gpu_device_id_and_bypass_compile_errors(monkeypatch):
    monkeypatch.setattr(mi.global_config, "gpu_device_id", 0)
    monkeypatch.setattr(mi.global_config, "bypass_compile_errors", False)
    mi.set_gpu_device_id(0)
    assert mi.global_config.gpu_device_id == 0
    for bad in (-1, "0", True, 1.5, None):
        with pytest.raises(ValueError, match="device_id must be a CUDA device index"):
            mi.set_gpu_device_id(bad)
    mi.bypass_compile_errors()
    assert mi.global_config.bypass_compile_errors is True
    mi.bypass_compile_errors(False)
    assert mi.global_config.bypass_compile_errors is False
    with pytest.raises(ValueError, match="True or False"):
        mi.bypass_compile_errors("yes")


def test_dropped_candidates_warn_unless_bypassed(monkeypatch):
    from mirage.search.result import SearchResult

    res = SearchResult(rmsnorm_linear(), [], None, 0.0, None)
    monkeypatch.setattr(mi.global_config, "bypass_compile_errors", False)
    with pytest.warns(UserWarning, match="c2: planted"):
        M.report_dropped(res, {"c2": "planted"})
    monkeypatch.setattr(mi.global_config, "bypass_compile_errors", True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        M.report_dropped(res, {"c3": "planted"})
    assert len(res.notes) == 2 and "c3: planted" in res.notes[1]  # recorded either way


def test_save_codes_writes_the_mlir_json_and_ptx(tmp_path):
    out = tmp_path / "codes"
    best = rmsnorm_linear().superoptimize(config="mlp", save_codes=str(out), measure=False, **FAST)
    graphs = mi.load_mlir(str(out / "rmsnorm_linear.candidates.mlir"))
    assert len(graphs) == len(best.search.candidates)
    assert graphs[0].ops and [op.kind for op in graphs[0].ops] == [op.kind for op in best.ops]
    check_numpy(graphs[0])
    again = mi.from_json(str(out / "rmsnorm_linear.best.json"))
    assert again.to_mlir() == best.to_mlir()
    manifest = json.loads((out / "rmsnorm_linear-sm_90" / "manifest.json").read_text())
    assert manifest["target"] == "sm_90" and manifest["kernels"]


def test_previous_checkpoint_is_read_back_and_never_overwritten(tmp_path):
    ck = tmp_path / "rmsnorm.json"
    first = rmsnorm_linear().superoptimize(config="mlp", previous_checkpoint=str(ck), measure=False, **FAST)
    data = json.loads(ck.read_text())
    assert data["format"] == "mirage-checkpoint" and len(data["graphs"]) >= 2
    again = rmsnorm_linear().superoptimize(config="mlp", previous_checkpoint=str(ck), measure=False, **FAST)
    assert again.search.from_cache and again.to_mlir() == first.to_mlir()
    check_numpy(again)
    # a file this implementation did not write (Mirage's own format): searched, file kept
    mirage_file = tmp_path / "mirage.json"
    mirage_file.write_text('[[{"op_type": "kn_input_op", "input_tensors": []}]]')
    with pytest.warns(UserWarning, match="not a checkpoint written by this implementation"):
        third = rmsnorm_linear().superoptimize(config="mlp", previous_checkpoint=str(mirage_file),
                                               measure=False, **FAST)
    assert not third.search.from_cache and mirage_file.read_text().startswith('[[{"op_type"')
    # results of another program are not taken
    with pytest.warns(UserWarning, match="takes or returns other tensors"):
        other = rmsnorm_linear(4, 256, 256).superoptimize(config="mlp", previous_checkpoint=str(ck),
                                                          measure=False, **FAST)
    assert not other.search.from_cache
    check_numpy(other)
