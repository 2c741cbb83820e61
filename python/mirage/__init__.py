"""mirage: a multi-level superoptimizer for GPU tensor programs.

`import mirage` loads only numpy-based modules: the graph model, the interpreter and
the API. MLIR is imported on first use of what needs it (printing parses, passes).
"""
from .core.dtypes import bfloat16, dtype, float16, float32
from .core.graph import (DTensor, GraphError, KNGraph, STensor, TBGraph, THGraph,
                         new_kernel_graph, new_thread_graph, new_threadblock_graph)

__version__ = "0.1.0"
