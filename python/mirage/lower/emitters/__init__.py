"""The emitters of `BlockLowering`, one module per op family (mixins: each reads the
kernel's plan `self.p` and writes through its emitter `self.e`)."""
from .accumulator import AccumulatorEmitter
from .elementwise import ElementwiseEmitter
from .matmul import MatmulEmitter
from .memory import TileIO
from .reduction import ReductionEmitter
from .rows import RowsEmitter

__all__ = ["AccumulatorEmitter", "ElementwiseEmitter", "MatmulEmitter", "ReductionEmitter", "RowsEmitter", "TileIO"]
