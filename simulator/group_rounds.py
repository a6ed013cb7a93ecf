"""A step as rounds of group splits: the rounds run one after another, each a split of every GPU into aligned
groups (a `GroupChoice` on the step's item indices), and the gradients are synchronised once per step.

The step takes the sum of its rounds' makespans plus one synchronisation, priced as the widest of its rounds'
(`rounds_choice`: the round whose smallest group gathers over the most ranks; zero when every round is one group
of all GPUs). One split per step is the case of one round. Rounds pay off where a step holds a sequence that is
fastest on all GPUs beside many short ones: one round trains it alone on every GPU, the next the short ones on
small groups, where one split would train them all on the whole world or leave the long one on a small group.

The planners: `plan_rounds` (greedy: the one-split greedy planner on the whole batch, and on every cut of the
items, longest first, into a first round of the k longest and a second of the rest, for k on a ladder; then
any candidates the caller adds, such as Megatron's schedule re-priced), and `plan_rounds_exact` (small
batches: every division of the items into rounds, each round's exact split, every synchronisation level).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from paradyse_lab.errors import UserInputError
from paradyse_lab.simulator.group_exact import best_assignment
from paradyse_lab.simulator.group_greedy import plan_greedy
from paradyse_lab.simulator.group_problem import GroupChoice, ItemTimes, Sync, binary_partitions, lower_bound_s


@dataclass(frozen=True)
class RoundsChoice:
    """The rounds of one step, in the order they run, and the step's one gradient synchronisation."""

    rounds: tuple[GroupChoice, ...]
    sync_s: float

    @property
    def makespan_s(self) -> float:
        """The rounds' makespans summed (a barrier between rounds)."""
        return float(sum(r.makespan_s for r in self.rounds))

    @property
    def step_s(self) -> float:
        return self.makespan_s + self.sync_s

    def label(self) -> str:
        """The group sizes of each round joined by ',', the rounds by ' / '."""
        return " / ".join(",".join(map(str, r.sizes)) for r in self.rounds)

    @property
    def busy_groups(self) -> int:
        return sum(1 for r in self.rounds for a in r.assignment if a)


def rounds_choice(rounds: Iterable[GroupChoice], sync: Sync) -> RoundsChoice:
    """`rounds` with the step's synchronisation: the largest of the rounds' own (inf when any round's state
    phases do not fit); rounds that train nothing are dropped (one is kept)."""
    rounds = [r for r in rounds if any(r.assignment)] or list(rounds)[:1]
    return RoundsChoice(tuple(rounds), max(float(sync(r.sizes)) for r in rounds))


def objective(choice: RoundsChoice) -> tuple[float, int, int]:
    """Least step time; among equals fewer rounds, then fewer groups."""
    return (choice.step_s, len(choice.rounds), sum(len(r.sizes) for r in choice.rounds))


def subset(costs: ItemTimes, items: Sequence[int]) -> ItemTimes:
    """The item-time table of `items` only (their positions in `items` become their indices)."""
    index = np.asarray(items, dtype=int)
    return ItemTimes(costs.world, {s: t[index] for s, t in costs.times.items()})


def lift(choice: GroupChoice, items: Sequence[int]) -> GroupChoice:
    """A choice on `subset(costs, items)` with its item indices mapped back to the whole batch's."""
    return GroupChoice(choice.sizes, tuple(tuple(items[i] for i in a) for a in choice.assignment),
                       choice.makespan_s, choice.sync_s)


CUTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
"""How many of the longest items a two-round candidate trains in its first round."""


def plan_rounds(costs: ItemTimes, sync: Sync, extra: Iterable[RoundsChoice] = (),
                one_split: GroupChoice | None = None) -> RoundsChoice:
    """The greedy rounds planner (module docstring); never worse than `one_split` (default: the one-split greedy
    planner's choice) nor than any of `extra`."""
    sync = functools.cache(sync)
    one = one_split if one_split is not None else plan_greedy(costs, sync)
    best = min([rounds_choice([one], sync), *extra], key=objective)
    order = costs.longest_first(costs.sizes)
    fastest, least_gpu_s = _floors(costs)
    for k in (k for k in CUTS if k < costs.items):
        head, rest = order[:k], order[k:]
        first = lift(plan_greedy(subset(costs, head), sync), head)
        if first.makespan_s >= best.step_s:
            break  # longer heads only take longer
        floor = max(fastest[rest].max(), least_gpu_s[rest].sum() / costs.world)
        if first.makespan_s + floor >= best.step_s:
            continue  # no second round can make this cut pay
        second = lift(plan_greedy(subset(costs, rest), sync), rest)
        found = rounds_choice([first, second], sync)
        if objective(found) < objective(best):
            best = found
    return best


def _floors(costs: ItemTimes) -> tuple[np.ndarray, np.ndarray]:
    """Per item: its time on its fastest group, and its least GPU-seconds over the group sizes."""
    table = np.stack([costs.times[s] for s in costs.sizes])  # [sizes, items]
    return table.min(axis=0), (table * np.array(costs.sizes, dtype=float)[:, None]).min(axis=0)


MAX_EXACT_ROUND_ITEMS = 6
MAX_EXACT_ROUND_WORLD = 8


def plan_rounds_exact(costs: ItemTimes, sync: Sync) -> RoundsChoice:
    """The optimum over every division of the items into rounds (each round any partition of the world into
    allowed sizes with its exact assignment, `best_assignment`) of the rounds' makespans summed plus the widest
    round's synchronisation: for every synchronisation level L (the sync of some partition), the least sum of
    makespans using only partitions whose sync is at most L, by dynamic programming over subsets of items, plus
    L; the least over L. Small instances only."""
    n, world = costs.items, costs.world
    if n > MAX_EXACT_ROUND_ITEMS or world > MAX_EXACT_ROUND_WORLD:
        raise UserInputError(f"the exact rounds planner takes at most {MAX_EXACT_ROUND_ITEMS} items on "
                             f"{MAX_EXACT_ROUND_WORLD} GPUs, got {n} on {world}; use the greedy one")
    allowed = set(costs.sizes)
    partitions = [p for p in binary_partitions(world) if set(p) <= allowed]
    levels = sorted({float(sync(p)) for p in partitions})
    full = (1 << n) - 1
    # per subset of items: the best choice (least makespan) of each partition
    per_subset: dict[int, list[GroupChoice]] = {}
    for mask in range(1, full + 1):
        items = [i for i in range(n) if mask >> i & 1]
        part = subset(costs, items)
        per_subset[mask] = [lift(best_assignment(part, p, sync), items) for p in partitions]
    best: RoundsChoice | None = None
    for level in levels:
        if not math.isfinite(level):
            continue
        rounds_of = {mask: min((c for c in choices if c.sync_s <= level), key=lambda c: (c.makespan_s, len(c.sizes)))
                     for mask, choices in per_subset.items()}
        value = [math.inf] * (full + 1)
        took = [0] * (full + 1)
        value[0] = 0.0
        for mask in range(1, full + 1):
            low = mask & -mask
            rest = mask ^ low
            sub = rest
            while True:
                round_mask = sub | low
                v = rounds_of[round_mask].makespan_s + value[mask ^ round_mask]
                if v < value[mask]:
                    value[mask], took[mask] = v, round_mask
                if sub == 0:
                    break
                sub = (sub - 1) & rest
        if not math.isfinite(value[full]):
            continue
        rounds, mask = [], full
        while mask:
            rounds.append(rounds_of[took[mask]])
            mask ^= took[mask]
        found = rounds_choice(sorted(rounds, key=lambda r: -r.makespan_s), sync)
        if best is None or objective(found) < objective(best):
            best = found
    if best is None:
        return rounds_choice([GroupChoice((world,), ((),), math.inf, 0.0)], sync)
    return best


def rounds_lower_bound_s(costs: ItemTimes, sync: Sync | None = None) -> float:
    """No schedule of rounds (each round a split of the world into groups of the sizes of `costs`) trains the
    items faster than this: with D the sizes the rounds use, the step takes at least (1) its longest item on
    that item's fastest size in D and (2) all the items' least GPU-seconds over D spread over every GPU (the
    rounds run one after another, so the GPU-seconds of all rounds share the world), plus the synchronisation of
    a split whose smallest group is D's smallest (its price depends on that size alone; of the two such splits
    tried, groups of that size only or D's sizes filled with it, the lesser, in case one's state phases do not
    fit). The least over every D; unlike one split, D need not fit in the world at once."""
    return lower_bound_s(costs, sync, rounds=True)
