"""Cost models: what a strategy option costs a sub-layer in time and bytes (docs/design.md section 3)."""

from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.types import CollectiveCall, CostModel, FixedCost, SubLayerCost
from paradyse_lab.costmodel.uniform_plan import UniformPlanCost, uniform_plan_cost

__all__ = ["AnalyticCostModel", "CollectiveCall", "CostModel", "FixedCost", "SubLayerCost",
           "UniformPlanCost", "uniform_plan_cost"]
