"""The search on a Ray cluster (`executor="ray"`, search/executor.py): the same states and
the same verified candidates as the local process pool, also when a worker is killed in
the middle; the time limit and Ctrl-C as locally; a clear error without Ray.

The cluster is started by the tests on this machine (`ray.init` with 2 CPUs: a head and
up to two task worker processes) and shut down after them."""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mirage.search import superoptimize
from test_search import gqa_ref, qknorm_ref
from test_search_interrupt import _ctrl_c_default

ROOT = Path(__file__).resolve().parents[2]

# reduced GQA and QKNorm (the benchmark programs' structure, examples/benchmarks.py):
# 19,086 and 38,774 states, 3 s and 6 s on 2 cores
PROGRAMS = {
    "gqa": (lambda: gqa_ref(s=128), dict(tile_sizes=(16,), max_block_ops=9)),
    "qknorm": (lambda: qknorm_ref(s=128), dict(tile_sizes=(16,), max_block_ops=10)),
}


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install '.[ray]' (CI installs it)")
    info = ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20, log_to_driver=False)
    yield info.address_info["gcs_address"]
    ray.shutdown()


_local: dict = {}


def search(name, workers=2, **kw):
    make, limits = PROGRAMS[name]
    return superoptimize(make(), "attention", workers=workers, time_limit=120, measure=False, **limits, **kw)


def local(name):
    if name not in _local:
        _local[name] = search(name)
    return _local[name]


def assert_same(a, b):
    assert not a.stats.stopped and not b.stats.stopped
    assert a.stats.states == b.stats.states and a.stats.pruned == b.stats.pruned
    assert a.stats.candidates == b.stats.candidates and a.stats.rejected == b.stats.rejected
    assert [c.key for c in a.candidates] == [c.key for c in b.candidates]
    assert [c.verification for c in a.candidates] == [c.verification for c in b.candidates]
    assert a.best.to_mlir() == b.best.to_mlir()
    assert a.candidates[0].key != "reference" and a.candidates[0].verification.startswith("equivalent")


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_ray_finds_what_the_local_pool_finds(cluster, name):
    assert_same(search(name, executor="ray"), local(name))


def _items(name):
    """(ref, cfg, pro, bound, generator, work items) of a reduced program, as the driver makes them."""
    from mirage.search import driver as D
    from mirage.search.config import make_config
    from mirage.search.generator import Generator, Stats
    from mirage.search.prologue import aliased, analyze

    make, limits = PROGRAMS[name]
    ref, cfg = make(), make_config("attention", **limits)
    pro = analyze(ref) or aliased(ref)
    seeds = D._seeds(ref, cfg, D.DEFAULT, pro, Stats().pruned)
    bound = D.BOUND_WINDOW * min(v[1] for v in seeds.values())
    gen = Generator(pro.core if pro is not None else ref, cfg, bound=bound)
    return ref, cfg, pro, bound, gen, D.work_items(gen, bound=bound)[0]


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_an_item_cut_into_parts_visits_what_it_visits_whole(name):
    # driver.split cuts an item where its kernel closes into several kernel states: its
    # parts together visit the same states, count the same pruning and candidates and
    # find the same plans at the same costs as the whole item
    from collections import Counter

    from mirage.search import driver as D

    ref, cfg, pro, bound, gen, items = _items(name)
    units, weights = D.split(gen, items)
    assert len(units) == len(weights) > len(items)  # some items are cut (GQA 31 -> 73, QKNorm 31 -> 101)
    D._init_worker(None, None, ref, cfg, pro, bound, quiet=False)  # quiet would ignore Ctrl-C here and in the
    # processes the later tests start (an ignored SIGINT is inherited)
    whole, parts = {}, {}
    for it in items:
        f, s = D._run_item(it)
        whole[repr(it)] = (s.states, dict(s.pruned), s.candidates, s.rejected, f)
    for u in units:
        f, s = D._run_item(u)
        p = parts.setdefault(repr(u[:3]), [0, Counter(), 0, 0, {}])
        p[0] += s.states
        p[1].update(s.pruned)
        p[2] += s.candidates
        p[3] += s.rejected
        p[4].update(f)
    assert whole == {k: (a, dict(b), c, d, e) for k, (a, b, c, d, e) in parts.items()}
    assert sum(w[0] for w in whole.values()) > 10000


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_pools_workers_cut_the_items_as_this_process_does(name):
    # with a pool, driver.split's chunks run on its workers, each with a generator of its
    # own (here not forked from this one: its expression table numbers expressions in
    # another order): the same units, and outputs that group the same units together
    from mirage.search import driver as D, executor as X

    ref, cfg, pro, bound, gen, items = _items(name)
    here = D.split(gen, items)
    pool = X.make("local", 2, D._init_worker, (ref, cfg, pro, bound, D.DEFAULT, True, None), None)
    try:
        there = D.split(gen, items, lambda args: D._in_order(pool, D._split_call, args))
    finally:
        pool.close()
    assert here == there
    assert len(here[0]) > len(items) and sum(m[1] is not None for m in here[1]) > len(items) // 2
    assert len(D._Lanes(*here).groups) < len(here[0])  # some units share their outputs


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_worker_started_from_the_drivers_generator_visits_what_a_fresh_one_visits(name):
    # the local pool's workers start from the driver's generator, whose memos
    # `work_items` filled (driver._init_worker's gen): each unit visits the same states, counts the same
    # pruning and candidates and finds the same plans at the same costs as on a fresh one
    from mirage.search import driver as D

    ref, cfg, pro, bound, gen, items = _items(name)
    units, _ = D.split(gen, items)
    runs = []
    for warm in (None, gen):
        D._init_worker(None, None, ref, cfg, pro, bound, quiet=False, gen=warm)
        assert (D._W["gen"] is gen) == (warm is gen)
        runs.append([(s.states, dict(s.pruned), s.candidates, s.rejected, f)
                     for f, s in map(D._run_item, units)])
    assert runs[0] == runs[1]
    assert sum(r[0] for r in runs[0]) > 10000


def test_lanes_deal_every_unit_once_in_runs_of_one_kind():
    # driver._Lanes: whatever the order in which workers return, every unit is dealt once,
    # in calls of units consecutive in the kind order; a worker that continues its lane
    # gets the units that follow its last call's, and a lane taken by a worker without
    # one is the back of another lane (contiguous in that order)
    import random

    from mirage.search import driver as D

    *_, gen, items = _items("qknorm")
    units, weights = D.split(gen, items)
    for seed in range(5):
        rnd = random.Random(seed)
        lanes = D._Lanes(units, weights, workers=4)
        pos = {k: i for i, k in enumerate(lanes.order)}
        dealt, flight, sizes = [], [], []

        def deal(lane=None):
            nxt = lanes.take(lane) if lanes.left else None
            if nxt is not None:
                lane_, call = nxt
                assert [pos[k] for k in call] == list(range(pos[call[0]], pos[call[0]] + len(call)))
                flight.append(nxt)
                dealt.extend(call)
                sizes.append(len(call))
            return nxt

        for _ in range(4):  # four workers start
            deal()
        while flight:
            lane, call = flight.pop(rnd.randrange(len(flight)))
            lanes.seen_call(call, rnd.random() * len(call))
            if rnd.random() < 0.1:  # the worker runs a check instead: the lane waits
                lanes.release(lane)
                deal()
            else:
                nxt = deal(lane)
                if nxt is not None and nxt[0] == lane:
                    assert pos[nxt[1][0]] == pos[call[-1]] + 1  # the lane goes on in kind order
        assert sorted(dealt) == list(range(len(units)))
        assert not any(lanes.lanes)
        assert max(sizes) > 1 and min(sizes) == 1  # calls of several units, single ones at the end


@pytest.mark.parametrize("workers", [1, 2])
def test_the_deal_order_does_not_change_the_result(monkeypatch, workers):
    # the units dealt in another order (their text reversed: no kind order, no lanes of one
    # kind): the same states, candidates and verified programs
    from mirage.search import driver as D

    monkeypatch.setattr(D, "_kind", lambda unit: repr(unit)[::-1])
    assert_same(search("gqa", workers=workers), local("gqa"))


def _task_workers() -> list[int]:
    """Processes below this one (the cluster the test started) running a search task."""
    children: dict = {}
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
        except (OSError, ValueError):
            continue
    mine, todo = [], [os.getpid()]
    while todo:
        kids = children.get(todo.pop(), [])
        mine += kids
        todo += kids
    out = []
    for p in mine:
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if f.read().startswith(b"ray::_task"):
                    out.append(p)
        except OSError:
            continue
    return out


def test_a_worker_killed_mid_search_changes_nothing(cluster):
    want = local("qknorm")
    killed = []

    def kill_one():
        # the first worker seen running an item (the enumeration takes ~1-2 s here since
        # the block-DFS memos: a fixed wait before looking missed it)
        deadline = time.monotonic() + 20
        while not killed and time.monotonic() < deadline:
            for p in _task_workers():
                os.kill(p, signal.SIGKILL)
                killed.append(p)
                break
            time.sleep(0.01)

    t = threading.Thread(target=kill_one)
    t.start()
    got = search("qknorm", executor="ray")
    t.join()
    assert killed, "no search task was seen running"
    # the killed item ran again: counted once, as in the local run
    assert_same(got, want)


def test_time_limit_on_ray(cluster):
    sys.path.insert(0, str(ROOT / "examples"))
    from benchmarks import BENCHMARKS

    t0 = time.monotonic()
    res = superoptimize(BENCHMARKS["gqa"].reference(1), "attention", workers=2, time_limit=6, measure=False,
                        executor="ray")
    took = time.monotonic() - t0
    assert res.stats.stopped == "time limit"
    assert took < 6 + 4, took  # the enumeration stops at 3 s, the checks at 6 s; slack for a loaded CI
    assert res.candidates  # what passed, or the reference


def test_mirage_opt_on_the_cluster_address_and_ctrl_c(cluster):
    # another process reaches the cluster through MIRAGE_RAY_ADDRESS; Ctrl-C in the
    # middle of its search returns the best verified program so far and exits with 130
    env = dict(os.environ, PYTHONUNBUFFERED="1", MIRAGE_RAY_ADDRESS=cluster)
    proc = subprocess.Popen([sys.executable, "-m", "mirage.mlir.opt", str(ROOT / "examples" / "gqa.mlir"),
                             "--mirage-superoptimize=executor=ray workers=2 cache-dir=none"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=_ctrl_c_default)
    seen = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        seen.append(proc.stderr.readline())
        if seen[-1].startswith("[search] enumeration:") or not seen[-1]:
            break
    assert seen[-1].startswith("[search] enumeration:"), "".join(seen[-20:])
    time.sleep(1.0)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert time.monotonic() - t0 < 5.0, (time.monotonic() - t0, err[-2000:])
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "interrupted (Ctrl-C)" in err
    assert "func.func @gqa" in out



def test_ray_pool_calls(cluster):
    # the executor's calls on Ray as on the local pool (test_search_checks.test_local_pool_calls)
    import math

    from mirage.search import driver as D
    from mirage.search import executor as X

    pool = X.make("ray", 2, D._ignore_sigint, (), None)
    try:
        hs = {pool.submit(math.factorial, k): k for k in range(5)}
        got = {}
        while pool.running:
            h, out = pool.next_done()
            got[hs[h]] = out
        assert got == {k: math.factorial(k) for k in range(5)}
        pool.submit(time.sleep, 30)
        with pytest.raises(TimeoutError):
            pool.next_done(timeout=0.5)
        pool.submit(math.factorial, -1)  # raises on every retry
        with pytest.raises(Exception, match="factorial\\(\\) not defined for negative values"):
            pool.next_done()
        assert len(pool.running) == 1  # the sleeping call
    finally:
        t0 = time.monotonic()
        pool.close()  # abandons the call still running
        assert time.monotonic() - t0 < 10

NO_RAY = f"""
import sys
sys.modules["ray"] = None  # as if Ray were not installed
sys.path.insert(0, {str(ROOT / 'test' / 'python')!r})
from test_search import rmsnorm_ref
from mirage.search import superoptimize
res = superoptimize(rmsnorm_ref(2, 256, 256), "mlp", workers=2, measure=False)
print("local:", res.candidates[0].verification.split(" (")[0])
try:
    superoptimize(rmsnorm_ref(2, 256, 256), "mlp", workers=2, measure=False, executor="ray")
except ImportError as e:
    print("ray:", e)
"""


def test_without_ray_the_default_works_and_ray_says_what_to_install():
    out = subprocess.run([sys.executable, "-c", NO_RAY], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "local: equivalent" in out.stdout
    assert "ray: executor='ray' needs Ray, which is not installed: pip install 'mirage[ray]'" in out.stdout


def test_bad_executor_is_a_diagnostic():
    with pytest.raises(ValueError, match="executor='spark': must be 'local' or 'ray'"):
        superoptimize(gqa_ref(s=64), "attention", executor="spark")
    out = subprocess.run([sys.executable, "-m", "mirage.mlir.opt", str(ROOT / "examples" / "gqa.mlir"),
                          "--mirage-superoptimize=executor=spark"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "executor" in out.stderr and "expected one of local, ray, got 'spark'" in out.stderr


def test_an_address_without_a_cluster_is_a_diagnostic():
    env = dict(os.environ, MIRAGE_RAY_ADDRESS="127.0.0.1:1")  # nothing listens on port 1
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "mirage.mlir.opt", str(ROOT / "examples" / "gqa.mlir"),
                          "--mirage-superoptimize=executor=ray cache-dir=none"], capture_output=True, text=True,
                         timeout=120, env=env)
    assert time.monotonic() - t0 < 30  # Ray itself would retry for minutes
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "MIRAGE_RAY_ADDRESS=127.0.0.1:1: no Ray cluster answers there" in out.stderr
