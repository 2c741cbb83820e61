"""The Mirage-compatible methods of `KNGraph` that reach up the pipeline (search, GPU
code), attached here so that the graph model (`mirage.core`) imports nothing above it,
and Mirage's serialization methods (`to_json`, `from_json`, `get_owner_independent_hash`,
implemented in `mirage.core.serialize`). `import mirage` attaches them; each imports its
module on first use. docs/compat.md lists the Mirage API accepted and what differs."""
from __future__ import annotations

from .core.graph import KNGraph


_BACKENDS = ("cuda", "triton", "nki")
TIME_LIMIT_VARIABLE = "MIRAGE_SEARCH_TIME_LIMIT"  # seconds; superoptimize's time_limit where none is passed


def superoptimize(self, imaps=None, omaps=None, griddims=None, blockdims=None, fmaps=None, franges=None,
                  verbose: bool = False, config=None, backend: str = "cuda", warmup_iters: int = 16,
                  profile_iters: int = 1000, use_graph_dataset: bool | None = None,
                  use_cached_graphs: bool = True, save_codes: bool | str = False,
                  is_formal_verified: bool = False, *, previous_checkpoint: str | None = None,
                  cache_dir: str | None = None, **kwargs) -> KNGraph:
    """Search for the best μGraph equivalent to this one (`mirage.search`); returns it,
    with `.search` holding the ranked candidates and statistics.

    Mirage's arguments, in Mirage's order (docs/compat.md says what each does here):
    `imaps`, `omaps`, `griddims`, `fmaps`, `franges` restrict the schedules searched;
    `config` is a preset ("mlp", "lora", "attention", "rows", "generic") or a
    `SearchConfig`, and None, as in Mirage, a bounded default: the preset that fits the
    program ("auto"). `warmup_iters` and `profile_iters` set how the top candidates are
    timed on the GPU (where there is one); `use_cached_graphs` uses the result cache
    (`cache_dir`, default under the user cache directory); `previous_checkpoint` names a
    JSON file of results, read instead of searching when it holds verified results for
    this program and written after the search when it does not exist; `save_codes`
    (True, or a folder) writes the candidates' MLIR and the best one's PTX bundle to
    `generated_codes/` (or that folder). Every candidate kept is verified whatever
    `is_formal_verified` says. `blockdims`, `backend` other than "cuda" and
    `use_graph_dataset=True` have no equivalent here and are ignored with one warning
    naming them. Other keywords are `SearchConfig` fields (`time_limit`, `workers`, ...)
    and `measure` (see `mirage.search.superoptimize`); without `time_limit`, the
    environment variable MIRAGE_SEARCH_TIME_LIMIT (seconds) sets it."""
    import os
    import warnings

    from .search import superoptimize as search

    self.require_outputs("superoptimize")  # before any search work; the result would be empty
    cap = os.environ.get(TIME_LIMIT_VARIABLE)
    if cap and "time_limit" not in kwargs:  # bounds the searches of scripts one cannot edit
        try:
            kwargs["time_limit"] = float(cap)
        except ValueError:
            raise ValueError(f"{TIME_LIMIT_VARIABLE}={cap!r}: expected a number of seconds") from None
    ignored = []
    if blockdims is not None:
        ignored.append(f"blockdims={blockdims!r} (thread-block sizes are chosen by the lowering and timed among "
                       f"its variants, not searched)")
    if not isinstance(backend, str) or backend not in _BACKENDS:
        raise ValueError(f"superoptimize: unknown backend {backend!r} (Mirage's are {', '.join(_BACKENDS)}; "
                         f"this implementation generates PTX for CUDA)")
    if backend != "cuda":
        ignored.append(f"backend={backend!r} (this implementation generates PTX for the CUDA runtime only)")
    if use_graph_dataset:
        ignored.append("use_graph_dataset=True (there is no dataset of pre-optimized μGraphs here; "
                       "use_cached_graphs caches this machine's own search results)")
    if is_formal_verified:
        ignored.append("is_formal_verified=True (every kept candidate is verified by finite-field random testing "
                       "with a stated failure bound, as always here, not by an SMT proof)")
    for name, v, lo in (("warmup_iters", warmup_iters, 0), ("profile_iters", profile_iters, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"superoptimize: {name} must be an integer >= {lo}, got {v!r}")
    if not isinstance(use_cached_graphs, bool):
        raise ValueError(f"superoptimize: use_cached_graphs must be True or False, got {use_cached_graphs!r}")
    if cache_dir is not None and not use_cached_graphs:
        raise ValueError("superoptimize: cache_dir given with use_cached_graphs=False; drop one of them")
    if use_cached_graphs and cache_dir is None:
        from .paths import search_cache_dir

        cache_dir = search_cache_dir()
    if ignored:
        warnings.warn("superoptimize: ignored, no equivalent in this implementation: " + "; ".join(ignored),
                      stacklevel=2)
    tup = lambda v: None if v is None else tuple(tuple(x) if isinstance(x, (list, tuple)) else x for x in v)
    res = search(self, "auto" if config is None else config, verbose, cache_dir=cache_dir,
                 checkpoint=None if previous_checkpoint is None else os.fspath(previous_checkpoint),
                 imaps=tup(imaps), omaps=tup(omaps), griddims=tup(griddims), fmaps=tup(fmaps),
                 franges=tup(franges), warmup_iters=warmup_iters, profile_iters=profile_iters, **kwargs)
    best = res.best
    best.search = res
    if save_codes:
        _save_codes(self, res, "generated_codes" if save_codes is True else save_codes)
    return best


def _save_codes(ref: KNGraph, res, folder) -> None:
    """Write what the search generated to `folder`: `<name>.candidates.mlir` (the kept
    candidates, best first, as functions @<name>_0, _1, ...) and `<name>.best.json`, and
    the best one's PTX bundle `<name>-sm_90/` (a lowering failure is a warning: the MLIR
    is still written)."""
    import os
    import warnings

    from .core.mlir_text import print_module
    from .core.serialize import to_json

    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    graphs = [c.graph for c in res.candidates]
    names = [g.name for g in graphs]
    try:
        for k, g in enumerate(graphs):
            g.name = f"{ref.name}_{k}"
        text = print_module(graphs)
    finally:
        for g, n in zip(graphs, names):
            g.name = n
    with open(os.path.join(folder, f"{ref.name}.candidates.mlir"), "w") as f:
        f.write(text)
    to_json(res.best, os.path.join(folder, f"{ref.name}.best.json"))
    try:
        res.best.compile("sm_90", out_dir=os.path.join(folder, f"{ref.name}-sm_90"))
    except Exception as e:  # e.g. no MLIR here, or a μGraph the lowering does not take: keep the MLIR
        warnings.warn(f"superoptimize(save_codes=...): the best μGraph was not lowered to PTX "
                      f"({type(e).__name__}: {e}); its MLIR is in {folder}", stacklevel=3)


def get_owner_independent_hash(self) -> int:
    """A 64-bit hash of the program, independent of the graph's name and of the objects
    holding it (Mirage's method of this name; `mirage.core.serialize`)."""
    from .core.serialize import owner_independent_hash

    return owner_independent_hash(self)


def to_json(self, filename=None) -> str:
    """The μGraph as JSON text, also written to `filename` when given (Mirage's
    `to_json(filename)`; format: `mirage.core.serialize`)."""
    from .core.serialize import to_json as dump

    return dump(self, filename)


def from_json(self, source) -> KNGraph:
    """Replace this graph's program by the one in `source` (a JSON file path, JSON text or
    dict), as Mirage's `g.from_json(filename)` does; returns the graph. `mi.from_json(source)`
    returns a new graph instead."""
    from .core.serialize import from_json as load

    return load(source, into=self)


def compile(self, target: str = "sm_90", **kwargs):
    """Lower to PTX for `target` and write a kernel bundle (`mirage.lower.compile`)."""
    from .lower import compile as lower_compile

    return lower_compile(self, target, **kwargs)


_UNUSED_CALL_OPTIONS = {  # Mirage's compile options with no equivalent here, and why
    "num_warp_groups": "warp specialization is chosen by the lowering",
    "pipeline_stages": "the lowering picks the for-loop's buffering",
    "profiling": "no in-kernel profiler here; time launches with CUDA events",
    "enable_online_softmax": "the μGraph is lowered as written (same values); write the online softmax "
                             "with tb.reduction_max and forloop_accum_rescale to get it",
    "file_id": "generated code is not saved by a call; superoptimize(save_codes=...) or g.compile(out_dir=...)",
    "verbose": "no launch log",
}


def prepare_call(self, inputs=None, *, outputs=None, stream=None, out=None, target_cc=None, **options):
    """Check a call's arguments as Mirage's `graph(inputs=..., ...)` takes them, before
    anything needs a GPU; returns (target, inputs, launch keywords). `outputs` (older
    Mirage scripts) names the graph's outputs: those marked, or, on a graph with none
    marked, the tensors to mark. `target_cc` picks the PTX target (default sm_90); the
    other Mirage options are accepted with one warning naming them."""
    import warnings

    from .core.graph import GraphError

    unknown = sorted(set(options) - set(_UNUSED_CALL_OPTIONS))
    if unknown:
        raise TypeError(f"{self.name}(...): unexpected keyword argument(s) {', '.join(unknown)} (accepted: inputs, "
                        f"outputs, stream, out, target_cc, {', '.join(_UNUSED_CALL_OPTIONS)})")
    used = {k: v for k, v in options.items() if v not in (None, False, -1)}
    if used:
        warnings.warn(f"{self.name}(...): ignored, no equivalent here: " +
                      "; ".join(f"{k}={v!r} ({_UNUSED_CALL_OPTIONS[k]})" for k, v in used.items()), stacklevel=3)
    if outputs is not None:
        outputs = list(outputs)
        if not self.outputs:
            for t in outputs:
                self.mark_output(t)
        elif [id(t) for t in outputs] != [id(t) for t in self.outputs]:
            raise GraphError(f"{self.name}(outputs=...): the graph's outputs are those marked with mark_output; "
                             f"outputs= must list them, in order, or be left out")
    self.require_outputs("a call")
    if inputs is None:
        raise TypeError(f"{self.name}(...): give the input tensors, inputs=[...]")
    inputs = list(inputs)
    if len(inputs) != len(self.inputs):
        raise ValueError(f"{self.name}(inputs=...): {len(inputs)} tensors given, the graph has "
                         f"{len(self.inputs)} inputs")
    for k, (x, t) in enumerate(zip(inputs, self.inputs)):
        shape = getattr(x, "shape", None)  # tensors and arrays; the runtime names anything else
        if shape is not None and tuple(shape) != tuple(t.shape):
            raise ValueError(f"{self.name}(inputs=...): input {k} has shape {tuple(shape)}, "
                             f"the graph's is {tuple(t.shape)}")
    from .cuda_program import target_for_cc

    target = "sm_90" if target_cc is None else target_for_cc(target_cc)
    return target, inputs, {k: v for k, v in (("stream", stream), ("out", out)) if v is not None}


_LOADED: dict = {}  # prebuilt bundle folder -> runtime kernel


def call(self, inputs=None, **kwargs):
    """Run the μGraph on CUDA tensors from compiled PTX (a clear error without a GPU).
    Where MLIR is not installed, a bundle built on another machine is run
    (`mirage.cuda_program.prebuilt_bundle`)."""
    from .cuda_program import mlir_available, prebuilt_bundle

    target, inputs, kw = prepare_call(self, inputs, **kwargs)
    if mlir_available():
        from .lower import call as run

        return run(self, inputs, target, **kw)
    path = prebuilt_bundle(self, target)
    if path not in _LOADED:
        from . import runtime

        _LOADED[path] = runtime.load(path)
    return _LOADED[path](*inputs, **kw)


def cygraph(self):
    """Mirage's `graph.cygraph` handle, for its code-generation calls (`mirage.cuda_program`)."""
    from .cuda_program import CyKNGraph

    return CyKNGraph(self)


KNGraph.superoptimize = superoptimize
KNGraph.get_owner_independent_hash = get_owner_independent_hash
KNGraph.to_json = to_json
KNGraph.from_json = from_json
KNGraph.compile = compile
KNGraph.__call__ = call
KNGraph.cygraph = property(cygraph)
