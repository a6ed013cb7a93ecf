"""A fixed group policy for grouped steps: groups of one size, items dealt round-robin.

The simple, deterministic way to split a global batch over the world (`train --group-size G` without a group
planner): the world's W ranks form W/G aligned groups of G ranks; item i of the batch goes to group i mod (W/G),
so the groups' item counts differ by at most one (a group may be idle when the batch is smaller than W/G).
Each item gets the plan `plan_of(item, G)` returns. A planner that sizes the groups per step produces the same
`GroupedStep` type and replaces this module.
"""

from __future__ import annotations

from collections.abc import Callable

from paradyse_lab.core.plan import Plan
from paradyse_lab.core.step_groups import GroupedStep, StepGroup
from paradyse_lab.errors import UserInputError


def fixed_size_groups(world: int, batch: int, size: int, plan_of: Callable[[int, int], Plan]) -> GroupedStep:
    """`batch` items over W/`size` groups of `size` ranks, round-robin (module docstring)."""
    if size < 1 or size & (size - 1) or world % size:
        raise UserInputError(f"--group-size must be a power of two dividing the world size {world}, got {size}")
    if batch < 1:
        raise UserInputError(f"--global-batch must be a positive number of sequences, got {batch}")
    count = world // size
    groups = []
    for g in range(count):
        items = tuple(range(g, batch, count))
        groups.append(StepGroup(g * size, size, items, tuple(plan_of(i, size) for i in items)))
    return GroupedStep(world, batch, tuple(groups))
