"""Steps of a global batch over groups of GPUs: the item times per group size, the synchronisation across
groups, the group policies, and the `GroupedStep` the runtime runs (a run of such steps:
`grouped_runs`).

Model states (how the simulator counts them; docs/design.md section 5): one layout over the whole world, as the
runtime keeps them (docs/grouped_steps.md): every rank holds its 1/W shard of every sharded
matrix with its gradient, fp32 master and Adam moments (16 B/param over W), so a change of group sizes between
steps moves no state. A step with groups smaller than the world first all-gathers each group's shards of every
layer (its 16-bit weights, 1/g per rank, resident for the step beside their gradients) over the W / g_min ranks
holding one world block each, and after the backward reduce-scatters the gradients back into the world layout;
the replicated tensors' gradients are all-reduced over the same ranks. The cost model at p = g counts 16 B/param
over g for the sharded matrices, so a group's budget is corrected by the difference (`budget_for`); the gather's
buffers, held when no activation is, must fit beside the states (`state_phase_fits`); the collectives are priced
with the cluster model, hierarchical across nodes (`sync_s`). With one group of all GPUs (ParaDySe) there is
nothing to gather.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from paradyse_lab.cluster.spec import ClusterSpec
from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.plan import Plan
from paradyse_lab.core.policy_contract import HeadPolicy
from paradyse_lab.core.step_groups import (
    GROUP_POLICIES,
    PER_LAYER_GROUP_POLICIES,
    ROUND_GROUP_POLICIES,
    GroupedStep,
    StepGroup,
)
from paradyse_lab.core.strategies import layout_unit, pad_to_unit
from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.factory import build_cost_model
from paradyse_lab.costmodel.grouped_states import (
    data_parallel_width,
    grouped_state_kept_bytes,
    reduce_phase_bytes,
    sharded_total,
)
from paradyse_lab.costmodel.packed import PackedStep
from paradyse_lab.errors import UserInputError, unknown_name
from paradyse_lab.simulator import shared
from paradyse_lab.simulator.group_dynamic_cp import smallest_fit_partition
from paradyse_lab.simulator.group_exact import plan_exact
from paradyse_lab.simulator.group_greedy import lpt, plan_greedy
from paradyse_lab.simulator.group_problem import GroupChoice, ItemTimes, Partition, reassess
from paradyse_lab.simulator.planner import Planner, build_planner

RING_POLICY = "static:megatron_cz"
"""The context-parallel baselines' strategy (Megatron's scheduler and `smallest-fit`): ring attention (context
parallelism), ZeRO states."""


def power_sizes(world: int) -> tuple[int, ...]:
    """Group sizes 1, 2, 4, ... up to `world`."""
    return tuple(1 << k for k in range(world.bit_length()) if 1 << k <= world)


def padded_item(step: int | PackedStep, g: int) -> int | PackedStep:
    """An item as a group of g trains it: a sequence padded to the layout unit 2g, a pack's documents each padded
    to 2g (or to the pack's own unit when larger: a run pads to its world's unit, a multiple of 2g)."""
    if isinstance(step, PackedStep):
        return PackedStep(step.documents, max(step.unit, layout_unit(g)))
    return pad_to_unit(step, layout_unit(g))


def optimizer_share(model: ModelSpec) -> int:
    """Bytes per parameter of the states kept over the world: all but the 16-bit (or fp32) weights and gradients."""
    return F.model_state_bytes_per_param(model) - 2 * model.dtype_bytes


def sharded_layer_params(model: ModelSpec, g: int) -> int:
    """Parameters of every layer's matrices a rank of a group of g holds (its 1/g shards)."""
    return model.layers * sum(-(-F.sharded_params(model, kind) // g) for kind in ("attention", "mlp"))


@dataclass
class GroupPricer:
    """Item times and plans on groups of each size, for one planning policy (a dynamic solver or one strategy)."""

    model: ModelSpec
    cluster: ClusterSpec
    policy: str
    """`dynamic:SOLVER[...]` or `static:NAME`."""
    budget_bytes: int
    """Per-GPU memory a plan may use with all model states sharded over the group (the cluster's budget)."""
    cost_model: str = "analytic"
    profiles: str | None = None
    """Profiles a learned `cost_model` is fitted on."""
    recompute: bool = False
    """Plans may recompute activations (static: every layer does)."""
    granularity: str = "block"
    """Decisions per block or per sub-layer."""
    runnable_only: bool = False
    """Only the group sizes the runtime runs today (`group_sizes`)."""
    _planners: dict = field(default_factory=dict, repr=False)
    _items: dict = field(default_factory=dict, repr=False)
    _syncs: dict = field(default_factory=dict, repr=False)

    def budget_for(self, g: int) -> int:
        """The budget of a group of g: raised by what the cost model at p = g counts of the sharded matrices'
        states (16 B/param over g) beyond what a rank of the group holds (module docstring): the world shard
        with its optimizer states (16 B/param over the world) and, when g < W, the group's 16-bit weight and
        gradient shards (2 e B/param over g)."""
        m, world = self.model, self.cluster.gpus
        if g == world:
            return self.budget_bytes
        counted = F.model_state_bytes_per_param(m) * sharded_layer_params(m, g)
        held = F.model_state_bytes_per_param(m) * sharded_layer_params(m, world) + \
            2 * m.dtype_bytes * sharded_layer_params(m, g)
        return self.budget_bytes + counted - held

    def state_phase_fits(self, sizes: Partition) -> bool:
        """Whether every rank holds the state phases of the step (outside the compute, when no activation is kept),
        beside its world shard and optimizer states and the replicated tensors' states. The gather: its group's
        weight shard, the flat send buffer and the [W / g_min, world shard] buffer the all-gather fills. The
        reduce, after the backward: the group's weight and gradient shards, and the larger of the
        reduce-scatter's [W / g_min, world shard] buffer and the replicated gradients' [R] buffer (the world's,
        beside the group view's; `reduce_phase_bytes`, less the world
        shards' gradients the states count)."""
        m, world = self.model, self.cluster.gpus
        if len(sizes) == 1:
            return True
        replicated = m.layers * F.replicated_params(m) * 2 + F.embedding_params(m)
        states = F.model_state_bytes_per_param(m) * (sharded_layer_params(m, world) + replicated)
        kept = grouped_state_kept_bytes(m, world, min(sizes), sizes)
        phase = reduce_phase_bytes(m, world, sizes)
        world_shard_grads = m.dtype_bytes * (sharded_total(m) // world)  # in `states`; a view in phase["world_grads"]
        gather = kept["group_weights"] + kept["send_buffer"] + kept["gather_buffer"]
        reduce = (kept["group_weights"] + kept["group_grads"] + phase["world_grads"] - world_shard_grads
                  + phase["transient"])
        return states + max(gather, reduce) <= self.budget_bytes

    def group_sizes(self) -> tuple[int, ...]:
        """The group sizes this pricer plans with: every power of two up to the world (a size a strategy cannot
        split is priced per plan). The runtime runs every size: blocks that are not whole heads are gathered from
        the whole world (`data_parallel_width`, docs/grouped_steps.md), so `runnable_only` keeps them all."""
        return tuple(power_sizes(self.cluster.gpus))

    def planner(self, g: int) -> Planner:
        if g not in self._planners:
            planner = build_planner(self.policy, self.model, self.cluster, cost_model=self.cost_model_at(g),
                                    p=g, budget_bytes=self.budget_for(g), smoothing=False,
                                    recompute=self.recompute, granularity=self.granularity)
            if isinstance(planner.policy, HeadPolicy):  # grouped steps keep the embedding and head replicated
                planner.policy.restrict_heads(("whole", "tiled"))
            self._planners[g] = planner
        return self._planners[g]

    def cost_model_at(self, g: int):
        """The cost model of a group of g: built once for every pricer of this model and cluster inside
        `paradyse_lab.simulator.shared.sharing()` (their search problems are then shared too), else for this pricer."""
        return shared.cost_model(lambda: build_cost_model(self.cost_model, self.model, self.cluster, g, self.profiles),
                                 self.cost_model, f"{self.model!r} at p={g}", repr(self.cluster), self.profiles)

    def item(self, g: int, step: int | PackedStep) -> tuple[float, Plan | None]:
        """(seconds, plan) of one item on a group of g (inf, None: it does not fit): a sequence of `step` tokens,
        or a pack of documents (`PackedStep`)."""
        time_s, decision = self._priced(g, step)
        return (time_s, decision.plan) if math.isfinite(time_s) else (math.inf, None)

    def decision(self, g: int, step: int | PackedStep):
        """The policy's decision (`StepPlan`) for one item on a group of g, whether or not
        it fits (its `feasible` says), or None where the strategy cannot split the item's shapes on g ranks."""
        return self._priced(g, step)[1]

    def _priced(self, g: int, step: int | PackedStep):
        key = (g, step)
        if key not in self._items:
            self._items[key] = self._price(g, padded_item(step, g))
        return self._items[key]

    def _price(self, g: int, padded: int | PackedStep):
        planner = self.planner(g)
        try:
            decision = planner.policy.decide(padded, 1)
            if self.policy.startswith("dynamic:"):  # planned with the model that charges: its own prediction
                time_s, fits = decision.predicted_time_s, decision.feasible
            else:
                charger = self._planners.setdefault(("charger", g), planner.charger())
                time_s, peak = charger.charge(decision.plan.names, padded, 1, decision.head)
                fits = peak <= planner.budget_bytes
                decision = replace(decision, predicted_time_s=time_s, feasible=fits)
        except UserInputError:  # the strategy cannot split these shapes on g ranks
            return math.inf, None
        return (time_s if fits else math.inf), decision

    def times(self, lengths, sizes) -> ItemTimes:
        """The item-time table of `lengths` on the group `sizes`."""
        return ItemTimes(self.cluster.gpus, {g: np.array([self.item(g, n)[0] for n in lengths]) for g in sizes})

    def sync_s(self, sizes: Partition) -> float:
        """`priced_sync_s`, kept per partition (the planners ask for the same partitions step after step)."""
        if sizes not in self._syncs:
            self._syncs[sizes] = self.priced_sync_s(sizes)
        return self._syncs[sizes]

    def priced_sync_s(self, sizes: Partition) -> float:
        """The all-gather of the group shards from the world layout and the reduce-scatter of their gradients
        back, across groups, and the all-reduce of the replicated tensors' gradients (module docstring), over
        the W / g_min ranks holding one block each, priced with the cluster model; inf when the gather's
        buffers do not fit (`state_phase_fits`)."""
        if len(sizes) == 1:
            return 0.0
        if not self.state_phase_fits(sizes):
            return math.inf
        c, m = self.cluster, self.model
        replicas = data_parallel_width(c.gpus, sizes, m)  # the whole world when blocks are not whole heads
        per_node = max(1, c.node_gpus * replicas // c.gpus)
        elements = sharded_layer_params(m, c.gpus // replicas)
        replicated = F.grad_all_reduces(m.layers * F.replicated_params(m) * 2 + F.embedding_params(m), replicas)
        return (F.collective_call_s(c, "reduce_scatter", F.GRAD_REDUCE_BYTES * elements, replicas, per_node)
                + F.collective_call_s(c, "all_gather", m.dtype_bytes * elements, replicas, per_node)
                + sum(call.count * F.collective_call_s(c, "all_reduce", call.buffer_bytes, replicas, per_node)
                      for call in replicated))


def choose(group_policy: str, lengths, pricer: GroupPricer, ring: GroupPricer | None = None) -> GroupChoice:
    """The groups and assignment of one step under a one-split `group_policy` (`GROUP_POLICIES`); `ring`: the
    context-parallel pricer whose `smallest-fit` choice `sized` must not be worse than (re-priced with per-layer
    plans)."""
    world = pricer.cluster.gpus
    if group_policy in ("paradyse", "static"):
        return lpt(pricer.times(lengths, (world,)), (world,), pricer.sync_s)
    costs = pricer.times(lengths, pricer.group_sizes())
    if group_policy == "smallest-fit":
        return smallest_fit_partition(costs, pricer.sync_s)
    if group_policy == "sized-exact":
        return plan_exact(costs, pricer.sync_s)
    extra = [smallest_fit_partition(costs, pricer.sync_s)]
    if ring is not None:
        ring_choice = smallest_fit_partition(ring.times(lengths, pricer.group_sizes()), ring.sync_s)
        extra.append(reassess(ring_choice, costs, pricer.sync_s))
    return plan_greedy(costs, pricer.sync_s, extra)


def grouped_step(choice: GroupChoice, items, pricer: GroupPricer) -> GroupedStep:
    """The `GroupedStep` the runtime executes: each group's rank block, items and per-item plans (a plan that
    does not fit is kept: its decision says so)."""
    groups = []
    for start, size, assigned in zip(choice.starts(), choice.sizes, choice.assignment):
        decisions = [pricer.decision(size, items[i]) for i in assigned]
        if None in decisions:
            raise UserInputError(f"{pricer.policy} cannot split an item of this step on a group of {size}")
        groups.append(StepGroup(start, size, tuple(assigned), tuple(d.plan for d in decisions)))
    return GroupedStep(pricer.cluster.gpus, len(items), tuple(groups))


def check_group_policy(group_policy: str, policy: str) -> None:
    """`--groups` against `--policy` (one-line errors naming both)."""
    if group_policy not in GROUP_POLICIES + ROUND_GROUP_POLICIES:
        raise unknown_name("--groups", group_policy, GROUP_POLICIES + ROUND_GROUP_POLICIES)
    dynamic = policy.startswith("dynamic:")
    if group_policy in PER_LAYER_GROUP_POLICIES and not dynamic:
        raise UserInputError(f"--groups {group_policy} plans every item per layer: --policy must be dynamic:SOLVER, "
                             f"got {policy!r}")
    if group_policy not in PER_LAYER_GROUP_POLICIES and not policy.startswith("static:"):
        raise UserInputError(f"--groups {group_policy} runs one strategy: --policy must be static:NAME "
                             f"(the context-parallel baselines: {RING_POLICY}), got {policy!r}")
