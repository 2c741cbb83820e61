"""The driver ranks the candidates that workers found from the cost and graph key each
worker sent (driver._run_item), building a graph only when asked for (driver._Found): the
ranking, costs and keys must be those of building every candidate in the driver, as it did."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from mirage.search import build as B, driver as D  # noqa: E402
from mirage.search.cost import cost  # noqa: E402
from mirage.search.result import Candidate, diversity  # noqa: E402
from test_search_ray import _items  # noqa: E402


def test_ranking_from_the_workers_costs_is_that_of_built_candidates():
    ref, cfg, pro, bound, gen, items = _items("gqa")
    units, _ = D.split(gen, items)
    D._init_worker(None, None, ref, cfg, pro, bound, quiet=False)
    found = {}
    for u in units:
        found.update(D._run_item(u)[0])
    assert len(found) > 30 and all(len(v) == 3 for v in found.values())
    lazy = D._Checks(ref, cfg, D.DEFAULT)
    built = D._Checks(ref, cfg, D.DEFAULT)
    ranked, slow = lazy.rank(found)
    again = {}  # each candidate built and costed here
    for k, (plan, _, _) in found.items():
        g = B.build(ref, plan)
        c = cost(g, D.DEFAULT)
        again[k] = (plan, c.time, (c, B.graph_key(g), diversity(g, c)))
    ranked_b, slow_b = built.rank(again)
    assert [c.key for c in ranked] == [c.key for c in ranked_b] and [c.key for c in slow] == [c.key for c in slow_b]
    assert [c.cost for c in ranked + slow] == [c.cost for c in ranked_b + slow_b]
    # the graphs of those beyond diverse's window (2 x the best cost) were not built to rank them
    far = [c for c in ranked + slow if c.cost.time > 2 * ranked[0].cost.time]
    assert far and all(c._graph is None for c in far)
    for c, b in zip(ranked + slow, ranked_b + slow_b):
        assert isinstance(c, D._Found) and isinstance(c, Candidate)
        assert B.graph_key(c.graph) == B.graph_key(b.graph) == built._built[c.key][1] == lazy._built[c.key][1]
