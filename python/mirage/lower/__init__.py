"""Lowering of μGraphs to GPU code: `convert-mirage-to-gpu`, PTX, kernel bundles.

- `convert_to_gpu(g)`: the KNGraph as a module of `gpu`/`nvgpu`/`arith`/`memref`/`scf`/
  `vector`/`math` ops (MLIR text) plus the launch plan;
- `to_ptx(g, target)`: through the upstream `gpu-lower-to-nvvm-pipeline` to PTX (cached
  on disk by the module's text, `ptx_cache.py`);
- `compile(g, target)`: a kernel bundle (`mirage.runtime` format) on disk;
- `call(g, inputs)`: compile (cached) and run with `mirage.runtime` on a GPU.

MLIR is imported only inside these functions: `import mirage.lower` stays light.
"""
from __future__ import annotations

import os
from dataclasses import replace

from .kernel_plan import LoweringError, Options
from .convert import Lowered, convert

__all__ = ["LoweringError", "Options", "Lowered", "convert_to_gpu", "to_ptx", "compile", "call",
           "CompiledGraph", "compile_variants", "tuning_choices"]


def convert_to_gpu(g, options: Options | None = None) -> Lowered:
    return convert(g, options)


def to_ptx(g, target: str = "sm_90", options: Options | None = None, disk_cache: bool = True) -> tuple[Lowered, str]:
    """The lowered graph and its PTX; the NVVM pipeline's result is cached on disk across
    processes unless `disk_cache` is False (then nothing is written)."""
    from .pipeline import run_pipeline
    from .ptx_cache import compile_ptx

    low = convert(g, target_options(target, options))
    return low, (compile_ptx if disk_cache else run_pipeline)(low.module, target)


def target_options(target: str, options: Options | None = None) -> Options | None:
    """`options` as `target` takes them: griddepcontrol (Options.pdl), wgmma and clusters
    are sm_90's."""
    if target != "sm_90":
        return replace(options or Options(), pdl=False, wgmma=False, clusters=False)
    return options


class CompiledGraph:
    """A compiled μGraph: the bundle directory, its manifest, and (lazily) a runtime kernel."""

    def __init__(self, path: str, lowered: Lowered, ptx: str, target: str):
        self.path, self.lowered, self.ptx, self.target = path, lowered, ptx, target
        self._kernel = None

    def __call__(self, *tensors, **kw):
        if self._kernel is None:
            from .. import runtime

            self._kernel = runtime.load(self.path)
        return self._kernel(*tensors, **kw)

    def write(self, dest: str) -> str:
        """Copy the bundle directory to `dest` (replaced if it exists); returns `dest`."""
        import shutil

        if os.path.abspath(dest) != os.path.abspath(self.path):
            if os.path.isdir(dest):
                shutil.rmtree(dest)
            shutil.copytree(self.path, dest)
        return dest

    def __fspath__(self) -> str:
        return self.path

    def __repr__(self):
        return f"CompiledGraph({self.path!r}, {len(self.lowered.kernels)} kernels, {self.target})"


_CACHE: dict[tuple, CompiledGraph] = {}


def _cache_key(g, target: str, options) -> tuple:
    """Bundle cache key: the graph's content hash (its kn MLIR), the target and the
    options, so equal graphs share a bundle and nothing is recompiled per call."""
    from .convert import graph_hash

    return (graph_hash(g), target, repr(options))


def compile(g, target: str = "sm_90", out_dir: str | None = None,
            options: Options | None = None) -> CompiledGraph:
    """Lower `g` to PTX and write a bundle directory (default: a folder keyed by the graph
    hash and target under the user cache directory, `mirage.paths.bundle_dir`). Returns a
    `CompiledGraph`."""
    from ..runtime.bundle import write_bundle

    key = _cache_key(g, target, options)
    hit = _CACHE.get(key)
    if hit is not None and out_dir is None and os.path.isdir(hit.path):
        return hit
    low, ptx = to_ptx(g, target, options)
    if out_dir is None:
        from ..paths import bundle_dir  # under the user cache dir, never a /tmp folder shared by all users

        out_dir = os.path.join(bundle_dir(), f"{low.name}-{low.graph_hash}-{target}")
    os.makedirs(out_dir, exist_ok=True)
    fname = f"{low.name}.ptx"
    manifest = {
        "format": "mirage-bundle", "version": 1, "graph_hash": low.graph_hash, "target": target,
        "inputs": low.inputs, "outputs": low.outputs, "buffers": low.buffers,
        "kernels": [{"name": k["name"], "ptx": fname, "grid": k["grid"], "block": k["block"],
                     "smem_bytes": k["smem_bytes"], "args": k["args"], "pdl": k["pdl"]}
                    for k in low.kernels],
    }
    write_bundle(out_dir, manifest, {fname: ptx})
    cg = CompiledGraph(out_dir, low, ptx, target)
    _CACHE[key] = cg
    return cg


def tuning_choices(g, options: Options | None = None, factors=(1, 2, 4, 8),
                   threads=(256, 512)) -> list[tuple[str, Options]]:
    """Lowering options worth timing for `g` besides the default (none changes what `g`
    computes): each split factor of the for-loops (Options.split; 1: none) that changes
    some kernel's split from the default choice and, where a graph-defined kernel keeps fewer
    warps in flight than a quarter of the machine's (latency-bound), larger blocks
    (Options.threads), alone and with each split. [(suffix, Options)], the default first
    with suffix ''."""
    from dataclasses import replace
    from math import prod

    from .kernel_plan import choose_split

    base = options or Options()
    bodies = [op.body for op in g.ops if op.kind == "graph_def"]
    seen = {tuple(choose_split(b, base) for b in bodies)}
    splits = [("", base)]
    for s in factors:
        o = replace(base, split=s)
        key = tuple(choose_split(b, o) for b in bodies)
        if key not in seen:
            seen.add(key)
            splits.append((f"-split{s}", o))
    warps = lambda b: prod(b.grid_dim) * choose_split(b, base) * prod(b.block_dim) // 32
    small = [b for b in bodies if warps(b) < base.sms * 16]  # 64 warps an SM at most: under 1/4
    out = list(splits)
    for t in threads:
        if any(prod(b.block_dim) < t for b in small):
            out += [(f"{sfx}-t{t}", replace(o, threads=t)) for sfx, o in splits]
    return out


def compile_variants(graphs, out_dir: str, reference: str, target: str = "sm_90",
                     options: Options | None = None, tune: bool = False) -> str:
    """Compile several equivalent μGraphs, `graphs` = [(name, KNGraph)], into one variant
    bundle at `out_dir` (`mirage.runtime.select`): the runtime times them on the GPU at
    first use and keeps the fastest; `reference` names the one the others are checked
    against. With `tune`, each graph is also compiled with the other lowering options of
    `tuning_choices` (variants `<name>-split<s>`, `<name>-t<threads>`; one that does not
    compile is left out).
    Returns `out_dir`."""
    from ..runtime.select import write_variant_bundle

    parts = []
    for name, g in graphs:
        for suffix, opts in (tuning_choices(g, options) if tune else [("", options)]):
            try:  # each variant is compiled in place, as a sub-directory of the bundle
                cg = compile(g, target, os.path.join(out_dir, name + suffix), opts)
            except LoweringError:
                if not suffix:
                    raise
                continue  # e.g. the split's co-resident blocks leave too little shared memory
            parts.append((name + suffix, cg.path))
    return write_variant_bundle(out_dir, parts, reference)


def clear_cache() -> None:
    _CACHE.clear()


def _gpu_available() -> bool:
    try:
        import torch  # noqa: F401

        return bool(torch.cuda.is_available())
    except Exception:
        try:
            from cuda.bindings import driver as d

            err, = d.cuInit(0)[:1]
            if int(err) != 0:
                return False
            err, n = d.cuDeviceGetCount()
            return int(err) == 0 and n > 0
        except Exception:
            return False


def call(g, inputs, target: str = "sm_90", **kw):
    """Run μGraph `g` on `inputs` (CUDA tensors) from compiled PTX; returns the outputs.
    Raises a clear error on a machine without a GPU."""
    if not _gpu_available():
        raise RuntimeError(
            f"no CUDA GPU is available to run μGraph '{g.name}': calling a graph runs its compiled "
            f"PTX kernels on a GPU. On this machine use g.evaluate(inputs) (the reference "
            f"interpreter, numpy) or g.compile(target) to produce a kernel bundle for a GPU machine.")
    cg = compile(g, target)  # cached by graph hash + target: compiled once
    inputs = list(inputs or [])
    return cg(*inputs, **{k: v for k, v in kw.items() if k in ("stream", "out")})
