"""Verified lifting of Triton kernels (after "Verified Lifting of Deep Learning
Operators"): symbolic evaluation of a `@triton.jit` kernel's Python AST, synthesis of a
`kn` program, verification (Z3 at the launched sizes; Hoare logic over the launch grid
for all sizes where its pattern applies) and egglog simplification to a formula.

Needs the optional dependencies `triton` (only for its `@triton.jit` objects; no GPU)
and `egglog`: `pip install 'mirage[lift]'`.
"""
from .errors import LiftError

__all__ = ["LiftError", "LiftResult", "lift_triton"]


def __getattr__(name):
    if name in ("lift_triton", "LiftResult"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'mirage.lift' has no attribute '{name}'")
