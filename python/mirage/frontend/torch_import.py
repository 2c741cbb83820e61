"""PyTorch -> `kn`: export, partition, import through torch-mlir's TOSA output.

Pipeline (`import_module`):

1. `torch.export` the module (non-strict) and apply torch-mlir's decomposition table:
   an ATen graph whose parameters, buffers and tensor constants are graph inputs
   (placeholders) — so weights become kernel inputs, never baked constants, and the
   export's graph signature gives the mapping back to the module's state.
2. Partition the ATen graph: each node is *supported* when its op is in `SUPPORTED`
   (ops whose TOSA lowering `convert-tosa-to-kn` expresses) and its tensors have a kn
   element type; maximal convex groups of supported nodes become partitions
   (`torch.fx`'s `CapabilityBasedPartitioner`); the rest stay torch nodes.
3. Each partition is imported with `torch_mlir.fx.stateless_fx_import(...,
   output_type="tosa")`, parsed with the `mlir` bindings and converted by
   `tosa_to_kn.convert_function`. If the TOSA holds an op kn cannot express, the whole
   partition stays in torch (reported with the TOSA op and reason): nothing is dropped.
4. The partitioned program is the export's graph module in which every converted
   partition is a `DeployedSegment` (frontend/deploy.py): it runs the kn graph (reference interpreter, or
   compiled kernels on CUDA once attached) or, by default on CPU, the original ATen
   subgraph.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..core.graph import KNGraph
from ..core.mlir_text import print_module
from . import tosa_to_kn as T

# ATen ops (after torch-mlir's decompositions) whose TOSA lowering converts to kn.
SUPPORTED = {
    "aten.add.Tensor", "aten.add.Scalar", "aten.sub.Tensor", "aten.sub.Scalar", "aten.rsub.Scalar",
    "aten.mul.Tensor", "aten.mul.Scalar", "aten.div.Tensor", "aten.div.Scalar", "aten.neg.default",
    "aten.reciprocal.default", "aten.exp.default", "aten.sqrt.default", "aten.rsqrt.default",
    "aten.sigmoid.default", "aten.silu.default", "aten.gelu.default", "aten.relu.default",
    "aten.tanh.default", "aten.pow.Tensor_Scalar", "aten.square.default",
    "aten.sum.dim_IntList", "aten.mean.dim", "aten.amax.default", "aten._softmax.default",
    "aten.mm.default", "aten.bmm.default", "aten.addmm.default", "aten.matmul.default",
    "aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.permute.default",
    "aten.transpose.int", "aten.t.default", "aten.expand.default", "aten.clone.default",
    "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.alias.default",
    "aten.detach.default", "aten.cat.default", "aten._to_copy.default",
}
FLOAT_DTYPES = {"torch.float16", "torch.bfloat16", "torch.float32"}
_POW_OK = {2, 0.5, -0.5, 1, -1, 3, 4, -2}


def _tensors(v):
    import torch

    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in _tensors(x)]
    return []


def unsupported_reason(node) -> str | None:
    """Why an FX node cannot go to kn, or None if it can."""
    target = str(node.target)
    if target not in SUPPORTED:
        return "no kn equivalent" if target.startswith("aten.") else f"not an ATen op ({target})"
    vals = _tensors(node.meta.get("val"))
    for a in node.all_input_nodes:
        vals += _tensors(a.meta.get("val"))
    if not vals:
        return "no tensor metadata"
    for v in vals:
        if v.dim() == 0:
            return "rank-0 tensor (kn tensors have rank >= 1)"
        if str(v.dtype) not in FLOAT_DTYPES:
            return f"element type {v.dtype} (kn has float16, bfloat16, float32)"
    if target == "aten.pow.Tensor_Scalar" and node.args[1] not in _POW_OK:
        return f"pow by {node.args[1]} (kn has square, sqrt, rsqrt and products)"
    if target == "aten._to_copy.default":
        src, dst = node.all_input_nodes[0].meta["val"], node.meta["val"]
        if src.dtype != dst.dtype:
            return f"changes the element type {src.dtype} -> {dst.dtype} (kn has no cast)"
    return None


# -- results ----------------------------------------------------------------------------

@dataclass
class Binding:
    """Where a kn graph input comes from."""

    kind: str  # parameter | buffer | constant | input | value (an intermediate of another segment)
    name: str  # FQN, user-input name, or FX node name
    value: Any = None  # lifted constants: the numpy value


@dataclass
class Offload:
    """An op that stays in PyTorch."""

    op: str
    node: str
    reason: str


@dataclass
class SegmentInfo:
    name: str  # the fused submodule's name
    graph: KNGraph | None  # None: the partition stays in torch
    aten_ops: list  # ops of the partition
    bindings: list  # one Binding per graph input
    reason: str = ""  # why it stayed in torch
    rewrites: list = field(default_factory=list)
    tosa: str = ""


@dataclass
class ImportResult:
    graphs: list  # KNGraphs, one per converted segment
    segments: list  # SegmentInfo
    offloaded: list  # Offload
    program: Any  # the partitioned callable (nn.Module)
    exported: Any  # torch.export.ExportedProgram (decomposed)
    module: Any = None

    @property
    def fully_converted(self) -> bool:
        return not self.offloaded and len(self.graphs) == 1

    @property
    def graph(self) -> KNGraph:
        """The kn graph of a module imported whole (raises otherwise, saying why)."""
        if not self.fully_converted:
            raise ValueError("the module is not one kn graph:\n" + self.report())
        return self.graphs[0]

    @property
    def bindings(self) -> list:
        return next(s.bindings for s in self.segments if s.graph is not None)

    def to_mlir(self) -> str:
        return print_module(self.graphs) if self.graphs else "module {\n}\n"

    def __str__(self) -> str:
        return self.to_mlir()

    def graph_inputs(self, *args, segment: int = 0) -> list[np.ndarray]:
        """The numpy inputs of kn graph `segment` for user inputs `args` (parameters and
        buffers read from the module now). Only for segments whose inputs are all module
        state or user inputs."""
        seg = [s for s in self.segments if s.graph is not None][segment]
        user = {spec.arg.name: a for spec, a in zip(_user_specs(self.exported), _flat_args(self.exported, args))}
        out = []
        for b in seg.bindings:
            if b.kind == "input":
                out.append(_np(user[b.name]))
            elif b.kind in ("parameter", "buffer", "constant"):
                out.append(_np(self.program.state_value(b)) if b.value is None else b.value)
            else:
                raise ValueError(f"graph input {b.name} is an intermediate value computed in torch")
        return out

    def report(self) -> str:
        lines = []
        ng = len(self.graphs)
        lines.append(f"import: {ng} kn segment(s), {len(self.offloaded)} op(s) left to PyTorch")
        for s in self.segments:
            if s.graph is not None:
                kinds: dict = {}
                for op in s.graph.ops:
                    kinds[op.kind] = kinds.get(op.kind, 0) + 1
                ins = ", ".join(f"{b.kind}:{b.name}" for b in s.bindings)
                lines.append(f"  kn segment @{s.graph.name} ({s.name}): {len(s.aten_ops)} ATen ops -> "
                             f"{len(s.graph.ops)} kn ops " +
                             "{" + ", ".join(f"{k}: {v}" for k, v in kinds.items()) + "}")
                lines.append(f"    inputs: {ins}")
                if s.rewrites:
                    lines.append(f"    rewrites: {', '.join(sorted(set(s.rewrites)))}")
            else:
                lines.append(f"  torch segment {s.name}: {len(s.aten_ops)} ATen ops stay in PyTorch: {s.reason}")
        for o in self.offloaded:
            lines.append(f"  offloaded {o.op} ({o.node}): {o.reason}")
        return "\n".join(lines)


def _np(t) -> np.ndarray:
    return t.detach().to("cpu").double().numpy() if hasattr(t, "detach") else np.asarray(t, dtype=np.float64)


def _user_specs(ep):
    from torch.export.graph_signature import InputKind

    return [s for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]


def _flat_args(ep, args, kwargs=None):
    import torch.utils._pytree as pytree

    flat, _ = pytree.tree_flatten((tuple(args), dict(kwargs or {})))
    return flat


# -- export ------------------------------------------------------------------------------

def _as_module(module_or_fn):
    import torch

    if isinstance(module_or_fn, torch.nn.Module):
        return module_or_fn

    class _Fn(torch.nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, *args):
            return self.fn(*args)

    return _Fn(module_or_fn)


def export(module_or_fn, example_inputs: Sequence):
    """torch.export (non-strict) + torch-mlir's decompositions."""
    import torch
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    mod = _as_module(module_or_fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(mod, tuple(example_inputs), strict=False)
        ep = ep.run_decompositions(get_decomposition_table())
    return ep


# -- segments at run time ----------------------------------------------------------------

def _make_segment_module(graph: KNGraph, fallback, arg_map, out_map, single: bool, out_dtypes):
    """The module that replaces a converted partition (`deploy.DeployedSegment`: runs
    the ATen subgraph, the kn graph in the interpreter, or compiled kernels)."""
    from .deploy import DeployedSegment

    return DeployedSegment(graph, fallback, arg_map, out_map, single, out_dtypes)


class PartitionedProgram:
    """Mixin marker; see `_make_program`."""


def _make_program(ep, fused_gm, segments: dict, module):
    import torch
    import torch.utils._pytree as pytree
    from torch.export.graph_signature import InputKind, OutputKind

    specs = list(ep.graph_signature.input_specs)
    n_user_out = sum(1 for s in ep.graph_signature.output_specs if s.kind == OutputKind.USER_OUTPUT)
    if n_user_out != len(ep.graph_signature.output_specs):
        raise NotImplementedError("the module mutates its buffers or inputs; only pure forward passes are supported")

    class Program(torch.nn.Module):
        """The partitioned module: kn segments (`DeployedSegment`) and PyTorch for the rest.
        Call it like the original module."""

        def __init__(self):
            super().__init__()
            self.gm = fused_gm
            self.segments = segments
            self.source = [module]  # not a submodule: its parameters stay the user's

        def state_value(self, b: Binding):
            m = self.source[0]
            if b.kind == "constant":
                return ep.constants[b.name]
            try:
                return m.get_parameter(b.name) if b.kind == "parameter" else m.get_buffer(b.name)
            except AttributeError:
                return ep.state_dict[b.name]

        def set_mode(self, mode: str) -> None:
            """'torch' (default), 'interpreter' (float64 reference) or 'kernels'."""
            for s in self.segments.values():
                s.mode = mode

        def forward(self, *args, **kwargs):
            flat = _flat_args(ep, args, kwargs)
            state = []
            for s in specs:
                if s.kind == InputKind.USER_INPUT:
                    continue
                kind = {InputKind.PARAMETER: "parameter", InputKind.BUFFER: "buffer"}.get(s.kind, "constant")
                state.append(self.state_value(Binding(kind, s.target)))
            outs = self.gm(*state, *flat)
            return pytree.tree_unflatten(list(outs), ep.call_spec.out_spec)

    return Program()


# -- import ------------------------------------------------------------------------------

class _Support:
    def __init__(self):
        from torch.fx.passes.operator_support import OperatorSupportBase

        class S(OperatorSupportBase):
            def is_node_supported(self, submodules, node) -> bool:
                return node.op == "call_function" and unsupported_reason(node) is None

        self.impl = S()


def _binding_of(ep, node) -> Binding:
    from torch.export.graph_signature import InputKind

    if node.op == "placeholder":
        for s in ep.graph_signature.input_specs:
            if s.arg.name == node.name:
                kind = {InputKind.PARAMETER: "parameter", InputKind.BUFFER: "buffer",
                        InputKind.USER_INPUT: "input"}.get(s.kind, "constant")
                return Binding(kind, s.target if kind != "input" else s.arg.name)
    return Binding("value", node.name)


def import_module(module_or_fn, example_inputs: Sequence, *, name: str = "main") -> ImportResult:
    """Import a PyTorch module (or function) at the shapes and dtypes of
    `example_inputs` into kn graphs; see the module docstring for the pipeline."""
    import torch
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch_mlir import fx as tmfx

    module = _as_module(module_or_fn)
    ep = export(module, example_inputs)
    gm = ep.graph_module
    offloaded = []
    for n in gm.graph.nodes:
        if n.op == "call_function":
            r = unsupported_reason(n)
            if r is not None:
                offloaded.append(Offload(str(n.target), n.name, r))
    part = CapabilityBasedPartitioner(gm, _Support().impl, allows_single_node_partition=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fused = part.partition_and_fuse()
    segments, infos, graphs = {}, [], []
    k = 0
    for node in list(fused.graph.nodes):
        if node.op != "call_module":
            continue
        sub = fused.get_submodule(node.target)
        aten = [str(n.target) for n in sub.graph.nodes if n.op == "call_function"]
        info = SegmentInfo(node.target, None, aten, [])
        infos.append(info)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tm = tmfx.stateless_fx_import(sub, output_type="tosa", model_name=f"{name}_{k}")
            info.tosa = str(tm)
            mod = T.parse_tosa(info.tosa)
            fr = T.convert_function(next(op for op in mod.body.operations if op.operation.name == "func.func"),
                                    lift_constants=True)
        except Exception as e:  # torch-mlir cannot lower it, or the TOSA is not what we read
            info.reason = f"TOSA import failed: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
            offloaded += [Offload(a, node.target, info.reason) for a in aten]
            continue
        info.rewrites = fr.rewrites
        kn_segs = [s for s in fr.segments if s.graph is not None]
        if fr.unsupported or len(kn_segs) != 1:
            why = "; ".join(f"{u.op}: {u.reason}" for u in fr.unsupported) or "nothing to compute in kn"
            info.reason = f"its TOSA is not one kn graph ({why})"
            offloaded += [Offload(a, node.target, info.reason) for a in aten]
            continue
        seg = kn_segs[0]
        seg.graph.name = f"{name}_{k}" if k or _count_modules(fused) > 1 else name
        k += 1
        placeholders = [p for p in sub.graph.nodes if p.op == "placeholder"]
        outer_args = list(node.args)
        arg_map, bindings = [], []
        for i in seg.inputs:
            if i.kind == "arg":
                arg_map.append(("arg", i.index))
                bindings.append(_binding_of(ep, outer_args[i.index]))
            else:  # lifted constant
                arg_map.append(("const", i.value))
                bindings.append(Binding("constant", f"const{len(bindings)}", i.value))
        out_node = next(n for n in sub.graph.nodes if n.op == "output")
        outs_fx = out_node.args[0]
        single = not isinstance(outs_fx, (tuple, list))
        outs_fx = [outs_fx] if single else list(outs_fx)
        out_map, out_dtypes = [], []
        for r, o in zip(fr.results, outs_fx):
            out_dtypes.append(o.meta["val"].dtype)
            if any(r is x for x in seg.outputs):
                out_map.append(("out", next(j for j, x in enumerate(seg.outputs) if x is r)))
            elif r.kind == "arg":
                out_map.append(("arg", r.index))
            elif r.kind == "constant":
                out_map.append(("const", r.attrs["value"], r.shape))
            else:
                raise AssertionError("unmapped result")
        info.graph, info.bindings = seg.graph, bindings
        graphs.append(seg.graph)
        segm = _make_segment_module(seg.graph, sub, arg_map, out_map, single, out_dtypes)
        setattr(fused, node.target, segm)
        segments[node.target] = segm
    fused.recompile()
    # nodes outside every partition are the ones `unsupported_reason` rejected (listed above)
    program = _make_program(ep, fused, segments, module)
    return ImportResult(graphs, infos, offloaded, program, ep, module)


def _count_modules(gm) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_module")
