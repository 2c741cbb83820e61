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
ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to \
insufficient register resources for the wgmma pipeline in the function 'g11_k1'
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

    assert parse(PTXAS_V) == {
        "g11_k0": {"registers": 255, "spill_stores": 288, "spill_loads": 280, "wgmma_serialized": None},
        "g11_k1": {"registers": 40, "spill_stores": 0, "spill_loads": 0,
                   "wgmma_serialized": "insufficient register resources for the wgmma pipeline"}}


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


def _exp_then(op):
    g = mi.new_kernel_graph(f"exp_{op}")
    x = g.new_input((16, 64))
    g.mark_output(getattr(g, op)(g.exp(x), x))
    return g


def test_spills_are_memoized_per_kernel(monkeypatch):
    # a graph sharing a kernel with one checked before: only its new kernels go through the
    # NVVM pipeline and ptxas (faked here: the "PTX" is the module, and a kernel spills a
    # byte per multiply and 4 per add in its MLIR), and the sum is the whole graph's
    import re

    import mirage.lower as L
    import mirage.lower.pipeline as P
    import mirage.lower.ptxas as X
    import mirage.search.measure as M

    def usage(ptx):
        entries = re.split(r"gpu\.func @", ptx)[1:]
        assembled.extend(e.split("(")[0] for e in entries)
        return {e.split("(")[0]: {"registers": 32, "spill_stores": e.count("arith.mulf") + 4 * e.count("arith.addf"),
                                  "spill_loads": 0} for e in entries}

    def whole(g):  # what one ptxas run over all of g's kernels reports
        return sum(u["spill_stores"] for u in usage(L.convert(g).module).values())

    assembled = []
    monkeypatch.setattr(M, "_KERNEL_SPILLS", {})
    monkeypatch.setattr(X, "find", lambda: "/usr/bin/ptxas")
    monkeypatch.setattr(X, "usage", usage)
    monkeypatch.setattr(P, "run_pipeline", lambda module, target="sm_90": module)
    a, b = _exp_then("mul"), _exp_then("add")
    want_a, want_b = whole(a), whole(b)
    assert 0 < want_a < want_b
    assembled.clear()
    assert M.spills(a) == want_a and sorted(assembled) == ["exp_mul_k0", "exp_mul_k1"]
    assembled.clear()
    assert M.spills(b) == want_b and assembled == ["exp_add_k1"]  # the exp kernel is a's
    assembled.clear()
    assert M.spills(a) == want_a and M.spills(b) == want_b and assembled == []
    assert M.spills(a, "sm_80") == want_a and sorted(assembled) == ["exp_mul_k0", "exp_mul_k1"]  # per target


def test_memoized_spills_equal_one_ptxas_run_over_the_graph(monkeypatch):
    import mirage.lower as L
    import mirage.lower.ptxas as X
    import mirage.search.measure as M

    if X.find() is None:
        pytest.skip("no ptxas on this machine")
    pytest.importorskip("mlir.ir")
    usage, entries = X.usage, []

    def counted(ptx, *a, **k):
        use = usage(ptx, *a, **k)
        entries.extend(use or ())
        return use

    monkeypatch.setattr(M, "_KERNEL_SPILLS", {})
    monkeypatch.setattr(X, "usage", counted)
    a, b = _exp_then("mul"), _exp_then("add")
    assert M.spills(a) is not None and len(entries) == 2
    assert M.spills(b) == sum(u["spill_stores"] for u in usage(L.to_ptx(b, disk_cache=False)[1]).values())
    assert sorted(entries) == ["exp_add_k1", "exp_mul_k0", "exp_mul_k1"]  # the exp kernel once
