"""On-disk cache of the PTX compiler: `<user cache root>/ptx/<key>.ptx` (`mirage.paths`).

The upstream NVVM pipeline (`mirage.lower.pipeline.run_pipeline`) takes seconds per program
(13 s for a full-size decoder layer's 62 kernels); without this every process compiled
again what an earlier one had. The key is the SHA-256 of everything the PTX depends on:
the `gpu.module` text handed to the pipeline, the pipeline string (target, PTX features,
opt level), the MLIR bindings' distribution versions, mirage's version and `FORMAT` (bump
it when `lower/pipeline.py`'s post-processing changes). The cache is content-addressed, so
concurrent writers of one key write the same text; each write is atomic
(`mirage.paths.write_atomic`). A file that cannot be read is compiled again and replaced.
"""
from __future__ import annotations

import hashlib
import os

FORMAT = "mirage-ptx-cache 1"
_MLIR_VERSION: list = []  # computed once per process


def _mlir_version() -> str:
    if not _MLIR_VERSION:
        import importlib.metadata as md

        names = md.packages_distributions().get("mlir") or []
        _MLIR_VERSION.append(" ".join(sorted(f"{n}=={md.version(n)}" for n in set(names))) or "unknown")
    return _MLIR_VERSION[0]


def key(module_text: str, target: str) -> str:
    from ..version import __version__
    from .pipeline import nvvm_pipeline

    h = hashlib.sha256(module_text.encode())
    h.update(f"\n{nvvm_pipeline(target, module_text=module_text)}\n{_mlir_version()}\n{FORMAT} {__version__}".encode())
    return h.hexdigest()[:32]


def path(module_text: str, target: str) -> str:
    from ..paths import user_cache_dir

    return user_cache_dir("ptx", key(module_text, target) + ".ptx")


def compile_ptx(module_text: str, target: str = "sm_90") -> str:
    """PTX of a module holding one gpu.module: from the cache, else compiled and stored."""
    from .pipeline import run_pipeline

    p = path(module_text, target)
    try:
        with open(p) as f:
            ptx = f.read()
        if ptx.strip():
            return ptx
    except (OSError, UnicodeDecodeError):
        pass
    ptx = run_pipeline(module_text, target)
    from ..paths import write_atomic

    try:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        write_atomic(p, ptx)
    except OSError:  # a read-only or full cache folder costs the next process a compile, nothing else
        pass
    return ptx
