"""Register use of compiled kernels, from NVIDIA's assembler where one is installed.

`ptxas -v` reports, per entry function, the registers a thread uses and the bytes it
spills to local memory. A kernel that spills can run several times slower than the
cost model expects (MCFuser's G11 on the H100: 288 bytes spilled, 68.9 µs against 20.2
µs for a candidate that does not spill), so the search consults it when no GPU is there
to time the candidates (`search.measure`). ptxas is not a dependency: it is looked for
as `$MIRAGE_PTXAS`, on the PATH, under `$CUDA_HOME/bin`, and in Triton's wheel, which
ships one; without it `usage` returns None."""
from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile


@functools.lru_cache(maxsize=None)
def find() -> str | None:
    """Path of a ptxas executable, or None."""
    env = os.environ.get("MIRAGE_PTXAS")
    if env:
        return env if os.access(env, os.X_OK) else None
    found = shutil.which("ptxas")
    if found:
        return found
    candidates = [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ptxas")]
    spec = importlib.util.find_spec("triton")  # located, not imported (the import takes seconds)
    if spec is not None and spec.submodule_search_locations:
        candidates.append(os.path.join(spec.submodule_search_locations[0], "backends", "nvidia", "bin", "ptxas"))
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")
# wgmma that ptxas runs one group at a time (its own waits), whatever the PTX's waits say
_SERIAL = re.compile(r"wgmma\.mma_async instructions are serialized due to (.*) in the function '([^']+)'")


def parse(text: str) -> dict[str, dict]:
    """{entry: {"registers", "spill_stores", "spill_loads", "wgmma_serialized"}} from
    `ptxas -v` output (the last: ptxas's reason, or None)."""
    out: dict = {}
    serial = {m.group(2): m.group(1) for m in _SERIAL.finditer(text)}
    name = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            name = m.group(1)
            out[name] = {"registers": 0, "spill_stores": 0, "spill_loads": 0, "wgmma_serialized": serial.get(name)}
        elif name and (m := _SPILL.search(line)):
            out[name]["spill_stores"], out[name]["spill_loads"] = int(m.group(1)), int(m.group(2))
        elif name and (m := _REGS.search(line)):
            out[name]["registers"] = int(m.group(1))
    return out


def usage(ptx: str, arch: str | None = None, timeout: float = 60.0) -> dict[str, dict] | None:
    """Per-entry register use of `ptx` as ptxas assembles it for `arch` (default: the PTX's
    own `.target`); None where no ptxas is installed or it fails (the caller goes on
    without the information)."""
    if arch is None:
        m = re.search(r"^\.target\s+(sm_\w+)", ptx, re.M)
        arch = m.group(1) if m else "sm_90"
    exe = find()
    if exe is None:
        return None
    with tempfile.TemporaryDirectory(prefix="mirage-ptxas-") as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        try:
            r = subprocess.run([exe, f"-arch={arch}", "-v", src, "-o", os.path.join(tmp, "k.cubin")],
                               capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            return None
    if r.returncode != 0:
        return None
    return parse(r.stdout + r.stderr)
