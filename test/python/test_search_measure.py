"""Selection by measured time (`search.measure`), without a GPU: the ranking logic with
given times, the rank correlation, and the default call's behaviour on a CPU machine."""
import math

import pytest

import mirage as mi
from mirage.search import superoptimize
from mirage.search.measure import rank_by_time, spearman


def small():
    g = mi.new_kernel_graph("ew")
    x = g.new_input((16, 64))
    g.mark_output(g.mul(g.exp(x), x))
    return g


@pytest.fixture(scope="module")
def result():
    return superoptimize(small(), "auto", time_limit=60, measure=False)


def test_measured_times_reorder_the_candidates(result):
    res = superoptimize(small(), "auto", time_limit=60, measure=False)
    assert len(res.candidates) >= 2
    before = [c.key for c in res.candidates]
    # the cost model's last candidate measured fastest, the first failed its check (no time)
    times = {len(before) - 1: 1.0, **{i: 10.0 + i for i in range(1, len(before) - 1)}}
    calls = []
    res2 = superoptimize(small(), "auto", time_limit=60, measure=lambda r: calls.append(r) or times)
    assert len(calls) == 1
    assert res2.candidates[0].key == before[-1] and res2.best is res2.candidates[0].graph
    assert res2.candidates[-1].key == before[0] and math.isnan(res2.candidates[-1].measured_us)
    assert [c.measured_us for c in res2.candidates[:-1]] == sorted(c.measured_us for c in res2.candidates[:-1])
    assert any("measured time" in n for n in res2.notes) and "measured 1.0 µs" in res2.report()


def test_default_without_gpu_keeps_the_cost_ranking(result, monkeypatch):
    import mirage.search.measure as M

    monkeypatch.setattr(M, "gpu_available", lambda: False)
    res = superoptimize(small(), "auto", time_limit=60)
    assert [c.key for c in res.candidates] == [c.key for c in result.candidates]
    assert any("no GPU here" in n for n in res.notes)
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        superoptimize(small(), "auto", time_limit=60, measure=True)


def test_rank_by_time_direct(result):
    n = len(result.candidates)
    rank_by_time(result, {i: float(n - i) for i in range(n)})
    assert [c.measured_us for c in result.candidates] == [float(i) for i in range(1, n + 1)]


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [5, 5, 6]) == pytest.approx(1.0)
    assert math.isnan(spearman([1], [2]))
