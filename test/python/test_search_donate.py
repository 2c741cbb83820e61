"""Units cut while they run (driver._Piece, driver._Donated): a unit still running when a
worker is idle (or past a budget: these tests) hands the pairs of its next kernel it did
not run to other workers. Its pieces
together must visit what the unit visits whole, the driver must merge them only where no
kernel state below was expanded in two of them (else run the unit again whole), and the
search must find what one worker finds however the units are cut."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from mirage.search import driver as D, executor as X  # noqa: E402
from mirage.search.absexpr import Table  # noqa: E402
from test_search_ray import PROGRAMS, _items, assert_same, cluster, search  # noqa: E402,F401 (cluster: a fixture)


def _summary(runs):
    """(states, pruning, candidates, rejected, found) of (found, stats, ...) runs together."""
    from collections import Counter

    states, pruned, cands, rejected, found = 0, Counter(), 0, 0, {}
    for f, s, *_ in runs:
        states += s.states
        pruned.update(s.pruned)
        cands += s.candidates
        rejected += s.rejected
        found.update(f)
    return states, {k: v for k, v in pruned.items() if v}, cands, rejected, found


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_unit_cut_at_every_pair_visits_what_it_visits_whole(name):
    ref, cfg, pro, bound, gen, items = _items(name)
    units, meta = D.split(gen, items)
    D._init_worker(None, None, ref, cfg, pro, bound, quiet=False)
    compared = pieces = 0
    for u, m in zip(units, meta):
        if u[0] != "graph_def" or m[1] is None:  # units that `_Donated` does not cut
            continue
        whole = D._run_item(u)
        f, s, stop, n, keys = D._run_item(u, (0, None, None))  # the piece path, uncut
        assert stop is None and keys == frozenset()
        assert _summary([(f, s)]) == _summary([whole])
        if not n:  # its kernel states are pruned before a next kernel
            continue
        runs = [D._run_item(u, (i, i + 1, None)) for i in range(n)]
        assert all(r[2] is None and r[3] == n and r[4] is not None for r in runs)
        assert _summary(runs) == _summary([whole])
        compared += 1
        pieces += n
    assert compared >= 20 and pieces > 5 * compared  # most units that can be cut reach a next kernel


def test_a_piece_past_its_budget_stops_at_a_pair_and_the_rest_completes_it():
    ref, cfg, pro, bound, gen, items = _items("gqa")
    units, meta = D.split(gen, items)
    D._init_worker(None, None, ref, cfg, pro, bound, quiet=False)
    u = next(u for u, m in zip(units, meta) if u[0] == "graph_def" and m[1] is not None
             and (D._run_item(u, (0, None, None))[3] or 0) > 3)
    first = D._run_item(u, (0, None, 0.0))  # past its budget after its first pair
    assert first[2] == 1
    rest = D._run_item(u, (1, None, None))
    assert rest[2] is None
    assert _summary([first, rest]) == _summary([D._run_item(u)])


def test_a_group_stops_where_its_first_unit_stopped():
    # units of the same outputs run in one call (driver._Lanes), the later ones replaying
    # the first's block-graph DFSs: only the first stops, the others stop at the same pair,
    # so that the rest goes into one call again (`_run_units`)
    ref, cfg, pro, bound, gen, items = _items("gqa")
    units, meta = D.split(gen, items)
    D._init_worker(None, None, ref, cfg, pro, bound, quiet=False)
    lanes = D._Lanes(units, meta)
    group = next(g for g in lanes.groups if len(g) > 1 and (D._run_item(units[g[0]], (0, None, None))[3] or 0) > 2)
    first = D._run_units([(units[k], 0, None, 0.0) for k in group])  # the first stops after one pair
    assert first[0] == {} and [(p[0], p[3]) for p in first[2]] == [(i, 1) for i in range(len(group))]
    rest = D._run_units([(units[k], 1, None, None) for k in group])
    assert [p[3] for p in rest[2]] == [None] * len(group)  # nobody waits (executor.steal)
    assert _summary([p[1:] for p in first[2] + rest[2]]) == _summary([D._run_item(units[k]) for k in group])


def test_state_digests_do_not_depend_on_the_order_the_table_made_them():
    # the same expressions made in two orders (as two workers would) get other ids, the
    # same digests; other expressions other digests
    def make(T, order):
        x, y, z = T.var(0), T.var(1), T.var(2)
        made = {}
        for k in order:
            if k == "a":
                made[k] = T.add(T.mul(x, T.exp(y)), T.div(z, T.sqrt(T.add(x, T.const()))))
            elif k == "b":
                made[k] = T.add(T.div(z, T.sqrt(T.add(T.const(), x))), T.mul(T.exp(y), x))
            else:
                made[k] = T.sum(4, T.mul(z, T.fn("silu", y)))
        return made

    t1, t2 = Table(), Table()
    m1, m2 = make(t1, "cab"), make(t2, "abc")
    assert m1["a"] == m1["b"]  # one normal form
    assert [m1[k] for k in "abc"] != [m2[k] for k in "abc"]  # other ids
    d1 = {k: D._expr_digest(t1, e, {}) for k, e in m1.items()}
    d2 = {k: D._expr_digest(t2, e, {}) for k, e in m2.items()}
    assert d1 == d2 and d1["a"] != d1["c"]
    key = lambda T, m: ((((m["a"], (4, 16), ("b", "d"), True), (m["c"], (4,), ("b",), False)), 2, 1, (1, (1, 0), 3)))
    assert D._state_digest(t1, key(t1, m1), {}) == D._state_digest(t2, key(t2, m2), {})
    assert D._state_digest(t1, key(t1, m1), {}) != D._state_digest(t1, key(t1, {**m1, "a": m1["c"]}), {})


def _cut_search(monkeypatch, name, **kw):
    """A 2-worker search whose every unit that can be cut is cut at each of its pairs (as if
    a worker were always idle, from the start); returns (result, the driver's _Donated)."""
    seen = []

    class Seen(D._Donated):
        def __init__(self, *a):
            super().__init__(*a)
            seen.append(self)

    monkeypatch.setattr(D, "_Donated", Seen)
    monkeypatch.setattr(D, "DONATE_MIN", 0.0)
    monkeypatch.setattr(X, "steal", lambda: True)  # the pool's workers are forked: they see it
    return search(name, workers=2, **kw), seen[-1]


def _steals(n):
    return [X.steal() for _ in range(n)]


def test_a_local_worker_steals_as_many_times_as_workers_are_wanted():
    pool = X.make("local", 2, D._ignore_sigint, (), None)
    try:
        pool.submit(_steals, 3)
        assert pool.next_done(timeout=60)[1] == [False] * 3  # nobody waits
        assert pool.want(2) == 0
        pool.submit(_steals, 3)
        assert pool.next_done(timeout=60)[1] == [True, True, False]
        assert pool.want(1) == 2  # both taken
        assert pool.want(0) == 0  # the driver dealt the work after all: none taken
        pool.submit(_steals, 1)
        assert pool.next_done(timeout=60)[1] == [False]
    finally:
        pool.close()


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_search_whose_units_are_cut_finds_what_one_worker_finds(monkeypatch, name):
    res, donated = _cut_search(monkeypatch, name)
    assert donated.cut >= 50 and donated.again == 0  # GQA 60 units cut, QKNorm 87
    assert_same(res, search(name, workers=1))


def test_pieces_that_expanded_a_state_of_one_key_run_again_whole():
    # where two pieces expanded a kernel state of one key, one run would have searched it
    # once (the second arrival hits the memo): the driver drops the pieces and runs the
    # unit again whole, first; disjoint pieces are merged once all have returned
    from mirage.search.config import make_config
    from mirage.search.generator import Stats

    units = [("graph_def", (0,), None)] * 4
    meta = [(1.0, ("outs",))] * 4
    d = D._Donated(units, meta, make_config("attention"), workers=4)
    assert d.can(0)

    def back(k, lo, hi, stop, keys, n=9, m=2):
        return d.returned([((k, lo, hi, 1.0), {}, Stats(), stop, n, keys)], m)

    # unit 0 ran pairs 0-2 of 9 and stopped: pairs 3-8 become 4 pieces
    assert back(0, 0, None, 3, frozenset({b"x"}), m=4) == []
    assert list(d.pending) == [((0,), 3, 4), ((0,), 4, 6), ((0,), 6, 7), ((0,), 7, None)]
    outs = [back(0, *d.pending.popleft()[1:], None, frozenset({bytes([j])})) for j in range(4)]
    assert outs[:3] == [[], [], []] and [k for k, _ in outs[3]] == [0] and len(outs[3][0][1]) == 5
    # a call of a group (units 1 and 2) stopped at pair 5: its rest is one call of both again
    got = d.returned([((k, 0, None, 1.0), {}, Stats(), 5, 9, frozenset()) for k in (1, 2)])
    assert got == [] and list(d.pending) == [((1, 2), 5, 7), ((1, 2), 7, None)]
    # ... whose pieces of unit 2 expanded a state of one key: unit 2 runs again whole, unit 1 is merged
    for ks, lo, hi in [d.pending.popleft(), d.pending.popleft()]:
        got = d.returned([((k, lo, hi, 1.0), {}, Stats(), None, 9, frozenset({b"k" if k == 2 else bytes([lo])}))
                          for k in ks], 0)
    assert [k for k, _ in got] == [1] and list(d.pending) == [((2,), 0, None)]  # whole, no budget (`deal`)
    assert (d.cut, d.again) == (3, 1)
    # keys that cannot be compared (None) run it again too
    assert back(3, 0, None, 8, None) == []  # one pair left: one piece
    assert back(3, *d.pending.pop()[1:], None, frozenset()) == []
    assert list(d.pending) == [((3,), 0, None), ((2,), 0, None)] and d.again == 2


def test_a_ray_worker_steals_as_many_times_as_workers_are_wanted(cluster):
    import time

    def steal_for(seconds):  # nested: Ray sends it by value (the test module is not on the workers' path)
        t, n = time.monotonic(), 0
        while time.monotonic() - t < seconds:
            n += X.steal()
            time.sleep(0.01)
        return n

    pool = X.make("ray", 1, D._ignore_sigint, (), None)
    try:
        pool.submit(steal_for, 0.6)
        assert pool.next_done(timeout=120)[1] == 0  # nobody waits
        assert pool.want(2) == 0
        pool.submit(steal_for, 1.0)  # the worker asks the actor every executor.POLL s
        assert pool.next_done(timeout=120)[1] == 2
        assert pool.want(0) == 2
    finally:
        pool.close()
