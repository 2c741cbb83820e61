"""Mirage's code-generation entry points, for scripts written for the reference
implementation, and the bundles that let a graph run where there is no compiler.

- `graph.cygraph`: in Mirage the Cython handle of the C++ graph; here a `CyKNGraph` view
  of the `KNGraph` with the accessors Mirage's scripts call on it.
- `generate_cuda_program(cygraph, target_cc=, input_strides=, ...)`: Mirage transpiles
  the μGraph to CUDA C++; here it is lowered to PTX (`mirage.lower`), so the returned
  `"code"` is PTX text (docs/compat.md).
- `prebuilt_bundle(g, target)`: the kernel bundle of `g` for `target` in the bundle cache's
  `prebuilt/` folder, named by the graph's owner-independent hash. Where the MLIR Python
  bindings are installed it is compiled there; where they are not (a GPU machine with
  only numpy, torch and the CUDA runtime), a bundle built there by another machine is
  used, so `g(inputs=...)` and `generate_cuda_program` still work.
"""
from __future__ import annotations

import os

# compute capability (major) -> the PTX target we generate for it
_TARGETS = {8: "sm_80", 9: "sm_90"}


def target_for_cc(target_cc) -> str:
    """Mirage's `target_cc` (86 for compute capability 8.6) -> our PTX target. Every 8.x
    device runs sm_80 PTX and every 9.x sm_90 PTX."""
    if isinstance(target_cc, bool) or not isinstance(target_cc, int) or target_cc // 10 not in _TARGETS:
        raise ValueError(f"target_cc={target_cc!r}: PTX is generated for compute capability 8.x (sm_80) and "
                         f"9.x (sm_90) here; give 80..89 or 90..99")
    return _TARGETS[target_cc // 10]


def mlir_available() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("mlir.ir") is not None
    except ImportError:
        return False


def prebuilt_dir(g, target: str) -> str:
    from .paths import bundle_dir

    return os.path.join(bundle_dir(), "prebuilt", f"{g.get_owner_independent_hash():016x}-{target}")


def prebuilt_bundle(g, target: str, build: bool = False) -> str:
    """The path of `g`'s bundle for `target` (see the module doc): compiled now where MLIR
    is installed (always with `build`), else one built earlier; a clear error if there is
    neither."""
    path = prebuilt_dir(g, target)
    if build or mlir_available():
        g.compile(target, out_dir=path)
    elif not os.path.isfile(os.path.join(path, "manifest.json")):
        raise RuntimeError(
            f"μGraph '{g.name}' cannot be compiled on this machine (the MLIR Python bindings are not installed) "
            f"and no bundle was built for it: expected {path}. Build it where mirage is fully installed "
            f"(mirage.cuda_program.prebuilt_bundle(g, '{target}', build=True), with MIRAGE_CACHE_DIR pointing "
            f"to a folder copied here)")
    return path


class CyKNGraph:
    """Mirage's `graph.cygraph`: the accessors its scripts call, on our graph."""

    def __init__(self, graph):
        self.graph = graph

    def get_num_inputs(self) -> int:
        return len(self.graph.inputs)

    def get_num_outputs(self) -> int:
        return len(self.graph.outputs)

    def get_input_dtensors(self) -> list:
        return list(self.graph.inputs)

    def get_output_dtensors(self) -> list:
        return list(self.graph.outputs)

    def get_input_dtensor_shape_and_stride(self, A) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return tuple(A.shape), declared_strides(self.graph, A)

    def get_owner_independent_hash(self) -> int:
        return self.graph.get_owner_independent_hash()

    def __getattr__(self, name):
        raise AttributeError(f"cygraph.{name}: Mirage's C++ graph handle is not reproduced here; this view has "
                             f"get_num_inputs, get_num_outputs, get_input_dtensors, get_output_dtensors, "
                             f"get_input_dtensor_shape_and_stride, get_owner_independent_hash (docs/compat.md)")


def declared_strides(g, A) -> tuple[int, ...]:
    """The strides `g` declares for its input `A` (`new_input(strides=...)`, else row-major)."""
    from .core.rules import row_major_strides

    for k, t in enumerate(g.inputs):
        if t is A:
            return tuple(g.strides.get(k, row_major_strides(t.shape)))
    raise ValueError(f"{A!r} is not an input of graph '{g.name}'")


def generate_cuda_program(input_graph, *, target_cc: int, input_strides: list, num_warp_groups: int = -1,
                          pipeline_stages: int = -1, profiling: bool = False,
                          enable_online_softmax: bool = False) -> dict:
    """Mirage's `mi.generate_cuda_program`: the μGraph's GPU code for `target_cc`. Returns
    {"code": the PTX of every kernel, "target", "max_smem_size" (bytes, the largest
    kernel's), "bundle" (its folder)}. `input_strides` must be the graph's own input
    strides (the code is generated for those); the other options tune Mirage's CUDA
    templates and are accepted and unused (`enable_online_softmax` changes no values)."""
    from .core.graph import KNGraph
    from .runtime.bundle import load_bundle

    g = input_graph.graph if isinstance(input_graph, CyKNGraph) else input_graph
    if not isinstance(g, KNGraph):
        raise TypeError(f"generate_cuda_program: expected graph.cygraph (or a kernel graph), "
                        f"got {type(input_graph).__name__}")
    g.require_outputs("generate_cuda_program")
    target = target_for_cc(target_cc)
    if not isinstance(input_strides, (list, tuple)) or len(input_strides) != len(g.inputs):
        raise ValueError(f"generate_cuda_program: input_strides needs one entry per input "
                         f"({len(g.inputs)}), got {input_strides!r}")
    for k, (t, s) in enumerate(zip(g.inputs, input_strides)):
        want = declared_strides(g, t)
        if tuple(s) != want:
            raise ValueError(f"generate_cuda_program: input {k} has strides {tuple(s)}, the graph declares {want} "
                             f"(new_input(dims, strides)); the code is generated for the declared layout")
    b = load_bundle(prebuilt_bundle(g, target))
    return {"code": "\n".join(b.ptx[f] for f in sorted(b.ptx)), "target": target, "bundle": b.path,
            "max_smem_size": max((k.smem_bytes for k in b.manifest.kernels), default=0)}
