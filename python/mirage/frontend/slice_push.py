"""Slices of a projection's output moved onto its weights, before partitioning.

A fused projection is split along its output columns: GPT-2's `c_attn` into q, k and v,
Phi-3's `qkv_proj` and `gate_up_proj` (`split`, `chunk`, or `x[..., a:b]`). kn has no
slice: the import writes one as a product with a 0/1 selection matrix, a matmul as large
as the projection itself, and without our `split` decomposition the split stayed in
PyTorch, cutting the gated MLP apart. But a column slice of `x @ W + b` is
`x @ W[:, a:b] + b[a:b]`: here each last-dim slice of a value whose every user is such a
slice is moved up through the ops that keep that dim (a view that keeps it, `mm`,
`addmm`, `bmm`, element-wise ops such as a bias `add`, a dtype cast) onto the weight and the bias, and
the full product is no longer computed. A slice of a parameter then folds into its binding
(`torch_import.fold_state_layout`): the kernels receive the weight's columns, cut once; for
that, each user of a view of a parameter gets its own chain of views (`localize_state_views`),
so that a segment never receives a weight's view from another segment.
Exact: every rule computes the same elements.
"""
from __future__ import annotations

_VIEWS = ("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
_PRODUCTS = ("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
# torch-mlir's `addmm` is `mm(x, w) * 1 + b * 1`
_ELEMENTWISE = ("aten.add.Tensor", "aten.sub.Tensor", "aten.mul.Tensor", "aten.div.Tensor")


def _val(n):
    return n.meta.get("val") if hasattr(n, "meta") else None


def _last_slice(n):
    """(start, end) of `n` when it is a step-1 slice of its operand's last dim, else None."""
    if n.op != "call_function" or str(n.target) != "aten.slice.Tensor":
        return None
    x = _val(n.args[0])
    if x is None or x.dim() == 0:
        return None
    args = list(n.args) + [None] * (5 - len(n.args))
    dim = args[1] if args[1] is not None else n.kwargs.get("dim", 0)
    start = args[2] if args[2] is not None else n.kwargs.get("start", 0) or 0
    end = args[3] if args[3] is not None else n.kwargs.get("end", None)
    step = args[4] if args[4] is not None else n.kwargs.get("step", 1)
    size = x.shape[-1]
    if dim % x.dim() != x.dim() - 1 or step != 1 or not isinstance(start, int):
        return None
    end = size if end is None or end > size else end
    start, end = (start + size if start < 0 else start), (end + size if end < 0 else end)
    return (start, end) if 0 <= start < end <= size else None


class _Pusher:
    def __init__(self, gm):
        import torch

        self.g = gm.graph
        self.aten = torch.ops.aten

    def _node(self, before, target, args, val):
        with self.g.inserting_before(before):
            n = self.g.call_function(target, tuple(args))
        n.meta["val"] = val
        return n

    def slice(self, before, x, a: int, b: int):
        """A node equal to x[..., a:b], inserted before `before`."""
        v = _val(x)
        return self._node(before, self.aten.slice.Tensor, (x, v.dim() - 1, a, b, 1),
                          v.new_empty(tuple(v.shape[:-1]) + (b - a,)))

    def push(self, before, y, a: int, b: int, own: bool = False):
        """A node equal to y[..., a:b], inserted before `before`: computed from y's sliced
        operands where y's op keeps its last dim and the slice is y's only use (`own`: y's
        uses are all slices, each rewritten so), else a slice of y."""
        v = _val(y)
        t = str(y.target) if y.op == "call_function" else ""
        if v is None or not hasattr(v, "shape") or v.dim() == 0 or (not own and len(y.users) != 1):
            return self.slice(before, y, a, b)
        n = v.shape[-1]
        out = v.new_empty(tuple(v.shape[:-1]) + (b - a,))

        def keeps_last(x):  # an operand whose last dim is y's (not one broadcast along it)
            xv = _val(x) if hasattr(x, "meta") else None
            return hasattr(xv, "shape") and xv.dim() > 0 and xv.shape[-1] == n

        if t in _VIEWS and keeps_last(y.args[0]):
            return self._node(before, y.target, (self.push(before, y.args[0], a, b), list(out.shape)), out)
        if t in _PRODUCTS and keeps_last(y.args[1]) and _val(y.args[1]).dim() >= 2:
            x, w = y.args[:2]
            return self._node(before, y.target, (x, self.slice(before, w, a, b)), out)
        if t == "aten.addmm.default" and not y.kwargs and len(y.args) == 3:
            c, x, w = y.args
            c = self.push(before, c, a, b) if keeps_last(c) else c
            return self._node(before, y.target, (c, x, self.slice(before, w, a, b)), out)
        if t == "prims.convert_element_type.default" and keeps_last(y.args[0]):
            # (a half-precision `addmm` exported on the CPU computes in f32 between casts)
            return self._node(before, y.target, (self.push(before, y.args[0], a, b),) + tuple(y.args[1:]), out)
        if t in _ELEMENTWISE and len(y.args) == 2 and not y.kwargs:
            # an operand broadcast along the last dim (a scalar, size 1) is taken whole
            ins = tuple(self.push(before, x, a, b) if keeps_last(x) else x for x in y.args)
            return self._node(before, y.target, ins, out)
        return self.slice(before, y, a, b)


def push_slices(gm) -> list[str]:
    """Move the last-dim slices of `gm` (in place) onto the weights of the projections they
    cut (module docstring). Returns one note when any moved."""
    p = _Pusher(gm)
    moved = 0
    for y in list(gm.graph.nodes):
        if y.op != "call_function" or not y.users:
            continue
        cuts = [(s, _last_slice(s)) for s in list(y.users)]
        if not all(c for _, c in cuts):
            continue
        for s, (a, b) in cuts:
            new = p.push(s, y, a, b, own=True)
            if str(new.target) == "aten.slice.Tensor" and new.args[0] is y:  # y's op keeps nothing: as it was
                gm.graph.erase_node(new)
                continue
            s.replace_all_uses_with(new)
            gm.graph.erase_node(s)
            moved += 1
    if not moved:
        return []
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    return [f"{moved} slice(s) of a projection's output moved onto its weight"]


_STATE_VIEWS = _VIEWS + ("aten.permute.default", "aten.t.default", "aten.transpose.int", "aten.slice.Tensor")


def localize_state_views(gm, state: set) -> list[str]:
    """Give each user of a view of module state (a weight's `permute`, its column slices:
    placeholders named in `state`) its own copy of the chain of views. Shared, the chain
    sat in one segment and reached the others as an activation, which their bindings cannot
    fold: Phi-3's fp16 k and v projections kept two 2304 x 768 selection matrices."""
    derived = set()
    for n in gm.graph.nodes:
        if n.op == "placeholder" and n.name in state:
            derived.add(n)
        elif n.op == "call_function" and str(n.target) in _STATE_VIEWS and n.args and n.args[0] in derived:
            derived.add(n)
    cloned = 0
    for n in reversed(list(gm.graph.nodes)):  # users first: a chain is cloned from its end
        if n.op != "call_function" or n not in derived:
            continue
        for u in list(n.users)[1:]:
            with gm.graph.inserting_before(u):
                c = gm.graph.node_copy(n)
            c.meta = dict(n.meta)
            u.replace_input_with(n, c)
            cloned += 1
    if not cloned:
        return []
    gm.graph.lint()
    gm.recompile()
    return [f"{cloned} view(s) of module state copied for their users (each segment folds its own)"]
