"""Diagnostics from Python passes, reported like MLIR's own.

The MLIR Python bindings can only emit errors; passes here also need remarks and
warnings. A pass calls `error`/`warning`/`remark` with an `mlir.ir` Location (or an op);
`mirage-opt` installs a `Sink` that collects them together with MLIR's diagnostics,
prints them as `file:line:col: severity: message` and checks them under
`--verify-diagnostics`. Without a sink they go to stderr.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Diag:
    severity: str  # error | warning | remark | note
    file: str
    line: int
    col: int
    message: str

    def format(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}: " if self.line else (f"{self.file}: " if self.file else "")
        return f"{where}{self.severity}: {self.message}"


def location_of(x) -> tuple[str, int, int]:
    """(file, line, col) of an mlir Location, Operation or OpView; ('', 0, 0) if unknown."""
    loc = getattr(x, "location", x)
    try:
        while loc.is_a_callsite() or loc.is_a_name():
            loc = loc.callee if loc.is_a_callsite() else loc.child_loc
        if loc.is_a_fused():
            loc = loc.locations[0]
        if loc.is_a_file():
            return loc.filename, loc.start_line, loc.start_col
    except Exception:  # unknown location kinds
        pass
    return "", 0, 0


class Sink:
    def __init__(self):
        self.diags: list[Diag] = []

    def add(self, d: Diag) -> None:
        self.diags.append(d)

    @property
    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self.diags)


_sinks: list[Sink] = []


@contextmanager
def collect():
    sink = Sink()
    _sinks.append(sink)
    try:
        yield sink
    finally:
        _sinks.pop()


def emit(severity: str, where, message: str) -> Diag:
    d = Diag(severity, *location_of(where), message)
    if _sinks:
        _sinks[-1].add(d)
    else:
        print(d.format(), file=sys.stderr)
    return d


def error(where, message: str) -> Diag:
    return emit("error", where, message)


def warning(where, message: str) -> Diag:
    return emit("warning", where, message)


def remark(where, message: str) -> Diag:
    return emit("remark", where, message)
