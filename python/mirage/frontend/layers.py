"""Partitions cut at the boundaries of repeated layers.

A model's decoder layers (`model.layers.0`, `model.layers.1`, ...) are one computation
with other weights. Imported into one kn segment, they would be searched as one large
program; cut per layer, each layer is a segment of the same program (weights are kernel
inputs), which the search and the compiler do once (`mirage.torch._attach_kernels`).

A node's layer is the outermost module on its `nn_module_stack` (the export's record of
which module call made it) whose name ends in an index: an element of a `ModuleList` or
`Sequential`. A partition is cut into its nodes' layers when every part is convex (no
path leaves a part and comes back, so each can be one call); otherwise it is kept whole.
"""
from __future__ import annotations


def layer_of(node) -> str | None:
    for path, _ in (node.meta.get("nn_module_stack") or {}).values():
        if path and path.rsplit(".", 1)[-1].isdigit():
            return path
    return None


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
        groups: dict = {}
        for n in p.nodes:
            groups.setdefault(layer_of(n), set()).add(n)
        if len(groups) < 2 or not all(_convex(g) for g in groups.values()):
            out.append(p)
            continue
        graph = next(iter(p.nodes)).graph
        pos = {n: k for k, n in enumerate(graph.nodes)}
        # in program order, so that equal layers give equal subgraphs (inputs in one order)
        for g in sorted(groups.values(), key=lambda g: min(pos[n] for n in g)):
            out.append(Partition(nodes=sorted(g, key=pos.get)))
    for k, p in enumerate(out):
        p.id = k
    return out
