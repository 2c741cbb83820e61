"""PyTorch integration: `import mirage.torch`.

- `import_module(module_or_fn, example_inputs)` -> `ImportResult`: kn graph(s), the
  partition into kn and PyTorch segments, the binding of graph inputs to the module's
  parameters, and a report (`result.report()`); `str(result)` is the kn MLIR.
- `superoptimize(module, example_inputs, **search_options)` -> an `nn.Module` that runs
  optimized kernels on CUDA tensors where the search and the runtime are available, and
  the original module otherwise (one warning, not one per call).
- `torch.compile(model, backend="mirage")`: the backend is registered on import.

See docs/torch.md.
"""
from __future__ import annotations

import importlib
import warnings
from typing import Any, Sequence

import torch

from .frontend.torch_import import ImportResult, import_module, unsupported_reason  # noqa: F401

__all__ = ["import_module", "superoptimize", "MirageModule", "ImportResult", "backend", "compile_reports"]


def _optional(name: str):
    """Import a layer that may not exist yet (search, lower, runtime); None if absent."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if (e.name or "").startswith("mirage"):
            return None
        raise


def _attach_kernels(result: ImportResult, search_options: dict) -> list[str]:
    """Superoptimize each kn segment and attach a GPU callable where possible.
    Returns one line per segment saying what happened."""
    notes = []
    search = _optional("mirage.search")
    lower = _optional("mirage.lower")
    for name, seg in result.program.segments.items():
        g = seg.graph
        best = g
        fn = getattr(g, "superoptimize", None) or getattr(search, "superoptimize", None)
        if fn is None:
            notes.append(f"{g.name}: search not available; kept the imported graph")
        else:
            try:
                out = fn(**search_options) if fn is getattr(g, "superoptimize", None) else fn(g, **search_options)
                best = out[0] if isinstance(out, (list, tuple)) else out
                notes.append(f"{g.name}: superoptimized")
            except Exception as e:  # the search is young: never fail the user's model on it
                notes.append(f"{g.name}: search failed ({type(e).__name__}: {e}); kept the imported graph")
        seg.optimized = best
        call = getattr(lower, "call", None) if lower is not None else None
        if call is None or not torch.cuda.is_available():
            notes.append(f"{g.name}: no GPU code generation/runtime here; runs in PyTorch")
            continue
        seg.kernel = lambda ins, best=best, call=call: call(best, ins)
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


def superoptimize(module: torch.nn.Module, example_inputs: Sequence, **search_options: Any) -> MirageModule:
    """Import `module` at `example_inputs`' shapes, superoptimize its kn segments and
    return a module that uses them on matching CUDA inputs (see docs/torch.md)."""
    try:
        result = import_module(module, example_inputs)
    except Exception as e:
        warnings.warn(f"mirage: import failed ({type(e).__name__}: {e}); the module runs unchanged",
                      RuntimeWarning, stacklevel=2)
        return MirageModule(module, None, [f"import failed: {e}"], example_inputs)
    notes = _attach_kernels(result, search_options)
    return MirageModule(module, result, notes, example_inputs)


# -- torch.compile backend -------------------------------------------------------------

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
    try:
        result = import_module(gm, list(example_inputs))
        _REPORTS.append(result)
        notes = _attach_kernels(result, search_options)
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
