"""The μGraph optimizer (paper §6): layout selection (ILP, Z3), operator scheduling by
depth, shared-memory planning. Each can be switched off for the ablation of the
paper's Figure 12. Results are plain dataclasses (`plan.py`) read by the lowering.

    plan = optimize(tb_graph)            # BlockPlan: .layouts, .schedule, .smem
    plans = optimize_graph(kn_graph)     # {index of the graph_def op: BlockPlan}
"""
from .plan import (BlockPlan, LayoutPlan, SchedulePlan, SmemBuffer, SmemCapacityError, SmemPlan,
                   Stage, TileLayout, tile_names)
from .api import optimize, optimize_graph

__all__ = ["optimize", "optimize_graph", "BlockPlan", "LayoutPlan", "SchedulePlan", "SmemPlan",
           "SmemBuffer", "Stage", "TileLayout", "SmemCapacityError", "tile_names"]
