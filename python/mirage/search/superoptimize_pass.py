"""The `mirage-superoptimize` pass: replace each reference function by its best μGraph.

Reads the module's functions as KNGraphs (`mirage.core.mlir_import.parse_mlir`), runs
`superoptimize` on each, and rewrites the module (`mlir_import.replace_body`) with the
best μGraph under the function's name; with `keep-top-k=K` the next K-1 verified
candidates are added as `@<name>_alt<k>`. Progress and the final report go to stderr
(`verbose=0` silences them). The preset defaults to `auto` (chosen from the program:
see `mirage.search.config.auto_preset`).
"""
from __future__ import annotations

import sys

from .. import diagnostics
from ..passes import Option, Pass, PassFailure, parse_bool, register


@register
class SuperoptimizePass(Pass):
    argument = "mirage-superoptimize"
    summary = "Replace each function by the best verified μGraph found by the superoptimizer"
    options = (
        Option("preset", str, "auto", "search preset: auto, generic, mlp, attention, lora"),
        Option("max-kernel-ops", int, 0, "max kernel ops per candidate (0: preset default)"),
        Option("max-block-ops", int, 0, "max block-graph ops incl. iterators and savers (0: default)"),
        Option("max-graph-defs", int, 0, "max graph-defined kernels (0: default)"),
        Option("max-block-inputs", int, 0, "max inputs of a block graph (0: default)"),
        Option("max-block-outputs", int, 0, "max outputs of a block graph (0: default)"),
        Option("time-limit", float, 600.0, "seconds per function"),
        Option("seed", int, 0, "seed of the equivalence check's random inputs"),
        Option("workers", int, 0, "worker processes (0: all cores)"),
        Option("cache-dir", str, "", "result cache directory (empty: none)"),
        Option("keep-top-k", int, 1, "also keep the next verified candidates as @<name>_alt<k>"),
        Option("verbose", parse_bool, True, "progress and report on stderr"),
    )

    def run(self, module, **o) -> None:
        from ..core.mlir_import import parse_mlir, replace_body
        from .driver import superoptimize

        graphs = parse_mlir(module)
        kw = {k.replace("-", "_"): v for k, v in o.items() if k.startswith("max-") and v}
        top_k = max(1, o["keep-top-k"])
        out = []
        for g in graphs:
            try:
                res = superoptimize(g, o["preset"] or "auto", o["verbose"], cache_dir=o["cache-dir"] or None,
                                    time_limit=o["time-limit"], seed=o["seed"], workers=o["workers"],
                                    top_k=max(top_k, 3), **kw)
            except Exception as e:  # a user-visible diagnostic, not a traceback
                diagnostics.error(module, f"mirage-superoptimize: @{g.name}: {e}")
                raise PassFailure() from None
            name = g.name
            best = res.best
            best.name = name
            out.append(best)
            for k, c in enumerate(res.candidates[1:top_k], 1):
                c.graph.name = f"{name}_alt{k}"
                out.append(c.graph)
            if o["verbose"]:
                print(f"[mirage-superoptimize] @{name}: best of {len(res.candidates)} kept candidates: "
                      f"{res.candidates[0].cost.summary()}", file=sys.stderr)
        replace_body(module, out)
