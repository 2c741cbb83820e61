"""Units of the same outputs dealt together (driver.split's outputs, driver._Lanes' groups):
the units whose first kernel adds tensors of the same values search below them the same
block-graph DFSs, which a worker that ran them once replays (generator._BlockCtx.run).
The groups must stay whole in every call, a group's later units must replay, and the
search must find what one worker finds, whatever the number of workers."""
import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from mirage.search import driver as D  # noqa: E402
from test_search_ray import _items, assert_same, search  # noqa: E402
from test_search_block_memo import count_block_dfs  # noqa: E402


@pytest.fixture(scope="module")
def gqa():
    return _items("gqa")


def deal_all(lanes, workers, rnd, release=0.1):
    """The calls `lanes` deals to `workers` workers whose calls return in a random order, a
    worker going off to a check (its lane released) with probability `release`."""
    calls, flight = [], []

    def deal(lane=None):
        nxt = lanes.take(lane) if lanes.left else None
        if nxt is not None:
            flight.append(nxt)
            calls.append(nxt[1])

    for _ in range(workers):
        deal()
    while flight:
        lane, call = flight.pop(rnd.randrange(len(flight)))
        lanes.seen_call(call, rnd.random() * len(call))
        if rnd.random() < release:
            lanes.release(lane)
            deal()
        else:
            deal(lane)
    return calls


def test_lanes_deal_groups_whole(gqa):
    *_, gen, items = gqa
    units, meta = D.split(gen, items)
    outs = [m[1] for m in meta]
    by_outs: dict = {}
    for k, o in enumerate(outs):
        if o is not None:
            by_outs.setdefault(o, []).append(k)
    assert sum(len(g) > 1 for g in by_outs.values()) >= 5  # the program has groups to deal (5 of 2 units)
    for seed in range(5):
        lanes = D._Lanes(units, meta, workers=4)
        assert sorted(lanes.order) == list(range(len(units)))
        calls = deal_all(lanes, 4, random.Random(seed))
        assert sorted(k for c in calls for k in c) == list(range(len(units)))
        for g in by_outs.values():  # each group in one call
            assert sum(1 for c in calls if set(g) & set(c)) == 1, g


def test_a_group_run_in_one_worker_replays_and_visits_what_each_unit_visits_alone(gqa, monkeypatch):
    ref, cfg, pro, bound, gen, items = gqa
    units, meta = D.split(gen, items)
    lanes = D._Lanes(units, meta)
    groups = [g for g in lanes.groups if len(g) > 1]
    visited = count_block_dfs(monkeypatch)

    def run(us, fresh_each):
        out = []
        for k in us:
            if fresh_each or not out:
                D._init_worker(None, None, ref, cfg, pro, bound, quiet=False)
            f, s = D._run_item(units[k])
            out.append((s.kernel_states, s.block_states, dict(s.pruned), s.candidates, s.rejected, f))
        return out

    alone, together = [], []
    visited[0] = 0
    for g in groups:
        alone += run(g, True)
    apart = visited[0]
    visited[0] = 0
    for g in groups:
        together += run(g, False)
    assert together == alone
    assert sum(x[1] for x in alone) > 1000
    assert visited[0] < 0.8 * apart  # the later units of a group replay the first's DFSs


def test_groups_dealt_to_workers_find_what_one_worker_finds():
    assert_same(search("gqa", workers=3), search("gqa", workers=1))
