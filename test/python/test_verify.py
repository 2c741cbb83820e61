"""Tests of mirage.verify: finite-field semantics (Table 2 identities), the Lax checker,
check_equivalence (benchmark pairs, no false negatives), and the mutation suite.

Run: PYTHONPATH=python pytest test/python/test_verify.py -s   (prints the mutation counts)
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import mirage as mi  # noqa: E402
from mirage.core import ops as O  # noqa: E402
from mirage.core.interpret import evaluate  # noqa: E402
from mirage.verify import FieldArith, analyze, check_equivalence  # noqa: E402
from mirage.verify.field import FV, FieldZeroDivision, safe_primes  # noqa: E402
from mirage.verify.mutate import GraphError, mutations, replay  # noqa: E402

from benchmarks import BENCHMARKS  # noqa: E402

# Small versions of the six benchmarks: the same μGraphs with sizes mapped down.
SHRINK = {
    "rmsnorm_linear": dict(dims={4096: 64, 6144: 48}, grid={96: 3}, loop={64: 4}),
    "gated_mlp": dict(dims={4096: 64}, grid={128: 4}, loop={16: 4}),
    "lora": dict(dims={256: 32, 4096: 64}, grid={64: 4}),
    "gqa": dict(dims={256: 32, 4096: 64, 64: 8}, dimx={64: 8}),
    "qknorm_attention": dict(dims={256: 32, 4096: 64, 64: 8}, dimx={64: 8}),
    "ntrans": dict(dims={4096: 64}),
}


def small(name):
    b = BENCHMARKS[name]
    return replay(b.reference(1), **SHRINK[name]), replay(b.fused(1), **SHRINK[name])


# -- field semantics --------------------------------------------------------------------

def _fa(seed=0):
    return FieldArith(seed=seed)


def _rand(ar, shape, rng):
    return ar.random_value(shape, rng)


def _eq(a, b):
    return np.array_equal(a.p, b.p) and (a.q is None or np.array_equal(a.q, b.q))


def test_primes_are_safe_and_large():
    for p, q in safe_primes(4):
        assert (p - 1) % q == 0 and p > 2**30 and q > 2**29
        assert p % 4 == 3 and q % 4 == 3


@pytest.mark.parametrize("seed", range(5))
def test_table2_identities(seed):
    rng = np.random.default_rng(seed)
    ar = _fa(seed)
    a, b, c = (_rand(ar, (7, 5), rng) for _ in range(3))
    # exp(a) * exp(b) = exp(a + b)  (Z_p components: the value of an exponential)
    assert np.array_equal(ar.mul(ar.exp(a), ar.exp(b)).p, ar.exp(ar.add(a, b)).p)
    # exp(0) = 1
    assert np.all(ar.exp(ar.const(0.0, (3,))).p == 1)
    # division distributes over sums: (a + b) / c = a / c + b / c
    assert _eq(ar.div(ar.add(a, b), c), ar.add(ar.div(a, c), ar.div(b, c)))
    # (a / b) / c = a / (b * c); a * (b / a) = b
    assert _eq(ar.div(ar.div(a, b), c), ar.div(a, ar.mul(b, c)))
    assert _eq(ar.mul(a, ar.div(b, a)), b)
    # sqrt is multiplicative: sqrt(a b) = sqrt(a) sqrt(b), sqrt(a / b) = sqrt(a) / sqrt(b)
    assert _eq(ar.sqrt(ar.mul(a, b)), ar.mul(ar.sqrt(a), ar.sqrt(b)))
    assert _eq(ar.sqrt(ar.div(a, b)), ar.div(ar.sqrt(a), ar.sqrt(b)))
    # sqrt(x)^2 = x for squares: sqrt(a^2)^2 = a^2
    sq = ar.mul(a, a)
    assert _eq(ar.mul(ar.sqrt(sq), ar.sqrt(sq)), sq)
    # sum over splits: sum over a dim = sum of the sums of its two halves
    x = _rand(ar, (4, 12), rng)
    whole = ar.sum(x, 1)
    halves = ar.add(ar.sum(ar.apply(lambda t: t[:, :5], x), 1), ar.sum(ar.apply(lambda t: t[:, 5:], x), 1))
    assert _eq(whole, halves)
    # matmul over a split contraction dim = sum of the partial products; matches a naive sum
    A, B = _rand(ar, (3, 64), rng), _rand(ar, (64, 5), rng)
    parts = ar.add(ar.matmul(ar.apply(lambda t: t[:, :40], A), ar.apply(lambda t: t[:40], B)),
                   ar.matmul(ar.apply(lambda t: t[:, 40:], A), ar.apply(lambda t: t[40:], B)))
    assert _eq(ar.matmul(A, B), parts)
    naive = [[sum(int(A.p[i, k]) * int(B.p[k, j]) for k in range(64)) % ar.p for j in range(5)] for i in range(3)]
    assert np.array_equal(ar.matmul(A, B).p, np.array(naive))
    # max: a random total order, so max over a dim = max of the maxes of its halves
    m_whole = ar.max(x, 1)
    m_split = ar.max(ar.apply(lambda s, t: np.concatenate([s, t], 1),
                              ar.max(ar.apply(lambda t: t[:, :5], x), 1), ar.max(ar.apply(lambda t: t[:, 5:], x), 1)), 1)
    assert _eq(m_whole, m_split)


def _exact_matmul(a, b, m):
    """a @ b mod m in Python integers (object arrays): the independent reference."""
    return (np.einsum("...ij,...jk->...ik", a.astype(object), b.astype(object)) % m).astype(np.int64)


def test_matmul_mod_exact_at_the_edges():
    """The float64 BLAS matmul equals exact integer arithmetic, for residues near (m - 1)/2 and
    (m + 1)/2 (balanced: the largest products) and near m - 1, in both layouts and every digit count (`_mm_plan`), over contractions
    of one chunk, a chunk and one term, and many chunks (K = 40000: a naive int64 sum of
    products near 2^62 overflows after 2 terms, a float64 one is inexact after 1), for both
    primes of a pair, and batched operands that broadcast."""
    from mirage.verify.field import _chunk, _matmul_mod, _mm_plan
    p, q = safe_primes(1)[0]
    rng = np.random.default_rng(0)
    for m in (p, q):
        for how in ("free", "fold"):
            for L in (2, 3, 4):
                w, c = _chunk(how, L, m, 10**9)
                assert w * L >= 32 and c * 2 ** (w - 1) * (m - 1) <= 2 ** 54
                for k in sorted({1, 64, c // L, c // L + 1, c, c + 1, 3 * c + 5}):
                    if k > 40000:
                        continue
                    a = m - 1 - rng.integers(0, 3, (3, k))
                    b = m - 1 - rng.integers(0, 3, (k, 2))
                    b[::7] = rng.integers(0, m, b[::7].shape)
                    for x in (a, b):  # the balanced extremes, (m - 1)/2 and -(m - 1)/2, of one sign
                        x[1::3] = m // 2 - rng.integers(0, 2, x[1::3].shape)
                        x[2::5] = m // 2 + 1 + rng.integers(0, 2, x[2::5].shape)
                    exact = _exact_matmul(a, b, m)
                    assert np.array_equal(_matmul_mod(a, b, m, (how, L)), exact), (m, how, L, k)
                    assert np.array_equal(_matmul_mod(b.T.copy(), a.T.copy(), m, (how, L)), exact.T), (m, how, L, k)
        for k in (2, 64, 127, 128, 129, 300, 4096, 5000, 16384, 40000):  # the chosen plan
            a = m - 1 - rng.integers(0, 3, (3, k))
            b = rng.integers(0, m, (k, 2))
            b[::3] = m - 1
            assert np.array_equal(_matmul_mod(a, b, m), _exact_matmul(a, b, m)), k
        for sa, sb in (((2, 1, 5, 200), (1, 3, 200, 4)), ((2, 1, 4, 8), (1, 3, 8, 600)), ((64, 64), (64, 512))):
            a = m - 1 - rng.integers(0, 3, sa)
            b = rng.integers(0, m, sb)
            exact = _exact_matmul(a, b, m)
            for plan in (None, ("free", 2), ("fold", 2), ("fold", 3)):
                assert np.array_equal(_matmul_mod(a, b, m, plan), exact), (sa, sb, plan)
    assert _mm_plan((16, 256, 64), (16, 64, 4096), p)[0] == "fold"  # attention scores: one plane
    assert _mm_plan((64, 4096), (4096, 4096), p)[0] == "free"  # GEMV-shaped: the weight read once


def test_field_matmul_layouts_and_sums_are_exact():
    """FieldArith.matmul of operands that broadcast along batch axes (a block graph's tiles:
    grid and loop axes of size 1 in one operand) equals the exact product, and sums of a
    product over any axis (forloop_accum over the loop axis: folded into the contraction)
    equal the exact sums; a product reused within a trial is the same value."""
    from mirage.verify.field import _Product
    rng = np.random.default_rng(3)
    ar = _fa(3)
    shapes = [((2, 1, 3, 1, 1, 8, 16), (2, 4, 1, 5, 1, 16, 6)), ((2, 3, 4, 5), (2, 3, 5, 7)),
              ((1, 1, 1, 4, 6, 32), (3, 1, 1, 4, 32, 5)), ((3, 1, 6, 8), (1, 1, 8, 9))]
    for sa, sb in shapes:
        a, b = _rand(ar, sa, rng), _rand(ar, sb, rng)
        for comp, m in (("p", ar.p), ("q", ar.q)):
            exact = _exact_matmul(getattr(a, comp), getattr(b, comp), m)
            assert np.array_equal(getattr(ar.matmul(a, b), comp), exact), (sa, sb, comp)
            for axis in range(len(sa)):
                s = ar.sum(ar.matmul(a, b), axis)
                assert isinstance(s, _Product)  # folded, not computed and summed
                assert np.array_equal(getattr(s, comp), exact.sum(axis=axis, keepdims=True) % m), (sa, sb, axis)
    a, b = _rand(ar, (2, 16, 64), rng), _rand(ar, (2, 64, 300), rng)
    first = ar.matmul(a, b).p
    again = ar.matmul(FV(a.p.copy(), a.q.copy()), FV(b.p.copy(), b.q.copy())).p
    assert np.array_equal(first, again) and np.array_equal(first, _exact_matmul(a.p, b.p, ar.p))
    b.p[0, 0, 0] = (b.p[0, 0, 0] + 1) % ar.p  # a different operand is not mistaken for the kept one
    assert np.array_equal(ar.matmul(a, b).p, _exact_matmul(a.p, b.p, ar.p))


def test_field_elementwise_ops_match_python_integers():
    """The blocked element-wise ops (add, sub, mul, inverse, exp tables) equal Python-integer
    arithmetic on arrays larger than one block, with broadcasting and strided operands."""
    from mirage.verify.field import _BLOCK
    rng = np.random.default_rng(5)
    ar = _fa(5)
    n = 3 * _BLOCK + 17
    a = _rand(ar, (2, n // 64 + 1, 64), rng)
    b = _rand(ar, (2, 1, 64), rng)
    at = ar.apply(lambda x: np.swapaxes(x, 1, 2), _rand(ar, (2, 64, n // 64 + 1), rng))  # strided
    for x, y in ((a, b), (at, b), (a, at)):
        for comp, m in (("p", ar.p), ("q", ar.q)):
            X, Y = getattr(x, comp).astype(object), getattr(y, comp).astype(object)
            assert np.array_equal(getattr(ar.add(x, y), comp), ((X + Y) % m).astype(np.int64))
            assert np.array_equal(getattr(ar.sub(x, y), comp), ((X - Y) % m).astype(np.int64))
            assert np.array_equal(getattr(ar.mul(x, y), comp), ((X * Y) % m).astype(np.int64))
    inv = ar.inverse(a)
    assert np.all(ar.mul(a, inv).p == 1) and np.all(ar.mul(a, inv).q == 1)
    e = ar.exp(a)
    idx = [(0, 0, 0), (1, 5, 63), (1, n // 64, 7)]
    for i in idx:
        assert e.p[i] == pow(ar.omega, int(a.q[i]), ar.p)


def test_random_functions_are_consistent_and_distinct():
    rng = np.random.default_rng(1)
    ar = _fa(7)
    a = _rand(ar, (100,), rng)
    assert _eq(ar.unary("silu", a), ar.unary("silu", FV(a.p.copy(), a.q.copy())))
    assert not np.array_equal(ar.unary("silu", a).p, ar.unary("gelu", a).p)
    assert not np.array_equal(FieldArith(seed=8).unary("silu", a).p, ar.unary("silu", a).p)


def test_constants_map_exactly():
    ar = _fa()
    c8, = ar.const(0.125, (1,)).p
    assert c8 * 8 % ar.p == 1
    ce, = ar.const(1e-6, (1,)).p
    assert ce * 1000000 % ar.p == 1
    assert ar.const_element(np.pi) == ar.const_element(np.pi)


def test_zero_division_detected():
    ar = _fa()
    with pytest.raises(FieldZeroDivision):
        ar.div(ar.const(1.0, (2,)), ar.const(0.0, (2,)))


# -- Lax checker ---------------------------------------------------------------------------

def test_lax_checker_explains():
    g = mi.new_kernel_graph()
    x = g.new_input((4, 8))
    g.mark_output(g.exp(g.reduction(g.exp(x), 1)))
    rep = analyze(g)
    assert not rep.lax and rep.max_exps_on_path == 2
    assert "kn.exp #0" in rep.explain() and "kn.exp #2" in rep.explain() and "input 0" in rep.explain()
    for name, b in BENCHMARKS.items():
        r = analyze(b.reference(1))
        assert r.lax == (name != "gated_mlp"), (name, r.explain())
    assert "kn.silu" in analyze(BENCHMARKS["gated_mlp"].reference(1)).explain()
    # the max accumulator is not Lax
    g = mi.new_kernel_graph()
    x = g.new_input((4, 64))
    tb = mi.new_threadblock_graph((1, 1, 1), forloop_range=4)
    t = tb.new_input(x, (-1, -1, -1), 1)
    tb.new_output(tb.forloop_accum(t, "max"), (-1, -1, -1))
    g.mark_output(g.customized([x], tb)[0])
    assert "forloop_accum<max>" in analyze(g).explain()


# -- check_equivalence -----------------------------------------------------------------------

@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_benchmark_pairs_small(name):
    r, f = small(name)
    res = check_equivalence(r, f, delta=1e-9, input_scales=BENCHMARKS[name].scales)
    assert res.equivalent, res.summary()
    assert res.trials >= 1 and res.max_fp_error <= res.fp_tolerance
    # Theorem 2 is vacuous for the softmax sums; the random-function model gives the bound
    assert res.bound_met and res.error_bound <= 1e-9, res.summary()
    assert res.model == ("random" if name in ("gqa", "qknorm_attention") else "omega")


@pytest.mark.parametrize("name", ["rmsnorm_linear", "gated_mlp", "lora", "ntrans"])
def test_benchmark_pairs_full_size(name):
    b = BENCHMARKS[name]
    res = check_equivalence(b.reference(1), b.fused(1), delta=1e-9, input_scales=b.scales)
    assert res.equivalent and res.bound_met and res.error_bound <= 1e-9, res.summary()


@pytest.mark.parametrize("name", ["gqa", "qknorm_attention"])
def test_attention_full_size_bound(name):
    """Full-size attention (softmax over 4096 keys): Theorem 2 is vacuous, the random-function
    model reaches δ = 1e-9 (the counts come from the graphs: m = 2 x 8192 exp atoms)."""
    b = BENCHMARKS[name]
    res = check_equivalence(b.reference(1), b.fused(1), delta=1e-9, input_scales=b.scales, vacuous_trials=2)
    assert res.equivalent and res.bound_met and res.error_bound <= 1e-9 and res.model == "random", res.summary()
    assert res.bound_details["atoms"]["exp"] == 2 * 2 * 4096
    assert res.bound_details["omega"]["note"].startswith("Theorem 2 is vacuous")
    # the bound is model 2's: one ω^x trial (not vacuous_trials) before its trials
    assert res.trials - res.random_trials == 1 and res.random_trials >= 1


def test_thread_graph_sites_are_counted():
    """The search fuses element-wise tails into thread graphs (FlashDecoding's final division
    by the row sums): the analysis counts their sites from the operands' tile shapes, so such
    a candidate gets the random-function model's bound like the hand-written one with tb ops."""
    from mirage.search import build as B, driver as D
    from mirage.search.config import auto_config, make_config

    ref, fused = small("gqa")
    cfg = make_config(auto_config(ref)[0], **auto_config(ref)[1])
    plans = [v[0] for v in D._seeds(ref, cfg, D.DEFAULT).values()]
    cands = [B.build(ref, p) for p in plans]
    cands = [g for g in cands if any(op.kind == "thread_graph" for k in g.ops if k.kind == "graph_def"
                                     for op in k.body.ops)]
    assert cands, "no seed with a thread graph"
    want = analyze(fused, "random").site_elements
    for g in cands[:2]:
        rep = analyze(g, "random")
        assert rep.zero_div < 10**9 and sum(rep.site_elements.values()) == sum(want.values())
        res = check_equivalence(ref, g, delta=1e-9, input_scales=BENCHMARKS["gqa"].scales)
        assert res.equivalent and res.bound_met and res.model == "random", res.summary()


def test_reference_outputs_reused_across_candidates():
    """Checking several candidates against one reference evaluates it once per trial (the
    search's checks); each result equals the one computed afresh, rejections included."""
    import mirage.verify.equivalence as E

    r, f = small("gqa")
    cands = [f]
    for m in list(mutations(f))[::6]:  # a spread: the first mutants keep the program equal
        try:
            cands.append(replay(f, m))
        except GraphError:
            continue
        if len(cands) == 8:
            break
    calls = []
    real = E.evaluate
    E.evaluate = lambda g, *a, **k: (calls.append(g), real(g, *a, **k))[1]
    try:
        reused = [check_equivalence(r, c, fp_check=False) for c in cands]
    finally:
        E.evaluate = real
    assert sum(g is r for g in calls) <= 3  # one ω^x and one random trial (+ one resample), not one per candidate
    fresh = []
    for c in cands:
        E._REFERENCE.clear()
        fresh.append(check_equivalence(r, c, fp_check=False))
    assert [x.summary() for x in reused] == [x.summary() for x in fresh]
    assert reused[0].equivalent and not all(x.equivalent for x in reused)


def _softmax_pair(online: bool, shift_by_max: bool = False):
    """Reference: exp(x) V / sum exp(x) over 16 keys. Online-softmax-style candidate: two
    halves of 8 keys, each shifted by its own mean m_h (exp(x - m_h)), rescaled by exp(m_h)
    before the halves are combined — equal only through exp(a - b) = exp(a) / exp(b)."""
    g = mi.new_kernel_graph()
    x, v = g.new_input((4, 16)), g.new_input((16, 3))
    if not online:
        e = g.exp(x)
        g.mark_output(g.div(g.matmul(e, v), g.reduction(e, 1)))
        return g
    xh = g.reshape(x, (4, 2, 8))
    m = g.div(g.reduction(xh, 2), g.constant(8.0, (1, 1, 1)))  # (4, 2, 1)
    e = g.exp(g.sub(xh, m))  # (4, 2, 8)
    scale = g.exp(m)  # (4, 2, 1)
    num = g.matmul(g.reshape(g.mul(e, scale), (4, 16)), v)
    den = g.reduction(g.reshape(g.mul(e, scale), (4, 16)), 1)
    g.mark_output(g.div(num, den))
    return g


def test_online_softmax_accepted_without_bound():
    """ω^x satisfies exp(a - b) = exp(a)/exp(b), the random-function model does not: the pair is
    equivalent (ω^x trials pass) but no bound is claimed, and the reason says why."""
    ref, cand = _softmax_pair(False), _softmax_pair(True)
    res = check_equivalence(ref, cand, delta=1e-9, vacuous_trials=4, max_trials=8)
    assert res.equivalent and not res.bound_met, res.summary()
    assert "random-function model" in res.reason and "exp(a-b)" in res.reason
    assert res.bound_details.get("random_model_difference") is not None
    # a wrong online softmax (the rescaling dropped from the denominator) is rejected by ω^x
    g = mi.new_kernel_graph()
    x, v = g.new_input((4, 16)), g.new_input((16, 3))
    xh = g.reshape(x, (4, 2, 8))
    m = g.div(g.reduction(xh, 2), g.constant(8.0, (1, 1, 1)))
    e = g.exp(g.sub(xh, m))
    num = g.matmul(g.reshape(g.mul(e, g.exp(m)), (4, 16)), v)
    g.mark_output(g.div(num, g.reduction(g.reshape(e, (4, 16)), 1)))
    res = check_equivalence(ref, g, vacuous_trials=4, max_trials=8)
    assert not res.equivalent and res.first_difference is not None


def test_random_model_field_semantics():
    """In the random-function model exp and sqrt are keyed random functions of the argument's
    value in Z_p x Z_p2: consistent, and exp(a)exp(b) != exp(a+b)."""
    ar = FieldArith(model="random", seed=3)
    assert ar.q != ar.p and ar.q > 2**30
    rng = np.random.default_rng(0)
    a, b = ar.random_value((50,), rng), ar.random_value((50,), rng)
    assert _eq(ar.exp(a), ar.exp(FV(a.p.copy(), a.q.copy())))
    assert not np.array_equal(ar.mul(ar.exp(a), ar.exp(b)).p, ar.exp(ar.add(a, b)).p)
    assert not np.array_equal(ar.exp(a).p, ar.sqrt(a).p)
    # an argument that differs in one component only is a different argument
    a2 = FV(a.p.copy(), (a.q + 1) % ar.q)
    assert not np.any(ar.exp(a).p == ar.exp(a2).p)


def test_exp_bound_met_on_short_softmax():
    """Attention over 2 keys: Theorem 2 is not vacuous and the trials reach δ = 1e-9."""
    def build(fused):
        g = mi.new_kernel_graph()
        Q, K, V = g.new_input((1, 4, 2)), g.new_input((1, 2, 2)), g.new_input((1, 2, 2))
        E = g.exp(g.matmul(Q, K))
        if fused:
            g.mark_output(g.div(g.matmul(E, V), g.matmul(E, g.add(g.constant(1.0, (1, 2, 2)), g.constant(0.0, (1, 2, 2))))))
        else:
            g.mark_output(g.div(g.matmul(E, V), g.reduction(E, 2)))
        return g
    res = check_equivalence(build(False), build(True), delta=1e-9, max_trials=1000)
    assert res.equivalent and res.bound_met, res.summary()


def test_equivalent_rewrites_never_rejected():
    """No false negatives: algebraically equal programs pass on many seeds."""
    def pair():
        a = mi.new_kernel_graph()
        x, y, z = a.new_input((4, 16)), a.new_input((16, 8)), a.new_input((4, 8))
        a.mark_output(a.div(a.add(a.matmul(x, y), z), a.sqrt(a.mul(z, z))))
        b = mi.new_kernel_graph()
        x, y, z = b.new_input((4, 16)), b.new_input((16, 8)), b.new_input((4, 8))
        s = b.sqrt(b.mul(z, z))
        b.mark_output(b.add(b.div(b.matmul(x, y), s), b.div(z, s)))
        return a, b
    for seed in range(20):
        assert check_equivalence(*pair(), seed=seed, fp_check=False).equivalent
    for seed in range(3):
        r, f = small("gqa")
        assert check_equivalence(r, f, seed=seed, fp_check=False, vacuous_trials=2).equivalent


def test_difference_reported():
    r, f = small("lora")
    m = replay(f, next(m for m in mutations(f) if m.change == ("accum", "sum")
                       if _valid(f, m)))
    res = check_equivalence(r, m)
    assert res.reason and (res.first_difference is not None or "shape" in res.reason)


def _valid(g, m):
    try:
        replay(g, m)
        return True
    except (GraphError, ValueError):
        return False


def test_fp_filter_rejects_unstable():
    """exp(x)/sum(exp(x)) vs exp(x-c)/sum(exp(x-c)) with a huge c: equal in the field and
    in float64 algebra, but the shifted form underflows in fp16."""
    def build(shift):
        g = mi.new_kernel_graph()
        x = g.new_input((4, 16))
        if shift:
            x = g.sub(x, g.constant(30.0, (1, 1)))
        e = g.exp(x)
        g.mark_output(g.div(e, g.reduction(e, 1)))
        return g
    res = check_equivalence(build(False), build(True), vacuous_trials=2, max_trials=8)
    assert not res.equivalent and "floating-point" in res.reason and res.max_fp_error > res.fp_tolerance


# -- mutation suite --------------------------------------------------------------------------

MUTATION_COUNTS = {}


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_mutants_rejected(name):
    _mutants_rejected(name)


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_mutants_rejected_with_every_reuse(name, monkeypatch):
    """The same with the reuse of a trial's products and their images (`FieldArith._product`,
    `_image`) and the buffer pool (`reusing_memory`) on for every size, not only full size:
    a mutant whose product or buffer is mistaken for another's would be accepted."""
    from mirage.verify import field
    monkeypatch.setattr(field, "_MEMO_MACS", 0)
    monkeypatch.setattr(field, "_BIG", 0)
    _mutants_rejected(name)


def _mutants_rejected(name):
    r, f = small(name)
    b = BENCHMARKS[name]
    rng = np.random.default_rng(0)
    scales = b.scales or (1.0,) * len(r.inputs)
    ins = [rng.standard_normal(t.shape) * s for t, s in zip(r.inputs, scales)]
    with np.errstate(all="ignore"):
        y = evaluate(r, ins)
    c = dict(generated=0, invalid=0, differ=0, rejected=0, equivalent=0, equivalent_accepted=0)
    missed, false_neg = [], []
    for base in (f, r):  # the fused μGraph first
        for m in mutations(base):
            c["generated"] += 1
            try:
                mg = replay(base, m)
            except (GraphError, ValueError):
                c["invalid"] += 1
                continue
            with np.errstate(all="ignore"):
                ym = evaluate(mg, ins)
            differ = len(ym) != len(y) or any(
                a.shape != b_.shape or not np.allclose(a, b_, rtol=1e-9, atol=1e-9 * np.abs(b_).max())
                for a, b_ in zip(ym, y))
            res = check_equivalence(r, mg, input_scales=b.scales, vacuous_trials=3)
            if differ:
                c["differ"] += 1
                c["rejected"] += not res.equivalent
                if res.equivalent:
                    missed.append(str(m))
            else:
                c["equivalent"] += 1
                c["equivalent_accepted"] += res.equivalent
                if not res.equivalent:
                    false_neg.append(f"{m}: {res.reason}")
    MUTATION_COUNTS[name] = c
    print(f"\n{name}: {c}")
    assert not missed, f"non-equivalent mutants accepted: {missed}"
    assert c["differ"] >= 20
    # equivalent mutants (e.g. a different grid or loop split) pass too: no false negatives
    assert not false_neg, false_neg


def test_fp_filter_arithmetic_is_the_native_one():
    """The fp filter's working-precision arithmetic (`_FilterArith`, each array rounded once):
    its outputs equal evaluate(..., dtype="native") bit for bit, for the six pairs."""
    from mirage.verify.equivalence import _FilterArith
    for name in BENCHMARKS:
        ref, fused = small(name)
        xs = [np.random.default_rng(4).standard_normal(t.shape) for t in ref.inputs]
        ar = _FilterArith(native=True)
        for g in (ref, fused):
            with np.errstate(all="ignore"):  # (fp16 overflow of unscaled attention scores: inf in both)
                want, got = evaluate(g, xs, dtype="native"), evaluate(g, xs, arith=ar)
            assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(want, got)), name


def test_fp_filter_arithmetic_is_exact_with_every_shortcut(monkeypatch):
    """The filter's arithmetic with its full-size paths on at every size (pooled results,
    rounded arrays remembered so that views of them are not rounded again, broadcasts
    rounded before they are broadcast, products shared between runs): the six pairs'
    outputs equal evaluate(...) in float64 and in working precision bit for bit, at inputs
    that are values of the input types (as the filter's are)."""
    from mirage.core.dtypes import round_to
    from mirage.verify import equivalence as E
    from mirage.verify import field
    monkeypatch.setattr(E, "_LARGE", 1)
    monkeypatch.setattr(E, "_SHARE_MACS", 0)
    monkeypatch.setattr(field, "_BIG", 0)
    for name in BENCHMARKS:
        ref, fused = small(name)
        xs = [round_to(np.random.default_rng(5).standard_normal(t.shape) * 0.5, t.dtype) for t in ref.inputs]
        with field.reusing_memory():
            shared = E._Shared()
            for x, t in zip(xs, ref.inputs):
                shared.remember(x, t.dtype)
            with np.errstate(all="ignore"):
                for native, dtype in ((False, None), (True, "native")):
                    ar = E._FilterArith(native, shared)
                    for g in (ref, fused):
                        want, got = evaluate(g, xs, dtype=dtype), evaluate(g, xs, arith=ar)
                        assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(want, got)), (name, dtype)
            assert shared.products or name == "ntrans", name  # (the exact run's products were kept)


def test_fp_filter_inputs_are_normal_values_of_the_input_types():
    """The filter's random inputs (`_draw`): values of each input's element type, with the
    scale as standard deviation; fp16/bf16 ones by the inverse normal CDF at 16 bits (the
    table's CDF within 2^-17 of the normal's), f32 ones normal draws; the same for a seed
    whatever the size's alignment to the generator's words and blocks."""
    import statistics
    from mirage.core.dtypes import dtype as Dtype, round_to
    from mirage.verify import equivalence as E
    table = E._normal_quantiles()
    nd = statistics.NormalDist()
    n = table.size
    assert n == 2 ** 16 and np.all(np.diff(table) > 0)
    assert max(abs(nd.cdf(float(v)) - (i + 0.5) / n) for i, v in enumerate(table)) < 1e-12
    for name, d in (("f16", Dtype.float16), ("bf16", Dtype.bfloat16), ("f32", Dtype.float32)):
        g = mi.new_kernel_graph()
        t = g.new_input((3, 33335), dtype=name)
        x = E._draw(np.random.default_rng(0), t, 0.25)
        assert x.shape == t.shape and np.array_equal(round_to(x, d), x), name
        z = np.sort(x.ravel()) / 0.25
        at = np.arange(0, z.size, 97)
        ks = max(abs(nd.cdf(float(z[i])) - (i + 0.5) / z.size) for i in at)
        assert ks < 0.01, (name, ks)  # (1e5 draws: sampling noise ~0.004; rounding to bf16 moves the CDF < 0.002)
        assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02, name
        assert np.array_equal(x, E._draw(np.random.default_rng(0), t, 0.25)), name
        assert len(np.unique(x)) > (50000 if name == "f32" else 1000), name
    t = mi.new_kernel_graph().new_input((5, 7))  # 35 draws: not a multiple of a generator word's 4
    words = np.random.default_rng(3).bit_generator.random_raw(9)
    assert np.array_equal(E._draw(np.random.default_rng(3), t, 1.0).ravel(),
                          round_to(table, Dtype.float16)[words.view(np.uint16)[:35]])


def test_fp_filter_judges_the_programs_at_values_of_their_input_types():
    """The filter's exact reference is float64 at the inputs the programs see (values of
    their element types): a program that fp16 computes exactly has error 0, and given
    fp_inputs are rounded in a copy, not in the caller's arrays."""
    from mirage.verify.equivalence import fp_filter

    def build():
        g = mi.new_kernel_graph()
        x, y = g.new_input((64, 32)), g.new_input((64, 32))
        g.mark_output(g.mul(g.add(x, x), g.constant(0.5, (1, 1))))  # (x + x) / 2 = x in fp16 too
        return g
    ok, err, tol, why = fp_filter(build(), build(), np.random.default_rng(0))
    assert ok and err == 0.0, (err, why)
    given = [np.random.default_rng(1).standard_normal((64, 32)) for _ in range(2)]
    kept = [x.copy() for x in given]
    ok, err, _, _ = fp_filter(build(), build(), np.random.default_rng(0), inputs=given)
    assert ok and err == 0.0 and all(np.array_equal(a, b) for a, b in zip(given, kept))
