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
(position masks) once, at import.
"""
from __future__ import annotations

_ASSERTS = ("aten._assert_tensor_metadata.default",)
FOLD_MAX_BYTES = 1 << 24  # the largest value `fold_constants` stores in the graph


def _val(n):
    return n.meta.get("val") if hasattr(n, "meta") else None


def _full_slice(n) -> bool:
    x, out = _val(n.args[0]), _val(n)
    if x is None or out is None or tuple(x.shape) != tuple(out.shape) or x.dtype != out.dtype:
        return False
    step = n.args[4] if len(n.args) > 4 else n.kwargs.get("step", 1)
    return step == 1


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
            if isinstance(n.target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in n.target.tags:
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
