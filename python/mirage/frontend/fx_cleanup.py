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
"""
from __future__ import annotations

_ASSERTS = ("aten._assert_tensor_metadata.default",)


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
