"""Seed candidates: fusions built without enumeration, which the search must beat.

A program without matmuls (an element-wise chain, a norm, a softmax) fuses into one
graph-defined kernel whose blocks each hold whole rows: the block graph is the
reference's ops in order, on tiles split over the grid only along dimension classes
that no op reduces. The enumeration reaches the same kernel when its limits allow, but
the block graph of a LayerNorm (14 ops) is beyond what it visits in minutes, while a
seed costs one build. Seeds are ranked, checked and formally verified like every other
candidate, so a seed that is wrong for some program is rejected, never returned.
"""
from __future__ import annotations

from ..core import ops as O
from .config import SearchConfig, dim_classes, schedules

# kernel ops whose block-level op has the same meaning on a tile holding whole rows
_ATTRS = {"reduction": ("dim",), "reduce_max": ("dim",), "constant": ("value", "shape"), "rms_norm": ("normalized_shape",)}


def _replayable(ref) -> bool:
    for op in ref.ops:
        d = O.OPS.get(op.kind)
        if d is None or "tb" not in d.levels or op.kind == "matmul":
            return False
        if set(op.attrs) - set(_ATTRS.get(op.kind, ())):
            return False  # attributes the block builder would not pass on
        if op.kind == "rms_norm" and tuple(op.attrs["normalized_shape"]) != tuple(op.inputs[0].shape[-1:]):
            return False
    return bool(ref.ops)


def row_seeds(ref, cfg: SearchConfig) -> list:
    """Plans of one graph-defined kernel replaying `ref`, one per schedule of `cfg` that
    keeps every reduced class whole and has no for-loop; [] when `ref` has ops the
    replay does not cover (matmuls, layout ops, ops with other attributes)."""
    if not _replayable(ref) or len(ref.outputs) > cfg.max_block_outputs:
        return []
    classes, reduced, batch = dim_classes(ref, also=ref.outputs)
    n = len(ref.inputs)
    in_classes, out_classes = classes[:n], classes[n:]
    tile = {id(t): k for k, t in enumerate(ref.inputs)}
    bops = []
    for op in ref.ops:
        bops.append((op.kind, tuple(tile[id(t)] for t in op.inputs), tuple(sorted(op.attrs.items()))))
        tile[id(op.outputs[0])] = n + len(bops) - 1
    plans = []
    for s in schedules([t.shape for t in ref.inputs], in_classes, reduced, cfg, loop_needed=False, batch=batch):
        if s.forloop != 1 or set(s.grid_classes) & reduced:
            continue
        omaps = []
        for t, oc in zip(ref.outputs, out_classes):
            omap = [-1, -1, -1]
            for gi, c in enumerate(s.grid_classes):
                if c not in oc:
                    break  # blocks would write the same output tile
                omap[gi] = oc.index(c)
            else:
                omaps.append((tile[id(t)], tuple(omap)))
                continue
            break
        if len(omaps) != len(ref.outputs):
            continue
        plan_op = ("graph_def", tuple(range(n)), s.grid, 1, cfg.reduction_dimx, s.maps, tuple(bops),
                   tuple(omaps))
        plans.append(((plan_op,), tuple(n + k for k in range(len(ref.outputs)))))
    return plans
