"""Equivalence check of complete candidates: one function, `equivalent`.

The formal verifier (`mirage.verify.check_equivalence`, random testing over finite
fields, paper §5) is being written in python/mirage/verify/. Until it lands this uses
the float64 reference interpreter on random inputs as a stand-in; switching is the one
line `USE_FORMAL_VERIFIER = True`.
"""
from __future__ import annotations

import numpy as np

USE_FORMAL_VERIFIER = False
TRIALS = 2
RTOL = 1e-8  # float64 reassociation of 4096-term sums stays ~1e-13 relative


def equivalent(reference, candidate, seed: int = 0) -> bool:
    if USE_FORMAL_VERIFIER:
        from ..verify import check_equivalence

        return bool(check_equivalence(reference, candidate, delta=1e-9))
    return float_equivalent(reference, candidate, seed)


def float_equivalent(reference, candidate, seed: int = 0) -> bool:
    rng = np.random.default_rng(seed)
    for _ in range(TRIALS):
        xs = [rng.uniform(-1.0, 1.0, t.shape) for t in reference.inputs]
        try:
            want = reference.evaluate(xs)
            got = candidate.evaluate(xs)
        except Exception:
            return False
        for a, b in zip(got, want):
            if a.shape != b.shape or not np.all(np.isfinite(a)):
                return False
            scale = float(np.max(np.abs(b))) or 1.0
            if float(np.max(np.abs(a - b))) > RTOL * scale:
                return False
    return True
