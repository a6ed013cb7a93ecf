"""Cost models: what a strategy option costs a sub-layer in time and bytes (DESIGN.md section 3)."""

from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.summary import UniformPlanCost, uniform_plan_cost
from paradyse_lab.costmodel.types import CollectiveCall, CostModel, FixedCost, SubLayerCost

__all__ = ["AnalyticCostModel", "CollectiveCall", "CostModel", "FixedCost", "SubLayerCost",
           "UniformPlanCost", "uniform_plan_cost"]
