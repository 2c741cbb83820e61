"""mirage.runtime: load kernel bundles and launch them with the CUDA driver API.

Imports only numpy and (on first launch) `cuda.bindings.driver`; torch is used only
when given torch tensors. Never imports MLIR, z3 or the compiler.
"""
from .bundle import (Bundle, BufferSpec, BundleError, KernelArg, KernelSpec, Manifest,
                     TensorSpec, load_bundle, write_bundle)

__all__ = ["Bundle", "BufferSpec", "BundleError", "KernelArg", "KernelSpec", "Manifest",
           "TensorSpec", "load_bundle", "write_bundle", "load", "Kernel", "LaunchError",
           "Selecting", "write_variant_bundle"]


def __getattr__(name):
    if name in ("load", "Kernel", "LaunchError"):
        from . import launcher
        return getattr(launcher, name)
    if name in ("Selecting", "write_variant_bundle"):
        from . import select
        return getattr(select, name)
    raise AttributeError(f"module 'mirage.runtime' has no attribute '{name}'")
