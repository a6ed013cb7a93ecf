"""Splitting a step's world into groups and its global batch over them, on a table of item times: the problem
every group planner solves, its types, the partitions of the world, and a lower bound on any split.

The problem (one training step): `world` ranks, a power of two, are split into groups, each an aligned block of
a power-of-two number of ranks; every item of the global batch goes to one group,
and a group trains its items one after another. `ItemTimes.times[s][i]` is the time of item i on a group of
size s with its best plan (inf where it does not fit in the group's memory). The step takes

    max over groups of (the sum of its items' times) + sync(the group sizes)

where `sync` prices the gradient synchronisation across groups. A multiset of
powers of two that sums to `world` placed largest first is always aligned (each start is a sum of parts at
least as large), and an aligned block of at most one node's GPUs stays inside the node, so a partition here
is a descending tuple of sizes and `GroupedStep` gets the blocks in that order.

The one-split planners: exact, greedy and smallest-fit
(dynamic CP); a step as rounds of splits, and Megatron's
scheduler.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from paradyse_lab.errors import UserInputError

Partition = tuple[int, ...]
"""Group sizes, descending, summing to the world."""


@dataclass(frozen=True)
class ItemTimes:
    """Seconds of each item on a group of each size (inf: does not fit)."""

    world: int
    times: dict[int, np.ndarray]
    """Group size (a power of two up to `world`) -> seconds per item."""

    def __post_init__(self):
        if self.world < 1 or self.world & (self.world - 1):
            raise UserInputError(f"groups need a power-of-two number of GPUs, got {self.world}")

    @property
    def items(self) -> int:
        return len(next(iter(self.times.values())))

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(sorted(self.times))

    def rows(self, sizes: tuple[int, ...]) -> list[list[float]]:
        """Per item: its times on `sizes`, as Python floats (cached: the greedy planner reads them often)."""
        cache = self.__dict__.setdefault("_rows", {})
        if sizes not in cache:
            cache[sizes] = np.stack([self.times[s] for s in sizes], axis=1).astype(float).tolist()
        return cache[sizes]

    def longest_first(self, sizes: tuple[int, ...]) -> list[int]:
        """Items by their fastest time on `sizes`, longest first (cached)."""
        cache = self.__dict__.setdefault("_order", {})
        if sizes not in cache:
            rows = self.rows(sizes)
            cache[sizes] = sorted(range(len(rows)), key=lambda i: -min(rows[i]))
        return cache[sizes]


@dataclass(frozen=True)
class GroupChoice:
    """A partition of the world and which items each of its groups trains."""

    sizes: Partition
    assignment: tuple[tuple[int, ...], ...]
    """Per group (in `sizes` order) its items, in the order it trains them."""
    makespan_s: float
    """The slowest group's time (inf when an item fits no group)."""
    sync_s: float
    """Gradient synchronisation across the groups."""

    @property
    def step_s(self) -> float:
        return self.makespan_s + self.sync_s

    def starts(self) -> tuple[int, ...]:
        """The first rank of each group (largest first: aligned)."""
        return tuple(int(x) for x in np.cumsum((0,) + self.sizes[:-1]))


Sync = Callable[[Partition], float]


def binary_partitions(world: int, smallest: int = 1) -> list[Partition]:
    """Every multiset of powers of two from `smallest` to `world` that sums to `world`, descending."""
    out: list[Partition] = []

    def extend(prefix: tuple[int, ...], left: int, largest: int) -> None:
        if left == 0:
            out.append(prefix)
            return
        size = largest
        while size >= smallest:
            if size <= left:
                extend(prefix + (size,), left - size, size)
            size //= 2

    extend((), world, world)
    return out


def objective(choice: GroupChoice) -> tuple[float, int]:
    """Least step time; among equals, fewer groups (fewer communicators, less synchronisation)."""
    return (choice.step_s, len(choice.sizes))


def fill(parts: list[int], world: int, sizes: tuple[int, ...] | None = None) -> Partition:
    """`parts` plus idle groups to cover `world`, descending: the largest of `sizes` (default every power of two;
    1 must be among them) that still fit."""
    left, extra = world - sum(parts), []
    for size in sorted(sizes or [1 << b for b in range(world.bit_length())], reverse=True):
        while size <= left:
            extra.append(size)
            left -= size
    return tuple(sorted(parts + extra, reverse=True))


def lower_bound_s(costs: ItemTimes, sync: Sync | None = None, rounds: bool = False) -> float:
    """No split of the world into groups of the sizes of `costs` trains the items faster than this. A step has one
    partition, whose distinct sizes D are powers of two summing to at most the world; every item then runs on a
    group of a size in D, so the step takes at least (1) its longest item on that item's fastest size in D and
    (2) all the items' least GPU-seconds over D spread over every GPU, plus `sync` of a partition of sizes D
    (the same for every such partition: it depends on the sizes present). The bound is the least over every D.
    `rounds`: the bound for steps as rounds of splits instead (`rounds_lower_bound_s`)."""
    sizes = costs.sizes
    table = np.stack([costs.times[s] for s in sizes])  # [sizes, items]
    gpu_seconds = table * np.array(sizes, dtype=float)[:, None]
    best = math.inf
    for mask in range(1, 1 << len(sizes)):
        chosen = [k for k in range(len(sizes)) if mask >> k & 1]
        used = [sizes[k] for k in chosen]
        if sum(used) > costs.world and not rounds:
            continue
        bound = max(float(table[chosen].min(axis=0).max()), float(gpu_seconds[chosen].min(axis=0).sum()) / costs.world)
        if sync is not None and math.isfinite(bound):
            smallest = min(used)
            splits = [fill(used, costs.world, (smallest,))] if sum(used) <= costs.world else []
            if rounds:  # a round of D's sizes may be any split whose smallest group is D's smallest
                splits.append((smallest,) * (costs.world // smallest))
            bound += min(sync(p) for p in splits)
        best = min(best, bound)
    return best


def reassess(choice: GroupChoice, costs: ItemTimes, sync: Sync) -> GroupChoice:
    """`choice`'s partition and assignment priced on `costs` (another way of planning each item); a choice that
    trains no complete assignment (infinite makespan) stays infinite."""
    if not math.isfinite(choice.makespan_s):
        return choice
    loads = [sum(costs.times[s][i] for i in items) for s, items in zip(choice.sizes, choice.assignment)]
    return GroupChoice(choice.sizes, choice.assignment, max(loads), sync(choice.sizes))
