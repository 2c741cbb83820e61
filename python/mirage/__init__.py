"""mirage: a multi-level superoptimizer for GPU tensor programs.

`import mirage` loads only numpy-based modules: the graph model, the interpreter and
the builder API. Everything heavier (MLIR, z3, torch) is imported on first use of a
name from `_LAZY`, so `import mirage.runtime` works where only numpy and cuda-bindings
are installed.
"""
from importlib import import_module

from .core.dtypes import bfloat16, dtype, float16, float32
from .core.graph import (DTensor, GraphError, KNGraph, STensor, TBGraph, THGraph,
                         new_kernel_graph, new_thread_graph, new_threadblock_graph)
from . import api  # noqa: F401,E402 (attaches KNGraph.superoptimize / compile / __call__)
from .global_config import bypass_compile_errors, global_config, set_gpu_device_id  # noqa: F401 (Mirage's API)

from .version import __version__  # noqa: F401,E402

# public name -> module defining it (imported on first access)
_LAZY = {
    "parse_mlir": "mirage.mlir.importer",
    "load_mlir": "mirage.mlir.importer",
    "check_equivalence": "mirage.verify",
    "from_json": "mirage.core.serialize",
    "generate_cuda_program": "mirage.cuda_program",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mirage' has no attribute '{name}'")
