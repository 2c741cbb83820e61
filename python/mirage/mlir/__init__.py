"""The MLIR boundary: the only package that crosses between MLIR and the μGraph model.

`dialects/` (the kn/tb/th op classes), `importer` (MLIR -> model), `bridge` (what every
pass shares), `registry` (passes and their options), `diagnostics`, `opt` (`mirage-opt`),
and `passes/`, one file per pass flag. See docs/architecture.md.
"""
