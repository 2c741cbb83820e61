"""Scalar (f32 register) code of the element-wise operators, as MLIR text: each
operator's `gpu` entry in the op table (`core/ops.py`).

Every value is computed in f32 whatever the tensor element type; the result is rounded
to the element type only when stored (as the reference interpreter's `native` mode
rounds each tensor). Transcendentals use ops that lower without libdevice (`math.exp`,
`math.sqrt`, `math.powf` expand inline in the NVVM lowering); `exp` of a 16-bit result is
the hardware's ex2.approx (`Emitter.exp`).
"""
from __future__ import annotations

from ..core import ops as O
from .emitter import Emitter

BINARY, UNARY = O.BINARY, O.UNARY


HALF = ("f16", "bf16")


def apply(e: Emitter, name: str, args: list[str], attrs: dict, dtype: str | None = None) -> str:
    """The f32 value of operator `name` on `args`; `dtype`: the element type of the op's
    result (a 16-bit one lets `exp` approximate: `Emitter.exp`)."""
    d = O.OPS.get(name)
    if d is None or d.gpu is None:
        raise NotImplementedError(f"operator '{name}' is not element-wise")
    e.approx_exp = dtype in HALF
    try:
        return d.gpu(e, args, attrs)
    finally:
        e.approx_exp = False
