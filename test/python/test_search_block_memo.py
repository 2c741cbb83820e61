"""The block-graph DFS's record per input tiles (generator._BlockCtx.run): a DFS whose
inputs, grid, loop and budgets were searched before adds the recorded counts and closes
the recorded block graphs against its own kernel state. It must visit what the plain
DFS visits: the same states, pruning counts and candidates, work item by work item."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from mirage.search import driver as D  # noqa: E402
from mirage.search import generator as G  # noqa: E402
from mirage.search.config import make_config  # noqa: E402
from test_search import gqa_ref  # noqa: E402


def count_block_dfs(monkeypatch) -> list:
    """[n]: n counts the block-graph DFS steps run (not replayed) from now on."""
    visited = [0]
    dfs = G._BlockCtx.dfs

    def counted(self):
        visited[0] += 1
        return dfs(self)

    monkeypatch.setattr(G._BlockCtx, "dfs", counted)
    return visited


def _items(cfg, monkeypatch):
    """Per work item: (states, pruning counts, candidates, plans), run in this process; and
    how many block states the DFS itself visited (the others were replayed)."""
    visited = count_block_dfs(monkeypatch)
    ref = gqa_ref(s=128)
    gen = G.Generator(ref, cfg)
    items, _ = D.work_items(gen)
    D._init_worker(None, None, ref, cfg, quiet=False, gen=gen)
    out = []
    for it in items:
        found, s = D._run_item(it)
        out.append((s.kernel_states, s.block_states, dict(s.pruned), s.candidates, sorted(found)))
    return out, visited[0]


def test_replayed_block_dfs_visits_what_the_plain_dfs_visits(monkeypatch):
    cfg = make_config("attention", tile_sizes=(16,), workers=1)
    # a state cap turns the record off (the order of counting decides where a cap stops);
    # this one is never reached
    plain, plain_visited = _items(cfg.with_(max_states=10 ** 12), monkeypatch)
    memo, memo_visited = _items(cfg, monkeypatch)
    assert memo == plain
    states = sum(x[1] for x in plain)
    assert plain_visited == states > 0
    assert memo_visited < 0.95 * states  # some block DFSs were replayed (9 % of the states)
    assert sum(x[3] for x in plain) > 0
