"""GPU dialects -> PTX with the upstream `gpu-lower-to-nvvm-pipeline` (MLIR Python
bindings; no GPU and no CUDA toolkit needed: `cubin-format=isa` stops at PTX)."""
from __future__ import annotations

import re

TARGETS = {"sm_90": "+ptx80", "sm_80": "+ptx70"}


def chip(module_text: str, target: str) -> str:
    """The PTX target for `target`: sm_90's kernels with warpgroup matmuls (wgmma, which
    only the arch-specific sm_90a has) are compiled for sm_90a, the others as given."""
    return "sm_90a" if target == "sm_90" and "wgmma.mma_async" in module_text else target


def nvvm_pipeline(target: str = "sm_90", opt_level: int = 3, module_text: str = "") -> str:
    if target not in TARGETS:
        raise ValueError(f"unsupported target '{target}' (expected one of {', '.join(TARGETS)})")
    return (f"builtin.module(gpu-lower-to-nvvm-pipeline{{cubin-format=isa cubin-chip={chip(module_text, target)} "
            f"cubin-features={TARGETS[target]} opt-level={opt_level} "
            f"kernel-bare-ptr-calling-convention=true}})")


def parse(text: str, ctx=None):
    from mlir import ir

    ctx = ctx or ir.Context()
    return ir.Module.parse(text, ctx)


def run_pipeline(module_text: str, target: str = "sm_90") -> str:
    """Lower a module holding a gpu.module to PTX text."""
    from mlir import ir
    from mlir.passmanager import PassManager

    with ir.Context() as ctx:
        m = ir.Module.parse(module_text)
        PassManager.parse(nvvm_pipeline(target, module_text=module_text)).run(m.operation)
        return extract_ptx(str(m))


def _unescape(s: str) -> str:
    out = bytearray()
    i = 0
    b = s.encode()
    while i < len(b):
        c = b[i]
        if c == 0x5C and i + 2 < len(b) + 1:  # backslash
            nxt = b[i + 1:i + 3]
            if nxt[:1] == b"\\":
                out.append(0x5C)
                i += 2
                continue
            if nxt[:1] == b'"':
                out.append(0x22)
                i += 2
                continue
            out.append(int(nxt.decode(), 16))
            i += 3
            continue
        out.append(c)
        i += 1
    return out.decode()


def extract_ptx(module_text: str) -> str:
    m = re.search(r'assembly = "((?:[^"\\]|\\.)*)"', module_text, re.S)
    if not m:
        raise RuntimeError("the NVVM pipeline produced no PTX (no gpu.binary assembly)")
    return fix_dynamic_smem(_unescape(m.group(1)))


_DEMOTED = re.compile(r"^\s*// demoted variable\n\s*\.shared \.align (\d+) \.b8 (__dynamic_shmem__\d+);\n", re.M)


_MODSCOPE = re.compile(r"^\.shared \.align (\d+) \.b8 (__dynamic_shmem__\d+);", re.M)


def fix_dynamic_smem(ptx: str) -> str:
    """LLVM's NVPTX backend demotes MLIR's zero-size dynamic shared memory global into
    each kernel as a scalar `.shared .b8` variable; declare it instead once at module
    scope as `.extern .shared .b8 name[]` (what CUDA emits), so the launch's dynamic
    shared memory is what the kernel addresses."""
    ptx = _MODSCOPE.sub(r".extern .shared .align \1 .b8 \2[];", ptx)
    names = {}
    for m in _DEMOTED.finditer(ptx):
        names[m.group(2)] = m.group(1)
    if not names:
        return ptx
    ptx = _DEMOTED.sub("", ptx)
    ptx = re.sub(r"^// (__dynamic_shmem__\d+) has been demoted\n", "", ptx, flags=re.M)
    decl = "".join(f".extern .shared .align {a} .b8 {n}[];\n" for n, a in names.items())
    i = ptx.find(".address_size")
    j = ptx.find("\n", i) + 1
    return ptx[:j] + "\n" + decl + ptx[j:]
