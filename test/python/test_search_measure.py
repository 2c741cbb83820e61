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


PTXAS_V = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'g11_k0' for 'sm_90'
ptxas info    : Function properties for g11_k0
    288 bytes stack frame, 288 bytes spill stores, 280 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 288 bytes cumulative stack size
ptxas info    : Compiling entry function 'g11_k1' for 'sm_90'
ptxas info    : Function properties for g11_k1
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers
"""


def test_ptxas_report_is_parsed_per_kernel():
    from mirage.lower.ptxas import parse

    assert parse(PTXAS_V) == {"g11_k0": {"registers": 255, "spill_stores": 288, "spill_loads": 280},
                              "g11_k1": {"registers": 40, "spill_stores": 0, "spill_loads": 0}}


def test_without_gpu_spilling_candidates_move_after_the_first_that_does_not(monkeypatch):
    import mirage.lower.ptxas as P
    import mirage.search.measure as M

    keys = [c.key for c in superoptimize(small(), "auto", time_limit=60, measure=False).candidates]
    monkeypatch.setattr(M, "gpu_available", lambda: False)
    monkeypatch.setattr(P, "find", lambda: "/usr/bin/ptxas")
    assert keys[0] != "reference" and len(keys) >= 3
    checked = []

    def fake_spills(graph, target="sm_90"):  # the first checked (the best) spills 64 bytes, the next none
        checked.append(graph)
        return 64 if len(checked) == 1 else 0
    monkeypatch.setattr(M, "spills", fake_spills)
    res = superoptimize(small(), "auto", time_limit=60)
    assert [c.key for c in res.candidates] == keys[1:] + keys[:1]
    assert len(checked) == 2 and checked[0] is res.candidates[-1].graph  # best first, until one does not spill
    assert any("spill registers (ptxas)" in n and "64 bytes" in n for n in res.notes)
    # unknown (no lowering, no ptxas): the cost ranking stands
    monkeypatch.setattr(M, "spills", lambda graph, target="sm_90": None)
    res = superoptimize(small(), "auto", time_limit=60)
    assert [c.key for c in res.candidates] == keys


def test_spills_of_a_real_kernel():
    from mirage.lower import ptxas
    from mirage.search.measure import spills

    if ptxas.find() is None:
        pytest.skip("no ptxas on this machine")
    assert spills(small()) == 0


def test_the_spill_check_keeps_to_the_time_limit(monkeypatch):
    import time

    import mirage.lower.ptxas as P
    import mirage.search.measure as M

    res = superoptimize(small(), "auto", time_limit=60, measure=False)
    keys = [c.key for c in res.candidates]
    monkeypatch.setattr(P, "find", lambda: "/usr/bin/ptxas")
    monkeypatch.setattr(M, "spills", lambda graph, target="sm_90": pytest.fail("checked past the deadline"))
    M.demote_spilling(res, deadline=time.monotonic() + M.SPILL_CHECK_S / 2)
    assert [c.key for c in res.candidates] == keys
    assert any("not checked for register spills" in n for n in res.notes)
