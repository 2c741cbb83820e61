"""What the driver process does and keeps during a search (driver._search): a pool search's
last status line has the final counts, and a one-worker search leaves its generator behind
for no one (a later search's full collections would walk it, its workers inherit it)."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))

from mirage.search import driver as D  # noqa: E402
from test_search_ray import search  # noqa: E402


def test_a_pool_search_s_last_enumeration_line_has_the_final_counts(capsys):
    res = search("qknorm", workers=2, verbose=True)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[search] enumeration done in ")]
    assert len(lines) == 1
    m = re.search(r": (\d+)/(\d+) items, candidates (\d+), best ([0-9.]+)us, states (\d+), pruned\[", lines[0])
    assert m, lines[0]
    assert m.group(1) == m.group(2) and int(m.group(5)) == res.stats.states > 0
    # the candidates found (plan keys, seeds in): at least the distinct graphs ranked, the reference out
    assert int(m.group(3)) >= len(res.candidates) - 1 + len(res.others) > 100
    assert float(m.group(4)) == round(res.candidates[0].cost.time * 1e6, 2)


def test_a_one_worker_search_leaves_its_generator_behind_for_no_one(monkeypatch):
    import gc
    import weakref

    made = []
    plain = D._init_worker

    def init(*args, **kw):
        plain(*args, **kw)
        made.append(weakref.ref(D._W["gen"]))

    monkeypatch.setattr(D, "_init_worker", init)
    gc.disable()  # freed by reference counts, not left for a full collection (a cycle)
    try:
        res = search("qknorm", workers=1)
        assert res.stats.states > 0 and len(made) == 1 and "gen" not in D._W
        assert made[0]() is None
    finally:
        gc.enable()


def test_the_driver_ranks_the_workers_candidates_without_building_them(monkeypatch):
    # each worker sends a candidate's cost, graph key and `diversity`: the rankings that pick
    # the checks and the final one build none (the checks run in the workers, from plans)
    built = []
    plain = D._Found.graph.fget

    def graph(self):
        if self._graph is None:
            built.append(self.key)
        return plain(self)

    monkeypatch.setattr(D._Found, "graph", property(graph, D._Found.graph.fset))
    res = search("qknorm", workers=2)
    ranked = len(res.candidates) - 1 + len(res.others)
    assert ranked > 100 and built == []
    lazy = [c for c in res.others if isinstance(c, D._Found) and c._graph is None]
    assert lazy and lazy[0].graph.ops and built == [lazy[0].key]  # built when asked for
