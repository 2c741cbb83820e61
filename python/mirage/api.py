"""The Mirage-compatible methods of `KNGraph` that reach up the pipeline (search, GPU
code), attached here so that the graph model (`mirage.core`) imports nothing above it.
`import mirage` attaches them; each imports its stage on first use."""
from __future__ import annotations

from .core.graph import KNGraph


def superoptimize(self, imaps=None, omaps=None, griddims=None, fmaps=None, franges=None, config=None,
                  verbose: bool = False, **kwargs) -> KNGraph:
    """Search for the best μGraph equivalent to this one (`mirage.search`); returns
    it, with `.search` holding the ranked candidates and statistics."""
    from .search import superoptimize as search

    tup = lambda v: None if v is None else tuple(tuple(x) if isinstance(x, (list, tuple)) else x for x in v)
    res = search(self, config, verbose, imaps=tup(imaps), omaps=tup(omaps), griddims=tup(griddims),
                 fmaps=tup(fmaps), franges=tup(franges), **kwargs)
    best = res.best
    best.search = res
    return best


def compile(self, target: str = "sm_90", **kwargs):
    """Lower to PTX for `target` and write a kernel bundle (`mirage.lower.compile`)."""
    from .lower import compile as lower_compile

    return lower_compile(self, target, **kwargs)


def call(self, inputs=None, **kwargs):
    """Run the μGraph on CUDA tensors from compiled PTX (a clear error without a GPU)."""
    from .lower import call as run

    return run(self, inputs if inputs is not None else kwargs.get("inputs"), **kwargs)


KNGraph.superoptimize = superoptimize
KNGraph.compile = compile
KNGraph.__call__ = call
