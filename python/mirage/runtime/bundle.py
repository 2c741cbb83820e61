"""Kernel bundle format: a directory holding `manifest.json` and the PTX file(s).

A bundle is what the compiler (`mirage.lower.compile`) produces on the CPU machine and
what the runtime (`mirage.runtime.load`) launches on the GPU machine. This module
imports only the standard library, so it works anywhere.

Manifest (format "mirage-bundle", version 1)::

    {"format": "mirage-bundle", "version": 1,
     "graph_hash": "<hash of the source μGraph>", "target": "sm_90",
     "inputs":  [{"shape": [..], "dtype": "f16"|"bf16"|"f32", "strides": [..]}],
     "outputs": [{"shape": [..], "dtype": .., "strides": [..]}],
     "buffers": [{"shape": [..], "dtype": ..}],     # intermediates, runtime-allocated
     "kernels": [{"name": "<PTX entry symbol>", "ptx": "<file in the bundle>",
                  "grid": [x, y, z], "block": [x, y, z],
                  "smem_bytes": <dynamic shared memory>,
                  "args": [{"kind": "input"|"output"|"buffer", "index": i}]}]}

Kernels run in list order; every tensor argument is passed as ONE bare device
pointer (in `args` order) and nothing else. Strides are in elements, row-major
(contiguous) unless stated otherwise.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

FORMAT = "mirage-bundle"
VERSION = 1
MANIFEST = "manifest.json"
DTYPES = ("f16", "bf16", "f32")
DTYPE_BYTES = {"f16": 2, "bf16": 2, "f32": 4}
ARG_KINDS = ("input", "output", "buffer")


class BundleError(ValueError):
    """A bundle or manifest is malformed; the message names the file and field."""


def contiguous_strides(shape) -> list[int]:
    strides, acc = [], 1
    for d in reversed(list(shape)):
        strides.append(acc)
        acc *= int(d)
    return strides[::-1]


@dataclass
class TensorSpec:
    shape: list[int]
    dtype: str
    strides: list[int] | None = None  # elements; None = contiguous

    def __post_init__(self):
        self.shape = [int(d) for d in self.shape]
        if self.strides is None:
            self.strides = contiguous_strides(self.shape)
        self.strides = [int(s) for s in self.strides]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Bytes spanned by the tensor (max offset + 1 element)."""
        if self.numel == 0:
            return 0
        span = 1 + sum((d - 1) * s for d, s in zip(self.shape, self.strides))
        return span * DTYPE_BYTES[self.dtype]


@dataclass
class BufferSpec:
    shape: list[int]
    dtype: str

    def __post_init__(self):
        self.shape = [int(d) for d in self.shape]

    @property
    def nbytes(self) -> int:
        n = DTYPE_BYTES[self.dtype]
        for d in self.shape:
            n *= d
        return n


@dataclass
class KernelArg:
    kind: str   # "input" | "output" | "buffer"
    index: int


@dataclass
class KernelSpec:
    name: str
    ptx: str
    grid: list[int]
    block: list[int]
    smem_bytes: int = 0
    args: list[KernelArg] = field(default_factory=list)
    # launched as a programmatic dependent of the kernel before it (the kernel waits on
    # griddepcontrol; `lower.Options.pdl`); absent in bundles from before it: False
    pdl: bool = False


@dataclass
class Manifest:
    graph_hash: str
    target: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    kernels: list[KernelSpec]
    buffers: list[BufferSpec] = field(default_factory=list)
    format: str = FORMAT
    version: int = VERSION

    def to_json(self) -> dict:
        d = asdict(self)
        return {"format": d["format"], "version": d["version"],
                "graph_hash": d["graph_hash"], "target": d["target"],
                "inputs": d["inputs"], "outputs": d["outputs"],
                "buffers": d["buffers"], "kernels": d["kernels"]}

    @classmethod
    def from_json(cls, data: Any, where: str = MANIFEST) -> "Manifest":
        return _parse_manifest(data, where)

    def validate(self, where: str = MANIFEST) -> "Manifest":
        """Re-check every field (e.g. after building a Manifest by hand)."""
        _parse_manifest(self.to_json(), where)
        return self


@dataclass
class Bundle:
    path: str
    manifest: Manifest
    ptx: dict[str, str]   # file name -> PTX text


# ----------------------------------------------------------------------------- parsing

def _err(where, fld, msg):
    raise BundleError(f"{where}: field '{fld}': {msg}")


def _get(d: Mapping, key: str, where: str, prefix: str):
    if not isinstance(d, Mapping):
        _err(where, prefix or "<root>", f"expected an object, got {type(d).__name__}")
    if key not in d:
        _err(where, f"{prefix}.{key}" if prefix else key, "missing")
    return d[key]


def _int(v, where, fld, minimum=None):
    if isinstance(v, bool) or not isinstance(v, int):
        _err(where, fld, f"expected an integer, got {v!r}")
    if minimum is not None and v < minimum:
        _err(where, fld, f"must be >= {minimum}, got {v}")
    return v


def _int_list(v, where, fld, minimum=None, length=None):
    if not isinstance(v, list):
        _err(where, fld, f"expected a list of integers, got {v!r}")
    if length is not None and len(v) != length:
        _err(where, fld, f"expected {length} entries, got {len(v)}")
    return [_int(x, where, f"{fld}[{i}]", minimum) for i, x in enumerate(v)]


def _str(v, where, fld):
    if not isinstance(v, str) or not v:
        _err(where, fld, f"expected a non-empty string, got {v!r}")
    return v


def _dtype(v, where, fld):
    if v not in DTYPES:
        _err(where, fld, f"unknown dtype {v!r} (expected one of {', '.join(DTYPES)})")
    return v


def _list(v, where, fld):
    if not isinstance(v, list):
        _err(where, fld, f"expected a list, got {type(v).__name__}")
    return v


def _tensor(d, where, fld) -> TensorSpec:
    shape = _int_list(_get(d, "shape", where, fld), where, f"{fld}.shape", 0)
    dtype = _dtype(_get(d, "dtype", where, fld), where, f"{fld}.dtype")
    strides = d.get("strides") if isinstance(d, Mapping) else None
    if strides is not None:
        strides = _int_list(strides, where, f"{fld}.strides", 0)
        if len(strides) != len(shape):
            _err(where, f"{fld}.strides", f"has {len(strides)} entries but shape "
                 f"{shape} has rank {len(shape)}")
    return TensorSpec(shape, dtype, strides)


def _parse_manifest(data: Any, where: str) -> Manifest:
    if not isinstance(data, Mapping):
        raise BundleError(f"{where}: expected a JSON object at top level")
    fmt = _get(data, "format", where, "")
    if fmt != FORMAT:
        _err(where, "format", f"expected {FORMAT!r}, got {fmt!r}")
    ver = _get(data, "version", where, "")
    if ver != VERSION:
        _err(where, "version", f"unsupported version {ver!r} (this runtime reads "
             f"version {VERSION})")
    graph_hash = _get(data, "graph_hash", where, "")
    if not isinstance(graph_hash, str):
        _err(where, "graph_hash", f"expected a string, got {graph_hash!r}")
    target = _str(_get(data, "target", where, ""), where, "target")
    if not target.startswith("sm_"):
        _err(where, "target", f"expected 'sm_XX', got {target!r}")
    inputs = [_tensor(t, where, f"inputs[{i}]")
              for i, t in enumerate(_list(_get(data, "inputs", where, ""), where, "inputs"))]
    outputs = [_tensor(t, where, f"outputs[{i}]")
               for i, t in enumerate(_list(_get(data, "outputs", where, ""), where, "outputs"))]
    buffers = []
    for i, b in enumerate(_list(data.get("buffers", []), where, "buffers")):
        fld = f"buffers[{i}]"
        buffers.append(BufferSpec(
            _int_list(_get(b, "shape", where, fld), where, f"{fld}.shape", 0),
            _dtype(_get(b, "dtype", where, fld), where, f"{fld}.dtype")))
    counts = {"input": len(inputs), "output": len(outputs), "buffer": len(buffers)}
    kernels = []
    kl = _list(_get(data, "kernels", where, ""), where, "kernels")
    if not kl:
        _err(where, "kernels", "a bundle needs at least one kernel")
    for i, k in enumerate(kl):
        fld = f"kernels[{i}]"
        name = _str(_get(k, "name", where, fld), where, f"{fld}.name")
        ptx = _str(_get(k, "ptx", where, fld), where, f"{fld}.ptx")
        if os.path.basename(ptx) != ptx or ptx in (".", ".."):
            _err(where, f"{fld}.ptx", f"must be a plain file name inside the bundle, got {ptx!r}")
        grid = _int_list(_get(k, "grid", where, fld), where, f"{fld}.grid", 1, 3)
        block = _int_list(_get(k, "block", where, fld), where, f"{fld}.block", 1, 3)
        if block[0] * block[1] * block[2] > 1024:
            _err(where, f"{fld}.block", f"{block} has more than 1024 threads")
        smem = _int(k.get("smem_bytes", 0) if isinstance(k, Mapping) else 0,
                    where, f"{fld}.smem_bytes", 0)
        args = []
        for j, a in enumerate(_list(_get(k, "args", where, fld), where, f"{fld}.args")):
            afld = f"{fld}.args[{j}]"
            kind = _get(a, "kind", where, afld)
            if kind not in ARG_KINDS:
                _err(where, f"{afld}.kind", f"expected one of {', '.join(ARG_KINDS)}, got {kind!r}")
            idx = _int(_get(a, "index", where, afld), where, f"{afld}.index", 0)
            if idx >= counts[kind]:
                _err(where, f"{afld}.index", f"{kind} index {idx} out of range "
                     f"(the bundle has {counts[kind]} {kind}s)")
            args.append(KernelArg(kind, idx))
        pdl = k.get("pdl", False)
        if not isinstance(pdl, bool):
            _err(where, f"{fld}.pdl", f"expected true or false, got {pdl!r}")
        kernels.append(KernelSpec(name, ptx, grid, block, smem, args, pdl))
    return Manifest(graph_hash=graph_hash, target=target, inputs=inputs, outputs=outputs,
                    kernels=kernels, buffers=buffers)


# --------------------------------------------------------------------------- file I/O

def write_bundle(directory: str | os.PathLike, manifest: Manifest | Mapping,
                 ptx_texts: Mapping[str, str]) -> str:
    """Write `manifest.json` and the PTX files (file name -> text) into `directory`.

    `manifest` is a `Manifest` or its JSON dict; it is validated first, and every
    `kernels[i].ptx` must be a key of `ptx_texts`. Returns the directory path.
    """
    directory = os.fspath(directory)
    m = manifest if isinstance(manifest, Manifest) else Manifest.from_json(manifest, "manifest")
    m.validate("manifest")
    for i, k in enumerate(m.kernels):
        if k.ptx not in ptx_texts:
            _err("manifest", f"kernels[{i}].ptx", f"{k.ptx!r} is not among the PTX texts "
                 f"given ({', '.join(sorted(ptx_texts)) or 'none'})")
    os.makedirs(directory, exist_ok=True)
    for name, text in ptx_texts.items():
        if os.path.basename(name) != name:
            raise BundleError(f"PTX file name {name!r} must be a plain file name")
        with open(os.path.join(directory, name), "w") as f:
            f.write(text)
    with open(os.path.join(directory, MANIFEST), "w") as f:
        json.dump(m.to_json(), f, indent=1)
        f.write("\n")
    return directory


def load_bundle(directory: str | os.PathLike) -> Bundle:
    """Read and validate a bundle directory; raises `BundleError` naming the field."""
    directory = os.fspath(directory)
    path = os.path.join(directory, MANIFEST)
    if not os.path.isdir(directory):
        raise BundleError(f"{directory}: not a bundle directory (no such directory)")
    if not os.path.isfile(path):
        raise BundleError(f"{directory}: not a bundle (no {MANIFEST})")
    try:
        with open(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise BundleError(f"{path}: invalid JSON: {e}") from None
    m = _parse_manifest(data, path)
    ptx = {}
    for i, k in enumerate(m.kernels):
        if k.ptx in ptx:
            continue
        p = os.path.join(directory, k.ptx)
        if not os.path.isfile(p):
            _err(path, f"kernels[{i}].ptx", f"file {k.ptx!r} is missing from the bundle")
        with open(p) as f:
            ptx[k.ptx] = f.read()
    for i, k in enumerate(m.kernels):
        text = ptx[k.ptx]
        if f".entry {k.name}" not in text and f".entry\t{k.name}" not in text:
            # tolerate unusual spacing; exact symbol must appear somewhere
            if k.name not in text:
                _err(path, f"kernels[{i}].name", f"entry {k.name!r} not found in {k.ptx!r}")
    return Bundle(directory, m, ptx)
