"""Deployable drop-in modules: what an optimized module needs at run time.

`MirageModule.save(dir)` (on the compiler machine) writes::

    dir/manifest.json   format, target, input signature, segments, bindings, versions
    dir/program.pt      torch.save of a `DeployedProgram`: the exported ATen graph in
                        which every kn segment is a `DeployedSegment` (its original ATen
                        subgraph, the binding of its inputs, the reference kn graph)
    dir/weights.pt      parameters and buffers by name (unless `weights=False`)
    dir/bundles/<seg>/  one kernel bundle (manifest.json + PTX) per kn segment

`load(dir, module=None)` reads it back with torch, numpy and `mirage.runtime` only (it
never imports MLIR, torch-mlir, z3 or the compiler): kernels run on matching CUDA
inputs, the exported ATen graph otherwise. Parameters come from `module` when given
(by name: the module the program was exported from, or one with the same state),
else from `weights.pt`.

This module imports only torch and numpy; `mirage.runtime` is imported on the first
kernel launch.
"""
from __future__ import annotations

import json
import os
import warnings
from typing import Any

import numpy as np
import torch

FORMAT = "mirage-torch-module"
VERSION = 1
_TORCH_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def _np64(t) -> np.ndarray:
    return t.detach().to("cpu").double().numpy() if hasattr(t, "detach") else np.asarray(t, dtype=np.float64)


def _lookup(module, name: str, kind: str):
    """`module.get_parameter(name)` / `get_buffer(name)` by plain attribute access (read on
    every call, so a replaced parameter is seen), or None when absent."""
    m = module
    *path, leaf = name.split(".")
    for p in path:
        m = getattr(m, p, None)
        if not isinstance(m, torch.nn.Module):
            return None
    return (m._parameters if kind == "parameter" else m._buffers).get(leaf)


# the layout transforms folded into a binding (`torch_import.fold_state_layout`):
# ("transpose", permutation) | ("reshape", shape) | ("narrow", (start, count)) of the last dim

def transformed_shape(shape: tuple, kind: str, arg: tuple) -> tuple:
    if kind == "transpose":
        return tuple(shape[p] for p in arg)
    if kind == "narrow":
        return tuple(shape[:-1]) + (arg[1],)
    return tuple(arg)


def apply_transforms_np(a, transforms):
    for kind, arg in transforms:
        if kind == "transpose":
            a = np.transpose(a, arg)
        elif kind == "narrow":
            a = a[..., arg[0]:arg[0] + arg[1]]
        else:
            a = np.reshape(a, arg)
    return a


def _apply_torch(t, transforms):
    for kind, arg in transforms:
        if kind == "transpose":
            t = t.permute(*arg)
        elif kind == "narrow":
            t = t.narrow(-1, *arg)
        else:
            t = t.reshape(*arg)
    return t


class DeployedSegment(torch.nn.Module):
    """A kn segment of the partitioned program. Modes: 'torch' (the segment's original
    ATen ops), 'interpreter' (the reference kn graph in float64, for checking) and
    'kernels' (the compiled kernels: `kernel`, a callable set by `superoptimize`, or the
    bundle at `bundle_path`, loaded with `mirage.runtime` on first use; without either
    it runs the ATen ops)."""

    def __init__(self, graph, fallback, arg_map, out_map, single: bool, out_dtypes, in_dtypes=None):
        super().__init__()
        self.graph = graph  # the imported (reference) kn graph
        self.fallback = fallback  # torch.fx.GraphModule: the partition's ATen ops
        # per graph input: ("arg", k) | ("arg", k, transforms) | ("const", ndarray); transforms:
        # layout ops folded out of the graph at import (`apply_transforms_np`), applied to
        # argument k once and cached while that tensor is unchanged
        self.arg_map = arg_map
        self.out_map = out_map  # per partition output: ("out", j) | ("arg", k) | ("const", v, shape)
        self.single = single
        self.out_dtypes = out_dtypes
        self.in_dtypes = in_dtypes or [_TORCH_DTYPES.get(t.dtype.mlir, torch.float32) for t in graph.inputs]
        self.mode = "torch"
        self.kernel = None  # callable(list of tensors) -> outputs; not saved
        self.optimized = None  # the graph the kernels were compiled from; not saved
        self.bundle = None  # mirage.lower.CompiledGraph (build side); not saved
        self.bundle_name = None  # directory name under <dir>/bundles (saved)
        self.bundle_path = None  # set by `load`
        self._consts: dict = {}
        self._folded: dict = {}  # graph input index -> (key of the source tensor, transformed tensor)

    def __getstate__(self):
        d = dict(self.__dict__)
        for k in ("kernel", "optimized", "bundle", "bundle_path"):
            d[k] = None
        d["_consts"] = {}
        d["_folded"] = {}
        return d

    def __setstate__(self, d):
        d.setdefault("_folded", {})
        super().__setstate__(d)

    def _transformed(self, i: int, t, transforms):
        """Argument `t` with the folded layout transforms applied, contiguous; computed
        once per (tensor, in-place version, device) and cached: a weight is transposed
        when first used (or after it changed), not on every call."""
        key = _state_key(t)
        hit = self._folded.get(i)
        if hit is not None and hit[0] == key:
            return hit[1]
        v = _apply_torch(t.detach(), transforms).contiguous()
        if v.data_ptr() == t.data_ptr():  # a reshape that stayed a view: own the copy
            v = v.clone()
        self._folded[i] = (key, v)
        return v

    def _arg(self, i: int, a, args):
        t = args[a[1]]
        if len(a) > 2 and a[2]:
            return self._transformed(i, t, a[2])
        return t.contiguous()

    def _kernel_fn(self):
        if self.kernel is None and self.bundle_path is not None:
            from ..runtime import load as load_bundle

            k = load_bundle(self.bundle_path)
            self.kernel = lambda ins, k=k: k(*ins)
        return self.kernel

    def _const(self, i: int, value, device):
        key = (i, str(device))
        t = self._consts.get(key)
        if t is None:
            t = self._consts[key] = torch.as_tensor(np.asarray(value), dtype=self.in_dtypes[i], device=device).contiguous()
        return t

    def forward(self, *args):
        kernel = self._kernel_fn() if self.mode == "kernels" else None
        if self.mode == "torch" or (self.mode == "kernels" and kernel is None):
            return self.fallback(*args)
        dev = args[0].device if args else torch.device("cpu")
        if self.mode == "kernels":
            ins = [self._arg(i, a, args) if a[0] == "arg" else self._const(i, a[1], dev)
                   for i, a in enumerate(self.arg_map)]
            outs = list(kernel(ins))
        else:  # interpreter, float64
            ins = [apply_transforms_np(_np64(args[a[1]]), a[2] if len(a) > 2 else ()) if a[0] == "arg" else a[1]
                   for a in self.arg_map]
            outs = self.graph.evaluate(ins)
        res = []
        for m, dt in zip(self.out_map, self.out_dtypes):
            if m[0] == "out":
                v = outs[m[1]]
            elif m[0] == "arg":
                v = args[m[1]]
            else:
                v = np.full(m[2], m[1])
            res.append(torch.as_tensor(v).to(device=dev, dtype=dt))
        return res[0] if self.single else tuple(res)


def _state_key(t) -> tuple:
    """What identifies a state tensor's value between calls: its storage, in-place
    version, device, shape and dtype."""
    return (t.data_ptr(), t._version, t.device, tuple(t.shape), t.dtype)


class StateValues(torch.nn.Module):
    """Values the program computes from module buffers alone (`fx_cleanup.hoist_state_values`:
    a rotary embedding's cos and sin tables, from its `inv_freq` buffer): `prelude`, an
    ATen graph of the buffers it reads, runs on the first call and again only when one of
    them changed (replaced, moved, or modified in place), not on every call.
    `forward(k, *state)` is output k; the graph calls it once per output, all on one
    computation. While autograd records (grad enabled, a state tensor requiring grad)
    it runs on every call instead, so gradients flow as in the module."""

    def __init__(self, prelude):
        super().__init__()
        self.prelude = prelude
        self._key = None
        self._values = None

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_key"], d["_values"] = None, None
        return d

    def forward(self, k: int, *state):
        if torch.is_grad_enabled() and any(t.requires_grad for t in state):
            return self.prelude(*state)[k]
        key = [_state_key(t) for t in state]
        if key != self._key:
            with torch.no_grad():
                self._values = tuple(self.prelude(*state))
            self._key = key
        return self._values[k]


def attr_tensors_to(gm: torch.nn.Module, device) -> None:
    """Move the tensors `gm` and its submodules hold to `device`: the `_tensor_constant`s that
    FX tracing captures (e.g. a decomposition's scalar tensors; buffers of the graph module)
    and any plain tensor attribute (which `Module.to` leaves). Built on the CPU, GPT-2's,
    Phi-3's and Mistral's blocks kept one on the host and failed on CUDA inputs."""
    gm.to(device)
    for m in gm.modules():
        for name, v in list(vars(m).items()):
            if isinstance(v, torch.Tensor) and v.device != device:
                setattr(m, name, v.to(device))


class DeployedProgram(torch.nn.Module):
    """The partitioned program without its exporter: the fused ATen graph module, the
    names of the state it reads (parameters, buffers, lifted constants, in the export's
    order) and the output tree. Call it like the original module (at the export's shapes)."""

    def __init__(self, gm, state_keys, constants: dict, out_spec: str):
        super().__init__()
        self.gm = gm
        self.state_keys = list(state_keys)  # [(kind, name)], kind: parameter | buffer | constant
        self.constants = dict(constants)  # name -> tensor (lifted tensor constants)
        self.out_spec = out_spec  # torch.utils._pytree.treespec_dumps text
        self.weights: dict = {}  # name -> tensor (from weights.pt)
        self.source = []  # [module] whose parameters/buffers are read, when bound

    def __getstate__(self):
        d = dict(self.__dict__)
        d["weights"], d["source"] = {}, []
        d.pop("_spec", None)
        d.pop("_segs", None)
        d.pop("_attrs_on", None)
        return d

    def bind(self, module=None, weights: dict | None = None) -> "DeployedProgram":
        """Read parameters and buffers from `module` (by name) or the `weights` dict."""
        missing = []
        for kind, name in self.state_keys:
            if kind == "constant":
                continue
            if module is not None:
                try:
                    module.get_parameter(name) if kind == "parameter" else module.get_buffer(name)
                    continue
                except AttributeError:
                    pass
            if weights is None or name not in weights:
                missing.append(name)
        if missing:
            raise KeyError(f"mirage: no value for {', '.join(missing)} (pass module= or save with weights)")
        self.source = [module] if module is not None else []
        self.weights = dict(weights or {})
        return self

    def _value(self, kind: str, name: str):
        if kind == "constant":
            return self.constants[name]
        if self.source:
            v = _lookup(self.source[0], name, kind)
            if v is not None:
                return v
        return self.weights[name]

    def set_mode(self, mode: str) -> None:
        for s in self.segments().values():
            s.mode = mode

    def segments(self) -> dict:
        return {n: m for n, m in self.gm.named_children() if isinstance(m, DeployedSegment)}

    def _segment_list(self) -> list:
        """The segments, looked up once (DeployedModule's per-call path)."""
        segs = self.__dict__.get("_segs")
        if segs is None:
            segs = self.__dict__["_segs"] = list(self.segments().values())
        return segs

    def to_device(self, device) -> None:
        """Move the saved weights and constants (not a bound module's) to `device`."""
        self.weights = {k: v.to(device) for k, v in self.weights.items()}
        self.constants = {k: v.to(device) for k, v in self.constants.items()}

    def forward(self, *args, **kwargs):
        import torch.utils._pytree as pytree

        if not kwargs and all(isinstance(a, torch.Tensor) for a in args):
            flat = list(args)  # what tree_flatten gives for tensors alone, without its cost
        else:
            flat, _ = pytree.tree_flatten((tuple(args), dict(kwargs)))
        dev = next((t.device for t in flat if isinstance(t, torch.Tensor)), None)
        if dev is not None and self.__dict__.get("_attrs_on") != dev:
            attr_tensors_to(self.gm, dev)
            self.__dict__["_attrs_on"] = dev
        state = []
        for kind, name in self.state_keys:
            v = self._value(kind, name)
            if dev is not None and isinstance(v, torch.Tensor) and v.device != dev:
                v = v.to(dev)  # saved weights follow the inputs (moved for good on first use)
                if kind == "constant":
                    self.constants[name] = v
                elif not self.source:
                    self.weights[name] = v
            state.append(v)
        outs = self.gm(*state, *flat)
        spec = self.__dict__.get("_spec")
        if spec is None:
            spec = self.__dict__["_spec"] = pytree.treespec_loads(self.out_spec)
        if spec.is_leaf():
            return outs[0]
        return pytree.tree_unflatten(list(outs), spec)


def signature(tensors) -> list:
    return [(tuple(t.shape), t.dtype) for t in tensors if isinstance(t, torch.Tensor)]


class DeployedModule(torch.nn.Module):
    """What `load` returns: runs the kernels on CUDA inputs matching the compiled shapes
    and dtypes. Otherwise, warning once per reason: the `module` given to `load` when
    there is one (other shapes, CPU tensors: bit for bit the module's results); without
    it, the exported ATen graph for inputs of the compiled shapes (the same function,
    rounding aside: PyTorch's decompositions) and an error for other shapes."""

    def __init__(self, program: DeployedProgram, sig, original=None, info: dict | None = None):
        super().__init__()
        self.program = program
        self.original = [original] if original is not None else []  # not a submodule
        self._signature = list(sig)
        self.info = dict(info or {})
        self._warned: set = set()
        self._failed = False

    @property
    def report(self) -> str:
        return self.info.get("report", "")

    def _warn_once(self, key: str, msg: str, then: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"mirage: {msg}; {then}", RuntimeWarning, stacklevel=3)

    def forward(self, *args, **kwargs):
        flat = [t for t in args if isinstance(t, torch.Tensor)]
        sig = signature(flat)
        if sig != self._signature or kwargs:
            if not self.original:
                raise ValueError(f"mirage: inputs {sig} do not match the compiled {self._signature} "
                                 f"and no original module was given to load(..., module=)")
            self._warn_once("shape", f"inputs {sig} do not match the compiled {self._signature}",
                            "running the original module")
            return self.original[0](*args, **kwargs)
        mode = "kernels"
        if not all(t.is_cuda for t in flat):
            if self.original:  # bit for bit what the module computes
                self._warn_once("device", "inputs are not CUDA tensors", "running the original module")
                return self.original[0](*args, **kwargs)
            self._warn_once("device", "inputs are not CUDA tensors", "running the exported graph in PyTorch")
            mode = "torch"
        elif self._failed:
            mode = "torch"
        elif not any(s.bundle_path or s.kernel for s in self.program._segment_list()):
            self._warn_once("kernels", "no compiled kernels in this module", "running the exported graph in PyTorch")
            mode = "torch"
        for s in self.program._segment_list():
            s.mode = mode
        if mode == "torch":
            return self.program(*args)
        try:
            return self.program(*args)
        except Exception as e:
            self._failed = True
            self._warn_once("error", f"kernel execution failed ({type(e).__name__}: {e})",
                            "running the exported graph in PyTorch")
            self.program.set_mode("torch")
            return self.program(*args)


# -- save / load ---------------------------------------------------------------------------

def build_program(ep, fused_gm) -> DeployedProgram:
    """A `DeployedProgram` from an exported program and its fused graph module."""
    import torch.utils._pytree as pytree
    from torch.export.graph_signature import InputKind

    keys = []
    for s in ep.graph_signature.input_specs:
        if s.kind == InputKind.USER_INPUT:
            continue
        kind = {InputKind.PARAMETER: "parameter", InputKind.BUFFER: "buffer"}.get(s.kind, "constant")
        keys.append((kind, s.target))
    consts = {name: (v.detach().clone() if isinstance(v, torch.Tensor) else v)
              for name, v in ep.constants.items() if any(k == ("constant", name) for k in keys)}
    gm = torch.fx.GraphModule(fused_gm, fused_gm.graph)
    for m in gm.modules():
        if isinstance(m, torch.fx.GraphModule):
            # pickled graph modules are re-traced from their code on load with this tracer;
            # export's module-stack tracer cannot be rebuilt that way, the default one can
            m._tracer_cls, m._tracer_extras = None, {}
    return DeployedProgram(gm, keys, consts, pytree.treespec_dumps(ep.call_spec.out_spec))


def save(path: str, program: DeployedProgram, sig, *, state: dict | None, info: dict) -> str:
    """Write a deployable module directory (see the module docstring). `program`'s
    segments with a compiled `bundle` get it copied to `bundles/<name>`."""
    os.makedirs(os.path.join(path, "bundles"), exist_ok=True)
    segs = []
    for name, seg in program.segments().items():
        entry = {"segment": name, "graph": seg.graph.name if seg.graph is not None else None, "bundle": None}
        seg.bundle_name = None
        if seg.bundle is not None:
            seg.bundle_name = name
            seg.bundle.write(os.path.join(path, "bundles", name))
            entry["bundle"] = f"bundles/{name}"
            entry["graph_hash"] = getattr(getattr(seg.bundle, "lowered", None), "graph_hash", None)
            entry["kernels"] = len(getattr(getattr(seg.bundle, "lowered", None), "kernels", []) or [])
        segs.append(entry)
    torch.save({"format": FORMAT, "version": VERSION, "program": program,
                "signature": [(list(s), str(d)) for s, d in sig]}, os.path.join(path, "program.pt"))
    if state is not None:
        torch.save({k: v.detach().cpu() for k, v in state.items()}, os.path.join(path, "weights.pt"))
    man = {"format": FORMAT, "version": VERSION, "weights": state is not None,
           "signature": [{"shape": list(s), "dtype": str(d)} for s, d in sig], "segments": segs,
           "state": [{"kind": k, "name": n} for k, n in program.state_keys],
           "torch": torch.__version__, **info}
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump(man, f, indent=1, default=str)
        f.write("\n")
    return path


def load(path: str, module: Any = None, *, weights: bool = True) -> DeployedModule:
    """Load a directory written by `MirageModule.save`. `module`: the original module
    (or one with the same parameter names): its parameters and buffers are used, and it
    runs inputs of other shapes. Otherwise the saved `weights.pt` is used."""
    with open(os.path.join(path, "manifest.json")) as f:
        man = json.load(f)
    if man.get("format") != FORMAT or man.get("version") != VERSION:
        raise ValueError(f"{path}: not a {FORMAT} v{VERSION} directory")
    blob = torch.load(os.path.join(path, "program.pt"), weights_only=False)
    program: DeployedProgram = blob["program"]
    wpath = os.path.join(path, "weights.pt")
    state = torch.load(wpath, weights_only=True) if weights and os.path.exists(wpath) else None
    program.bind(module, state)
    for name, seg in program.segments().items():
        seg.mode = "torch"
        if seg.bundle_name:
            seg.bundle_path = os.path.join(path, "bundles", seg.bundle_name)
    sig = [(tuple(s), getattr(torch, d.replace("torch.", ""))) for s, d in blob["signature"]]
    return DeployedModule(program, sig, module, man)
