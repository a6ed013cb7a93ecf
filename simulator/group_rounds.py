"""A step as rounds of group splits: the rounds run one after another, each a split of every GPU into aligned
groups (a `GroupChoice` on the step's item indices), and the gradients are synchronised once per step.

The step takes the sum of its rounds' makespans plus what its states cost (`RoundsSync`): every round's own
gather of its group shards, and one reduction of the step's gradients at its widest round's width (zero when
every round is one group of all GPUs), with the buffers of the step's gradients held across its rounds in every
round's memory (inf where they do not fit). One split per step is the case of one round. Rounds pay off where a
step holds a sequence that is fastest on all GPUs beside many short ones: one round trains it alone on every GPU,
the next the short ones on small groups, where one split would train them all on the whole world or leave the
long one on a small group.

The planners: `plan_rounds` (greedy: the one-split greedy planner on the whole batch, and on every cut of the
items, longest first, into a first round of the k longest and a second of the rest, for k on a ladder; then
any candidates the caller adds, such as Megatron's schedule re-priced), and `plan_rounds_exact` (small
batches: every division of the items into rounds, each round's exact split, every reduction width).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from paradyse_lab.errors import UserInputError
from paradyse_lab.simulator.group_exact import best_assignment
from paradyse_lab.simulator.group_greedy import plan_greedy
from paradyse_lab.simulator.group_problem import (
    GroupChoice,
    ItemTimes,
    Partition,
    Sync,
    binary_partitions,
    lower_bound_s,
)


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


@dataclass(frozen=True)
class RoundsSync:
    """What a step of rounds pays for its states, in parts the planners use: `step`, the whole step's (the
    rounds' group sizes in the order they run; inf where its buffers do not fit), made of every round's own
    `gather` and one `reduce` at the largest of the rounds' `width`s. Called on one partition it is a one-split
    step's sync (what the one-split planners take)."""

    split: Sync
    step: Callable[[tuple[Partition, ...]], float]
    width: Callable[[Partition], float]
    gather: Callable[[Partition], float]
    reduce: Callable[[float], float]
    held: Callable[[tuple[Partition, ...]], int] = lambda rounds: 0
    """Bytes every rank holds beside the compute of the rounds after the first (the step's gradient buffers)."""

    def __call__(self, sizes: Partition) -> float:
        return self.split(sizes)


def max_sync(sync: Sync) -> RoundsSync:
    """A step of rounds priced as the largest of its rounds' syncs (a sync that is a function of the partition
    alone, with no gather of its own per round: the level is the sync itself)."""
    return RoundsSync(sync, lambda rounds: max(float(sync(p)) for p in rounds), sync, lambda p: 0.0, float)


def as_rounds_sync(sync: Sync | RoundsSync) -> RoundsSync:
    return sync if isinstance(sync, RoundsSync) else max_sync(sync)


def rounds_choice(rounds: Iterable[GroupChoice], sync: Sync | RoundsSync, costs: ItemTimes | None = None
                  ) -> RoundsChoice:
    """`rounds` with the step's synchronisation (`RoundsSync.step`; a plain sync: the largest of the rounds');
    rounds that train nothing are dropped (one is kept). With `costs`, the rounds after the first are re-priced
    with the bytes `RoundsSync.held` less for their compute (`ItemTimes.beside`)."""
    rounds = [r for r in rounds if any(r.assignment)] or list(rounds)[:1]
    rsync = as_rounds_sync(sync)
    partitions = tuple(r.sizes for r in rounds)
    held = rsync.held(partitions) if len(rounds) > 1 else 0
    if held and costs is not None and costs.beside is not None:
        rounds = rounds[:1] + [_beside(r, costs, held) for r in rounds[1:]]
    return RoundsChoice(tuple(rounds), float(rsync.step(partitions)))


def _beside(choice: GroupChoice, costs: ItemTimes, held: int) -> GroupChoice:
    """`choice` with each item's time on its group with `held` bytes less memory."""
    if not math.isfinite(choice.makespan_s):
        return choice
    loads = [float(sum(costs.beside(s, held)[i] for i in items)) for s, items in zip(choice.sizes, choice.assignment)]
    return GroupChoice(choice.sizes, choice.assignment, max(loads), choice.sync_s)


def objective(choice: RoundsChoice) -> tuple[float, int, int]:
    """Least step time; among equals fewer rounds, then fewer groups."""
    return (choice.step_s, len(choice.rounds), sum(len(r.sizes) for r in choice.rounds))


def subset(costs: ItemTimes, items: Sequence[int]) -> ItemTimes:
    """The item-time table of `items` only (their positions in `items` become their indices)."""
    index = np.asarray(items, dtype=int)
    beside = None if costs.beside is None else (lambda s, held: costs.beside(s, held)[index])
    return ItemTimes(costs.world, {s: t[index] for s, t in costs.times.items()}, beside)


def lift(choice: GroupChoice, items: Sequence[int]) -> GroupChoice:
    """A choice on `subset(costs, items)` with its item indices mapped back to the whole batch's."""
    return GroupChoice(choice.sizes, tuple(tuple(items[i] for i in a) for a in choice.assignment),
                       choice.makespan_s, choice.sync_s)


CUTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
"""How many of the longest items a two-round candidate trains in its first round."""


def plan_rounds(costs: ItemTimes, sync: Sync | RoundsSync, extra: Iterable[RoundsChoice] = (),
                one_split: GroupChoice | None = None) -> RoundsChoice:
    """The greedy rounds planner (module docstring); never worse than `one_split` (default: the one-split greedy
    planner's choice) nor than any of `extra`."""
    whole = as_rounds_sync(sync)
    sync = functools.cache(whole.split)
    one = one_split if one_split is not None else plan_greedy(costs, sync)
    best = min([rounds_choice([one], whole, costs), *extra], key=objective)
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
        found = rounds_choice([first, second], whole, costs)
        if objective(found) < objective(best):
            best = found
    return best


def _floors(costs: ItemTimes) -> tuple[np.ndarray, np.ndarray]:
    """Per item: its time on its fastest group, and its least GPU-seconds over the group sizes."""
    table = np.stack([costs.times[s] for s in costs.sizes])  # [sizes, items]
    return table.min(axis=0), (table * np.array(costs.sizes, dtype=float)[:, None]).min(axis=0)


MAX_EXACT_ROUND_ITEMS = 6
MAX_EXACT_ROUND_WORLD = 8


def plan_rounds_exact(costs: ItemTimes, sync: Sync | RoundsSync) -> RoundsChoice:
    """The optimum over every division of the items into rounds (each round any partition of the world into
    allowed sizes with its exact assignment, `best_assignment`) of the rounds' makespans and gathers summed plus
    one reduction at the widest round's width (`RoundsSync`): for every level L (the width of some partition),
    the least sum of makespans and gathers using only partitions whose width is at most L, by dynamic
    programming over subsets of items, plus the reduction at L; the least over L. Exact where the held buffers
    fit every round (otherwise the step it finds is priced inf and a slower one may exist). Small instances
    only."""
    rsync = as_rounds_sync(sync)
    n, world = costs.items, costs.world
    if n > MAX_EXACT_ROUND_ITEMS or world > MAX_EXACT_ROUND_WORLD:
        raise UserInputError(f"the exact rounds planner takes at most {MAX_EXACT_ROUND_ITEMS} items on "
                             f"{MAX_EXACT_ROUND_WORLD} GPUs, got {n} on {world}; use the greedy one")
    allowed = set(costs.sizes)
    partitions = [p for p in binary_partitions(world) if set(p) <= allowed]
    levels = sorted({float(rsync.width(p)) for p in partitions})
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
        rounds_of = {mask: min((c for c in choices if rsync.width(c.sizes) <= level),
                               key=lambda c: (c.makespan_s + rsync.gather(c.sizes), len(c.sizes)))
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
                chosen = rounds_of[round_mask]
                v = chosen.makespan_s + rsync.gather(chosen.sizes) + value[mask ^ round_mask]
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
        found = rounds_choice(sorted(rounds, key=lambda r: -r.makespan_s), rsync, costs)
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
