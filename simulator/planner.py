"""The planner of a run, built in one place: cluster -> memory budget -> cost model -> layer graph -> policy.

`simulate` and `experiment` (`run_one`), `train`,
`validate-run` all call `build_planner`, and the API's `plan_step`
(a solver without a policy) its steps 2-4, `planning_model`; none of them repeats the chain:

1. the policy string is read once (`PolicySpec.parse`: base policy, recomputation,
   granularity; the names of its strategy or solver checked);
2. the run's memory budget: `budget_bytes` (default the cluster's GPU memory less its reserve);
3. the cost model the policy plans with: a name (`paradyse_lab.costmodel.factory.COST_MODEL_NAMES`) built for
   the model on the cluster at world size `p`, or a model already built;
4. the budget a plan may use: `cost_model.budget_bytes(budget)` (the `CostModel` protocol: the budget itself,
   or a learned model's OOM threshold when lower);
5. the `LayerGraph` at the policy's granularity, and the policy over it.

`Planner.charger(truth)` is the simulator's `Charger` of the same graph and budget.
Example: `build_planner("dynamic:dp+recompute", get_model("gpt"), get_cluster("a100-80gb-x8"))`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paradyse_lab.cluster.spec import ClusterSpec
from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.strategies import TWO_D
from paradyse_lab.costmodel.factory import build_cost_model
from paradyse_lab.costmodel.types import CostModel
from paradyse_lab.simulator.engine import Charger
from paradyse_lab.simulator.policies import DEFAULT_GAMMA, DEFAULT_RESTART_S, Policy, build_policy
from paradyse_lab.simulator.policy_spec import PolicySpec


@dataclass(frozen=True)
class Planner:
    """What plans a run's steps, and what it was built from."""

    spec: PolicySpec
    """The policy as read from its name (and the run's --recompute / --granularity)."""
    graph: LayerGraph
    """The decisions of a plan: blocks or sub-layers (`spec.granularity`)."""
    cost_model: CostModel
    """The model the policy plans with."""
    budget_bytes: int
    """The run's memory budget per GPU (what a step is charged against)."""
    policy: Policy
    """Chooses each step's plan (`decide(step, batch)`)."""

    def charger(self, truth: CostModel | None = None, switch_memory: bool = False) -> Charger:
        """The simulator's charger of this run: `truth` (default the planning model) on the same graph and
        budget, with the policy's recomputation options."""
        return Charger(self.graph, truth if truth is not None else self.cost_model, self.budget_bytes,
                       recompute=self.spec.recompute, switch_memory=switch_memory, tiled=self.spec.tiled,
                       offload=self.spec.offload, two_d=self.spec.two_d or self.spec.arg.split("+")[0] in TWO_D)


@dataclass(frozen=True)
class PlanningModel:
    """The cost model a run plans with and its memory budget (steps 2-4 of the module docstring)."""

    cost_model: CostModel
    budget_bytes: int
    """The run's memory budget per GPU."""

    @property
    def plan_budget_bytes(self) -> int:
        """What a plan may use of the budget: `cost_model.budget_bytes(budget_bytes)` (a learned model of the
        paper's kind caps it at the largest peak it saw while profiling)."""
        return self.cost_model.budget_bytes(self.budget_bytes)


def planning_model(model: ModelSpec, cluster: ClusterSpec, *, cost_model: str | CostModel = "analytic",
                   p: int | None = None, profiles: str | Path | None = None,
                   budget_bytes: int | None = None) -> PlanningModel:
    """The cost model (a name, built at world size `p`, default the cluster's GPUs, and fitted on `profiles`
    when it learns; or a built model) and the budget (`budget_bytes`, default the cluster's GPU memory less its
    reserve) of `model` on `cluster`: what `build_planner` and the API's `plan_step` plan with."""
    if isinstance(cost_model, str):
        cost_model = build_cost_model(cost_model, model, cluster, p, profiles)
    return PlanningModel(cost_model, cluster.plan_budget_bytes if budget_bytes is None else int(budget_bytes))


def build_planner(policy: str, model: ModelSpec, cluster: ClusterSpec, *, cost_model: str | CostModel = "analytic",
                  p: int | None = None, profiles: str | Path | None = None, budget_bytes: int | None = None,
                  recompute: bool = False, granularity: str = "block", gamma: float = DEFAULT_GAMMA,
                  smoothing: bool = True, exclude: tuple[str, ...] = (),
                  restart_s: float = DEFAULT_RESTART_S) -> Planner:
    """The planner of `policy` for `model` on `cluster` (module docstring). `cost_model`: a name, built here at
    world size `p` (default the cluster's GPUs) and fitted on `profiles` when it learns, or a built model;
    `recompute` and `granularity` (command-line flags) add to the policy's suffixes."""
    spec = PolicySpec.parse(policy, recompute, granularity)
    planning = planning_model(model, cluster, cost_model=cost_model, p=p, profiles=profiles, budget_bytes=budget_bytes)
    graph = LayerGraph(model, spec.granularity)
    chosen = build_policy(spec, graph, planning.cost_model, planning.plan_budget_bytes, gamma=gamma,
                          smoothing=smoothing, exclude=exclude, restart_s=restart_s)
    return Planner(spec, graph, planning.cost_model, planning.budget_bytes, chosen)
