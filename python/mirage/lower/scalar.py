"""Scalar (f32 register) semantics of the element-wise operators, as MLIR text.

Every value is computed in f32 whatever the tensor element type; the result is
rounded to the element type only when stored (as the reference interpreter's
`native` mode rounds each tensor). Transcendentals use ops that lower without
libdevice (`math.exp`, `math.sqrt`, `math.powf` expand inline in the NVVM lowering);
`erf` (for gelu) is the Abramowitz-Stegun 7.1.26 polynomial (|error| < 1.5e-7).
"""
from __future__ import annotations

from ..core import ops as O
from .emitter import Emitter


def unary(e: Emitter, name: str, x: str, attrs: dict | None = None) -> str:
    one = e.f32(1.0)
    if name == "clamp":  # min(max(x, lo), hi); NaN stays NaN, as in torch.clamp
        return e.fbin("minimumf", e.fbin("maximumf", x, e.f32(attrs["min_val"])), e.f32(attrs["max_val"]))
    if name == "mul_scalar":
        return e.fbin("mulf", x, e.f32(attrs["scalar"]))
    if name == "exp":
        return e.op(f"math.exp {x} : f32", "f")
    if name == "sqrt":
        return e.op(f"math.sqrt {x} : f32", "f")
    if name == "rsqrt":
        return e.fbin("divf", one, e.op(f"math.sqrt {x} : f32", "f"))
    if name == "square":
        return e.fbin("mulf", x, x)
    if name == "relu":
        return e.fbin("maximumf", x, e.f32(0.0))
    if name in ("sigmoid", "silu"):
        nx = e.op(f"arith.negf {x} : f32", "f")
        den = e.fbin("addf", one, e.op(f"math.exp {nx} : f32", "f"))
        return e.fbin("divf", one if name == "sigmoid" else x, den)
    if name == "gelu":
        z = e.fbin("mulf", x, e.f32(0.7071067811865476))
        return e.fbin("mulf", e.fbin("mulf", x, e.f32(0.5)), e.fbin("addf", one, erf(e, z)))
    raise NotImplementedError(f"unary operator '{name}' has no GPU lowering")


def erf(e: Emitter, x: str) -> str:
    a = e.op(f"math.absf {x} : f32", "f")
    t = e.fbin("divf", e.f32(1.0), e.fbin("addf", e.f32(1.0), e.fbin("mulf", a, e.f32(0.3275911))))
    coef = [1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592]
    p = e.f32(coef[0])
    for c in coef[1:]:
        p = e.fbin("addf", e.fbin("mulf", p, t), e.f32(c))
    p = e.fbin("mulf", p, t)
    nsq = e.op(f"arith.negf {e.fbin('mulf', a, a)} : f32", "f")
    ex = e.op(f"math.exp {nsq} : f32", "f")
    r = e.fbin("subf", e.f32(1.0), e.fbin("mulf", p, ex))
    return e.op(f"math.copysign {r}, {x} : f32", "f")


def binary(e: Emitter, name: str, a: str, b: str) -> str:
    if name == "pow":  # the NVVM lowering expands math.powf inline (no libdevice call)
        return e.op(f"math.powf {a}, {b} : f32", "f")
    return e.fbin({"add": "addf", "sub": "subf", "mul": "mulf", "div": "divf"}[name], a, b)


BINARY, UNARY = O.BINARY, O.UNARY


def apply(e: Emitter, name: str, args: list[str], attrs: dict) -> str:
    if name in BINARY:
        return binary(e, name, *args)
    if name in UNARY:
        return unary(e, name, args[0], attrs)
    if name == "constant":
        return e.f32(attrs["value"])
    raise NotImplementedError(f"operator '{name}' is not element-wise")
