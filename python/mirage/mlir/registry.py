"""Registry of this project's Python-defined passes.

A pass is a subclass of `Pass` with an `argument` (its flag in `mirage-opt`, e.g.
`mirage-verify`), a `summary`, typed `options`, and `run(module, **options)`, where
`module` is the `mlir.ir.Operation` of a `builtin.module`. A pass reports problems
through `mirage.mlir.diagnostics` and raises `PassFailure` to fail the pipeline.

Each pass is one file of `mirage/mlir/passes/` named after its flag; it crosses to the model
and back through `mirage.mlir.bridge` and calls the stage that does the work (verify/,
search/, optimize/, lower/). `PASS_MODULES` lists the modules that define passes,
imported on first use so that `import mirage` stays light.
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


PASS_MODULES = [
    "mirage.mlir.passes.mirage_verify",
    "mirage.mlir.passes.mirage_superoptimize",
    "mirage.mlir.passes.mirage_layout",
    "mirage.mlir.passes.mirage_schedule",
    "mirage.mlir.passes.mirage_smem_plan",
    "mirage.mlir.passes.convert_mirage_to_gpu",
    "mirage.mlir.passes.convert_tosa_to_kn",
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
