"""The BLAS library's thread count in this process.

The search runs one worker process per core, and each check (float64 evaluation, the
finite-field matmuls) is many BLAS calls. OpenBLAS's default of one thread per core in
every worker oversubscribes the cores: on a loaded 2-core machine a GQA-sized batched
float64 matmul took 1.9 s with its default threads and 0.16 s with one. Environment
variables (OPENBLAS_NUM_THREADS) are read only when the library loads, before a forked
worker exists, so the count is set through the library's own call, found among the
libraries this process has loaded (numpy's bundled OpenBLAS names it with a prefix).
"""
from __future__ import annotations

import ctypes

_SETTERS = ("openblas_set_num_threads", "scipy_openblas_set_num_threads64_",
            "scipy_openblas_set_num_threads_64_", "openblas_set_num_threads64_", "MKL_Set_Num_Threads")


def loaded(*words: str) -> list[tuple[str, ctypes.CDLL]]:
    """(path, handle) of each shared library this process has loaded whose path contains
    one of `words` (case-insensitive), in path order; [] where /proc is not there."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if any(w in line.lower() for w in words)}
    except OSError:  # not Linux
        return []
    out = []
    for path in sorted(paths):
        try:
            out.append((path, ctypes.CDLL(path)))
        except OSError:
            continue
    return out


def set_threads(n: int) -> bool:
    """Set the BLAS thread count of this process to `n`; False where no known BLAS is loaded."""
    import numpy  # noqa: F401  (loads the library)

    done = False
    for _, lib in loaded("blas", "mkl"):
        for name in _SETTERS:
            fn = getattr(lib, name, None)
            if fn is not None:
                fn(ctypes.c_int(int(n)))
                done = True
                break
    return done
