"""The cost model and the chain search's seeds against the H100: the GEMM chains' tilings,
their references and the references' two matmuls timed side by side (benchmarks/mbci.py
--sweep / --run-sweep / --fit; benchmarks/results/mbci.md, section 2026-11-25 04:33:
medians of CUDA-graph replays, every bundle within 5e-3 of fp32 PyTorch, default lowering). A graph replay costs about
4 us before its kernels run (`replay_overhead`: ref = mm1 + mm2 - F); the model is judged
on the times less that. G5's and G6's mm2 is G4's (the same 512x512 @ 512x256 kernel)."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "benchmarks"))

from mbci import replay_overhead, sweep_fit, sweep_graph as graph  # noqa: E402

from mirage.search.cost import cost  # noqa: E402

# µs, H100 80GB HBM3, 2026-11-25 (graph replays, the replay's fixed cost included)
MEASURED = {
    "G4": {"mm1": 7.14, "mm2": 10.69, "n32x128x32": 11.89, "n32x64x64": 13.73, "ref": 13.86,
          "n64x64x64": 14.02, "n64x64x32": 14.66, "n128x64x32": 15.14, "n32x64x32": 15.55,
          "n64x32x64": 16.64, "n64x32x128": 17.41, "n32x32x32": 17.47, "n128x32x64": 18.34,
          "n64x32x32": 19.58, "n32x32x64": 19.78, "n128x32x32": 20.83, "n64x32x16": 21.54},
    "G5": {"mm1": 7.97, "k16x32x64": 14.4, "ref": 14.62, "n64x64x64": 16.58, "n64x32x128": 19.71,
          "n32x64x32": 21.28, "n128x32x64": 21.41, "n32x64x64": 21.73, "n64x64x32": 22.11,
          "n32x32x64": 22.75, "n64x32x64": 23.81, "n32x32x32": 26.78, "n128x32x32": 26.78,
          "n64x32x32": 29.41, "n32x16x32": 33.06},
    "G6": {"mm1": 9.12, "ref": 16.06, "k16x32x64": 21.86, "n32x64x64": 34.21, "n64x32x64": 34.78,
          "n32x32x64": 42.66, "n16x32x64": 43.3, "n64x32x32": 47.62, "n32x16x32": 86.78, "n16x16x64": 88.1},
    "G10": {"mm1": 8.0, "mm2": 12.83, "n64x128x16": 15.01, "n64x64x64": 15.94, "n64x32x32": 16.45,
          "n32x32x64": 16.48, "ref": 16.58, "n64x64x128": 17.41, "n128x64x64": 17.89, "n64x64x16": 18.02,
          "n64x256x16": 18.59, "n64x64x32": 18.94, "n32x64x64": 19.46, "n32x32x32": 20.06,
          "n128x64x32": 20.26, "n64x32x128": 24.26, "n128x32x32": 24.83, "n64x32x64": 25.66,
          "n128x32x64": 27.52, "n128x32x128": 29.63},
    "G11": {"mm2": 12.48, "mm1": 14.4, "n64x128x64": 20.1, "n64x64x64": 20.48, "ref": 22.75,
          "n64x32x64": 23.3, "n32x64x64": 23.87, "n128x64x32": 24.19, "n128x32x32": 26.34,
          "n64x64x32": 27.26, "n32x32x64": 27.74, "n64x32x32": 30.11, "n128x128x32": 30.75,
          "n128x128x64": 34.34, "n128x64x64": 34.34, "n64x64x128": 35.17, "n128x32x64": 35.46,
          "n64x32x128": 36.48, "n128x64x128": 40.67, "n128x32x128": 73.76},
    "G12": {"mm2": 18.88, "mm1": 22.69, "n64x128x128": 23.42, "n64x64x128": 26.43, "n128x64x64": 28.77,
          "n64x32x128": 28.9, "n128x32x64": 29.82, "n64x64x64": 30.72, "n64x32x64": 34.02, "ref": 35.46,
          "n128x64x32": 37.25, "n128x32x32": 38.18, "n128x128x64": 40.54, "n128x32x128": 70.85,
          "n128x64x128": 86.82},
}
MEASURED["G5"]["mm2"] = MEASURED["G6"]["mm2"] = MEASURED["G4"]["mm2"]
# not in the sweep: the table's search-top pick (rank1) of that run, timed by the runtime's variant selection
MEASURED["G4"]["n64x128x16"] = 13.8
# the tilings whose kernels spill registers (ptxas -v, sm_90): bytes; the search ranks them last
SPILLED = {"G10": {"n64x256x16": 460}, "G11": {"n128x128x32": 400, "n128x128x64": 820},
           "G12": {"n128x128x64": 828, "n128x64x64": 20, "n128x64x32": 8, "n128x64x128": 300}}


def recorded(rows=tuple(MEASURED)):
    """(meta, measured) in the format of benchmarks/mbci.py --sweep, the model's costs live."""
    meta, measured = {}, {}
    for row in rows:
        for name, us in MEASURED[row].items():
            kind = name if name in ("ref", "mm1", "mm2") else "chain"
            meta[f"{row}__{name}"] = {"row": row, "kind": kind, "spill": SPILLED.get(row, {}).get(name, 0),
                                      "model_us": [k.time * 1e6 for k in cost(graph(row, name)).kernels]}
            measured[f"{row}__{name}"] = {"us": us, "err": 3e-4}
    return meta, measured


def test_fit_on_hand_numbers():
    """Two rows by hand: F = mm1 + mm2 - ref = 4 and 6 (median of two: the upper, 6); the
    pick is the least model time among ref and chains; a bundle over the tolerance is left out."""
    meta = {"A__ref": {"row": "A", "kind": "ref", "model_us": [5.0, 5.0]},
            "A__mm1": {"row": "A", "kind": "mm1", "model_us": [5.0]},
            "A__mm2": {"row": "A", "kind": "mm2", "model_us": [5.0]},
            "A__c1": {"row": "A", "kind": "chain", "model_us": [8.0]},
            "A__c2": {"row": "A", "kind": "chain", "model_us": [9.0]},
            "A__bad": {"row": "A", "kind": "chain", "model_us": [1.0]},
            "B__ref": {"row": "B", "kind": "ref", "model_us": [3.0]},
            "B__mm1": {"row": "B", "kind": "mm1", "model_us": [1.0]},
            "B__mm2": {"row": "B", "kind": "mm2", "model_us": [1.0]}}
    us = {"A__ref": 16.0, "A__mm1": 10.0, "A__mm2": 10.0, "A__c1": 18.0, "A__c2": 12.0, "A__bad": 1.0,
          "B__ref": 10.0, "B__mm1": 8.0, "B__mm2": 8.0}
    measured = {k: {"us": v, "err": 1.0 if k == "A__bad" else 1e-4} for k, v in us.items()}
    assert replay_overhead(meta, measured) == {"A": 4.0, "B": 6.0}
    r = sweep_fit(meta, measured)
    assert r["overhead"] == 6.0 and "A__bad" not in r["points"]
    assert r["points"]["A__c1"] == (8.0, 12.0)
    # model's pick c1 (8 us) measured 12 against c2's 6: twice the fastest
    assert r["regret"]["A"] == (2.0, "A__c1", "A__c2") and r["regret"]["B"] == (1.0, "B__ref", "B__ref")
    assert sweep_fit(meta, measured, overhead=0.0)["regret"]["A"] == (18.0 / 12.0, "A__c1", "A__c2")


def test_recorded_overhead_is_one_graph_replay():
    meta, measured = recorded(("G4", "G10", "G11", "G12"))
    f = replay_overhead(meta, measured)
    assert all(3.5 <= f[r] <= 4.5 for r in ("G4", "G10", "G11")) and f["G12"] < 6.5


def seeds(row: str) -> set:
    """Names of the tilings the chain search hands the driver for `row` (`seed_tilings`)."""
    from mirage.search.build import build
    from mirage.search.config import SearchConfig
    from mirage.search.mbci import find_chain, seed_tilings

    g = graph(row, "ref")

    def measure(plan) -> float:  # as the driver's: a plan the builder rejects costs inf
        try:
            return cost(build(g, plan)).time
        except Exception:
            return float("inf")

    ts = seed_tilings(find_chain(g), SearchConfig(), measure)
    return {f"{t.form}{t.tm}x{t.tl}x{t.th}" for t in ts}


G4_TIE = pytest.mark.xfail(strict=True, reason="G4: 64x128x16 (13.8 us) ties with 32x128x32 (11.9) in the model: "
                          "it computes C twice over (16 E tiles), but both stay under the model's L2 term")


@pytest.mark.parametrize("row,worst_ties", [(r, w) for r in MEASURED for w in (False, True) if (r, w) != ("G4", True)]
                         + [pytest.param("G4", True, marks=G4_TIE)])
def test_search_picks_within_5_percent_of_the_fastest(row, worst_ties):
    """The model's pick among the reference and the tilings the chain search hands over
    (the recorded ones; those that spill ranked last, as the search does) runs within 5% of
    the fastest recorded tiling of the row, also with the model's ties broken against it.
    Without `longest_loops` (checked) the model's pick was G4's 32x64x32 (15.6 against
    32x128x32's 11.9 us at one cost) and G12's 128x32x64 (29.8 against 64x128x128's 23.4)."""
    meta, measured = recorded((row,))
    fastest = min((v["us"], n) for n, v in measured.items() if meta[n]["kind"] in ("ref", "chain"))
    handed = seeds(row) | {"ref"}
    keep = {n for n in meta if n.split("__")[1] in handed and meta[n]["kind"] in ("ref", "chain")}
    assert len(keep) >= 2
    meta = {n: i for n, i in meta.items() if n in keep}
    measured = {n: v for n, v in measured.items() if n in keep}
    x, pick, _ = sweep_fit(meta, measured, overhead=4.13, worst_ties=worst_ties)["regret"][row]
    ratio = (measured[pick]["us"] - 4.13) / (fastest[0] - 4.13)
    assert ratio <= 1.05, (pick, fastest)


def test_unbatched_references_costed_within_15_percent():
    """The references of the unbatched rows (two pre-defined GEMM kernels), less the graph
    replay's cost: model / measured in [0.85, 1.15] (0.92-1.01 when recorded). Each matmul
    alone is not that close: the first (one block a 64x64 tile of C, no split) is overcosted
    1.3-1.4x, the second (split over K in 2 or 4, partials combined by the last block)
    undercosted 0.74-0.77x; the batched G11/G12 references are overcosted 1.36-1.44x."""
    r = sweep_fit(*recorded(("G4", "G5", "G6", "G10")), overhead=4.0)
    for row in ("G4", "G5", "G6", "G10"):
        m, t = r["points"][f"{row}__ref"]
        assert 0.85 <= m / t <= 1.15, (row, m, t)


@pytest.mark.xfail(strict=True, reason="Target.l2_bw is 7e12 B/s: the k-form's 144 MB of L2 reads cost 20.6 us "
                   "where the H100 ran the kernel in 17.9 (>= 8.5 TB/s); at 8.5e12 the ratio is 1.90")
def test_g6_chain_within_the_verification_window():
    """G6's fastest chain (k-form 16x32x64, measured 1.49x the reference less the replay)
    costs within the driver's BOUND_WINDOW of the reference, so the search verifies it."""
    from mirage.search.driver import BOUND_WINDOW

    assert cost(graph("G6", "k16x32x64")).time <= BOUND_WINDOW * cost(graph("G6", "ref")).time


def test_sweep_graphs_of_a_row():
    """G1's sweep: the reference and its two matmuls first, then distinct chain tilings (the
    best-costed and the warp-resident ones), each one graph-defined kernel equal to numpy
    float64 on fresh inputs."""
    import numpy as np

    from mbci import SWEEP_BEST, sweep_graphs

    out = sweep_graphs("G1")
    assert [k for _, k, _, _ in out[:3]] == ["ref", "mm1", "mm2"]
    chains = out[3:]
    names = [n for n, _, _, _ in chains]
    assert len(set(names)) == len(names) > SWEEP_BEST and all(k == "chain" for _, k, _, _ in chains)
    assert any(t[1] == 64 for _, _, t, _ in chains)  # tm = 16 x 4 warps: warp-resident
    rng = np.random.default_rng()
    ref = out[0][3]
    xs = [rng.standard_normal(t.shape) * 0.1 for t in ref.inputs]
    want = (xs[0] @ xs[1]) @ xs[2]
    for _, _, _, g in chains[:3] + chains[-1:]:
        assert [op.kind for op in g.ops] == ["graph_def"]
        assert np.abs(g.evaluate(xs)[0] - want).max() <= 1e-9 * np.abs(want).max()
