"""Chains of compute-intensive ops (search/mbci.py, MCFuser): recognition, the pruned
tiling space, the analytical model on hand-computed tilings, Algorithm 1, and the default
search fusing a GEMM chain, GEMM -> ReLU -> GEMM and self-attention into one verified
kernel with two tensor-core matmuls."""
import numpy as np
import pytest

import mirage as mi
from mirage.search import superoptimize
from mirage.search.build import build
from mirage.search.config import SearchConfig
from mirage.search.cost import cost
from mirage.search.mbci import LOOP_TILE, Chain, Tiling, blocks, explore, find_chain, longest_loops, mbci_seeds, \
    model_time, plan_of, \
    smem_estimate, space, tile_options
from mirage.target import H100

RTOL = 1e-9  # the interpreter runs in float64


def chain(b, M, N, K, H, between=(), attn=False):
    g = mi.new_kernel_graph("chain")
    sh = (lambda *s: (b,) + s) if b else (lambda *s: s)
    A, B, D = g.new_input(sh(M, K)), g.new_input(sh(K, N)), g.new_input(sh(N, H))
    c = g.matmul(A, B)
    for kind in between:
        c = g.mul_scalar(c, 0.125) if kind == "mul_scalar" else getattr(g, kind)(c)
    e = g.matmul(c, D)
    g.mark_output(g.div(e, g.reduction(c, len(sh(1, 1)) - 1)) if attn else e)
    return g


def numpy_chain(a, b, d, between=(), attn=False):
    c = a @ b
    for kind in between:
        c = {"relu": lambda x: np.maximum(x, 0), "exp": np.exp, "mul_scalar": lambda x: x * 0.125}[kind](c)
    e = c @ d
    return e / c.sum(-1, keepdims=True) if attn else e


def test_find_chain():
    c = find_chain(chain(2, 64, 128, 32, 16, ("relu",)))
    assert (c.batch, c.M, c.K, c.N, c.H, c.between, c.normalized) == (2, 64, 32, 128, 16, (("relu", ()),), False)
    c = find_chain(chain(0, 64, 128, 32, 16, ("mul_scalar", "exp"), attn=True))
    assert c.batch == 0 and c.normalized and [k for k, _ in c.between] == ["mul_scalar", "exp"]
    assert find_chain(chain(0, 64, 128, 32, 16)).between == ()
    # not a chain: one matmul; an extra output; the normalizer over other values than f(A @ B)
    g = mi.new_kernel_graph()
    x, w, v = g.new_input((64, 32)), g.new_input((32, 64)), g.new_input((64, 64))
    g.mark_output(g.relu(g.matmul(x, w)))
    assert find_chain(g) is None
    g = chain(0, 64, 128, 32, 16)
    g.mark_output(g.inputs[0])
    assert find_chain(g) is None
    g = mi.new_kernel_graph()
    A, B, D = g.new_input((64, 32)), g.new_input((32, 128)), g.new_input((128, 16))
    s = g.matmul(A, B)
    e = g.exp(s)
    g.mark_output(g.div(g.matmul(e, D), g.reduction(s, 1)))  # sums s, not exp(s)
    assert find_chain(g) is None


def test_model_on_hand_computed_tilings():
    """Eqs. (2)-(5) for G1 (M 512, N 256, K 64, H 64, f16) on the H100 (3.35 TB/s, 989
    TFLOP/s, 132 SMs)."""
    c = Chain(0, 1, 2, 0, 512, 64, 256, 64, (), False, 2)
    t = Tiling("n", 64, 64, 64)  # 8 blocks
    nb = 8
    per_block = 2 * (64 * 64 + 64 * 256 + 256 * 64 + 64 * 64)  # L_A once, L_B and L_D over n, S_E
    flops = 2 * 64 * 256 * (64 + 64)
    want = (nb * per_block / 3.35e12 + nb * flops / 989e12) * (nb + 132) / nb
    assert blocks(c, t) == nb and model_time(c, t, H100) == pytest.approx(want, rel=1e-12)
    # 32 blocks read B and D 4x as often in all, but alpha drops from 17.5 to 5.1: faster
    t32 = Tiling("n", 16, 64, 64)
    assert model_time(c, t32, H100) < model_time(c, t, H100)
    # eq. (1): operand tiles in f16, the accumulator (and row sums) in f32
    assert smem_estimate(c, t) == 2 * (64 * 64 + 64 * 64 + 64 * 64 + 64 * 64) + 4 * 64 * 64 + 4 * 64


def test_space_prunes_and_counts():
    c = find_chain(chain(0, 512, 512, 1024, 256))
    pruned = {}
    cands = space(c, SearchConfig(), pruned)
    assert cands and all(smem_estimate(c, t) <= 1.2 * SearchConfig().smem_capacity for t in cands)
    assert pruned["mbci smem"] > 0 and pruned["mbci nested tiling kn (one loop level)"] == 1
    assert all(t.tm in tile_options(512) and t.th in tile_options(256) for t in cands)
    assert tile_options(80) == [16, 80]  # ViT-Huge's head dim: no padding


def test_deep_tilings_stage_a_and_b_and_compute_the_chain():
    """K = 1024 (MCFuser's G6): a loop-over-n tiling whose whole A [64, 1024] and B [1024, tl]
    do not fit stages both in chunks of 64 ([stage]); the space keeps it with eq. (1) of
    two chunks, the model reads A once an iteration, and the built μGraph says so (the
    tb.inputs' k_chunk), counts what [smem] counts, computes the chain (float64, fresh
    inputs), is proved equal to the program and lowers with the chunks' ring."""
    from mirage.lower import to_ptx
    from mirage.verify import check_equivalence

    g = chain(0, 128, 256, 1024, 128)
    c = find_chain(g)
    cands = space(c, SearchConfig(), {})
    staged = [t for t in cands if t.kc]
    assert staged and all(t.form == "n" and t.kc == 64 for t in staged)
    t = Tiling("n", 64, 64, 128, 64)
    assert smem_estimate(c, t) < SearchConfig().smem_capacity < smem_estimate(c, Tiling("n", 64, 64, 128))
    whole = Tiling("n", 64, 64, 128)
    assert model_time(c, t) > model_time(c, whole)  # A read 256 / 64 = 4 times, not once
    f = build(g, plan_of(c, t, SearchConfig()))
    tb = f.ops[0].body
    assert [r.k_chunk for r in tb.inputs] == [64, 64, 0]
    from mirage.search.cost import STAGED_STEP, staged_steps  # each chunk waits for its copies
    assert staged_steps(tb) == 1024 // 64 and cost(f).time > 16 * STAGED_STEP  # (a split block: one iteration)
    assert tb.smem_bytes() == 2 * (2 * 64 * 64 + 2 * 64 * 64 + 64 * 128 + 64 * 64 + 64 * 128 + 64 * 128)
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(x.shape) * 0.1 for x in g.inputs]
    want = numpy_chain(*xs)
    assert np.abs(f.evaluate(xs)[0] - want).max() <= RTOL * np.abs(want).max()
    assert check_equivalence(g, f).equivalent
    low, ptx = to_ptx(f)
    assert low.kernels[0]["notes"]["k_staged"].startswith("64x") and ".entry" in ptx


def test_a_whole_tiling_that_does_not_fit_after_all_is_seeded_staged():
    """MCFuser's G5 (K = 512): 64 x 128 x 128, eq. (1) within 1.2 x the capacity but its
    built block graph over it: the space holds the whole tiling and its staged twin, and
    the seeds take the staged one where the whole does not build (before, G5's default
    search had no staged candidate; on the H100 it ran faster than the reference)."""
    from mirage.search.mbci import seed_tilings

    g = chain(1, 512, 512, 512, 256)
    c, cfg = find_chain(g), SearchConfig()
    whole, deep = Tiling("n", 64, 128, 128), Tiling("n", 64, 128, 128, 64)
    assert cfg.smem_capacity < smem_estimate(c, whole) <= 1.2 * cfg.smem_capacity
    assert {whole, deep} <= set(space(c, cfg, {}, True))

    def measure(plan):
        try:
            return cost(build(g, plan)).time
        except mi.GraphError:  # over the capacity
            return float("inf")

    assert measure(plan_of(c, whole, cfg)) == float("inf") and measure(plan_of(c, deep, cfg)) < float("inf")
    seeds = seed_tilings(c, cfg, measure, {})
    assert deep in seeds and whole not in seeds


def test_attention_of_head_dim_80_is_seeded_with_warp_resident_tiles():
    """MCFuser's S6 (head dim 80, so E's tile is 16 or 80 wide): its seeds take 64-row
    warp-resident tilings of the whole head dim (before, E tiles over 64 were left out and
    the search kept only 32-row tilings); they build and the lowering runs both matmuls
    as warpgroup matmuls (test_lower.py)."""
    from mirage.search.mbci import seed_tilings

    g = chain(16, 256, 256, 80, 80, ("mul_scalar", "exp"), attn=True)
    c, cfg = find_chain(g), SearchConfig()
    assert c.normalized and c.H == 80

    def measure(plan):
        try:
            return cost(build(g, plan)).time
        except mi.GraphError:
            return float("inf")

    rows64 = [t for t in seed_tilings(c, cfg, measure, {}) if t.tm == 64 and t.th == 80]
    assert rows64 and all(measure(plan_of(c, t, cfg)) < float("inf") for t in rows64)


def test_explore_is_deterministic_and_returns_measured_best_first():
    c = find_chain(chain(8, 1024, 1024, 128, 128))
    cands = space(c, SearchConfig(), {})
    calls = []

    def measure(t):
        calls.append(t)
        return model_time(c, t) * (1.5 if t.form == "k" else 1.0)

    a = explore(c, cands, measure)
    b = explore(c, cands, lambda t: model_time(c, t) * (1.5 if t.form == "k" else 1.0))
    assert a == b and a
    assert [measure(t) for t in a] == sorted(measure(t) for t in a)
    assert len(set(calls)) < len(cands)  # Algorithm 1 measures a few, not the whole space


CASES = {
    "gemm_chain": dict(b=2, M=256, N=256, K=64, H=64),
    "gemm_relu_gemm": dict(b=2, M=256, N=256, K=64, H=64, between=("relu",)),
    "attention": dict(b=2, M=128, N=256, K=64, H=64, between=("mul_scalar", "exp"), attn=True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_seeds_build_and_compute_the_chain(name):
    kw = dict(CASES[name])
    g = chain(kw.pop("b"), kw.pop("M"), kw.pop("N"), kw.pop("K"), kw.pop("H"), **kw)
    plans = mbci_seeds(g, SearchConfig(), lambda p: cost(build(g, p)).time)
    assert plans
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(t.shape) * 0.1 for t in g.inputs]
    want = numpy_chain(*xs, **{k: v for k, v in CASES[name].items() if k in ("between", "attn")})
    for p in plans:
        f = build(g, p)
        assert [op.kind for op in f.ops] == ["graph_def"]
        got = f.evaluate(xs)[0]
        assert np.abs(got - want).max() <= RTOL * np.abs(want).max()


@pytest.mark.parametrize("name", list(CASES))
def test_default_search_fuses_the_chain_into_one_kernel(name):
    pytest.importorskip("mlir.ir")
    from mirage.lower import to_ptx

    kw = dict(CASES[name])
    g = chain(kw.pop("b"), kw.pop("M"), kw.pop("N"), kw.pop("K"), kw.pop("H"), **kw)
    res = superoptimize(g, "auto", measure=False, workers=1, time_limit=60)
    best = res.candidates[0]
    assert [op.kind for op in best.graph.ops] == ["graph_def"], res.report()
    assert best.verification.startswith("equivalent"), best.verification
    rng = np.random.default_rng(11)
    xs = [rng.standard_normal(t.shape) * 0.1 for t in g.inputs]
    want = numpy_chain(*xs, **{k: v for k, v in CASES[name].items() if k in ("between", "attn")})
    assert np.abs(best.graph.evaluate(xs)[0] - want).max() <= RTOL * np.abs(want).max()
    low, ptx = to_ptx(best.graph)
    assert len(low.kernels) == 1 and low.kernels[0]["notes"]["mma"] == 2 \
        and ("mma.sync" in ptx or "wgmma.mma_async" in ptx)  # tensor cores: warp or warpgroup matmuls


def test_longest_loops_takes_the_loop_tile_the_model_ties_long():
    """Tilings that differ only in the loop tile: the longest (at most LOOP_TILE = 128 for a
    warp-resident one, tm = 16 x 4 warps) replaces the others where it costs no more (the
    model ties them); one that costs more stays; the k-form is left alone; a duplicate is
    dropped and counted."""
    assert LOOP_TILE == 128
    cands = [Tiling("n", 32, tl, 32) for tl in (16, 32, 64, 128, 256)] + \
        [Tiling("n", 64, tl, 16) for tl in (32, 64, 128, 256)] + [Tiling("n", 64, tl, 32) for tl in (64, 128)] + \
        [Tiling("k", 16, 32, 64), Tiling("k", 16, 64, 64)]
    dearer = {Tiling("n", 64, 128, 32)}  # costs more than its siblings: not taken
    cost_of = lambda t: 2.0 if t in dearer else 1.0  # noqa: E731
    pruned = {}
    got = longest_loops([Tiling("n", 32, 64, 32), Tiling("n", 32, 32, 32), Tiling("n", 64, 32, 16),
                         Tiling("n", 64, 64, 32), Tiling("k", 16, 32, 64)], cands, cost_of, pruned, warps=4)
    assert got == [Tiling("n", 32, 256, 32), Tiling("n", 64, 128, 16), Tiling("n", 64, 64, 32),
                   Tiling("k", 16, 32, 64)]
    assert pruned == {"mbci loop tile": 1}
    # warp-resident over 128: the longest up to 128 that costs no more; none: kept
    sib = [Tiling("n", 64, t, 16) for t in (64, 128, 256, 512)]
    assert longest_loops([sib[2]], sib, lambda t: 1.0, {}, warps=4) == [sib[1]]
    assert longest_loops([sib[3]], sib[2:], lambda t: 1.0, {}, warps=4) == [sib[3]]
