"""Policies: how a training run picks the plan for each step's sequence length (docs/design.md section 5).

The policy a name asks for (`PolicySpec`), built by `build_policy`:
- `static:NAME`: one strategy on every layer (the paper's baselines); `static:NAME+recompute` with
  activation recomputation on every layer.
- `restart:NAME`: static, but after an OOM it restarts (paying `restart_s`) with the next lighter strategy.
- `dynamic:SOLVER`: ParaDySe's switching: a solver per new (batch, length), the paper's cache by
  (batch, length) and its smoothing (keep the previous plan when, costed at the new length, it fits and is
  within gamma of the new best; the paper's Algorithm 1, step 5). Plans with its own cost model and options
  (its suffixes: recomputation, sub-layer decisions, the tiled MLP and activation offload).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.plan import Plan
from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.core.strategies import TWO_D, USABLE, StrategyOption, get_strategy
from paradyse_lab.core.strategies import options as make_options
from paradyse_lab.costmodel.head_loss import cheapest_head, head_cost_models
from paradyse_lab.costmodel.packed import PackedStep
from paradyse_lab.errors import UserInputError, unknown_name
from paradyse_lab.simulator import shared
from paradyse_lab.simulator.policy_spec import RECOMPUTE_SUFFIX, PolicySpec
from paradyse_lab.solvers.registry import STATIC_PREFIX, check_solver_name, get_solver

DEFAULT_GAMMA = 0.05
DEFAULT_RESTART_S = 31.0
"""docs/paper.md section 7: restarting a static framework after an OOM costs over 31 s."""


@dataclass(frozen=True)
class StepPlan:
    """The plan a policy chose for one step."""

    plan: Plan
    """One option per decision of the layer graph, and the graph's granularity (what the runtime runs)."""
    predicted_time_s: float
    """Time the policy's own cost model predicts."""
    feasible: bool
    """Whether the policy believes the plan fits."""
    solve_s: float
    """Wall time spent choosing (0 for a cache hit)."""
    cached: bool = False
    """Reused from the (batch, length) cache."""
    kept_previous: bool = False
    """Smoothing kept the previous step's plan."""
    head: str = "whole"
    """How the head and loss run (`HEAD_OPTIONS`): the runtime runs the tiled
    loss when 'tiled' (and a run whose embedding and head are stored by vocabulary rows plans 'vocab' alone:
    `vocab_storage`), and the simulator charges the plan with it."""

    def __post_init__(self):
        if not isinstance(self.plan, Plan):  # names would leave the granularity to be guessed downstream
            raise TypeError(f"StepPlan.plan must be a paradyse_lab.core.plan.Plan, got {type(self.plan).__name__}")


def keep_previous(problem: SearchProblem, previous_plan, best, gamma: float = DEFAULT_GAMMA) -> bool:
    """The paper's Algorithm 1, step 5 (smoothing): whether to keep the previous sequence's plan instead of `best`.

    True when the previous plan, costed on this problem, fits and is within `gamma` of the time of `best`
    (a solver's `Solution`).
    """
    if previous_plan is None or len(previous_plan) != problem.num_decisions:
        return False
    idx = problem.indices(list(previous_plan))
    return problem.is_feasible(idx) and problem.time_of(idx) <= (1 + gamma) * best.predicted_time_s


@dataclass
class DynamicPolicy:
    """A solver-driven policy with the paper's cache and smoothing."""

    solver_name: str
    """Registry name (`heuristic`, `dp`, `ilp`, ...)."""
    cost_model: object
    """The model the policy plans with (analytic, or a learned one)."""
    graph: LayerGraph
    """Decisions: blocks or sub-layers."""
    budget_bytes: int
    """Memory a plan may use."""
    strategies: tuple[str, ...] = USABLE
    """Strategies the policy may use (exclusions for Table 5)."""
    recompute: bool = False
    """Also consider each strategy with activation recomputation."""
    gamma: float = DEFAULT_GAMMA
    """Smoothing tolerance; None or 0 turns smoothing off."""
    smoothing: bool = True
    """Whether to apply the smoothing step."""
    name: str = ""
    """Shown in results; default dynamic:SOLVER."""
    tiled: bool = field(default=False, kw_only=True)
    """Also consider each option with the tiled MLP."""
    offload: bool = field(default=False, kw_only=True)
    """Also consider each option with activation offload."""
    _cache: dict = field(default_factory=dict, repr=False)
    _previous: tuple | None = field(default=None, repr=False)
    _solved: dict = field(default_factory=dict, repr=False)
    """(batch, length, head) -> (problem, solution) that `storage_head` solved at a run's longest step: the
    step's `decide` takes them instead of solving the same problem again."""

    def __post_init__(self):
        if self.solver_name.startswith(STATIC_PREFIX):
            _ = self.solver  # cheap (no compiled kernels), and building it checks the strategy's name
        else:
            check_solver_name(self.solver_name)
        self.name = self.name or f"dynamic:{self.solver_name}"
        if not self.strategies:
            raise UserInputError("a dynamic policy needs at least one strategy")
        self._head_models = head_cost_models(self.cost_model)

    @cached_property
    def solver(self):
        """The solver, built at the policy's first solve: building `dp` imports numba and loads its compiled
        kernels (`warm_up`, 1-2 CPU seconds), which a policy built only to check a run's
        settings never needs (`train --nproc N`'s launcher, `preflight`)."""
        return get_solver(self.solver_name)

    def problem(self, seq_len: int | PackedStep, batch: int, head: str = "whole") -> SearchProblem:
        """The search the policy solves at this length, or for this packed step, with the head option `head`."""
        opts = make_options(self.strategies, recompute=self.recompute, tiled=self.tiled, offload=self.offload)
        return shared.problem(self.graph, self._head_models[head], seq_len, batch, self.budget_bytes, opts)

    def decide(self, seq_len: int | PackedStep, batch: int) -> StepPlan:
        """Plan for this step (a length, or a packed step: cached per exact pack): cache, else solve over the head
        options (the fastest plan that fits: the tiled loss only where it is), then smoothing against the
        previous step's plan."""
        key = (batch, seq_len)
        if key in self._cache:
            sol, head = self._cache[key]
            self._previous = (sol.plan, head)
            return StepPlan(self._plan(sol), sol.predicted_time_s, sol.feasible, 0.0, cached=True, head=head)
        problems, solve_s = {}, 0.0

        def solve(head: str):
            nonlocal solve_s
            problems[head], found = self._solve(seq_len, batch, head)
            solve_s += found.solve_time_s  # a solution `storage_head` found: its solve, made for this step
            return found

        head, sol = cheapest_head(solve, tuple(self._head_models))
        problem = problems[head]
        kept = False
        smooth = sol.feasible and self.smoothing and self.gamma
        previous = self._previous[0] if self._previous and self._previous[1] == head else None
        if smooth and keep_previous(problem, previous, sol, self.gamma):
            idx = problem.indices(list(previous))
            sol = replace(sol, status="feasible", plan=tuple(previous), predicted_time_s=problem.time_of(idx),
                          peak_bytes=problem.peak_bytes(idx))
            kept = True
        self._cache[key] = (sol, head)
        self._previous = (sol.plan, head)
        return StepPlan(self._plan(sol), sol.predicted_time_s, sol.feasible, solve_s, kept_previous=kept,
                        head=head)

    def storage_head(self, seq_len: int, batch: int) -> str:
        """The head option of the fastest plan that fits at `seq_len` (a run's longest step), leaving the cache
        and the smoothing state as they are: `train` stores the embedding and head by it (vocabulary rows when
        'vocab') and then plans every step with `restrict_heads`."""
        def solve(head: str):
            self._solved[batch, seq_len, head] = self._solve(seq_len, batch, head)
            return self._solved[batch, seq_len, head][1]

        return cheapest_head(solve, tuple(self._head_models))[0]

    def _solve(self, seq_len: int | PackedStep, batch: int, head: str) -> tuple:
        """(problem, solution) at this length (or packed step) with the head option `head`: the pair
        `storage_head` solved (taken once: the longest step is decided once), else the problem solved now. A
        solver's answer depends on its problem alone, so the pair is the one solving again would give."""
        kept = self._solved.pop((batch, seq_len, head), None)
        if kept is not None:
            return kept
        problem = self.problem(seq_len, batch, head)
        return problem, self.solver.solve(problem)

    def restrict_heads(self, heads: tuple[str, ...]) -> None:
        """Plan later steps with these head options only (those the run's storage of the embedding and head can
        run); the cache is emptied, and `storage_head`'s solutions of the other heads are dropped."""
        self._head_models = {h: m for h, m in self._head_models.items() if h in heads}
        self._solved = {key: pair for key, pair in self._solved.items() if key[2] in heads}
        self._cache.clear()
        self._previous = None

    def fresh_copy(self) -> DynamicPolicy:
        """This policy with nothing remembered (an empty cache, no previous plan to smooth against): what plans
        a run's held-out evaluation steps without changing the plans of its training steps. It keeps the head
        options (`restrict_heads`: the run's storage of the embedding and head)."""
        copy = replace(self, _cache={}, _previous=None, _solved={})
        copy._head_models = dict(self._head_models)
        return copy

    def _plan(self, solution) -> Plan:
        """The solver's answer (option names of the search problem) as the plan the runtime runs."""
        return Plan.from_names(solution.plan, self.graph.granularity)


@dataclass
class StaticPolicy:
    """One strategy on every layer; with `restart`, OOM triggers a restart with a lighter strategy."""

    strategy: str
    """Catalog name of the current strategy."""
    recompute: bool = field(default=False, kw_only=True)
    """Recompute every layer's activations."""
    graph: LayerGraph
    """Decisions of a plan."""
    restart: bool = False
    """Restart with the next lighter strategy after an OOM instead of stopping."""
    restart_s: float = DEFAULT_RESTART_S
    """Seconds one restart costs."""
    name: str = ""
    """Shown in results."""

    def __post_init__(self):
        strategy = get_strategy(self.strategy)
        if not strategy.usable:
            raise UserInputError(f"strategy {self.strategy!r} is not usable: {strategy.unusable_reason}")
        self.name = self.name or f"{'restart' if self.restart else 'static'}:{self.option.name}"

    @property
    def option(self) -> StrategyOption:
        return StrategyOption(self.strategy, self.recompute)

    def fresh_copy(self) -> StaticPolicy:
        """As `DynamicPolicy.fresh_copy` (a static policy remembers nothing)."""
        return replace(self)

    def decide(self, seq_len: int, batch: int) -> StepPlan:
        plan = Plan((self.option,) * self.graph.num_decisions, self.graph.granularity)
        return StepPlan(plan, float("nan"), True, 0.0)


Policy = StaticPolicy | DynamicPolicy
"""What plans a run's steps: `decide(step, batch) -> StepPlan`."""


def build_policy(spec: PolicySpec, graph: LayerGraph, cost_model, budget_bytes: int, *, gamma: float = DEFAULT_GAMMA,
                 smoothing: bool = True, exclude: tuple[str, ...] = (),
                 restart_s: float = DEFAULT_RESTART_S) -> Policy:
    """The policy `spec` (read by `PolicySpec.parse`) over `graph` (built at `spec.granularity`), planning with
    `cost_model` under `budget_bytes`. `build_planner` is the one caller that matters."""
    if graph.granularity != spec.granularity:
        raise ValueError(f"policy {spec.name} decides per {spec.granularity}, the graph per {graph.granularity}")
    if spec.kind in ("static", "restart"):
        strategy = spec.arg.removesuffix(RECOMPUTE_SUFFIX)
        return StaticPolicy(strategy, graph, restart=spec.kind == "restart", restart_s=restart_s,
                            recompute=spec.arg != strategy, name=spec.name)
    offered = USABLE + (TWO_D if spec.two_d else ())
    for name in exclude:
        if name not in offered:
            raise unknown_name("excluded strategy", name, offered)
    strategies = tuple(s for s in offered if s not in exclude)
    return DynamicPolicy(spec.arg, cost_model, graph, budget_bytes, strategies, spec.recompute, gamma, smoothing,
                         name=spec.name, tiled=spec.tiled, offload=spec.offload)
