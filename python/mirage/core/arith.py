"""Pluggable arithmetic for the one evaluation core.

The interpreter (`interpret.py`) and the op table (`ops.py`) never touch numbers
directly: they call an `Arith`. `FloatArith` computes in float64 and optionally rounds
every result to a working precision; the finite-field arithmetic of the verifier
(`mirage.verify.field`) implements the same methods over Z_p x Z_q.

Values are opaque to the caller. Structural operations (reshape, transpose, slicing,
concatenation, broadcasting) go through `apply`, which runs a numpy function on each
component of a value.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .dtypes import dtype, round_to
from .ops import OPS


class Arith:
    """Interface; every method takes and returns values of this arithmetic."""

    def from_array(self, a: np.ndarray):  # an input given by the caller
        raise NotImplementedError

    # The defaults suit arithmetics whose values are single numpy arrays.
    def to_array(self, v) -> np.ndarray:
        return v

    def shape(self, v) -> tuple[int, ...]:
        return v.shape

    def apply(self, fn: Callable, *vs):
        """Structural op: `fn` maps numpy arrays to one numpy array, element values untouched."""
        return fn(*vs)

    def const(self, value: float, shape: Sequence[int]):
        raise NotImplementedError

    def add(self, a, b): raise NotImplementedError
    def sub(self, a, b): raise NotImplementedError
    def mul(self, a, b): raise NotImplementedError
    def div(self, a, b): raise NotImplementedError
    def matmul(self, a, b): raise NotImplementedError
    def sum(self, a, axis: int): raise NotImplementedError  # keeps the axis (size 1)
    def max(self, a, axis: int): raise NotImplementedError
    def exp(self, a): raise NotImplementedError
    def sqrt(self, a): raise NotImplementedError
    def unary(self, name: str, a): raise NotImplementedError  # the table's operators with a `real` function
    def pow(self, a, b): raise NotImplementedError  # a ** b element-wise

    def clamp(self, a, lo: float, hi: float):
        """min(max(a, lo), hi). By default the random function `unary` keyed by the
        bounds: arithmetics that model non-Lax operators as uninterpreted functions
        (the finite fields) need nothing more."""
        return self.unary(f"clamp[{float(lo)!r},{float(hi)!r}]", a)

    def round(self, v, d: dtype):
        """Round to the working precision of a tensor of element type `d`."""
        return v


class FloatArith(Arith):
    """Real arithmetic in float64; with `native=True` each op's result is rounded to its
    tensor's element type (fp16/bf16/fp32), products accumulate in float64 first, as
    tensor cores accumulate in fp32 before rounding."""

    def __init__(self, native: bool = False, force: dtype | None = None):
        self.native = native
        self.force = force

    def from_array(self, a):
        return np.asarray(a, dtype=np.float64)

    def const(self, value, shape):
        return np.full(tuple(shape), float(value))

    def add(self, a, b): return a + b
    def sub(self, a, b): return a - b
    def mul(self, a, b): return a * b

    def div(self, a, b):
        with np.errstate(divide="ignore", invalid="ignore"):
            return a / b

    def matmul(self, a, b): return np.matmul(a, b)
    def sum(self, a, axis): return a.sum(axis=axis, keepdims=True)
    def max(self, a, axis): return a.max(axis=axis, keepdims=True)

    def exp(self, a):
        with np.errstate(over="ignore"):
            return np.exp(a)

    def sqrt(self, a):
        with np.errstate(invalid="ignore"):
            return np.sqrt(a)

    def unary(self, name, a):
        with np.errstate(over="ignore"):
            return OPS[name].real(a)

    def pow(self, a, b):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return np.power(a, b)

    def clamp(self, a, lo, hi):
        return np.minimum(np.maximum(a, lo), hi)

    def round(self, v, d):
        if self.force is not None:
            return round_to(v, self.force)
        return round_to(v, d) if self.native else v
