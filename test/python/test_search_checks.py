"""The checks of the best candidates (search/driver.py `_Checks`, `_verify_ranked`) and the
executor calls they run on: checks started while work items still run, on a ranking that
later items change, leave the result as it is when every check waits for the end (the
same candidates checked, in the same order, the same verified set and statistics)."""
import time

import pytest

from mirage.search import build as B, driver as D, superoptimize
from mirage.search import executor as X
from mirage.search.generator import Stats
from mirage.target import DEFAULT
from test_search import gqa_ref, rmsnorm_ref


class Inline:
    """An executor that runs each call when it is submitted (deterministic order)."""

    workers = 8

    def __init__(self):
        self.running, self._done, self._n = set(), [], 0

    def submit(self, fn, arg):
        self._n += 1
        self.running.add(self._n)
        self._done.append((self._n, fn(arg)))
        return self._n

    def next_done(self, timeout=None):
        h, out = self._done.pop(0)
        self.running.discard(h)
        return h, out


class C:
    def __init__(self, key):
        self.key = key


def test_wanted_names_the_checks_still_needed_in_rank_order():
    from mirage.search.config import make_config

    checks = D._Checks(rmsnorm_ref(2, 256, 256), make_config("mlp"), DEFAULT)
    ranked = [C(f"c{k}") for k in range(6)]
    names = lambda: [c.key for c in checks.wanted(ranked)]  # noqa: E731
    assert names() == ["c0", "c1", "c2"]  # top_k = 3, nothing known
    checks.running = {7: "c0"}  # in flight: counted as passing, not started again
    assert names() == ["c1", "c2"]
    checks.running = {}
    checks.outcomes = {"c0": ("float", False, "float64 check failed")}  # a rejection widens the window
    assert names() == ["c1", "c2", "c3"]
    checks.outcomes.update(c1=("formal", True, "equivalent"), c2=("formal", False, "not equivalent"))
    checks.running = {8: "c3"}
    assert names() == ["c4"]  # c1 passed, c3 may pass: one more
    checks.outcomes.update(c3=("formal", True, "equivalent"), c4=("formal", True, "equivalent"))
    checks.running = {}
    assert names() == []  # c1, c3, c4: three passed


def _found_of(monkeypatch, ref, preset, **kw):
    """(ref, cfg, found): what the search's enumeration found for `ref` (plan key -> (plan, cost))."""
    got = {}
    rank = D._rank

    def capture(ref, cfg, stats, found, *a, **k):
        got.update(ref=ref, cfg=cfg, found=dict(found))
        return rank(ref, cfg, stats, found, *a, **k)

    monkeypatch.setattr(D, "_rank", capture)
    superoptimize(ref, preset, workers=1, measure=False, **kw)
    monkeypatch.setattr(D, "_rank", rank)
    return got["ref"], got["cfg"], got["found"]


def _summary(res):
    s = res.stats
    return ([(c.key, c.verification) for c in res.candidates], [c.key for c in res.others],
            (s.verified, s.rejected, s.formal, s.formal_rejected, s.stopped))


_REJECT = {"keys": set()}
_CHECK = D._check_item


def _rejecting(arg):
    """`_check_item`, but the plans of _REJECT["keys"] fail the float64 check (a module
    function: the child process of `_rank`'s own pool runs it too)."""
    if B.plan_key(arg[0]) in _REJECT["keys"]:
        return "float", False, "float64 check failed"
    return _CHECK(arg)


@pytest.mark.parametrize("reject_best", [False, True])
def test_checks_started_on_an_earlier_ranking_change_nothing(monkeypatch, reject_best):
    ref, cfg, found = _found_of(monkeypatch, rmsnorm_ref(2, 256, 256), "mlp")
    final = D._Checks(ref, cfg, DEFAULT).rank(found)[0]
    assert len(final) > 6
    bad = final[1].key  # the second best fails its float64 check (reject_best: the best too)
    monkeypatch.setattr(D, "_check_item", _rejecting)
    monkeypatch.setitem(_REJECT, "keys", {bad, final[0].key} if reject_best else {bad})
    D._W["ref"] = ref
    # the ranking before the best three were found: its checks are of others, some of
    # them beyond the ones that the final ranking checks
    early = D._Checks(ref, cfg, DEFAULT, Inline())
    partial = {k: v for k, v in found.items() if k not in {x.key for x in final[:3]}}
    early.start(early.rank(partial)[0], Inline.workers)
    while early.running:
        early.record(*early.pool.next_done())
    ahead = set(early.outcomes)
    assert ahead and final[0].key not in ahead
    a = D._rank(ref, cfg, Stats(), found, DEFAULT, 0.0, early)
    b = D._rank(ref, cfg, Stats(), found, DEFAULT, 0.0, D._Checks(ref, cfg, DEFAULT, Inline()))
    c = D._rank(ref, cfg, Stats(), found, DEFAULT, 0.0, D._Checks(ref, cfg, DEFAULT), deadline=time.monotonic() + 600)
    assert _summary(a) == _summary(b) == _summary(c)
    checked = a.stats.verified + a.stats.rejected - a.stats.formal_rejected
    assert ahead - {x.key for x in final[:checked]}, "no check ahead was wasted: the test tests nothing"
    kept = [x for x in a.candidates if x.key != "reference"]
    assert len(kept) == cfg.top_k and bad not in {x.key for x in kept}
    assert all(x.verification.startswith("equivalent") for x in kept)
    assert a.stats.rejected == 1 + reject_best


def test_checks_run_beside_the_items_and_change_nothing(monkeypatch):
    # 2 workers: the checks of the best candidates so far start while items still run
    # (the seeds' best at once); the result is one worker's, which checks after the end
    kw = dict(tile_sizes=(16,), max_block_ops=9, time_limit=120, measure=False)
    one = superoptimize(gqa_ref(s=128), "attention", workers=1, **kw)
    during, ranking = [], []
    start, rank = D._Checks.start, D._rank

    def spy_start(self, ranked, room):
        before = set(self.running.values())
        start(self, ranked, room)
        if not ranking:
            during.extend(k for k in self.running.values() if k not in before)

    def spy_rank(*a, **k):
        ranking.append(True)
        return rank(*a, **k)

    monkeypatch.setattr(D._Checks, "start", spy_start)
    monkeypatch.setattr(D, "_rank", spy_rank)
    two = superoptimize(gqa_ref(s=128), "attention", workers=2, **kw)
    assert during, "no check started before the enumeration ended"
    assert not one.stats.stopped and not two.stats.stopped
    assert one.stats.states == two.stats.states and one.stats.pruned == two.stats.pruned
    assert _summary(one) == _summary(two)
    assert one.candidates[0].key != "reference"


def _square(x):
    return x * x


def _fail(x):
    raise ValueError(f"bad item {x}")


def _sleep(x):
    time.sleep(x)
    return x


def _no_init(deadline, stop_flag):
    pass


def test_local_pool_calls():
    pool = X.make("local", 2, _no_init, (), None)
    try:
        hs = {pool.submit(_square, k): k for k in range(5)}
        got = {}
        while pool.running:
            h, out = pool.next_done()
            got[hs[h]] = out
        assert got == {k: k * k for k in range(5)}
        pool.submit(_sleep, 30)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            pool.next_done(timeout=0.2)
        assert time.monotonic() - t0 < 5
        pool.submit(_fail, 3)
        with pytest.raises(ValueError, match="bad item 3"):
            pool.next_done()
        assert len(pool.running) == 1  # the sleeping call
    finally:
        t0 = time.monotonic()
        pool.close()  # abandons the call still running instead of waiting 30 s for it
        assert time.monotonic() - t0 < 10


def _blas_threads(_=None):
    """(OpenBLAS thread counts, threads of this process)."""
    import ctypes
    import os

    with open("/proc/self/maps") as f:
        paths = sorted({line.split()[-1] for line in f if "openblas" in line.lower()})
    counts = []
    for path in paths:
        lib = ctypes.CDLL(path)
        counts += [getattr(lib, get)() for get, put in X._OPENBLAS_COUNT if hasattr(lib, get)][:1]
    return counts, len(os.listdir("/proc/self/task"))


def _matmul(n):
    import numpy as np

    a = np.ones((n, n))
    return float((a @ a)[0, 0])


def test_local_pool_workers_inherit_one_blas_thread():
    # one worker per core, so one BLAS thread per worker; a forked worker that set the count
    # itself would first restart OpenBLAS's thread pool (a thread per core, each spinning
    # ~0.1 s): the workers inherit the count instead, and this process keeps its own
    before, _ = _blas_threads()
    if not before:
        pytest.skip("numpy does not use OpenBLAS here")
    pool = X.make("local", 2, D._ignore_sigint, (), None)
    try:
        for k in range(2):
            pool.submit(_blas_threads, k)
        while pool.running:
            _, (counts, threads) = pool.next_done()
            assert counts == [1] * len(before)
            assert threads == 1  # no BLAS thread pool restarted in the worker
        pool.submit(_matmul, 256)  # a BLAS call: still one thread
        assert pool.next_done()[1] == 256.0
        pool.submit(_blas_threads, None)
        assert pool.next_done()[1] == ([1] * len(before), 1)
    finally:
        pool.close()
    assert _blas_threads()[0] == before
