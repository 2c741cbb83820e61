"""Compile caches across processes (issue 15): the search cache keeps a search stopped by its
time limit (a larger limit searches again), takes this user's own entries without re-running
the verifier and checks any other entry; the PTX compiler's output is cached on disk by the
gpu module's text, the pipeline and the versions (`mirage.lower.ptx_cache`)."""
import os
import warnings

import pytest

import mirage.search.cache as C
from mirage.search.config import make_config
from test_search import rmsnorm_ref


def _entry(tmp_path, stopped=None, time_limit=30.0):
    ref = rmsnorm_ref(2, 256, 256)
    cfg = make_config("mlp", time_limit=time_limit)
    p = C.store(str(tmp_path), ref, cfg, [rmsnorm_ref(2, 256, 256)], stopped)
    return ref, cfg, p


def test_a_time_limited_entry_is_used_up_to_its_limit(tmp_path):
    ref, cfg, p = _entry(tmp_path, "time limit", 30.0)
    assert "stopped at time_limit=30.0" in open(p).readline()
    assert C.load(str(tmp_path), ref, cfg) is not None
    assert C.load(str(tmp_path), ref, cfg.with_(time_limit=10.0)) is not None  # a smaller limit: the entry
    assert C.load(str(tmp_path), ref, cfg.with_(time_limit=60.0)) is None     # a larger one searches again
    assert os.path.exists(p)  # ... and replaces the entry when it is done, not before
    ref, cfg, p = _entry(tmp_path)  # a complete search serves every limit
    assert C.load(str(tmp_path), ref, cfg.with_(time_limit=600.0)) is not None


def test_own_entries_skip_the_verifier_others_do_not(tmp_path, monkeypatch):
    ref, cfg, p = _entry(tmp_path)
    checked = []
    real = C.check_entry
    monkeypatch.setattr(C, "check_entry", lambda r, gs: checked.append(1) or real(r, gs))
    assert C.load(str(tmp_path), ref, cfg) is not None and not checked  # written by this user
    # the same text under another user's key (or edited): checked by the verifier again
    text = open(p).read()
    head, body = text.split("\n", 1)
    with open(p, "w") as f:
        f.write(head[:-8] + "00000000\n" + body)
    assert C.load(str(tmp_path), ref, cfg) is not None and checked == [1]
    # an edit that keeps the HMAC line but changes the program: the verifier rejects it
    with open(p, "w") as f:
        f.write(head + "\n" + body.replace("kn.rms_norm", "kn.exp", 1) if "kn.rms_norm" in body
                else head + "\n" + body.replace("kn.mul", "kn.add", 1))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert C.load(str(tmp_path), ref, cfg) is None
    assert "discarded" in str(w[-1].message) and checked == [1, 1]


def test_the_key_file_is_private_and_shared_by_concurrent_creators(tmp_path, monkeypatch):
    monkeypatch.setenv("MIRAGE_CACHE_DIR", str(tmp_path / "root"))
    k = C.secret()
    assert len(k) == 32 and C.secret() == k
    p = tmp_path / "root" / "search-cache.key"
    assert os.stat(p).st_mode & 0o777 == 0o600
    assert [x for x in os.listdir(tmp_path / "root")] == ["search-cache.key"]  # no temp file left


def test_a_time_limited_search_is_cached_by_the_driver(tmp_path):
    from mirage.search import superoptimize

    ref = rmsnorm_ref(2, 256, 256)
    first = superoptimize(ref, "mlp", cache_dir=str(tmp_path), time_limit=1e-3, measure=False)
    assert first.stats.stopped == "time limit" and not first.from_cache
    again = superoptimize(ref, "mlp", cache_dir=str(tmp_path), time_limit=1e-3, measure=False)
    assert again.from_cache and again.best.to_mlir() == first.best.to_mlir()
    more = superoptimize(ref, "mlp", cache_dir=str(tmp_path), time_limit=30, measure=False)
    assert not more.from_cache  # a larger limit searched again


# -- the PTX cache (needs the MLIR bindings) -----------------------------------------------

def test_ptx_is_compiled_once_across_processes(monkeypatch, tmp_path):
    pytest.importorskip("mlir.ir")
    import mirage.lower as L
    from mirage.lower import pipeline, ptx_cache

    monkeypatch.setenv("MIRAGE_CACHE_DIR", str(tmp_path / "root"))
    runs = []
    real = pipeline.run_pipeline
    monkeypatch.setattr(pipeline, "run_pipeline", lambda text, target="sm_90": runs.append(target) or real(text, target))
    g = rmsnorm_ref(2, 256, 256)
    L.clear_cache()
    first = L.compile(g, "sm_90")
    assert runs == ["sm_90"]
    L.clear_cache()  # a new process: the in-memory bundle cache is empty, the disk cache is not
    again = L.compile(g, "sm_90")
    assert runs == ["sm_90"] and again.ptx == first.ptx
    files = os.listdir(tmp_path / "root" / "ptx")
    assert files == [ptx_cache.key(first.lowered.module, "sm_90") + ".ptx"]
    L.clear_cache()
    L.compile(g, "sm_80")  # another target: another key
    assert runs == ["sm_90", "sm_80"] and len(os.listdir(tmp_path / "root" / "ptx")) == 2
    # a bad file (empty: e.g. a full disk before atomic writes) is compiled again and replaced
    p = ptx_cache.path(first.lowered.module, "sm_90")
    open(p, "w").close()
    L.clear_cache()
    assert L.compile(g, "sm_90").ptx == first.ptx and runs[-1] == "sm_90" and len(runs) == 3
    assert open(p).read() == first.ptx
    # the version is in the key
    monkeypatch.setattr(ptx_cache, "FORMAT", "mirage-ptx-cache test")
    assert ptx_cache.key(first.lowered.module, "sm_90") != os.path.basename(p)[:-4]
