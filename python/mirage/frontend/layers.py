"""Partitions cut at the boundaries of repeated layers.

A model's decoder layers (`model.layers.0`, `model.layers.1`, ...) are one computation
with other weights. Imported into one kn segment, they would be searched as one large
program; cut per layer, each layer is a segment of the same program (weights are kernel
inputs), which the search and the compiler do once (`mirage.torch._attach_kernels`).

A node's layer is the outermost module on its `nn_module_stack` (the export's record of
which module call made it) whose name ends in an index: an element of a `ModuleList` or
`Sequential`. A partition is cut into its nodes' layers only when two of them repeat one
computation (the same ops on the same shapes) in a module that is not one of PyTorch's
own (`torch.nn.Linear`s in a `Sequential` stay together, to be fused), and only when
every part is convex (no path leaves a part and comes back, so each can be one call).
"""
from __future__ import annotations


def layer_of(node) -> tuple | None:
    """(module path, module type) of the node's layer, or None."""
    for path, kind in (node.meta.get("nn_module_stack") or {}).values():
        if path and path.rsplit(".", 1)[-1].isdigit():
            return path, str(kind)
    return None


def _signature(nodes) -> tuple:
    """The computation of `nodes` (in program order): each op with its result's shape and dtype."""
    sig = []
    for n in nodes:
        v = n.meta.get("val")
        sig.append((str(n.target), tuple(getattr(v, "shape", ())), str(getattr(v, "dtype", ""))))
    return tuple(sig)


def _repeats(groups: dict) -> bool:
    seen = set()
    for key, nodes in groups.items():
        if key is None or key[1].startswith("torch.nn."):
            continue
        sig = (key[1], _signature(nodes))
        if sig in seen:
            return True
        seen.add(sig)
    return False


def _convex(group: set) -> bool:
    """No path from a node of `group` through nodes outside it reaches `group` again."""
    seen, stack = set(), [u for n in group for u in n.users if u not in group]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        for u in n.users:
            if u in group:
                return False
            stack.append(u)
    return True


def split_by_layer(partitions):
    """`partitions` (torch.fx `Partition`s) with each cut into its nodes' layers where
    that keeps every part convex."""
    from torch.fx.passes.infra.partitioner import Partition

    out = []
    for p in partitions:
        graph = next(iter(p.nodes)).graph
        pos = {n: k for k, n in enumerate(graph.nodes)}
        groups: dict = {}
        for n in sorted(p.nodes, key=pos.get):  # program order: equal layers give equal subgraphs
            groups.setdefault(layer_of(n), []).append(n)
        if len(groups) < 2 or not _repeats(groups) or not all(_convex(set(g)) for g in groups.values()):
            out.append(p)
            continue
        for g in sorted(groups.values(), key=lambda g: pos[g[0]]):
            out.append(Partition(nodes=g))
    for k, p in enumerate(out):
        p.id = k
    return out
