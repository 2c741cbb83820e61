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
   `mirage.mlir.tosa.convert_function`. If the TOSA holds an op kn cannot express, the whole
   partition stays in torch (reported with the TOSA op and reason): nothing is dropped.
4. The partitioned program is the export's graph module in which every converted
   partition is a `DeployedSegment` (frontend/deploy.py): it runs the kn graph (reference interpreter, or
   compiled kernels on CUDA once attached) or, by default on CPU, the original ATen
   subgraph.
"""
from __future__ import annotations

import operator
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..core.graph import KNGraph
from ..core.mlir_text import print_module
from ..mlir import tosa as T
from .fx_cleanup import STATE_VALUES, cleanup, fold_constants, hoist_state_values
from .layers import split_by_layer
from .deploy import apply_transforms_np, transformed_shape
from .reshape_sink import sink_reshapes
from .slice_push import localize_state_views, push_slices

# ATen ops (after torch-mlir's decompositions) whose TOSA lowering converts to kn.
SUPPORTED = {
    "aten.add.Tensor", "aten.add.Scalar", "aten.sub.Tensor", "aten.sub.Scalar", "aten.rsub.Scalar",
    "aten.mul.Tensor", "aten.mul.Scalar", "aten.div.Tensor", "aten.div.Scalar", "aten.neg.default",
    "aten.reciprocal.default", "aten.exp.default", "aten.sqrt.default", "aten.rsqrt.default",
    "aten.sigmoid.default", "aten.silu.default", "aten.gelu.default", "aten.relu.default",
    "aten.tanh.default", "aten.pow.Tensor_Scalar", "aten.square.default",
    "aten.sum.dim_IntList", "aten.mean.dim", "aten.amax.default", "aten._softmax.default", "aten.clamp.default",
    "aten.mm.default", "aten.bmm.default", "aten.addmm.default", "aten.matmul.default",
    "aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.permute.default",
    "aten.transpose.int", "aten.t.default", "aten.expand.default", "aten.clone.default",
    "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.alias.default",
    "aten.detach.default", "aten.cat.default", "aten._to_copy.default", "aten.slice.Tensor",
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
    if target == "aten.slice.Tensor" and (node.args[4] if len(node.args) > 4 else 1) != 1:
        return f"slice with step {node.args[4]} (taken with step 1 only)"
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
    value: Any = None  # lifted constants: the numpy value (with `transforms` already applied)
    # layout transforms folded out of the graph (`fold_state_layout`), applied in order to
    # the state tensor once (not per call) before it is passed to the kernels:
    # ("transpose", permutation) | ("reshape", shape) | ("narrow", (start, count))
    transforms: tuple = ()

    def __str__(self) -> str:
        t = "".join(f".{k}({','.join(map(str, a))})" for k, a in self.transforms)
        return f"{self.kind}:{self.name}{t}"


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
    folded: list = field(default_factory=list)  # layout transforms folded into bindings


@dataclass
class ImportResult:
    graphs: list  # KNGraphs, one per converted segment
    segments: list  # SegmentInfo
    offloaded: list  # Offload
    program: Any  # the partitioned callable (nn.Module)
    exported: Any  # torch.export.ExportedProgram (decomposed)
    module: Any = None
    elided: list = field(default_factory=list)  # fp32 upcast sandwiches imported at half precision
    # before partitioning: no-op nodes removed (fx_cleanup), slices moved onto weights (slice_push)
    rewritten: list = field(default_factory=list)

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
        state, values computed at import (`fold_constants`) or from buffers (`hoist_state_values`) or
        user inputs."""
        import torch

        seg = [s for s in self.segments if s.graph is not None][segment]
        hoisted = {n.name: n for n in self.program.gm.graph.nodes if n.op == "call_module" and n.target == STATE_VALUES}
        user = {spec.arg.name: a for spec, a in zip(_user_specs(self.exported), _flat_args(self.exported, args))}
        out = []
        for b in seg.bindings:
            if b.kind == "input":
                out.append(_np(user[b.name]))
            elif b.kind in ("parameter", "buffer", "constant"):
                out.append(apply_transforms_np(_np(self.program.state_value(b)), b.transforms)
                           if b.value is None else b.value)
            elif isinstance(getattr(self.program.gm, b.name, None), torch.Tensor):  # computed at import
                out.append(_np(getattr(self.program.gm, b.name)))
            elif b.name in hoisted:  # computed from buffers (`hoist_state_values`)
                k, *ins = hoisted[b.name].args
                vals = [self.program.state_value(_binding_of(self.exported, p)) for p in ins]
                out.append(_np(self.program.gm.get_submodule(STATE_VALUES)(k, *vals)))
            else:
                raise ValueError(f"graph input {b.name} is an intermediate value computed in torch")
        return out

    def evaluate(self, *args) -> list[np.ndarray]:
        """The module's outputs (flattened, in the module's order) computed by the reference
        interpreter in float64 from the kn graph of a module imported whole: the check that
        the import computes what the module computes."""
        g = self.graph
        (seg,) = self.program.segments.values()
        (call,) = _partition_calls(self.program.gm)
        outs = g.evaluate(self.graph_inputs(*args))
        got = []
        for a in next(n for n in self.program.gm.graph.nodes if n.op == "output").args[0]:
            if a is call:
                idx = 0
            elif getattr(a, "target", None) is operator.getitem and a.args[0] is call:
                idx = a.args[1]
            else:
                raise ValueError(f"output {a} is not computed by the kn graph")
            m = seg.out_map[idx]
            if m[0] != "out":
                raise ValueError(f"output {a} is not computed by the kn graph ({m[0]})")
            got.append(outs[m[1]])
        return got

    def report(self) -> str:
        lines = []
        ng = len(self.graphs)
        lines.append(f"import: {ng} kn segment(s), {len(self.offloaded)} op(s) left to PyTorch")
        for e in self.elided:
            lines.append(f"  not exact: {e}")
        for r in self.rewritten:
            lines.append(f"  rewritten: {r}")
        for s in self.segments:
            if s.graph is not None:
                kinds: dict = {}
                for op in s.graph.ops:
                    kinds[op.kind] = kinds.get(op.kind, 0) + 1
                ins = ", ".join(str(b) for b in s.bindings)
                lines.append(f"  kn segment @{s.graph.name} ({s.name}): {len(s.aten_ops)} ATen ops -> "
                             f"{len(s.graph.ops)} kn ops " +
                             "{" + ", ".join(f"{k}: {v}" for k, v in kinds.items()) + "}")
                lines.append(f"    inputs: {ins}")
                if s.rewrites:
                    lines.append(f"    rewrites: {', '.join(sorted(set(s.rewrites)))}")
                for f in s.folded:
                    lines.append(f"    folded: {f}")
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


# -- folding layout transforms of module state ---------------------------------------------

_LAYOUT = ("transpose", "reshape")
_STATE = ("parameter", "buffer", "constant")


def _column_range(sel) -> tuple | None:
    """(start, count) when `sel` is a 0/1 matrix that selects the rows start..start+count-1
    in order (`x @ sel` is the column slice x[:, start:start+count]), else None."""
    if sel is None or np.ndim(sel) != 2 or sel.shape[1] == 0:
        return None
    start = int(np.argmax(sel[:, 0]))
    n, m = sel.shape
    want = np.zeros((n, m))
    if start + m > n:
        return None
    want[np.arange(start, start + m), np.arange(m)] = 1.0
    return (start, m) if np.array_equal(sel, want) else None


def fold_state_layout(graph: KNGraph, bindings: list, arg_map: list, weight_inputs=frozenset()):
    """Fold `transpose`/`reshape` chains applied to graph inputs bound to module state
    (parameters, buffers, constants) into the binding: `nn.Linear`'s `W.T` and the
    `[1, d]` reshape of an RMSNorm gain become inputs of the transformed shape whose
    binding records the transforms (applied once, when the weights are bound: see
    `deploy.DeployedSegment`), instead of a kernel per call. An input also used
    untransformed keeps its plain binding beside the transformed one. Returns
    `(graph, bindings, arg_map, folded)` (the inputs unchanged when nothing folds);
    `folded` lists one line per folded chain. `weight_inputs`: names of user inputs that
    are parameters too (`torch.compile` passes a module's parameters as graph inputs);
    their transforms are cached the same way (per tensor and in-place version)."""
    def state(b):
        return b.kind in _STATE or (b.kind == "input" and b.name in weight_inputs)

    virt = {}  # id(old tensor) -> (old input index, transforms)
    for k, t in enumerate(graph.inputs):
        if state(bindings[k]):
            virt[id(t)] = (k, ())
    if not virt:
        return graph, bindings, arg_map, []
    out_ids = {id(o) for o in graph.outputs}
    needed: list = []  # keys (old index, transforms), first use order

    def need(key):
        if key not in needed:
            needed.append(key)

    lifted = {id(t): bindings[k].value for k, t in enumerate(graph.inputs) if bindings[k].value is not None}
    folded_ops = set()
    for op in graph.ops:
        src = virt.get(id(op.inputs[0])) if op.inputs else None
        if src is None or id(op.outputs[0]) in out_ids:
            tr = None
        elif op.kind in _LAYOUT:
            tr = (op.kind, tuple(op.attrs["permutation"] if op.kind == "transpose" else op.attrs["shape"]))
        else:  # a column slice: a product with a lifted selection matrix (`tosa.Converter._slice`)
            cols = _column_range(lifted.get(id(op.inputs[1]))) if op.kind == "matmul" else None
            tr = None if cols is None else ("narrow", cols)
        if tr is not None:
            virt[id(op.outputs[0])] = (src[0], src[1] + (tr,))
            folded_ops.add(id(op))
            continue
        for t in op.inputs:
            if id(t) in virt:
                need(virt[id(t)])
    for o in graph.outputs:
        if id(o) in virt:
            need(virt[id(o)])
    # keep inputs not bound to state, and unused state inputs (not lifted constants: a selection
    # matrix whose slice was folded into a weight's binding is dropped)
    for k, t in enumerate(graph.inputs):
        if not state(bindings[k]) or (bindings[k].value is None and not any(key[0] == k for key in needed)):
            need((k, ()))
    if not folded_ops:
        return graph, bindings, arg_map, []
    needed.sort(key=lambda key: (key[0], len(key[1])))
    g = KNGraph(graph.name)
    g.smem_capacity = graph.smem_capacity
    new_of: dict = {}
    new_b, new_map, notes = [], [], []
    for k, tr in needed:
        old = graph.inputs[k]
        shape = tuple(old.shape)
        for kind, arg in tr:
            shape = transformed_shape(shape, kind, arg)
        nt = g.new_input(shape, None if tr else graph.strides.get(k), old.dtype)
        new_of[(k, tr)] = nt
        b = bindings[k]
        a = arg_map[k]
        if b.value is not None:  # a lifted constant: transform its value now
            v = apply_transforms_np(np.asarray(b.value), tr)
            new_b.append(Binding(b.kind, b.name, v, ()))
            new_map.append(("const", v) if a[0] == "const" else a)
        else:
            new_b.append(Binding(b.kind, b.name, None, tuple(b.transforms) + tr))
            new_map.append(a if not tr else (a[0], a[1], tuple(a[2] if len(a) > 2 else ()) + tr))
        if tr:
            notes.append(f"{new_b[-1]}: {len(tr)} layout op(s) folded into the binding")
    env = {}
    for k, t in enumerate(graph.inputs):
        if (k, ()) in new_of:
            env[id(t)] = new_of[(k, ())]
    for op in graph.ops:
        if id(op) in folded_ops:
            key = virt[id(op.outputs[0])]
            if key in new_of:
                env[id(op.outputs[0])] = new_of[key]
            continue
        ins = []
        for t in op.inputs:
            if id(t) not in env:
                env[id(t)] = new_of[virt[id(t)]]
            ins.append(env[id(t)])
        env[id(op.outputs[0])] = g._op(op.kind, ins, op.outputs[0].dtype, **op.attrs)
    for o in graph.outputs:
        g.mark_output(env[id(o)] if id(o) in env else new_of[virt[id(o)]])
    return g, new_b, new_map, notes


# -- fp16 -> fp32 -> op -> fp16 sandwiches --------------------------------------------------

# ops an upcast region may hold: element-wise ops, reductions, views, and matmuls (the
# decomposition of a half `nn.Linear` with bias upcasts its operands around `mm`; a kn
# matmul at half accumulates at f32 and rounds its result once)
_ELIDABLE = SUPPORTED - {"aten._to_copy.default", "aten.cat.default"}
_CASTS = ("prims.convert_element_type.default", "aten._to_copy.default")


def _cast_dtypes(node):
    """(source, destination) dtypes of a cast node, else None."""
    import torch

    if node.op != "call_function" or str(node.target) not in _CASTS or not node.all_input_nodes:
        return None
    src, dst = node.all_input_nodes[0].meta.get("val"), node.meta.get("val")
    if not isinstance(src, torch.Tensor) or not isinstance(dst, torch.Tensor) or src.dtype == dst.dtype:
        return None
    if str(node.target) == "aten._to_copy.default" and set(node.kwargs) - {"dtype"}:
        return None  # also changes device or layout
    return src.dtype, dst.dtype


def find_upcast_sandwiches(gm) -> list:
    """Regions `half -> float32 -> ops -> half` of an ATen graph: each a dict with the
    upcast nodes (`ups`), the float32 ops (`ops`), the downcasts (`downs`) and the half
    dtype. A region is the connected set of float32 ops reached from an upcast through
    uses and operands; it qualifies when every op in it is in `_ELIDABLE`, every tensor
    operand of its ops is in the region, an upcast from the same half type, a tensor of
    that type (PyTorch promotes it: `f32 * f16` is f32) or a float32 tensor of the graph
    module that the half type holds exactly (`consts`: GPT-2's folded mask of 0 and -inf,
    read at the half type once elided), and every use of its values is in the region or a
    downcast back to that type."""
    import torch

    half = (torch.float16, torch.bfloat16)
    seen, regions = set(), []
    for start in gm.graph.nodes:
        cd = _cast_dtypes(start)
        if cd is None or cd[0] not in half or cd[1] != torch.float32 or start in seen:
            continue
        low = cd[0]
        ups, ops, downs, consts, ok = {start}, set(), set(), set(), True
        work = [start]
        while work and ok:
            n = work.pop()
            # an op's operands too: a bias upcast meets the matmul of two other upcasts at an add
            near = list(n.users) + (n.all_input_nodes if n in ops else [])
            for u in near:
                if u in ups or u in ops or u in downs:
                    continue
                ud = _cast_dtypes(u)
                if ud == (torch.float32, low) and u in n.users:
                    downs.add(u)
                    continue
                if ud == (low, torch.float32):
                    ups.add(u)
                    work.append(u)
                    continue
                v = u.meta.get("val")
                if u not in n.users and isinstance(v, torch.Tensor) and v.dtype == low:
                    continue  # an operand promoted implicitly (a half LayerNorm's weight times f32)
                if u not in n.users and _exact_in(gm, u, low):
                    consts.add(u)  # a float32 constant the half type holds exactly (a folded mask of 0 and -inf)
                    continue
                if u.op != "call_function" or str(u.target) not in _ELIDABLE or \
                        not isinstance(v, torch.Tensor) or v.dtype != torch.float32 or unsupported_reason(u):
                    ok = False
                    break
                ops.add(u)
                work.append(u)
        seen |= ups
        if ok and ops and downs:
            regions.append({"ups": ups, "ops": ops, "downs": downs, "consts": consts, "dtype": low})
    return regions


def _exact_in(gm, node, low) -> bool:
    """Whether `node` is a float32 tensor of the graph module (`get_attr`) whose every value
    `low` holds exactly (infinities included)."""
    import torch

    if node.op != "get_attr":
        return False
    v = getattr(gm, node.target, None)
    return isinstance(v, torch.Tensor) and v.dtype == torch.float32 and torch.equal(v.to(low).float(), v)


def elide_fp32_upcasts(gm) -> list:
    """Rewrite each `find_upcast_sandwiches` region in place to compute at its half
    type: the casts are removed and the float32 ops' metadata says the half type.
    Changes rounding (opt-in: `allow_fp32_upcast_elision`). Returns one line per region."""
    import torch

    notes = []
    for r in find_upcast_sandwiches(gm):
        low = r["dtype"]
        for n in r["ops"]:
            v = n.meta["val"]
            n.meta["val"] = v.to(low)
            n.meta.pop("tensor_meta", None)
            if n.kwargs.get("dtype") is not None:
                n.kwargs = {**n.kwargs, "dtype": low}
        for d in r["downs"]:
            d.replace_all_uses_with(d.all_input_nodes[0])
            gm.graph.erase_node(d)
        for u in r["ups"]:
            u.replace_all_uses_with(u.all_input_nodes[0])
            gm.graph.erase_node(u)
        for c in r["consts"]:  # the region reads the constant's copy at the half type
            name = f"{c.target}_{str(low).replace('torch.', '')}"
            if not hasattr(gm, name):
                gm.register_buffer(name, getattr(gm, c.target).to(low))
            with gm.graph.inserting_before(c):
                h = gm.graph.get_attr(name)
            h.meta = {k: x for k, x in c.meta.items() if k != "tensor_meta"}  # (torch-mlir reads its dtype)
            if "val" in c.meta:
                h.meta["val"] = c.meta["val"].to(low)
            for n in r["ops"]:
                n.replace_input_with(c, h)
            if not c.users:
                gm.graph.erase_node(c)
        for n in [n for n in r["ops"] if str(n.target) == "aten._softmax.default"]:
            _expand_softmax(gm, n)
        f32, half = torch.finfo(torch.float32), torch.finfo(low)
        bounds = {f32.max: half.max, -f32.max: -half.max, f32.tiny: half.tiny}
        for n in [n for n in r["ops"] if str(n.target) == "aten.clamp.default"]:
            # the safe softmax's bounds (`_decompositions`) at the half type: f32's round to inf there
            n.args = tuple(bounds.get(a, a) if isinstance(a, float) else a for a in n.args)
        ops = sorted(str(n.target).replace("aten.", "").replace(".default", "") for n in r["ops"])
        notes.append(f"{len(r['ups'])} upcast(s) {str(low).replace('torch.', '')}->float32 and "
                     f"{len(r['downs'])} downcast(s) elided around {', '.join(ops)} (computed at "
                     f"{str(low).replace('torch.', '')}; allow_fp32_upcast_elision=True)")
    if notes:
        gm.graph.lint()
        gm.recompile()
    return notes


def _expand_softmax(gm, node) -> None:
    """Replace `_softmax(x, dim)` by max, sub, exp, sum and div at x's type: torch-mlir
    lowers a half-precision softmax through f32 casts of its own, which kn cannot take."""
    import torch

    aten = torch.ops.aten
    x, dim = node.args[0], node.args[1]
    v = node.meta["val"]
    red = list(v.shape)
    red[dim] = 1

    def make(target, args, shape):
        n = gm.graph.call_function(target, args)
        n.meta["val"] = v.new_empty(shape)  # a fake tensor, as the export's
        return n

    with gm.graph.inserting_before(node):
        m = make(aten.amax.default, (x, [dim], True), red)
        e = make(aten.exp.default, (make(aten.sub.Tensor, (x, m), v.shape),), v.shape)
        out = make(aten.div.Tensor, (e, make(aten.sum.dim_IntList, (e, [dim], True), red)), v.shape)
    node.replace_all_uses_with(out)
    gm.graph.erase_node(node)


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
    """torch.export (non-strict) + torch-mlir's decompositions and ours (`_decompositions`)."""
    import torch

    mod = _as_module(module_or_fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ep = torch.export.export(mod, tuple(example_inputs), strict=False)
        except Exception as e:
            raise ValueError(_export_failure(mod, e)) from e
        ep = ep.run_decompositions(_decompositions())
    return ep


def _export_failure(mod, e: Exception) -> str:
    """What to tell a user whose module `torch.export` refused, with the way out where the
    cause is a common one."""
    import re

    name = type(mod).__name__
    if name == "_Fn":  # a function wrapped by `_as_module`
        name = getattr(mod.fn, "__name__", "the function")
    first = (str(e).strip().splitlines() or [""])[0].split(". ")[0]  # torch's first sentence says it
    msg = f"torch.export could not export {name} at the example inputs: {type(e).__name__}: {first}"
    out = re.search(r"Found <class '([\w.]+)'> in output", str(e))
    if out:
        cls = out.group(1)
        msg += (f"\n  the module returns a {cls.rsplit('.', 1)[-1]} object, which torch.export cannot take "
                f"apart: its forward must return tensors (or tuples, lists, dicts of them)")
        if "cache" in cls.lower():
            msg += ("; a transformers model returns its KV cache unless `model.config.use_cache = False` "
                    "(or use torch.compile(model, backend='mirage'), which takes the graph apart itself)")
    return msg


def _decompositions() -> dict:
    """torch-mlir's decomposition table, plus `var_mean.correction` and `var.correction` in
    ops kn has: the table turns `nn.LayerNorm` (`native_layer_norm`) into the first and
    leaves it whole, which kept every LayerNorm of a GPT-2, BERT or ViT block in PyTorch,
    cutting the block's kn program in pieces (torch's own decompositions give `prims` ops);
    and `split` / `split_with_sizes` as slices (torch's: `as_strided`), which `slice_push`
    moves onto the weights of the projection they split."""
    import torch
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    aten = torch.ops.aten

    def var_mean(x, dim=None, *, correction=None, keepdim=False):
        dims = list(range(x.dim())) if dim is None else [d % x.dim() for d in dim]
        n = int(np.prod([x.shape[d] for d in dims]))
        mean = aten.mean.dim(x, dims, True)
        dev = aten.sub.Tensor(x, mean)
        var = aten.sum.dim_IntList(aten.mul.Tensor(dev, dev), dims, keepdim)
        var = aten.div.Scalar(var, max(0, n - (1 if correction is None else correction)))
        return var, (mean if keepdim else aten.view.default(mean, list(var.shape)))

    def split_with_sizes(x, sizes, dim=0):
        starts = np.cumsum([0] + list(sizes))
        return [aten.slice.Tensor(x, dim, int(a), int(b)) for a, b in zip(starts[:-1], starts[1:])]

    def split(x, size, dim=0):
        n = x.shape[dim]
        return split_with_sizes(x, [min(size, n - a) for a in range(0, n, size)], dim)

    def safe_softmax(x, dim, dtype=None):
        # SDPA's softmax: torch writes `where(all(x == -inf), 0, softmax(x))`, whose boolean
        # ops kn lacks (they cut every attention in two segments, at f32). The same values
        # with clamps: a row of -inf alone (fully masked) has its max clamped to a finite
        # value, so every exp is 0, and its sum clamped above 0, so 0 / tiny = 0; any other
        # row's max is kept (finite; finfo.min masks too) and its sum is at least 1. Differs
        # only on a row holding +inf (NaN there in torch; here inf / big and 0).
        x = x if dtype is None else aten._to_copy.default(x, dtype=dtype)
        big, tiny = torch.finfo(x.dtype).max, torch.finfo(x.dtype).tiny
        m = aten.clamp.default(aten.amax.default(x, [dim], True), -big, big)
        e = aten.exp.default(aten.sub.Tensor(x, m))
        return aten.div.Tensor(e, aten.clamp.default(aten.sum.dim_IntList(e, [dim], True), tiny, big))

    table = dict(get_decomposition_table())
    table[aten._safe_softmax.default] = safe_softmax
    table[aten.var_mean.correction] = var_mean
    table[aten.var.correction] = lambda *a, **k: var_mean(*a, **k)[0]
    table[aten.split_with_sizes.default] = split_with_sizes  # torch's: as_strided
    table[aten.split.Tensor] = split
    return table


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


def import_module(module_or_fn, example_inputs: Sequence, *, name: str = "main", fold_layout: bool = True,
                  allow_fp32_upcast_elision: bool = False) -> ImportResult:
    """Import a PyTorch module (or function) at the shapes and dtypes of
    `example_inputs` into kn graphs; see the module docstring for the pipeline.

    `fold_layout` (default True): transposes and reshapes of parameters, buffers and
    constants become binding transforms applied once (`fold_state_layout`), not kernels.
    `allow_fp32_upcast_elision` (default False): import a float16/bfloat16 -> float32 ->
    element-wise ops -> float16/bfloat16 sandwich (PyTorch's SiLU, softmax, norms in
    half precision) as the ops at the half type (`elide_fp32_upcasts`). This changes the
    rounding (the ops then round to the half type), so it is opt-in; without it the casts
    stay in PyTorch and the report says so."""
    import torch
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch_mlir import fx as tmfx

    module = _as_module(module_or_fn)
    ep = export(module, example_inputs)
    gm = ep.graph_module
    weight_inputs = {spec.arg.name for spec, a in zip(_user_specs(ep), _flat_args(ep, example_inputs))
                     if isinstance(a, torch.nn.Parameter)}
    state = {spec.arg.name for spec in ep.graph_signature.input_specs
             if spec.kind.name in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR") and hasattr(spec.arg, "name")}
    buffers = {spec.arg.name for spec in ep.graph_signature.input_specs if spec.kind.name == "BUFFER"}
    # (buffer values first: computed by PyTorch as the module computes them, casts included)
    rewritten = cleanup(gm) + fold_constants(gm) + push_slices(gm) + localize_state_views(gm, state) \
        + hoist_state_values(gm, buffers)
    elided, sandwich = [], {}
    if allow_fp32_upcast_elision:
        elided = elide_fp32_upcasts(gm)
    else:
        for r in find_upcast_sandwiches(gm):
            for c in r["ups"] | r["downs"]:
                sandwich[c.name] = r["dtype"]
    offloaded = []
    for n in gm.graph.nodes:
        if n.op == "call_function":
            r = unsupported_reason(n)
            if r is not None:
                if n.name in sandwich:
                    r = (f"{r}; a cast of a {str(sandwich[n.name]).replace('torch.', '')} -> float32 -> "
                         f"element-wise -> {str(sandwich[n.name]).replace('torch.', '')} sandwich "
                         f"(allow_fp32_upcast_elision=True imports the ops at "
                         f"{str(sandwich[n.name]).replace('torch.', '')}: not bit-exact)")
                offloaded.append(Offload(str(n.target), n.name, r))
    part = CapabilityBasedPartitioner(gm, _Support().impl, allows_single_node_partition=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fused = part.fuse_partitions(split_by_layer(part.propose_partitions()))
    segments, infos, graphs = {}, [], []
    k = 0
    for node in _partition_calls(fused):
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
        seg.graph.name = f"{name}_{k}" if k or len(_partition_calls(fused)) > 1 else name
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
        folded = []
        if fold_layout:
            g2, bindings, arg_map, folded = fold_state_layout(seg.graph, bindings, arg_map, weight_inputs)
            seg.graph = g2  # same outputs in the same order
        seg.graph, moved = sink_reshapes(seg.graph)  # same inputs and outputs, in the same order
        if moved:
            info.rewrites = list(info.rewrites) + [f"{moved} reshape(s) moved past element-wise ops and cancelled"]
        info.folded = folded
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
    res = ImportResult(graphs, infos, offloaded, program, ep, module)
    res.elided = elided
    res.rewritten = rewritten
    return res


def _partition_calls(gm) -> list:
    """The nodes of `gm` that call a partition (not the state values, `hoist_state_values`)."""
    return [n for n in gm.graph.nodes if n.op == "call_module" and n.target != STATE_VALUES]
