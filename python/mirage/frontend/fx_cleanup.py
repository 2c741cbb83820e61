"""No-op ATen nodes removed from an exported graph before it is partitioned.

They compute nothing, but each is a node kn cannot take, and one left in the graph cuts
the kn program around it (a decoder layer became two segments around its
`_assert_tensor_metadata` checks). Removed:

- `aten._assert_tensor_metadata`: a check of a tensor's dtype/device/layout that
  `torch.export` already made at the example inputs; the partitioned program only runs
  at the exported shapes and dtypes (`MirageModule` and the `torch.compile` backend fall
  back to PyTorch for anything else).
- operands of `aten.cat` with size 0 along the concatenated dim (an empty KV cache's
  first update), and a `cat` of one remaining operand;
- `aten.slice.Tensor` that keeps the whole dim (`x[:, :, None]` indexing emits them).

And `fold_constants` computes the values that depend on no input, parameter or buffer
(position masks) once, at import; `hoist_state_values` those that depend on module buffers
alone (rotary tables) once per version of those buffers, at run time.
"""
from __future__ import annotations

_ASSERTS = ("aten._assert_tensor_metadata.default",)
FOLD_MAX_BYTES = 1 << 24  # the largest value `fold_constants` stores in the graph
STATE_VALUES = "_state_values"  # the submodule of `hoist_state_values`


def _val(n):
    return n.meta.get("val") if hasattr(n, "meta") else None


def _full_slice(n) -> bool:
    x, out = _val(n.args[0]), _val(n)
    if x is None or out is None or tuple(x.shape) != tuple(out.shape) or x.dtype != out.dtype:
        return False
    step = n.args[4] if len(n.args) > 4 else n.kwargs.get("step", 1)
    return step == 1


def _random(n) -> bool:
    """Whether FX node `n` draws random numbers (a new value each call: never computed once)."""
    import torch

    return isinstance(n.target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in n.target.tags


def cleanup(gm) -> list[str]:
    """Remove the no-op nodes of `gm` (in place). Returns one line per kind removed."""
    counts = {"assert": 0, "cat": 0, "slice": 0}
    for n in list(gm.graph.nodes):
        if n.op != "call_function":
            continue
        t = str(n.target)
        if t in _ASSERTS and not n.users:
            gm.graph.erase_node(n)
            counts["assert"] += 1
        elif t == "aten.slice.Tensor" and _full_slice(n):
            n.replace_all_uses_with(n.args[0])
            gm.graph.erase_node(n)
            counts["slice"] += 1
        elif t == "aten.cat.default":
            xs = list(n.args[0])
            out = _val(n)
            if out is None or out.numel() == 0:
                continue
            # an empty operand adds nothing: size 0 along the dim, or the legacy 1-D empty tensor
            keep = [x for x in xs if _val(x) is None or _val(x).numel() != 0]
            if len(keep) == len(xs) or not keep:
                continue
            counts["cat"] += len(xs) - len(keep)
            if len(keep) == 1 and _val(keep[0]) is not None and _val(keep[0]).dtype == out.dtype:
                n.replace_all_uses_with(keep[0])
                gm.graph.erase_node(n)
            else:
                n.args = (keep,) + tuple(n.args[1:])
    if not any(counts.values()):
        return []
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    notes = []
    if counts["assert"]:
        notes.append(f"{counts['assert']} no-op _assert_tensor_metadata check(s) removed (checked by the export)")
    if counts["slice"]:
        notes.append(f"{counts['slice']} slice(s) of a whole dim removed")
    if counts["cat"]:
        notes.append(f"{counts['cat']} empty operand(s) of cat removed")
    return notes


def fold_constants(gm) -> list[str]:
    """Compute once, at import, the ops of `gm` that read no placeholder (no user input,
    parameter, buffer or lifted constant: values they create, arange, full, ...) and store
    each value the rest of the graph reads as a tensor of the graph module (in place). An
    attention mask built from positions (GPT-2: arange, le, logical_and, where; 13 ops) is
    a constant of the exported shapes; kn has no integer ops, so it stayed in PyTorch, one
    kernel an op on every call. (Lifted constants keep their own path: bindings whose
    layout ops fold, `fold_state_layout`.) Random ops and values over FOLD_MAX_BYTES are
    left. Returns one line, or none."""
    import torch
    from torch.fx.node import map_arg

    vals: dict = {}
    for n in gm.graph.nodes:
        if n.op == "call_function" and all(a in vals for a in n.all_input_nodes):
            if _random(n):
                continue
            try:
                vals[n] = n.target(*map_arg(n.args, vals.__getitem__), **map_arg(n.kwargs, vals.__getitem__))
            except Exception:  # not computable here (a device the export assumed): left as it is
                continue
    folded = 0
    for n, v in vals.items():
        if not isinstance(v, torch.Tensor) or v.numel() * v.element_size() > FOLD_MAX_BYTES:
            continue
        if all(u in vals for u in n.users):
            continue  # only read by other folded ops
        name = f"_folded_{n.name}"
        gm.register_buffer(name, v.detach().clone())
        with gm.graph.inserting_before(n):
            attr = gm.graph.get_attr(name)
        attr.meta = dict(n.meta)
        n.replace_all_uses_with(attr)
        folded += 1
    if not folded:
        return []
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    return [f"{folded} value(s) that read no input computed at import (no PyTorch ops for them per call)"]


def hoist_state_values(gm, buffers: set) -> list[str]:
    """Move the ops of `gm` that read module buffers alone (placeholders named in
    `buffers`, values `fold_constants` stored) into one `deploy.StateValues` submodule,
    which runs them when those buffers change instead of on every call (in place).
    Phi-3's and Mistral's rotary embedding (cos and sin of their `inv_freq` buffer times
    the positions, 8 ATen ops) stayed in PyTorch, one kernel an op per call, and cut the
    layer into two kn segments. Not parameters: their layout ops fold into the kernels'
    bindings (`torch_import.fold_state_layout`) and their casts into the half-precision
    regions (`elide_fp32_upcasts`); hoisted, GPT-2's sliced and cast weights became
    activations and the block 9 segments. Views of a buffer itself are left for the same
    reason; random ops are left. Returns one line, or none."""
    import torch

    from .deploy import StateValues
    from .slice_push import _STATE_VIEWS

    only: dict = {}  # node -> whether it reads buffers (and constants) alone
    view = set()  # views of a buffer (through views)
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            only[n] = n.name in buffers
        elif n.op == "get_attr":
            only[n] = True
        elif n.op == "call_function":
            only[n] = bool(n.all_input_nodes) and not _random(n) and all(only[a] for a in n.all_input_nodes)
            if only[n] and str(n.target) in _STATE_VIEWS and (n.args[0].op in ("placeholder", "get_attr")
                                                             or n.args[0] in view):
                view.add(n)
        else:
            only[n] = False
    hoist = [n for n in gm.graph.nodes if n.op == "call_function" and only[n] and n not in view]
    hoisted = set(hoist)
    outs = [n for n in hoist if any(u not in hoisted for u in n.users)]
    if not outs:
        return []
    # the prelude: the hoisted ops and the buffer views they read, over the buffers they read
    need, stack = set(), list(outs)
    while stack:
        n = stack.pop()
        if n not in need:
            need.add(n)
            stack += n.all_input_nodes
    g = torch.fx.Graph()
    env: dict = {}
    ins = [n for n in gm.graph.nodes if n in need and n.op == "placeholder"]
    for n in ins:
        env[n] = g.placeholder(n.name)
        env[n].meta = dict(n.meta)
    for n in gm.graph.nodes:
        if n in need and n.op != "placeholder":
            env[n] = g.node_copy(n, env.__getitem__)
    g.output(tuple(env[o] for o in outs))
    prelude = torch.fx.GraphModule(gm, g)
    gm.add_submodule(STATE_VALUES, StateValues(prelude))
    first = next(n for n in gm.graph.nodes if n.op != "placeholder")
    for k, o in enumerate(outs):
        with gm.graph.inserting_before(first):
            new = gm.graph.create_node("call_module", STATE_VALUES, (k, *ins), name=f"state_{o.name}")
        new.meta = dict(o.meta)
        o.replace_all_uses_with(new, delete_user_cb=lambda u: u not in hoisted)
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    kinds = sorted({str(n.target).split(".")[1] for n in hoist if str(n.target).startswith("aten.")})
    return [f"{len(hoist)} op(s) that read module buffers alone ({', '.join(kinds)}) run once, again when the "
            f"buffers change (no PyTorch ops for them per call)"]
