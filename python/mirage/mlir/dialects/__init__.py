"""MLIR side of mirage: the kn / tb / th dialects in the upstream Python bindings.

    from mirage.mlir.dialects import make_context
    ctx = make_context()            # an mlir.ir.Context with kn, tb, th loaded
    module = mlir.ir.Module.parse(text, ctx)

    from mirage.mlir.dialects import register_dialects
    register_dialects(existing_ctx)  # same, for a context you made

    from mirage.mlir.dialects import kn, tb, th   # generated op classes (kn.MatmulOp, ...)

The dialects are compiled into mirage/_lib/libMirageCAPI.so (linked against the
bindings' own libMLIRPythonCAPI.so) and registered through the C function
`mirageRegisterDialects(MlirContext)`, called here with ctypes. This package is the
only part of mirage that imports MLIR (`import mirage` and `import mirage.runtime`
do not).
"""
from __future__ import annotations

import ctypes
import math
import os
import re
import threading

from mlir import ir as _ir  # noqa: F401  (loads libMLIRPythonCAPI.so first)

from ...config import capi_lib

__all__ = ["register_dialects", "make_context", "format_scalar", "load_library", "parse_module", "ParseAborted"]

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


class ParseAborted(ValueError):
    """MLIR's parser would have killed the process on this text. `line` is the first line
    at which a prefix of the text makes it abort."""

    def __init__(self, line: int):
        self.line = line
        super().__init__(f"line {line}: the MLIR parser aborts on this input from this line on (an upstream "
                         f"bug: a value used before its definition inside an isolated region such as "
                         f"tb.thread_graph, together with a syntax error); fix the syntax error or define "
                         f"the value first")


def parse_module(text: str, ctx: _ir.Context) -> _ir.Module:
    """`mlir.ir.Module.parse` for text a user wrote. MLIR 22's parser aborts the whole process
    (an assertion in its cleanup) on some invalid inputs: a value used before its definition
    inside an isolated-from-above region, then a syntax error (found by fuzzing; upstream
    mlir-opt does the same, benchmarks/results/fuzz_mirage_opt.md). So text that uses a value
    before its definition is parsed first in a forked child; if that child dies, the
    shortest prefix of lines that kills it names the line, and `ParseAborted` is raised
    instead. Other text, and all text where fork is missing, is parsed directly."""
    if hasattr(os, "fork") and _forward_reference(text) and _aborts(text, ctx):
        lines = text.split("\n")
        lo, hi = 0, len(lines)  # the prefix of lo lines parses without aborting, hi aborts
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if _aborts("\n".join(lines[:mid]), ctx) else (mid, hi)
        raise ParseAborted(hi)
    return _ir.Module.parse(text, ctx)


_SSA = re.compile(r"%[\w.$-]+")
_DEFS = re.compile(r"^\s*((?:%[\w.$-]+(?::\d+)?\s*,\s*)*%[\w.$-]+(?::\d+)?)\s*=")


def _forward_reference(text: str) -> bool:
    """Whether some SSA name appears before its definition (an op result `%x = `, or a
    block or region argument `%x: type`): the parser's abort needs one. A false alarm only
    costs the trial parse."""
    seen = set()
    for line in text.split("\n"):
        line = line.split("//", 1)[0]  # comments
        m = _DEFS.match(line)
        defs = set(_SSA.findall(m.group(1))) if m else set()
        for n in _SSA.finditer(line):
            name = n.group(0)
            if name not in seen:
                if name not in defs and line[n.end():n.end() + 1] != ":":
                    return True
                seen.add(name)
    return False


def _aborts(text: str, ctx: _ir.Context) -> bool:
    """Whether parsing `text` kills the process (tried in a forked child with `ctx`)."""
    pid = os.fork()
    if pid == 0:
        try:  # the parent's worker threads do not exist here; the abort's reports are not ours to print
            import faulthandler

            faulthandler.disable()
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
            ctx.enable_multithreading(False)
            _ir.Module.parse(text, ctx)
        except BaseException:
            pass
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status)
