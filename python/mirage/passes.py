"""Registry of this project's Python-defined passes.

A pass is a subclass of `Pass` with an `argument` (its flag in `mirage-opt`, e.g.
`mirage-verify`), a `summary`, typed `options`, and `run(module, **options)`, where
`module` is the `mlir.ir.Operation` of a `builtin.module`. A pass reports problems
through `mirage.diagnostics` and raises `PassFailure` to fail the pipeline.

Each pass lives in the layer it belongs to (verify/, search/, optimize/, lower/,
frontend/); `PASS_MODULES` lists the modules that define passes, imported on first use
so that `import mirage` stays light.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable


class PassFailure(Exception):
    """Raised by a pass after it has emitted the diagnostics that explain the failure."""


class Interrupted:
    """Set by a pass that Ctrl-C stopped after it wrote its partial result into the
    module: mirage-opt still prints the module, then exits with 130."""
    seen = False


@dataclass(frozen=True)
class Option:
    name: str
    type: Callable[[str], Any]  # parses the textual value: int, float, str, parse_bool
    default: Any
    help: str


def parse_bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected a boolean, got '{text}'")


class Pass:
    argument: str = ""
    summary: str = ""
    options: tuple[Option, ...] = ()

    def run(self, module, **options) -> None:
        raise NotImplementedError

    @classmethod
    def parse_options(cls, pairs: dict[str, str]) -> dict[str, Any]:
        known = {o.name: o for o in cls.options}
        out = {o.name: o.default for o in cls.options}
        for k, v in pairs.items():
            if k not in known:
                raise ValueError(f"pass '{cls.argument}' has no option '{k}' "
                                 f"(options: {', '.join(known) or 'none'})")
            try:
                out[k] = known[k].type(v)
            except ValueError as e:
                raise ValueError(f"option '{k}' of pass '{cls.argument}': {e}") from None
        return out


def functions(module) -> list:
    """The `func.func` Operations of a module, in order (one per graph of `import_graphs`)."""
    return [f.operation for f in module.regions[0].blocks[0].operations if f.operation.name == "func.func"]


def import_graphs(module, pass_name: str) -> list:
    """The module's functions as KNGraphs; MLIR the model cannot take (another dialect's
    op, a broken model rule, a function returning nothing) is reported at the op at fault
    and fails the pass."""
    from . import diagnostics as D
    from .core.mlir_import import MLIRImportError, parse_module

    try:
        return parse_module(module)
    except MLIRImportError as e:
        D.error(e.op if e.op is not None else module, f"{pass_name}: {e.reason}")
        raise PassFailure(str(e)) from None


PASS_MODULES = [
    "mirage.verify.verify_pass",
    "mirage.search.superoptimize_pass",
    "mirage.optimize.passes",
    "mirage.lower.passes",
    "mirage.frontend.tosa_to_kn",
]

_REGISTRY: dict[str, type[Pass]] = {}


def register(cls: type[Pass]) -> type[Pass]:
    """Class decorator: make `cls` available to mirage-opt under `cls.argument`."""
    _REGISTRY[cls.argument] = cls
    return cls


def registry() -> dict[str, type[Pass]]:
    for name in PASS_MODULES:
        importlib.import_module(name)
    return dict(sorted(_REGISTRY.items()))
