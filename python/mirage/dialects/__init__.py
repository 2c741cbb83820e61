"""MLIR side of mirage: the kn / tb / th dialects in the upstream Python bindings.

    from mirage.dialects import make_context
    ctx = make_context()            # an mlir.ir.Context with kn, tb, th loaded
    module = mlir.ir.Module.parse(text, ctx)

    from mirage.dialects import register_dialects
    register_dialects(existing_ctx)  # same, for a context you made

    from mirage.dialects import kn, tb, th   # generated op classes (kn.MatmulOp, ...)

The dialects are compiled into mirage/_lib/libMirageCAPI.so (linked against the
bindings' own libMLIRPythonCAPI.so) and registered through the C function
`mirageRegisterDialects(MlirContext)`, called here with ctypes. This package is the
only part of mirage that imports MLIR (`import mirage` and `import mirage.runtime`
do not).
"""
from __future__ import annotations

import ctypes
import math
import threading

from mlir import ir as _ir  # noqa: F401  (loads libMLIRPythonCAPI.so first)

from ..config import capi_lib

__all__ = ["register_dialects", "make_context", "format_scalar", "load_library"]

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


class _MlirContext(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p)]


def load_library() -> ctypes.CDLL:
    """Load libMirageCAPI.so once (cached)."""
    global _lib
    with _lock:
        if _lib is None:
            lib = ctypes.CDLL(str(capi_lib()))
            lib.mirageRegisterDialects.argtypes = [_MlirContext]
            lib.mirageRegisterDialects.restype = None
            _lib = lib
        return _lib


def _context_ptr(ctx: _ir.Context) -> int:
    capsule = ctx._CAPIPtr
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    ptr = get(capsule, b"mlir.ir.Context._CAPIPtr")
    if not ptr:
        raise RuntimeError("mirage: could not read the MlirContext of " + repr(ctx))
    return ptr


def register_dialects(ctx: _ir.Context) -> _ir.Context:
    """Register and load the kn, tb and th dialects in `ctx`; returns `ctx`."""
    load_library().mirageRegisterDialects(_MlirContext(_context_ptr(ctx)))
    # Import the generated op classes so parsed ops get their Python OpViews.
    from . import kn, tb, th  # noqa: F401
    return ctx


def make_context() -> _ir.Context:
    """A new `mlir.ir.Context` with the kn, tb and th dialects registered and loaded
    (upstream dialects such as func are available as usual)."""
    return register_dialects(_ir.Context())


def format_scalar(value: float) -> str:
    """The text the constant ops (`kn.constant`, `tb.constant`, `th.constant`) print
    for `value`: Python's shortest `repr`, with `.0` added so MLIR reads a float
    (`1e-06` -> `1.0e-06`, `2` -> `2.0`). Same as the C++ printer."""
    v = float(value)
    if not math.isfinite(v):
        import struct

        return "0x%016X" % struct.unpack("<Q", struct.pack("<d", v))[0]
    s = repr(v)
    mant, e, exp = s.partition("e")
    if "." not in mant:
        mant += ".0"
    return mant + (e + exp if e else "")
