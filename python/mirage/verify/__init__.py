"""Equivalence verification of μGraphs (paper §5).

- `lax`: decides whether a μGraph is Lax and computes what Theorems 2-3 need.
- `field`: finite-field arithmetic (`FieldArith`) for the one interpreter.
- `equivalence`: `check_equivalence` (random tests with a stated bound + fp filter).
- `smt`: a Z3 formal check for small programs outside the Lax fragment.
- `mutate`: replaying/shrinking/mutating μGraphs (tests and benchmarks).
- `verify_pass`: the `mirage-verify` pass.
"""
from .equivalence import Difference, EquivalenceResult, check_equivalence
from .field import FieldArith, FieldZeroDivision
from .lax import LaxReport, analyze, is_lax

__all__ = ["check_equivalence", "EquivalenceResult", "Difference", "FieldArith", "FieldZeroDivision",
           "LaxReport", "analyze", "is_lax"]
