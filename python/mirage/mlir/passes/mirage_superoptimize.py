"""The `mirage-superoptimize` pass: replace each reference function by its best μGraph.

Reads the module's functions as KNGraphs (`mirage.mlir.importer.parse_mlir`), runs
`superoptimize` on each, and rewrites the module (`bridge.replace_body`) with the
best μGraph under the function's name; with `keep-top-k=K` the next K-1 verified
candidates are added as `@<name>_alt<k>`. Progress and the final report go to stderr
(`verbose=0` silences them). The preset defaults to `auto` (chosen from the program:
see `mirage.search.config.auto_preset`). `time-limit` bounds the whole pass: each function
gets an equal share of the time left; a function reached with no time left keeps its
program (with a warning).

Results are cached by default: `cache-dir` (default: the user cache directory,
`mirage.paths.search_cache_dir()`: `$MIRAGE_CACHE_DIR/search`, else
`$XDG_CACHE_HOME/mirage/search`, else `~/.cache/mirage/search`) holds one entry per program
and search configuration (`search.cache`; renamed copies of a function share it, and every
entry is checked by the verifier before it is used); `cache-dir=none` searches afresh and
writes nothing. A cache directory that cannot be created is skipped with a warning.

Errors are reported at the op at fault (MLIR the model cannot take: `bridge.import_graphs`;
a block or thread op the search has no abstract expression for) or at the function (the
search's own errors).
"""
from __future__ import annotations

import os
import sys
import time

from .. import diagnostics
from ..bridge import functions, import_graphs
from ..registry import Interrupted, Option, Pass, PassFailure, parse_bool, register


def _seconds(text: str) -> float:
    v = float(text)
    if not v > 0:  # also rejects nan
        raise ValueError(f"expected a number of seconds > 0, got {text}")
    return v


def _count(low: int):
    def parse(text: str) -> int:
        v = int(text)
        if v < low:
            raise ValueError(f"expected an integer >= {low}, got {text}")
        return v
    return parse


def _executor(text: str) -> str:
    from ...search.executor import EXECUTORS

    if text not in EXECUTORS:
        raise ValueError(f"expected one of {', '.join(EXECUTORS)}, got '{text}'")
    return text


def _cache_dir(text: str) -> str:
    return text.strip()


def resolve_cache_dir(value: str) -> str | None:
    """The `cache-dir` option's folder: `none` (any case) is no cache, empty (the default)
    the user cache directory (`mirage.paths.search_cache_dir()`), else the path given
    (`~` expanded)."""
    from ...paths import search_cache_dir

    if value.lower() == "none":
        return None
    return os.path.expanduser(value) if value else search_cache_dir()


def _unsearchable(func) -> list:
    """[(mlir op, op name)]: block- and thread-graph ops of `func` that have no abstract
    expression; the search cannot take a program with them (it would fail inside)."""
    from ...core.ops import OPS

    out = []

    def walk(op):
        for r in op.regions:
            for b in r.blocks:
                for o in b.operations:
                    o = o.operation
                    dialect, _, kind = o.name.partition(".")
                    if dialect in ("tb", "th") and kind in OPS and OPS[kind].absexpr is None:
                        out.append((o, o.name))
                    walk(o)

    walk(func)
    return out


@register
class SuperoptimizePass(Pass):
    argument = "mirage-superoptimize"
    summary = "Replace each function by the best verified μGraph found by the superoptimizer"
    options = (
        Option("preset", str, "auto", "search preset: auto, generic, mlp, attention, lora"),
        Option("max-kernel-ops", _count(0), 0, "max kernel ops per candidate (0: preset default)"),
        Option("max-block-ops", _count(0), 0, "max block-graph ops incl. iterators and savers (0: default)"),
        Option("max-graph-defs", _count(0), 0, "max graph-defined kernels (0: default)"),
        Option("max-block-inputs", _count(0), 0, "max inputs of a block graph (0: default)"),
        Option("max-block-outputs", _count(0), 0, "max outputs of a block graph (0: default)"),
        Option("time-limit", _seconds, 600.0, "seconds for the pass (shared by its functions)"),
        Option("seed", _count(0), 0, "seed of the equivalence check's random inputs"),
        Option("workers", _count(0), 0, "worker processes (0: all cores)"),
        Option("executor", _executor, "local", "where the search runs: local (processes of this machine) or ray "
               "(the Ray cluster at $MIRAGE_RAY_ADDRESS, else Ray started on this machine)"),
        Option("cache-dir", _cache_dir, "", "result cache directory; default (empty): the user cache, "
               "$MIRAGE_CACHE_DIR/search, else $XDG_CACHE_HOME/mirage/search, else ~/.cache/mirage/search; "
               "none: no cache"),
        Option("keep-top-k", _count(1), 1, "also keep the next verified candidates as @<name>_alt<k>"),
        Option("verbose", parse_bool, True, "progress and report on stderr"),
    )

    def run(self, module, **o) -> None:
        from ..bridge import replace_body
        from ...search.driver import superoptimize

        deadline = time.monotonic() + o["time-limit"]
        funcs = functions(module)
        bad = [x for f in funcs for x in _unsearchable(f)]
        for op, name in bad:
            diagnostics.error(op, f"mirage-superoptimize: '{name}' has no abstract expression: the search "
                                  f"cannot take a program that uses it")
        if bad:
            raise PassFailure()
        graphs = import_graphs(module, "mirage-superoptimize")
        kw = {k.replace("-", "_"): v for k, v in o.items() if k.startswith("max-") and v}
        top_k = max(1, o["keep-top-k"])
        cache_dir = resolve_cache_dir(o["cache-dir"])
        if cache_dir is not None:
            try:
                os.makedirs(cache_dir, exist_ok=True)
            except OSError as e:  # a read-only home must not fail the pass after its search
                diagnostics.warning(module.operation, f"mirage-superoptimize: cache directory {cache_dir} cannot "
                                                      f"be created ({e.strerror or e}); searching without a cache")
                cache_dir = None
        out = []
        for k, (f, g) in enumerate(zip(funcs, graphs)):
            share = (deadline - time.monotonic()) / (len(graphs) - k)
            if share <= 0.01:  # nothing left: the program stays as it is
                diagnostics.warning(f, f"mirage-superoptimize: @{g.name}: the time limit "
                                       f"({o['time-limit']:g} s) was spent before this function; kept as is")
                out.append(g)
                continue
            try:
                res = superoptimize(g, o["preset"] or "auto", o["verbose"], cache_dir=cache_dir,
                                    time_limit=share, seed=o["seed"], workers=o["workers"], executor=o["executor"],
                                    top_k=max(top_k, 3), **kw)
            except (ValueError, ImportError, ConnectionError) as e:  # a diagnostic (bad preset or limits, a rule,
                # no Ray, no cluster at MIRAGE_RAY_ADDRESS), not a traceback
                diagnostics.error(f, f"mirage-superoptimize: @{g.name}: {e}")
                raise PassFailure() from None
            name = g.name
            best = res.best
            best.name = name
            out.append(best)
            for j, c in enumerate(res.candidates[1:top_k], 1):
                c.graph.name = f"{name}_alt{j}"
                out.append(c.graph)
            if o["verbose"]:
                print(f"[mirage-superoptimize] @{name}: best of {len(res.candidates)} kept candidates: "
                      f"{res.candidates[0].cost.summary()}"
                      + (f" (from cache {cache_dir})" if res.from_cache else ""), file=sys.stderr)
            if res.stats.stopped == "interrupted":  # Ctrl-C: keep what was verified, leave the rest
                diagnostics.warning(f, f"mirage-superoptimize: @{name}: interrupted (Ctrl-C); the best verified "
                                       f"program so far is kept" + (f", {len(graphs) - k - 1} function(s) after it "
                                                                    f"as they are" if k + 1 < len(graphs) else ""))
                out += graphs[k + 1:]
                Interrupted.seen = True
                break
        replace_body(module, out)
