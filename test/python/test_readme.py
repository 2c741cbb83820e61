"""Every code block of README.md runs as written.

The ```python and ```sh blocks are extracted and each one runs in a fresh temporary
folder holding a copy of what the blocks read (examples/, test/Dialect/), with the
mirage cache pointed into that folder, so nothing lands in the user's home. A block is
skipped only by one of the rules in SKIPS (each with its reason); every block that runs
must also print what EXPECT says it prints, so a block that runs but shows nothing
useful fails too.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
COPIED = ("examples", "test/Dialect")  # what the blocks read, relative to the repository root
TIMEOUT = 300  # seconds per block; the slowest (a search) takes about 10 s on 2 cores


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _gpu() -> bool:
    if not _has("torch"):
        return False
    import torch

    return bool(torch.cuda.is_available())


# (rule, applies to the block?, skip now?, reason)
SKIPS = [
    ("install", lambda b: "pip install" in b, lambda: True,
     "the install command itself: this test runs against the installed package"),
    ("suite", lambda b: b.strip() == "pytest", lambda: True,
     "runs the whole test suite, of which this test is a part"),
    ("gpu", lambda b: 'device="cuda"' in b, lambda: not _gpu(),
     "needs a CUDA GPU (torch.cuda.is_available() is False here)"),
    ("torch", lambda b: "import torch" in b, lambda: not (_has("torch") and _has("torch_mlir")),
     "needs the PyTorch front end (pip install torch==2.13.0 '.[torch]')"),
    ("lift", lambda b: "mirage.lift" in b, lambda: not (_has("triton") and _has("egglog")),
     "needs the lift extra (pip install '.[lift]')"),
]

# block marker -> text its output must contain
EXPECT = {
    "examples/rmsnorm_linear.py": "func.func @rmsnorm_linear",
    "mirage-opt examples/rmsnorm_linear.mlir --mirage-superoptimize": "kn.graph_def",
    "mi.new_threadblock_graph": "kn.graph_def",
    "mirage-opt examples/rmsnorm_linear_fused.mlir | mirage-opt": "--mirage-superoptimize",  # ends with --help
    "mirage-config --mlir-opt": "func.func @gqa",
    "ref.superoptimize(": "superoptimize main",
    "'--mirage-superoptimize=preset=lora": "func.func @lora",
    "check_equivalence": "True ",
    "g.compile(": "rmsnorm_linear-",
    "python -m mirage.lower": "gpu.module",
    'device="cuda"': "",  # asserts against torch itself
    "mt.import_module": "kn segment",
    "lift_triton(": "formula     out = x / sqrt(mean(x * x, 1) + eps) * w",
}


def blocks() -> list[tuple[int, str, str]]:
    """(line, language, code) of every ```python / ```sh block of the README."""
    text = README.read_text()
    out = []
    for m in re.finditer(r"^```(python|sh)\n(.*?)^```", text, re.S | re.M):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)))
    return out


def _skip(code: str):
    for rule, applies, now, why in SKIPS:
        if applies(code):
            return rule, (why if now() else None)
    return None, None


def test_the_readme_has_its_blocks():
    bs = blocks()
    assert len(bs) >= 12, f"only {len(bs)} blocks found in README.md"
    assert all(code.strip() for _, _, code in bs)
    unmatched = [line for line, _, code in bs if _skip(code)[0] not in ("install", "suite")
                 and not any(k in code for k in EXPECT)]
    assert not unmatched, f"README blocks at lines {unmatched} have no expected output in EXPECT"


@pytest.mark.parametrize("line,lang,code", [pytest.param(*b, id=f"line{b[0]}-{b[1]}") for b in blocks()])
def test_readme_block(line, lang, code, tmp_path):
    rule, why = _skip(code)
    if why:
        pytest.skip(f"README line {line}: {why}")
    for rel in COPIED:
        shutil.copytree(ROOT / rel, tmp_path / rel)
    env = dict(os.environ)
    env.update(MIRAGE_CACHE_DIR=str(tmp_path / "cache"), XDG_CACHE_HOME=str(tmp_path / "xdg"),
               PYTHONUNBUFFERED="1")
    env.pop("MIRAGE_CACHE", None)
    # console scripts (mirage-opt, mirage-config) sit beside the interpreter
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    if lang == "python":
        script = tmp_path / "block.py"
        script.write_text(code)
        cmd = [sys.executable, str(script)]
    else:
        cmd = ["bash", "-e", "-o", "pipefail", "-c", code]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"README block at line {line} failed (exit {proc.returncode}):\n{code}\n{out[-6000:]}"
    want = [v for k, v in EXPECT.items() if k in code]
    assert want, f"README block at line {line}: no expected output in EXPECT"
    for w in want:
        assert w in out, f"README block at line {line}: output lacks {w!r}:\n{out[-4000:]}"
    # nothing may be written outside the folder (the defaults are redirected into it)
    if "g.compile(" in code:
        assert str(tmp_path / "cache" / "bundles") in proc.stdout
