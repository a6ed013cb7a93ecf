"""`GroupedStep`: one training step of a global batch split over groups of ranks.

A step trains a global batch of items (sequences, or packs of documents). The world of `world` ranks is split
into groups; each group is an aligned block of consecutive ranks whose size is a power of two
(`start % size == 0`), so a group never straddles a node boundary unless it spans whole nodes, and every group
of size g is one of the sequence-parallel groups of the 2-D mesh (world // g data-parallel x g) of that size.
Each group trains its own items one after another, each with its own per-layer `Plan` at the group's size;
all groups run in the same step and their gradients are reduced over the whole world.

The planner (simulator side) produces a `GroupedStep`; the runtime executes it; both only import this module.
"""

from __future__ import annotations

from dataclasses import dataclass

from paradyse_lab.core.plan import Plan
from paradyse_lab.errors import UserInputError

GROUP_POLICIES = ("sized", "sized-exact", "paradyse", "smallest-fit", "static")
"""One split of the GPUs per step. sized: groups sized per step with per-layer plans (greedy); sized-exact: the
same, exact (small instances); paradyse: one group of all GPUs with per-layer plans; smallest-fit: one strategy,
each item on the smallest group that fits it, groups shared in proportion to the work, greedy balance (one
split per step: not Megatron's scheduler, which is `megatron`); static: one group of all GPUs, one strategy."""
ROUND_GROUP_POLICIES = ("rounds", "rounds-exact", "megatron")
"""A step as rounds of splits run one after another (`StepRounds`). rounds: ours, per-layer
plans (greedy); rounds-exact: the same, exact (small instances); megatron: Megatron-Core's dynamic
context-parallel scheduler, one strategy (simulated only: its per-rank length is chosen on held-out batches)."""
TRAIN_GROUP_POLICIES = (*GROUP_POLICIES, "rounds", "rounds-exact")
"""The group policies `train --global-batch --groups` takes: the one-split ones and ours with rounds."""
PER_LAYER_GROUP_POLICIES = ("sized", "sized-exact", "paradyse", "rounds", "rounds-exact")
"""The group policies that plan each item with a solver (`--policy dynamic:SOLVER`); the others run one strategy
(`--policy static:NAME`)."""


@dataclass(frozen=True)
class StepGroup:
    """One group of ranks and what it trains in a step."""

    start: int
    """The group's first global rank."""
    size: int
    """The number of ranks in the group (a power of two; `start % size == 0`)."""
    items: tuple[int, ...]
    """Indices into the step's global batch that this group trains, in order (may be empty: an idle group)."""
    plans: tuple[Plan, ...]
    """One per-layer plan per item, for a group of `size` ranks."""

    def __post_init__(self):
        if self.size < 1 or self.size & (self.size - 1):
            raise UserInputError(f"a group's size must be a power of two, got {self.size}")
        if self.start < 0 or self.start % self.size:
            raise UserInputError(f"a group of {self.size} ranks must start at a multiple of {self.size}, "
                                 f"got rank {self.start}")
        if len(self.items) != len(self.plans):
            raise UserInputError(f"a group needs one plan per item: {len(self.items)} items, "
                                 f"{len(self.plans)} plans")

    @property
    def ranks(self) -> range:
        """The group's global ranks."""
        return range(self.start, self.start + self.size)


@dataclass(frozen=True)
class GroupedStep:
    """The groups of one step: their rank blocks partition `range(world)`, their items `range(batch)`."""

    world: int
    batch: int
    groups: tuple[StepGroup, ...]

    def __post_init__(self):
        ranks = sorted(r for g in self.groups for r in g.ranks)
        if ranks != list(range(self.world)):
            raise UserInputError(f"the groups' ranks must cover ranks 0..{self.world - 1} once each, got {ranks}")
        items = sorted(i for g in self.groups for i in g.items)
        if items != list(range(self.batch)):
            raise UserInputError(f"the groups' items must cover items 0..{self.batch - 1} once each, got {items}")

    def group_of(self, rank: int) -> StepGroup:
        """The group that holds global `rank`."""
        for group in self.groups:
            if rank in group.ranks:
                return group
        raise UserInputError(f"rank {rank} is outside a world of {self.world}")

    @property
    def sizes(self) -> tuple[int, ...]:
        """The groups' sizes, in rank order (what a log row prints)."""
        return tuple(g.size for g in sorted(self.groups, key=lambda g: g.start))
