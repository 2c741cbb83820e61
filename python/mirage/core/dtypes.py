"""Element types of μGraph tensors and their rounding in numpy."""
from __future__ import annotations

import enum

import numpy as np


class dtype(enum.Enum):
    """Element type; the value is its MLIR spelling."""

    float16 = "f16"
    bfloat16 = "bf16"
    float32 = "f32"

    @property
    def mlir(self) -> str:
        return self.value

    @property
    def itemsize(self) -> int:
        return 4 if self is dtype.float32 else 2

    @classmethod
    def parse(cls, text: str) -> "dtype":
        for d in cls:
            if d.value == text:
                return d
        raise ValueError(f"unsupported element type '{text}' (expected f16, bf16 or f32)")

    def __repr__(self) -> str:
        return f"mirage.{self.name}"


float16 = dtype.float16
bfloat16 = dtype.bfloat16
float32 = dtype.float32


def round_to(x: np.ndarray, d: dtype) -> np.ndarray:
    """Round float64 values to the precision of `d`, returned as float64."""
    if d is dtype.float32:
        return x.astype(np.float32).astype(np.float64)
    if d is dtype.float16:
        return x.astype(np.float16).astype(np.float64)
    if d is not dtype.bfloat16:
        raise ValueError(f"round_to: not a mirage element type: {d!r}")
    # bfloat16: round-to-nearest-even on the upper 16 bits of the float32 pattern.
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)
