"""PyTorch integration: `import mirage.torch`.

- `import_module(module_or_fn, example_inputs)` -> `ImportResult`: kn graph(s), the
  partition into kn and PyTorch segments, the binding of graph inputs to the module's
  parameters, and a report (`result.report()`); `str(result)` is the kn MLIR.
- `superoptimize(module, example_inputs, **search_options)` -> an `nn.Module` that runs
  optimized kernels on CUDA tensors where the search and the runtime are available, and
  the original module otherwise (one warning, not one per call).
- `MirageModule.save(dir)` / `load(dir, module=None)`: the optimized module with its
  ahead-of-time compiled kernel bundles, loadable where only torch and `mirage.runtime`
  are installed (frontend/deploy.py).
- `torch.compile(model, backend="mirage")`: the backend is registered on import.

See docs/torch.md.
"""
from __future__ import annotations

import importlib
import sys
import time
import warnings
from typing import Any, Sequence

import torch

from .frontend.torch_import import Binding, ImportResult, import_module, unsupported_reason  # noqa: F401

__all__ = ["import_module", "superoptimize", "MirageModule", "ImportResult", "backend", "compile_reports", "load"]


def _optional(name: str):
    """Import a layer that may not exist yet (search, lower, runtime); None if absent."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if (e.name or "").startswith("mirage"):
            return None
        raise


def _say(on: bool, msg: str) -> None:
    if on:
        print(f"[mirage] {msg}", file=sys.stderr, flush=True)


def _attach_kernels(result: ImportResult, search_options: dict) -> list[str]:
    """Superoptimize each kn segment, compile it ahead of time to a kernel bundle for
    `target` (default sm_90; works without a GPU) and, where CUDA is available, attach a
    callable running it. Segments that are the same program (identical layers: weights
    are inputs, so their graphs are equal) are searched and compiled once. Options
    besides the search's: `target`, `search` (False: skip the search), `compile` (False:
    no bundles), `progress` (True: one line per step on stderr, and the search's own
    progress display unless `verbose` is given). Returns one line per step and segment."""
    opts = dict(search_options)
    target = opts.pop("target", "sm_90")
    do_search = opts.pop("search", True)
    do_compile = opts.pop("compile", True)
    progress = opts.pop("progress", True)
    opts.setdefault("verbose", progress)
    notes = []
    search = _optional("mirage.search") if do_search else None
    lower = _optional("mirage.lower") if do_compile else None
    done: dict = {}  # program hash -> (name, optimized graph, bundle or None)
    segs = list(result.program.segments.values())
    for k, seg in enumerate(segs):
        g = seg.graph
        key = g.get_owner_independent_hash()
        if key in done:
            first, seg.optimized, cg = done[key]
            notes.append(f"{g.name}: the same program as {first}: its search and kernels reused")
            _say(progress, notes[-1])
            if cg is not None:
                seg.bundle = cg
                if torch.cuda.is_available():
                    seg.kernel = lambda ins, cg=cg: cg(*ins)
            continue
        best = g
        if not do_search:
            notes.append(f"{g.name}: search skipped (search=False); kept the imported graph")
        elif search is None:
            notes.append(f"{g.name}: search not available; kept the imported graph")
        else:
            _say(progress, f"segment {k + 1}/{len(segs)} @{g.name} ({len(g.ops)} kn ops): searching")
            t0 = time.monotonic()
            try:
                best = g.superoptimize(**opts)
                cached = bool(getattr(getattr(best, "search", None), "from_cache", False))
                notes.append(f"{g.name}: superoptimized in {time.monotonic() - t0:.1f} s"
                             + (" (from the search cache)" if cached else ""))
            except Exception as e:  # the search is young: never fail the user's model on it
                notes.append(f"{g.name}: search failed ({type(e).__name__}: {e}); kept the imported graph")
        _say(progress and do_search, notes[-1])
        seg.optimized = best
        done[key] = (g.name, best, None)
        if lower is None or not hasattr(lower, "compile"):
            notes.append(f"{g.name}: no code generation here (compile=False or mirage.lower missing); runs in PyTorch")
            continue
        t0 = time.monotonic()
        # the search's pick, else its next candidates (verified, ranked), else the imported
        # graph: a pick the lowering cannot take (its shared memory, say) costs its speed, not
        # the whole segment's kernels
        res = getattr(best, "search", None)
        tries = [best] + [c.graph for c in (res.candidates[1:] if res is not None else [])
                          if c.key != "reference"] + ([g] if best is not g else [])
        cg, failed = None, []
        for cand in tries:
            try:
                cg = lower.compile(cand, target)  # cached by graph hash + target
                ins = [list(t["shape"]) for t in cg.lowered.inputs]
                if ins != [list(t.shape) for t in g.inputs]:
                    raise ValueError(f"the bundle's inputs {ins} are not the segment's")
                break
            except Exception as e:
                cg = None
                failed.append(f"{type(e).__name__}: {e}")
        if cg is None:
            notes.append(f"{g.name}: code generation failed ({failed[0]}); runs in PyTorch")
            _say(progress, notes[-1])
            continue
        if failed:
            seg.optimized = cand
            notes.append(f"{g.name}: code generation failed for the search's pick ({failed[0]}); took "
                         f"{'the imported graph' if cand is g else 'its best candidate that compiles'}")
            _say(progress, notes[-1])
        seg.bundle = cg
        done[key] = (g.name, cand, cg)
        notes.append(f"{g.name}: compiled for {target} in {time.monotonic() - t0:.1f} s: "
                     f"{len(cg.lowered.kernels)} kernel(s) ({cg.path})")
        _say(progress, notes[-1])
        if torch.cuda.is_available():
            seg.kernel = lambda ins, cg=cg: cg(*ins)  # the runtime kernel is loaded once, on first call
            notes.append(f"{g.name}: kernels attached")
    return notes


class MirageModule(torch.nn.Module):
    """Drop-in replacement returned by `superoptimize`."""

    def __init__(self, module: torch.nn.Module, result: ImportResult | None, notes: Sequence[str],
                 example_inputs: Sequence):
        super().__init__()
        self.original = module
        self.result = result
        self.notes = list(notes)
        flat = [t for t in example_inputs if isinstance(t, torch.Tensor)]
        self._signature = [(tuple(t.shape), t.dtype) for t in flat]
        self._warned: set = set()
        self._failed = False

    @property
    def report(self) -> str:
        head = self.result.report() if self.result is not None else "import failed"
        return head + "\n" + "\n".join("  " + n for n in self.notes)

    def _warn_once(self, key: str, msg: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"mirage: {msg}; running the original module", RuntimeWarning, stacklevel=3)

    def forward(self, *args, **kwargs):
        if self.result is None or self._failed:
            return self.original(*args, **kwargs)
        flat = [t for t in args if isinstance(t, torch.Tensor)]
        sig = [(tuple(t.shape), t.dtype) for t in flat]
        if sig != self._signature or kwargs:
            self._warn_once("shape", f"inputs {sig} do not match the compiled {self._signature}")
            return self.original(*args, **kwargs)
        if not all(t.is_cuda for t in flat):
            self._warn_once("device", "inputs are not CUDA tensors")
            return self.original(*args, **kwargs)
        if not any(s.kernel is not None for s in self.result.program.segments.values()):
            self._warn_once("kernels", "no compiled kernels for this module")
            return self.original(*args, **kwargs)
        try:
            self.result.program.set_mode("kernels")
            return self.result.program(*args)
        except Exception as e:
            self._failed = True
            self._warn_once("error", f"kernel execution failed ({type(e).__name__}: {e})")
            return self.original(*args, **kwargs)

    def save(self, path: str, weights: bool = True) -> str:
        """Write everything the module needs at run time to directory `path`: the
        exported program with its PyTorch segments, each kn segment's kernel bundle
        (PTX + manifest, compiled ahead of time), the binding of kernel inputs to
        parameters and (unless `weights=False`) the parameters and buffers. Load it with
        `mirage.torch.load(path)` where only torch and `mirage.runtime` are installed."""
        from .frontend import deploy

        if self.result is None:
            raise ValueError("mirage: the module did not import; nothing to save")
        res = self.result
        program = deploy.build_program(res.exported, res.program.gm)
        state = None
        if weights:
            state = {name: res.program.state_value(Binding(kind, name))
                     for kind, name in program.state_keys if kind != "constant"}
        info = {"report": self.report,
                "bindings": {s.graph.name: [str(b) for b in s.bindings]
                             for s in res.segments if s.graph is not None},
                "offloaded": [f"{o.op} ({o.node}): {o.reason}" for o in res.offloaded]}
        return deploy.save(path, program, self._signature, state=state, info=info)


def load(path: str, module: torch.nn.Module | None = None, weights: bool = True):
    """Load a module saved by `MirageModule.save` (needs only torch, numpy and, to run
    kernels, `mirage.runtime`). `module`: the original module, whose parameters are
    then used and which runs inputs of other shapes; else the saved weights."""
    from .frontend.deploy import load as _load

    return _load(path, module, weights=weights)


_IMPORT_OPTIONS = ("fold_layout", "allow_fp32_upcast_elision")


def _import_options(options: dict) -> tuple[dict, dict]:
    """Split `options` into (search/compile options, `import_module` options)."""
    rest = {k: v for k, v in options.items() if k not in _IMPORT_OPTIONS}
    return rest, {k: options[k] for k in _IMPORT_OPTIONS if k in options}


def superoptimize(module: torch.nn.Module, example_inputs: Sequence, **search_options: Any) -> MirageModule:
    """Import `module` at `example_inputs`' shapes, superoptimize its kn segments, compile
    them to kernel bundles and return a module that uses them on matching CUDA inputs
    (see docs/torch.md). Options: the search's, and `target` ("sm_90"), `search`
    (True), `compile` (True); import options `fold_layout` (True: transposes/reshapes of
    weights become binding transforms done once) and `allow_fp32_upcast_elision`
    (False: opt in to computing fp16->fp32->op->fp16 sandwiches at fp16, which changes
    rounding)."""
    search_options, imp = _import_options(search_options)
    try:
        result = import_module(module, example_inputs, **imp)
    except Exception as e:
        warnings.warn(f"mirage: import failed ({type(e).__name__}: {e}); the module runs unchanged",
                      RuntimeWarning, stacklevel=2)
        return MirageModule(module, None, [f"import failed: {e}"], example_inputs)
    notes = _attach_kernels(result, search_options)
    return MirageModule(module, result, notes, example_inputs)


# -- torch.compile backend -------------------------------------------------------------

BACKEND_OPTIONS: dict = {}  # default options of backend="mirage" (search options, target, search, compile)
_REPORTS: list[ImportResult] = []  # explicit cache of the backend's imports (clear with compile_reports(clear=True))


def compile_reports(clear: bool = False) -> list[ImportResult]:
    """The imports done by `backend="mirage"` so far (each `.report()` says what went to kn)."""
    out = list(_REPORTS)
    if clear:
        _REPORTS.clear()
    return out


def backend(gm: torch.fx.GraphModule, example_inputs, **search_options):
    """The `torch.compile` backend: imports the captured graph (report kept in
    `compile_reports()`), attaches kernels where possible, and returns a callable that
    runs them on matching CUDA inputs and the captured graph itself otherwise — so on
    CPU the results are those of eager PyTorch, bit for bit."""
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    sig = [(tuple(t.shape), t.dtype, t.device.type) for t in tensors]
    opts, imp = _import_options({**BACKEND_OPTIONS, **search_options})
    try:
        result = import_module(gm, list(example_inputs), **imp)
        _REPORTS.append(result)
        notes = _attach_kernels(result, opts)
    except Exception as e:
        warnings.warn(f"mirage backend: import failed ({type(e).__name__}: {e}); using the captured graph",
                      RuntimeWarning)
        return gm.forward
    usable = any(s.kernel is not None for s in result.program.segments.values())
    result.notes = notes

    def run(*args):
        if usable and [(tuple(t.shape), t.dtype, t.device.type) for t in args if isinstance(t, torch.Tensor)] == sig \
                and all(t.is_cuda for t in args if isinstance(t, torch.Tensor)):
            result.program.set_mode("kernels")
            return result.program(*args)
        return gm.forward(*args)

    return run


def _register_backend() -> None:
    try:
        from torch._dynamo import list_backends, register_backend
    except ImportError:  # a torch without dynamo
        return
    if "mirage" not in list_backends(exclude_tags=()):
        register_backend(name="mirage")(backend)


_register_backend()
