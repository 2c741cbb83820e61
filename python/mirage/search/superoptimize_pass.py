"""The `mirage-superoptimize` pass: replace each reference function by its best μGraph.

Reads the module's functions as KNGraphs (mirage.core.mlir_import.parse_module, which
needs the C++ dialects), runs `superoptimize` on each, and rewrites the module with
the best μGraph under the function's name; with `keep-top-k=K` the next K-1 candidates
are added as `@<name>_alt<k>`.
"""
from __future__ import annotations

from .. import diagnostics
from ..passes import Option, Pass, PassFailure, parse_bool, register


@register
class SuperoptimizePass(Pass):
    argument = "mirage-superoptimize"
    summary = "Replace each function by the best verified μGraph found by the superoptimizer"
    options = (
        Option("preset", str, "", "search preset: mlp, attention, lora (empty: generic)"),
        Option("max-kernel-ops", int, 0, "max kernel ops per candidate (0: preset default)"),
        Option("max-block-ops", int, 0, "max block-graph ops incl. iterators and savers (0: default)"),
        Option("max-graph-defs", int, 0, "max graph-defined kernels (0: default)"),
        Option("max-block-inputs", int, 0, "max inputs of a block graph (0: default)"),
        Option("max-block-outputs", int, 0, "max outputs of a block graph (0: default)"),
        Option("time-limit", float, 600.0, "seconds per function"),
        Option("seed", int, 0, "seed of the equivalence check's random inputs"),
        Option("workers", int, 0, "worker processes (0: all cores)"),
        Option("cache-dir", str, "", "result cache directory (empty: none)"),
        Option("keep-top-k", int, 1, "also keep the next candidates as extra functions"),
        Option("verbose", parse_bool, False, "progress and report on stderr"),
    )

    def run(self, module, **o) -> None:
        from ..core.mlir_import import parse_module
        from ..core.mlir_text import print_module
        from .driver import superoptimize

        graphs = parse_module(str(module))
        kw = {k.replace("-", "_"): v for k, v in o.items()
              if k.startswith("max-") and v}
        out = []
        for g in graphs:
            try:
                res = superoptimize(g, o["preset"] or None, o["verbose"], cache_dir=o["cache-dir"] or None,
                                    time_limit=o["time-limit"], seed=o["seed"], workers=o["workers"], **kw)
            except Exception as e:  # a user-visible diagnostic, not a traceback
                diagnostics.error(module, f"mirage-superoptimize: @{g.name}: {e}")
                raise PassFailure() from None
            best = res.best
            best.name = g.name
            out.append(best)
            for k, c in enumerate(res.candidates[1:o["keep-top-k"]], 1):
                c.graph.name = f"{g.name}_alt{k}"
                out.append(c.graph)
        _replace_body(module, print_module(out))


def _replace_body(module, text: str) -> None:
    from mlir import ir

    new = ir.Module.parse(text, module.context)
    body = module.regions[0].blocks[0]
    for op in list(body.operations):
        op.erase()
    for op in list(new.body.operations):
        body.append(op.detach_from_parent()) if hasattr(op, "detach_from_parent") else body.append(op)
