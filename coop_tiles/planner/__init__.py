"""The planner: ThreadData layouts, CUB algorithm choices, TempStorage carve plan and barriers."""

from .carve import CarvePlan, Region, StorageNeed, carve
from .layout import BLOCKED, STRIPED, CollectiveChoice, LayoutPlan, TileLayout, plan_layouts
from .plan import Plan, finish_plan

__all__ = [
    "BLOCKED",
    "STRIPED",
    "CarvePlan",
    "CollectiveChoice",
    "LayoutPlan",
    "Plan",
    "Region",
    "StorageNeed",
    "TileLayout",
    "carve",
    "finish_plan",
    "plan_layouts",
]
