"""`check_equivalence`: random testing over finite fields with a stated error bound
(paper §5, Theorems 2 and 3), then a floating-point stability filter.

Procedure
1. Both graphs are analyzed (`mirage.verify.lax.analyze`): Lax-ness, and for each output
   the degree bound d and exp-term count k of the difference of the two programs in
   the normal form of Equation (2).
2. The per-trial probability that a non-equivalent pair agrees on one output element
   is bounded by (see `per_trial_bound`)
       eps = 8·d·k^4/q + q^(-1/k^2)        (Theorem 2; with no exp anywhere: d/p,
                                             Schwartz-Zippel over Z_p)
           + C(m, 2)·eps(atom arguments)    (m sqrt / random-function results in the
                                             cone, each treated as a fresh variable)
   and the trials needed for a failure probability δ are ceil(ln δ / ln eps)
   (Theorem 3). Trials are capped (`max_trials`); when the bound is vacuous (eps ≥ 1,
   e.g. attention over thousands of keys: k grows with the sequence length) the check
   still runs `vacuous_trials` trials (one where the random-function model below will
   give the bound), reports `bound_met=False` and says so.
   When that bound does not reach δ, the random-function model runs next (exp, sqrt and
   the non-Lax ops as keyed random functions over Z_p x Z_p2; `random_model_bound`,
   docs/verify.md "Model 2") and gives the bound; a pair that passes ω^x but not this model
   (equal only through exp/sqrt identities) is reported equivalent without a bound.
3. Each trial draws fresh inputs in Z_p x Z_q and a fresh ω from a seeded RNG, evaluates
   both graphs with `FieldArith` through the one interpreter and compares the Z_p
   components of every output element. A division by zero resamples the trial (counted
   in `zero_division_resamples`).
4. Floating-point filter: both graphs run on the same realistic random inputs, values of
   their input types (standard normal draws times `input_scales`, rounded; fp16/bf16 inputs
   by a 16-bit inverse-CDF table, see `_draw`); the candidate in its working precision
   (`dtype="native"`), the reference in float64 at the same inputs (and in working precision).
   The candidate is rejected when its normalized error max|y - y64| / max|y64| exceeds
   `fp_tolerance` (default: max(FP_BASE_TOL[dtype], 4 x the reference program's own
   error in working precision)) or is not finite. Inputs at which the reference itself is
   not finite (in float64 or in working precision) are scaled down by powers of 2 until it
   is (`fp_input_scale`, `fp_note` in the result say so).
"""
from __future__ import annotations

import functools
import math
import numbers
import statistics
import time
import weakref
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from ..core.graph import KNGraph
from ..core.arith import FloatArith
from ..core.dtypes import dtype as Dtype, round_to
from ..core.interpret import ReferenceOutputs, evaluate
from .field import (_BLOCK, FV, FieldArith, FieldZeroDivision, _blockwise, _empty, is_prime, reusing_memory,
                    safe_primes)
from .lax import LaxReport, analyze

# Normalized max error tolerated from one working precision (unit roundoff x a margin
# for the accumulation depth of fused kernels); the default tolerance is the larger of
# this and 4x the error of the reference program itself in the same precision.
FP_BASE_TOL = {"f16": 2e-2, "bf16": 1.2e-1, "f32": 1e-4}

# When the reference program itself is not finite at the filter's inputs (e.g. an
# unnormalized exp(Q@K) overflowing fp16), the inputs are halved until it is, down to this
# factor; below it the filter is skipped (with a note). The ladder is deterministic, so a
# result can be reproduced from the seed and the reported scale.
FP_MIN_INPUT_SCALE = 2.0 ** -10


@dataclass
class Difference:
    output: int
    index: tuple
    reference_value: int  # Z_p component
    candidate_value: int
    trial: int

    def __str__(self) -> str:
        return (f"output {self.output} element {list(self.index)} differs: reference {self.reference_value}, "
                f"candidate {self.candidate_value} (mod p, trial {self.trial})")


@dataclass
class EquivalenceResult:
    equivalent: bool
    trials: int
    error_bound: float  # P(a non-equivalent pair passes every trial run), by the bound
    delta: float
    bound_met: bool  # error_bound <= delta
    per_trial_bound: float
    primes: tuple
    reason: str = ""
    first_difference: Optional[Difference] = None
    max_fp_error: Optional[float] = None
    fp_tolerance: Optional[float] = None
    zero_division_resamples: int = 0
    lax_reference: Optional[LaxReport] = None
    lax_candidate: Optional[LaxReport] = None
    bound_details: dict = field(default_factory=dict)
    seconds: float = 0.0
    model: str = "omega"  # which model the bound comes from: "omega" (Theorem 2) or "random"
    random_trials: int = 0  # trials of the random-function model (included in `trials`)
    random_primes: tuple = ()
    fp_input_scale: float = 1.0  # factor the fp filter applied to its inputs (< 1: the reference overflowed)
    fp_note: str = ""  # what the fp filter did about a reference that is not finite, if anything

    def __bool__(self) -> bool:
        return self.equivalent

    def summary(self) -> str:
        if self.equivalent:
            b = (f"error bound {self.error_bound:.3g}" + (" (random-function model)" if self.model == "random" else "")
                 if self.bound_met else f"no bound: {self.bound_details.get('note', 'bound not reached')}")
            fp = "" if self.max_fp_error is None else f", fp error {self.max_fp_error:.3g} <= {self.fp_tolerance:.3g}"
            fp += f"; {self.fp_note}" if self.fp_note else ""
            return f"equivalent ({self.trials} trials, p={self.primes[0]}, q={self.primes[1]}, {b}{fp})"
        return f"not equivalent: {self.reason}"


# -- the bound ----------------------------------------------------------------------------

def theorem2_eps(d: int, k: int, ex: bool, p: int, q: int) -> float:
    """Probability bound that a non-zero expression of the form (2) vanishes at a random point."""
    if not ex:
        return min(1.0, max(d, 1) / p)
    if k > 10**6:
        return 1.0
    return min(1.0, 8.0 * max(d, 1) * float(k) ** 4 / q + q ** (-1.0 / (k * k)))


def per_trial_bound(ref: LaxReport, cand: LaxReport, p: int, q: int) -> tuple[float, dict]:
    worst, detail = 0.0, {}
    for o, (a, b) in enumerate(zip(ref.outputs, cand.outputs)):
        if a.broken or b.broken:
            return 1.0, {"output": o, "note": "an exp of an expression holding an exp: Theorem 2 does not apply"}
        d = max(a.dN + b.dD, b.dN + a.dD, a.dE, b.dE)
        k = max(a.kN * b.kD + b.kN * a.kD, a.kD * b.kD)
        ex = a.ex or b.ex
        eps = theorem2_eps(d, k, ex, p, q)
        m = min(a.m, ref.atom_elements) + min(b.m, cand.atom_elements)
        atom_eps = 0.0
        if m >= 2:
            dA, kA, exA = max(a.dA, b.dA), max(a.kA, b.kA), a.exA or b.exA
            atom_eps = min(1.0, m * (m - 1) / 2 * theorem2_eps(dA, kA, exA, p, q))
        total = min(1.0, eps + atom_eps)
        if total >= worst:
            worst = total
            detail = {"output": o, "degree": d, "exp_terms": k if ex else 0, "atoms": m,
                      "theorem2": eps, "atom_collisions": atom_eps}
    if worst >= 1.0:
        k = detail.get("exp_terms", 0)
        detail["note"] = (f"Theorem 2 is vacuous for output {detail.get('output')} "
                          f"(degree {detail.get('degree')}, {k} exp terms, {detail.get('atoms')} atoms)")
    return worst, detail


def random_model_bound(ref: LaxReport, cand: LaxReport, p: int, p2: int) -> tuple[float, dict]:
    """Per-trial bound of the random-function model (docs/verify.md, "The random-function
    model"): exp, sqrt and the non-Lax ops are keyed random functions of their argument's
    value in Z_p x Z_p2; both graphs are evaluated in Z_p x Z_p2 (two independent points) and
    compared on both components. For the output element e* where the programs differ:

        eps = ((d + b)/(p-1)) * ((d + b)/(p2-1))                      Schwartz-Zippel, per field
            + sum_f C(m_f, 2) * (dA/(p-1)) * (dA/(p2-1))              two distinct arguments of one
                                                                      random function collide
    d: degree of the cleared difference (atoms are degree-1 variables), b: sqrt atoms in the
    cone (represented by T = 1/sqrt, which needs sqrt != 0), m_f: atom elements of function f
    in e*'s cone over both graphs (an upper bound on distinct arguments), dA: degree of the
    cross difference of two arguments. A trial is conditioned on no division by zero; the
    result is divided by P(no division by zero) >= 1 - z, with z from every divisor element of
    both graphs plus a collision term over all atoms of both graphs."""
    P = float(p - 1) * float(p2 - 1)
    aN = max(ref.arg_degree[0], cand.arg_degree[0])
    aD = max(ref.arg_degree[1], cand.arg_degree[1])
    dA_all = max(aN + aD, 1)
    total_f: dict = {}
    for rep in (ref, cand):
        for (fn, _), n in rep.site_elements.items():
            total_f[fn] = min(CAP_F, total_f.get(fn, 0) + n)
    z = min(1.0, (ref.zero_div + cand.zero_div) * (1.0 / (p - 1) + 1.0 / (p2 - 1))
            + sum(n * (n - 1) / 2 for n in total_f.values()) * dA_all * dA_all / P)
    worst, detail = 0.0, {}
    for o, (a, b) in enumerate(zip(ref.outputs, cand.outputs)):
        if a.uncovered or b.uncovered:
            return 1.0, {"output": o, "note": "a max (reduce_max or the max accumulator) is in the cone: "
                                              "the random-function model gives no bound for it"}
        d = max(a.dN + b.dD, b.dN + a.dD, 1)
        dA = max(max(a.aN, b.aN) + max(a.aD, b.aD), 1)
        per_f: dict = {}
        for rep, f in ((ref, a), (cand, b)):
            for site, n in f.sites:
                per_f[site[0]] = per_f.get(site[0], 0) + min(n, rep.site_elements.get(site, n))
        nb = per_f.get("sqrt", 0)
        sz = (d + nb) / (p - 1) * (d + nb) / (p2 - 1)
        coll = sum(m * (m - 1) / 2 for m in per_f.values()) * dA * dA / P
        eps = min(1.0, (sz + coll) / (1.0 - z)) if z < 1.0 else 1.0
        if eps >= worst:
            worst = eps
            detail = {"output": o, "degree": d, "atoms": dict(per_f), "arg_degree": dA,
                      "schwartz_zippel": sz, "atom_collisions": coll, "zero_division": z}
    if worst >= 1.0 and "note" not in detail:
        detail["note"] = (f"the random-function model is vacuous for output {detail.get('output')} "
                          f"(degree {detail.get('degree')}, atoms {detail.get('atoms')}, zero-division {z:.3g})")
    return worst, detail


CAP_F = float(10**30)


def trials_for(eps: float, delta: float) -> int | None:
    """Trials so that eps^t <= delta (Theorem 3); None if eps >= 1."""
    if eps >= 1.0:
        return None
    if eps <= 0.0:
        return 1
    return max(1, math.ceil(math.log(delta) / math.log(eps)))


# -- the check ------------------------------------------------------------------------------

def _dtype_key(g: KNGraph) -> str:
    ds = {t.dtype.mlir for t in g.outputs} or {"f16"}
    for d in ("f16", "bf16", "f32"):
        if d in ds:
            return d
    return "f16"


def check_equivalence(reference: KNGraph, candidate: KNGraph, delta: float = 1e-9, seed: int = 0, *,
                      max_trials: int = 64, vacuous_trials: int = 3, max_resamples: int = 16,
                      primes: tuple | None = None, fp_check: bool = True,
                      fp_inputs: Sequence[np.ndarray] | None = None, input_scales: Sequence[float] | None = None,
                      fp_tolerance: float | None = None, progress=None,
                      random_model: bool = True) -> EquivalenceResult:
    """Check `candidate` against `reference` (both KNGraphs with the same inputs).

    Returns an `EquivalenceResult`; `bool(result)` is `result.equivalent`.

    The ω^x test (Theorem 2) runs first; when its bound does not reach `delta` (vacuous for
    long softmax sums) and `random_model` is set, the random-function model runs next and
    gives the bound. A pair that passes ω^x but not the random model (equal only through
    identities of exp/sqrt, e.g. exp(a-b) = exp(a)/exp(b)) is reported equivalent with
    bound_met=False and the reason."""
    with reusing_memory():  # the trials' large arrays reuse one another's buffers
        return _check_equivalence(reference, candidate, delta, seed, max_trials, vacuous_trials, max_resamples,
                                  primes, fp_check, fp_inputs, input_scales, fp_tolerance, progress, random_model)


def _check_equivalence(reference, candidate, delta, seed, max_trials, vacuous_trials, max_resamples, primes,
                       fp_check, fp_inputs, input_scales, fp_tolerance, progress, random_model):
    t0 = time.perf_counter()
    _check_arguments(reference, candidate, delta, seed, max_trials, vacuous_trials, max_resamples, primes,
                     fp_inputs, input_scales, fp_tolerance, progress)
    p, q = primes or safe_primes(1)[0]
    ra, ca = analyze(reference), analyze(candidate)
    res = EquivalenceResult(False, 0, 1.0, delta, False, 1.0, (p, q), lax_reference=ra, lax_candidate=ca)

    def done(reason: str = "") -> EquivalenceResult:
        res.reason = reason
        res.seconds = time.perf_counter() - t0
        return res

    why = signature_difference(reference, candidate)
    if why:
        return done(why)

    eps, detail = per_trial_bound(ra, ca, p, q)
    res.per_trial_bound, res.bound_details = eps, detail
    need = trials_for(eps, delta)
    n_trials = vacuous_trials if need is None else min(need, max_trials)
    random_reports = None  # the random-model analyses, computed once when needed
    if need is None and random_model:
        random_reports = analyze(reference, "random"), analyze(candidate, "random")
        if trials_for(random_model_bound(*random_reports, *_random_primes(p))[0], delta) is not None:
            n_trials = 1  # the random-function model gives the bound; one ω^x trial gates its exp/sqrt identities
    track_q = ra.uses_exp or ca.uses_exp
    rng = np.random.default_rng(seed)

    def make_omega():
        return FieldArith(p, q, seed=int(rng.integers(1 << 62)), rng=rng, track_q=track_q)

    diff, why = _trials(reference, candidate, n_trials, make_omega, rng, False, res, max_resamples, progress)
    if diff is not None or why:
        res.first_difference = diff
        res.error_bound = 0.0
        return done(why or f"finite-field test: {diff}")
    res.error_bound = min(1.0, eps ** res.trials) if eps < 1.0 else 1.0
    res.bound_met = res.error_bound <= delta
    if not res.bound_met and random_model:
        random_reports = random_reports or (analyze(reference, "random"), analyze(candidate, "random"))
        _random_model(reference, candidate, random_reports, delta, rng, res, max_trials, max_resamples, progress)
    elif not res.bound_met and "note" not in detail:
        detail["note"] = f"{res.trials} trials of per-trial bound {eps:.3g} give {res.error_bound:.3g} > delta"

    if fp_check:
        info: dict = {}
        ok, err, tol, why = fp_filter(reference, candidate, np.random.default_rng(seed + 1),
                                      fp_inputs, input_scales, fp_tolerance, info)
        res.max_fp_error, res.fp_tolerance = err, tol
        res.fp_input_scale, res.fp_note = info.get("scale", 1.0), info.get("note", "")
        if not ok:
            return done(why)
    res.equivalent = True
    return done(res.reason)


def _sig(ts) -> str:
    return "(" + ", ".join(f"{list(t.shape)} {t.dtype.mlir}" for t in ts) + ")"


def signature_difference(reference: KNGraph, candidate: KNGraph) -> str:
    """Why the two programs cannot be equivalent by their signatures (input and output
    shapes and element types), or "". Programs of different element types compute
    different values (rounding), so a dtype difference is a different program."""
    ri, ci, ro, co = reference.inputs, candidate.inputs, reference.outputs, candidate.outputs
    head = (f"the signatures differ: reference {_sig(ri)} -> {_sig(ro)}, candidate {_sig(ci)} -> {_sig(co)}")
    for what, rs, cs in (("input", ri, ci), ("output", ro, co)):
        if len(rs) != len(cs):
            return f"{head}: the reference has {len(rs)} {what}s, the candidate {len(cs)}"
        for k, (a, b) in enumerate(zip(rs, cs)):
            if a.shape != b.shape:
                return f"{head}: {what} {k} has shape {list(b.shape)}, the reference {list(a.shape)}"
            if a.dtype != b.dtype:
                return f"{head}: {what} {k} has element type {b.dtype.mlir}, the reference {a.dtype.mlir}"
    return ""


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _check_arguments(reference, candidate, delta, seed, max_trials, vacuous_trials, max_resamples, primes,
                     fp_inputs, input_scales, fp_tolerance, progress) -> None:
    """Reject arguments that would crash deep inside the check (delta=0: log(0)) or make it
    vacuous (vacuous_trials=0 would report equivalence after no trial)."""
    for name, g in (("reference", reference), ("candidate", candidate)):
        if not isinstance(g, KNGraph):
            raise TypeError(f"check_equivalence: {name} must be a KNGraph, got {type(g).__name__}")
        g.require_outputs(f"check_equivalence {name}")
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real):
        raise TypeError(f"check_equivalence: delta must be a number in (0, 1), got {delta!r}")
    if not 0.0 < float(delta) < 1.0:
        raise ValueError(f"check_equivalence: delta must be in (0, 1) (a failure probability), got {delta!r}")
    for name, v, lo in (("seed", seed, 0), ("max_trials", max_trials, 1), ("vacuous_trials", vacuous_trials, 1),
                        ("max_resamples", max_resamples, 0)):
        if not _is_int(v):
            raise TypeError(f"check_equivalence: {name} must be an integer, got {v!r}")
        if v < lo:
            raise ValueError(f"check_equivalence: {name} must be >= {lo}, got {v}")
    if primes is not None:
        if (not isinstance(primes, (tuple, list)) or len(primes) != 2 or not all(_is_int(x) for x in primes)):
            raise TypeError(f"check_equivalence: primes must be a pair of integers (p, q), got {primes!r}")
        p, q = (int(x) for x in primes)
        # FieldArith needs q | p - 1 (a q-th root of unity in Z_p) and p < 2**31 (int64 products)
        if not (2 < p < 2**31 and q > 2 and is_prime(p) and is_prime(q) and (p - 1) % q == 0):
            raise ValueError(f"check_equivalence: primes must be primes (p, q) with q dividing p - 1 and "
                             f"p < 2**31 (see mirage.verify.field.safe_primes), got {primes!r}")
    if fp_tolerance is not None:
        if isinstance(fp_tolerance, bool) or not isinstance(fp_tolerance, numbers.Real):
            raise TypeError(f"check_equivalence: fp_tolerance must be a positive number, got {fp_tolerance!r}")
        if not (math.isfinite(fp_tolerance) and fp_tolerance > 0):
            raise ValueError(f"check_equivalence: fp_tolerance must be positive and finite, got {fp_tolerance!r}")
    n = len(reference.inputs)
    if fp_inputs is not None:
        if len(fp_inputs) != n:
            raise ValueError(f"check_equivalence: fp_inputs has {len(fp_inputs)} arrays, the programs take {n}")
        for k, (a, t) in enumerate(zip(fp_inputs, reference.inputs)):
            if tuple(np.shape(a)) != t.shape:
                raise ValueError(f"check_equivalence: fp_inputs[{k}] has shape {list(np.shape(a))}, input {k} "
                                 f"is {list(t.shape)}")
    if input_scales:  # an empty sequence means "unscaled", as None does
        if len(input_scales) != n:
            raise ValueError(f"check_equivalence: input_scales has {len(input_scales)} entries, the programs "
                             f"take {n} inputs")
        for k, v in enumerate(input_scales):
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (math.isfinite(v) and v > 0):
                raise ValueError(f"check_equivalence: input_scales[{k}] must be a positive finite number, got {v!r}")
    if progress is not None and not callable(progress):
        raise TypeError(f"check_equivalence: progress must be callable, got {type(progress).__name__}")


def _trials(reference, candidate, n_trials, make_arith, rng, both: bool, res, max_resamples, progress):
    """Run `n_trials` trials; returns (first Difference or None, failure reason or "").
    Adds to res.trials and res.zero_division_resamples. `both`: compare both components."""
    for _ in range(n_trials):
        for attempt in range(max_resamples + 1):
            state = repr(rng.bit_generator.state)  # make_arith draws all of the trial from `rng`
            ar = make_arith()
            ins = [ar.random_value(t.shape) for t in reference.inputs]
            try:
                ro = _REFERENCE.get(reference, (state, ar.model, ar.p, ar.q, ar.track_q),
                                    lambda: _compared(evaluate(reference, ins, arith=ar), both))
                co = _compared(evaluate(candidate, ins, arith=ar), both)
                break
            except FieldZeroDivision:
                res.zero_division_resamples += 1
            finally:
                ar.forget()
        else:
            return None, (f"every one of {max_resamples + 1} samples divided by zero in the field "
                          f"(a denominator is identically zero?)")
        res.trials += 1
        if progress:
            progress(res.trials, n_trials)
        for o, (a, b) in enumerate(zip(ro, co)):
            neq = a.p != b.p
            if both:
                neq |= a.q != b.q
            if neq.any():
                idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(neq)), neq.shape))
                return Difference(o, idx, int(a.p[idx]), int(b.p[idx]), res.trials), ""
    return None, ""


def _compared(outs, both: bool) -> list:
    """The components of the outputs that the comparison reads (Z_p; both with `both`), as plain
    arrays: what is kept (the reference's, across checks) holds nothing else of the trial."""
    return [FV(o.p, o.q if both else None) for o in outs]


# the reference's outputs per trial: a check of several candidates against one reference
# (the search's checks) evaluates it once per trial. A trial's arithmetic (keys, ω) and inputs
# all come from the check's RNG, so its state before the trial, with the arithmetic's kind,
# names them.
_REFERENCE = ReferenceOutputs()


def _random_primes(p: int) -> tuple[int, int]:
    return p, next(pp for pp, _ in safe_primes(4) if pp != p)


def _random_model(reference, candidate, reports, delta, rng, res, max_trials, max_resamples, progress):
    """The random-function model after an ω^x test whose bound is not met (see
    `random_model_bound`; `reports`: the two graphs' random-model analyses); updates `res`."""
    p, p2 = res.random_primes = _random_primes(res.primes[0])
    eps, det = random_model_bound(*reports, p, p2)
    omega_note = res.bound_details.get("note", f"ω^x bound {res.error_bound:.3g} > delta")
    res.bound_details = dict(det, omega=dict(res.bound_details), omega_error_bound=res.error_bound)
    need = trials_for(eps, delta)
    if need is None:
        res.bound_details["note"] = f"{omega_note}; {det.get('note', 'random-function model vacuous')}"
        return
    before = res.trials

    def make_random():
        return FieldArith(p, p2, seed=int(rng.integers(1 << 62)), rng=rng, model="random")

    diff, why = _trials(reference, candidate, min(need, max_trials), make_random, rng, True, res,
                        max_resamples, progress)
    res.random_trials = res.trials - before
    if diff is not None or why:
        note = (f"the ω^x test passed, but the random-function model (exp, sqrt as independent random "
                f"functions) tells the programs apart ({why or diff}): they are equal only through "
                f"identities of exp/sqrt such as exp(a-b) = exp(a)/exp(b), which that model does not "
                f"satisfy; no error bound is claimed ({omega_note})")
        res.bound_details["note"] = note
        res.bound_details["random_model_difference"] = diff
        res.reason = note
        return
    res.model = "random"
    res.per_trial_bound = eps
    res.error_bound = min(1.0, eps ** res.random_trials)
    res.bound_met = res.error_bound <= delta
    if not res.bound_met:
        res.bound_details["note"] = (f"{res.random_trials} random-model trials of per-trial bound {eps:.3g} "
                                     f"give {res.error_bound:.3g} > delta")


# -- the floating-point filter ----------------------------------------------------------------

# products of at least this many multiply-adds are kept for the filter's later runs
_SHARE_MACS = 1 << 22
# arrays of at least this many elements take the pooled, remembered paths below
_LARGE = 1 << 16


def _span(a: np.ndarray) -> tuple[int, int]:
    """The bytes [lo, hi) that a's elements occupy."""
    lo = hi = a.__array_interface__["data"][0]
    if a.size == 0:
        return lo, lo
    for n, st in zip(a.shape, a.strides):
        if st > 0:
            hi += (n - 1) * st
        else:
            lo += (n - 1) * st
    return lo, hi + a.itemsize


def _ident(a: np.ndarray) -> tuple:
    return a.__array_interface__["data"][0], a.shape, a.strides


def _rounded(x: np.ndarray, d: Dtype, out: np.ndarray | None = None, factor: float = 1.0) -> np.ndarray:
    """round_to(x * factor, d), bit for bit, into `out` (may be x; default: a pooled array),
    block by block: the narrow temporaries stay in cache instead of two fresh full-size arrays."""
    out = _empty(x.shape) if out is None else out
    narrow = {Dtype.float16: np.float16, Dtype.float32: np.float32}.get(d)

    def fn(o, v):
        if factor != 1.0:
            v = np.multiply(v, factor, out=o)
        if narrow is None:  # bf16
            np.copyto(o, round_to(v, d))
            return
        t = np.empty(o.shape, narrow)
        np.copyto(t, v, casting="unsafe")
        np.copyto(o, t)
    return _blockwise(fn, out, x)


class _Shared:
    """What the filter's runs share: arrays known to hold values of an element type (weak
    references, with the bytes they occupy) and large products with their operands."""

    def __init__(self):
        self.rounded: list = []  # (weakref, lo, hi, dtype)
        self.products: dict = {}  # (ident(a), ident(b)) -> (a, b, a @ b)

    def remember(self, a: np.ndarray, d: Dtype) -> None:
        self.rounded = [r for r in self.rounded if r[0]() is not None]
        self.rounded.append((weakref.ref(a), *_span(a), d))

    def holds(self, v: np.ndarray, d: Dtype) -> bool:
        """Whether v lies in the memory of a live array remembered for d, so is a view of it
        (a live array's memory is no other array's: not in the pool, which hands out only
        buffers no array uses) and holds values of d (nothing here writes into a value)."""
        lo, hi = _span(v)
        return any(dd is d and l <= lo and hi <= h and r() is not None for r, l, h, dd in self.rounded)


class _FilterArith(FloatArith):
    """The filter's arithmetic: `FloatArith`'s values bit for bit (the same numpy operations),
    exact (float64) or `native` (each result rounded to its tensor's element type), with fewer
    passes over memory at full size:

    - an array is rounded once: a view of a rounded array (the filter's inputs, already values
      of their types; a block graph's tiles of them) is returned as it is, since rounding it
      again changes nothing; a broadcast (stride 0) array is rounded before it is broadcast;
    - large results come from the check's buffer pool (`reusing_memory`: no page faults);
    - a product whose operands are the very arrays of an earlier product of a run sharing
      `shared` is that product (the exact and the working-precision reference both start with
      X @ W on the same inputs)."""

    def __init__(self, native: bool = True, shared: _Shared | None = None):
        super().__init__(native=native)
        self._shared = shared if shared is not None else _Shared()

    def round(self, v, d):
        if not self.native:
            return v
        if not isinstance(v, np.ndarray) or v.dtype != np.float64 or v.size < _LARGE:
            return super().round(v, d)
        if self._shared.holds(v, d):
            return v
        compact = v[tuple(slice(0, 1) if st == 0 else slice(None) for st in v.strides)]
        r = _rounded(compact, d)
        self._shared.remember(r, d)
        return r if r.shape == v.shape else np.broadcast_to(r, v.shape)

    def _ew(self, ufunc, *xs):
        shape = np.broadcast_shapes(*(np.shape(x) for x in xs))
        if math.prod(shape) < _LARGE or any(np.result_type(x) != np.float64 for x in xs):
            return ufunc(*xs)
        return ufunc(*xs, out=_empty(shape))

    def add(self, a, b): return self._ew(np.add, a, b)
    def sub(self, a, b): return self._ew(np.subtract, a, b)
    def mul(self, a, b): return self._ew(np.multiply, a, b)

    def div(self, a, b):
        with np.errstate(divide="ignore", invalid="ignore"):
            return self._ew(np.divide, a, b)

    def exp(self, a):
        with np.errstate(over="ignore"):
            return self._ew(np.exp, a)

    def sqrt(self, a):
        with np.errstate(invalid="ignore"):
            return self._ew(np.sqrt, a)

    def matmul(self, a, b):
        shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        if math.prod(shape) * a.shape[-1] < _SHARE_MACS or a.dtype != np.float64 or b.dtype != np.float64:
            return np.matmul(a, b)
        key = (_ident(a), _ident(b))
        hit = self._shared.products.get(key)
        if hit is None:
            hit = self._shared.products[key] = (a, b, np.matmul(a, b, out=_empty(shape)))
        return hit[2]


# The filter draws inputs of fp16/bf16 tensors by the inverse CDF of the standard normal on
# 16 random bits (a table lookup, four to a generator word): its CDF is within 2^-17 of the
# normal's everywhere, |x| <= 4.33, and the values it takes are as fine as fp16's in all but
# the central 3% (where fp16 is finer) and finer than bf16's: rounded to those types, a draw
# is as likely as a rounded normal draw to equal another (fp16's own spacing makes that ~1e-4,
# the table's 2^-16). A normal draw and its rounding cost 5x more (the check's largest pass
# after the products at full size). f32 inputs, whose values are finer, are normal draws.
_TABLE_BITS = 16


@functools.lru_cache(maxsize=None)
def _normal_quantiles() -> np.ndarray:
    """Phi^-1((i + 1/2) / 2^16) for i < 2^16 (float64, increasing)."""
    nd = statistics.NormalDist()
    n = 1 << _TABLE_BITS
    half = np.array([nd.inv_cdf((i + 0.5) / n) for i in range(n // 2)])
    return np.concatenate([half, -half[::-1]])


def _draw(rng: np.random.Generator, t, scale: float) -> np.ndarray:
    """A value of tensor `t`'s type: scale times standard normal draws, rounded; into a pooled
    array, block by block."""
    x = _empty(t.shape)
    flat = x.reshape(-1)
    if t.dtype in (Dtype.float16, Dtype.bfloat16):
        table = round_to(_normal_quantiles() * scale, t.dtype)
        for i in range(0, flat.size, _BLOCK):
            o = flat[i:i + _BLOCK]
            idx = rng.bit_generator.random_raw(-(-o.size // 4)).view(np.uint16)[:o.size]
            np.take(table, idx, out=o)
        return x
    for i in range(0, flat.size, _BLOCK):
        o = flat[i:i + _BLOCK]
        rng.standard_normal(out=o)
        o *= scale
    return _rounded(x, t.dtype, out=x)


def _filter_inputs(reference: KNGraph, rng, inputs, scales, shared: _Shared) -> list:
    """The filter's inputs as values of the reference's input types (float64 arrays): the
    given `inputs` rounded (copies), else draws (`_draw`) times `scales`."""
    xs = []
    for k, t in enumerate(reference.inputs):
        if inputs is not None:
            x = _rounded(np.asarray(inputs[k], dtype=np.float64), t.dtype)
        else:
            x = _draw(rng, t, float(scales[k]) if scales else 1.0)
        shared.remember(x, t.dtype)
        xs.append(x)
    return xs


def fp_filter(reference: KNGraph, candidate: KNGraph, rng: np.random.Generator,
              inputs: Sequence[np.ndarray] | None = None, scales: Sequence[float] | None = None,
              tolerance: float | None = None, info: dict | None = None) -> tuple[bool, float, float, str]:
    """Numerical-stability filter: (ok, candidate error, tolerance, reason).

    Both programs run on the same inputs, values of the programs' input types (random
    normal times `scales`, or the given `inputs`, rounded to the input's element type): the
    reference in float64 (the exact value at those inputs), both in working precision; the
    error of each is its normalized distance from the exact value.

    The candidate is judged at inputs where the reference program is finite, in float64 and
    in working precision: an input at which the reference itself overflows (inf/nan) says
    nothing about the candidate. So when it does, the inputs are scaled down by powers of 2
    (and rounded again) until it does not; `info` (if given) receives the factor used
    ("scale") and a sentence saying so ("note")."""
    info = {} if info is None else info
    shared = _Shared()
    base = _filter_inputs(reference, rng, inputs, scales, shared)

    def finite(ys):
        return all(np.all(np.isfinite(y)) for y in ys)

    factor, info["scale"], info["note"] = 1.0, 1.0, ""
    with np.errstate(all="ignore"):
        while True:
            xs = base
            if factor != 1.0:
                xs = [_rounded(x, t.dtype, factor=factor) for x, t in zip(base, reference.inputs)]
                for x, t in zip(xs, reference.inputs):
                    shared.remember(x, t.dtype)
            exact = evaluate(reference, xs, arith=_FilterArith(False, shared))
            native = _FilterArith(True, shared)
            ref_native = evaluate(reference, xs, arith=native)
            if finite(exact) and finite(ref_native):
                break
            if factor / 2 < FP_MIN_INPUT_SCALE:
                info["note"] = (f"floating-point filter skipped: the reference program is not finite (inf/nan "
                                f"in float64 or in working precision) at its random inputs scaled down to "
                                f"{factor:g}")
                return True, 0.0, 0.0, ""
            factor /= 2
            shared.products.clear()
        cand_native = evaluate(candidate, xs, arith=native)
    if factor != 1.0:
        info["scale"] = factor
        info["note"] = (f"floating-point filter inputs scaled by {factor:g}: at the unscaled inputs the reference "
                        f"program itself is not finite in working precision")

    def nerr(y, y64):
        scale = float(np.max(np.abs(y64))) if y64.size else 0.0
        if not np.all(np.isfinite(y)):
            return math.inf
        return float(np.max(np.abs(y - y64))) / (scale if scale > 0 else 1.0)

    e_ref = max(nerr(y, y64) for y, y64 in zip(ref_native, exact))
    e_cand = max(nerr(y, y64) for y, y64 in zip(cand_native, exact))
    tol = tolerance if tolerance is not None else max(FP_BASE_TOL[_dtype_key(candidate)], 4.0 * e_ref)
    if not e_cand <= tol:
        at = f" (inputs scaled by {factor:g}, where the reference is finite)" if factor != 1.0 else ""
        return False, e_cand, tol, (f"floating-point filter: the candidate's normalized error in working "
                                    f"precision is {e_cand:.3g} > tolerance {tol:.3g} (reference program: "
                                    f"{e_ref:.3g}){at}")
    return True, e_cand, tol, ""
