"""simulator/planner.py: the one chain cluster -> budget -> cost model -> layer graph -> policy."""

import ast
from pathlib import Path

import pytest
from source_trees import PACKAGES, parsed

from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.simulator.planner import build_planner
from paradyse_lab.simulator.policies import build_policy
from paradyse_lab.simulator.policy_spec import PolicySpec

ROOT = Path(__file__).resolve().parents[2]


def test_the_planner_reads_the_policy_once_and_plans_under_the_cost_models_budget():
    model, cluster = get_model("gpt"), get_cluster("a100-80gb-x8")
    planner = build_planner("dynamic:dp+sublayer", model, cluster, budget_bytes=10**10, recompute=True)
    assert planner.spec == PolicySpec("dynamic:dp", True, "sublayer")
    assert planner.graph.num_decisions == 2 * model.layers and planner.budget_bytes == 10**10
    assert planner.policy.budget_bytes == 10**10 and planner.policy.name == "dynamic:dp+recompute+sublayer"
    default = build_planner("static:metp", model, cluster, cost_model="paper")
    assert default.budget_bytes == cluster.plan_budget_bytes and default.cost_model.name == "paper"


class CappedCostModel:
    """The analytic model, but a plan may use at most 5 GB (as a learned model's OOM threshold caps it)."""

    def __init__(self, model, cluster):
        from paradyse_lab.costmodel.analytic import AnalyticCostModel

        self.inner = AnalyticCostModel(model, cluster)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def budget_bytes(self, budget: int) -> int:
        return min(budget, 5 * 10**9)


def test_the_cost_models_budget_caps_the_plans_not_the_runs_memory():
    model, cluster = get_model("gpt"), get_cluster("a100-80gb-x8")
    planner = build_planner("dynamic:heuristic", model, cluster, cost_model=CappedCostModel(model, cluster))
    assert planner.budget_bytes == cluster.plan_budget_bytes  # the run is charged against the whole budget
    assert planner.policy.budget_bytes == 5 * 10**9
    assert planner.charger().budget_bytes == cluster.plan_budget_bytes


def test_a_policy_is_built_over_a_graph_of_its_own_granularity():
    planner = build_planner("dynamic:dp", get_model("gpt2-tiny"), get_cluster("a100-80gb-x8"))
    with pytest.raises(ValueError, match="sublayer"):
        build_policy(PolicySpec.parse("dynamic:dp+sublayer"), planner.graph, planner.cost_model, 10**10)


def test_no_caller_asks_a_cost_model_whether_it_has_a_budget():
    """`budget_bytes` is part of the `CostModel` protocol: no `hasattr(cm, "budget_bytes")` in the packages."""
    found = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(parsed(path)):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr"
                        and any(isinstance(a, ast.Constant) and a.value == "budget_bytes" for a in node.args)):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found


def test_train_reads_its_memory_budget_in_gib():
    """One unit for memory options: --budget-gib 2 is 2 GiB (as --reserve-gb and every printed size; the
    deprecated --budget-gb is GB, tests/paradyse_lab/cli/test_planner_usability.py)."""
    from dataclasses import replace

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import plan_policy

    spec = replace(get_model("gpt2-tiny"), dtype="fp32")
    opts = TrainOptions(model="gpt2-tiny", dataset="uniform:8:16", policy="dynamic:dp", budget_gib=2.0)
    assert plan_policy(opts, spec, 2, quiet=True).budget_bytes == 2 * 2**30
