"""Splitting a step's world into groups and its global batch over them, on a table of item times.

The problem (one training step): `world` ranks, a power of two, are split into groups, each an aligned block of
a power-of-two number of ranks (paradyse_lab/step_groups.py); every item of the global batch goes to one group,
and a group trains its items one after another. `ItemTimes.times[s][i]` is the time of item i on a group of
size s with its best plan (inf where it does not fit in the group's memory). The step takes

    max over groups of (the sum of its items' times) + sync(the group sizes)

where `sync` prices the gradient synchronisation across groups (simulator/grouped_steps.py). A multiset of
powers of two that sums to `world` placed largest first is always aligned (each start is a sum of parts at
least as large), and an aligned block of at most one node's GPUs stays inside the node, so a partition here
is a descending tuple of sizes and `GroupedStep` gets the blocks in that order.

Methods:
- `plan_exact`: every partition of `world` into powers of two, each with the optimal assignment (dynamic
  programming over subsets of items, `best_assignment`): exact, for small instances (a handful of items).
- `plan_greedy`: longest-processing-time-first assignment (`lpt`: each item, longest first, to the group where
  it would finish first) over a small set of candidate partitions: one group of all ranks, groups of one
  size, two sizes (k large groups and the rest small), the groups a target makespan asks for (each item on
  the smallest group that trains it within the target, bisected on the target: the classic approach to
  scheduling malleable jobs, Turek, Wolf and Yu, SPAA 1992), and any partitions the caller adds (the
  baselines'); then a local search splits or merges groups while that helps (`refine`), and one moves or swaps
  items out of the slowest group while that helps (`rebalance`). Never worse than a candidate it was given.
- `smallest_fit_partition`: Megatron-style dynamic context parallelism: each item on the smallest group that
  fits it, groups per size in proportion to the work of that size, greedy balance inside each size.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Callable, Iterable
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


def lpt(costs: ItemTimes, sizes: Partition, sync: Sync, bound: float = math.inf) -> GroupChoice:
    """Longest first, each item to the group where it finishes first (ties: the smaller group). Stops early with
    an infinite makespan once the step would take at least `bound` (a better choice is known)."""
    sync_s = sync(sizes)
    distinct = sorted(set(sizes))
    heaps: dict[int, list] = {s: [] for s in distinct}
    for j, s in enumerate(sizes):
        heaps[s].append((0.0, j))
    rows = costs.rows(tuple(distinct))
    assigned: list[list[int]] = [[] for _ in sizes]
    makespan = 0.0
    for i in costs.longest_first(tuple(distinct)):
        finish, size = min((heaps[s][0][0] + t, s) for s, t in zip(distinct, rows[i]))
        if finish == math.inf or finish + sync_s >= bound:
            return GroupChoice(sizes, tuple(map(tuple, assigned)), math.inf, sync_s)
        _, j = heapq.heapreplace(heaps[size], (finish, heaps[size][0][1]))
        assigned[j].append(i)
        makespan = max(makespan, finish)
    return GroupChoice(sizes, tuple(map(tuple, assigned)), makespan, sync_s)


def best_assignment(costs: ItemTimes, sizes: Partition, sync: Sync) -> GroupChoice:
    """The assignment of least makespan on `sizes`, by dynamic programming over subsets of items (exact;
    O(groups x 3^items))."""
    n = costs.items
    full = (1 << n) - 1
    load = {s: _subset_sums(costs.times[s]) for s in set(sizes)}
    best = np.full(full + 1, math.inf)
    best[0] = 0.0
    choice: list[np.ndarray] = []
    for s in sizes:
        nxt, took = best.copy(), np.zeros(full + 1, dtype=np.int64)  # the group may stay idle
        for mask in range(1, full + 1):
            sub = mask
            while sub:
                value = max(best[mask ^ sub], load[s][sub])
                if value < nxt[mask]:
                    nxt[mask], took[mask] = value, sub
                sub = (sub - 1) & mask
        best = nxt
        choice.append(took)
    assignment, mask = [], full
    for took in reversed(choice):
        sub = int(took[mask])
        assignment.append(tuple(i for i in range(n) if sub >> i & 1))
        mask ^= sub
    return GroupChoice(sizes, tuple(reversed(assignment)), float(best[full]), sync(sizes))


def _subset_sums(times: np.ndarray) -> np.ndarray:
    """Sum of `times` over every subset (bit i: item i)."""
    sums = np.zeros(1 << len(times))
    for i, t in enumerate(times):
        sums[1 << i: 1 << (i + 1)] = sums[: 1 << i] + t
    return sums


MAX_EXACT_ITEMS = 10
MAX_EXACT_WORLD = 16


def plan_exact(costs: ItemTimes, sync: Sync) -> GroupChoice:
    """The optimum over every partition and assignment (small instances only)."""
    if costs.items > MAX_EXACT_ITEMS or costs.world > MAX_EXACT_WORLD:
        raise UserInputError(f"the exact group planner takes at most {MAX_EXACT_ITEMS} items on "
                             f"{MAX_EXACT_WORLD} GPUs, got {costs.items} on {costs.world}; use the greedy one")
    allowed = set(costs.sizes)
    return min((best_assignment(costs, p, sync) for p in binary_partitions(costs.world) if set(p) <= allowed),
               key=_objective)


def _objective(choice: GroupChoice) -> tuple[float, int]:
    """Least step time; among equals, fewer groups (fewer communicators, less synchronisation)."""
    return (choice.step_s, len(choice.sizes))


def plan_greedy(costs: ItemTimes, sync: Sync, extra: Iterable[GroupChoice] = ()) -> GroupChoice:
    """LPT over the candidate partitions (module docstring); `extra`: choices the result must not be worse than."""
    sync = functools.cache(sync)
    best = min([lpt(costs, (costs.world,), sync), *extra], key=_objective)
    for partition in candidate_partitions(costs):
        found = lpt(costs, partition, sync, best.step_s)
        if _objective(found) < _objective(best):
            best = found
    return rebalance(costs, refine(costs, best, sync))


def rebalance(costs: ItemTimes, choice: GroupChoice, rounds: int = 32) -> GroupChoice:
    """Local search on `choice`'s assignment (its partition kept): move one item of the slowest group to another
    group, or swap it with one of another group's, taking the change that most lowers the larger of the two
    groups' times, while one lowers it below the slowest group's (each change lowers the sorted loads
    lexicographically: it ends); at most `rounds` changes. LPT leaves such moves when items differ in time
    across group sizes."""
    if not math.isfinite(choice.makespan_s) or len(choice.sizes) == 1:
        return choice
    distinct = tuple(sorted(set(choice.sizes)))
    column = {s: k for k, s in enumerate(distinct)}
    rows = costs.rows(distinct)
    col = [column[s] for s in choice.sizes]
    groups = [list(a) for a in choice.assignment]
    loads = [sum(rows[i][c] for i in g) for g, c in zip(groups, col)]
    for _ in range(rounds):
        k = max(range(len(loads)), key=loads.__getitem__)
        best = (loads[k], None)
        for i in groups[k]:
            out_k = loads[k] - rows[i][col[k]]
            for j in range(len(groups)):
                if j == k:
                    continue
                moved = max(out_k, loads[j] + rows[i][col[j]])
                if moved < best[0]:
                    best = (moved, (i, j, None))
                for m in groups[j]:
                    swapped = max(out_k + rows[m][col[k]], loads[j] - rows[m][col[j]] + rows[i][col[j]])
                    if swapped < best[0]:
                        best = (swapped, (i, j, m))
        if best[1] is None:
            break
        i, j, m = best[1]
        groups[k].remove(i)
        groups[j].append(i)
        loads[k] -= rows[i][col[k]]
        loads[j] += rows[i][col[j]]
        if m is not None:
            groups[j].remove(m)
            groups[k].append(m)
            loads[j] -= rows[m][col[j]]
            loads[k] += rows[m][col[k]]
    return GroupChoice(choice.sizes, tuple(map(tuple, groups)), max(loads), choice.sync_s)


def refine(costs: ItemTimes, best: GroupChoice, sync: Sync, rounds: int = 8) -> GroupChoice:
    """Local search from `best`'s partition: split one group of a size in two, or merge two groups of a size
    into one, keeping a move while LPT on it is faster (at most `rounds` moves; reaches partitions of three
    sizes and more that the candidates lack)."""
    for _ in range(rounds):
        moved = False
        for partition in neighbours(best.sizes, costs):
            found = lpt(costs, partition, sync, best.step_s)
            if _objective(found) < _objective(best):
                best, moved = found, True
        if not moved:
            break
    return best


def neighbours(sizes: Partition, costs: ItemTimes) -> list[Partition]:
    """The partitions one split (a group of s into two of s/2) or one merge (two of s into one of 2s) away."""
    out = []
    for s in dict.fromkeys(sizes):
        rest = list(sizes)
        rest.remove(s)
        if s // 2 in costs.times:
            out.append(tuple(sorted(rest + [s // 2, s // 2], reverse=True)))
        if sizes.count(s) >= 2 and 2 * s in costs.times:
            rest.remove(s)
            out.append(tuple(sorted(rest + [2 * s], reverse=True)))
    return out


SPLIT_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
"""How many large groups a two-size candidate partition has (a geometric ladder: the rest are small groups)."""


def candidate_partitions(costs: ItemTimes) -> list[Partition]:
    """Uniform sizes, two sizes (k large groups and small ones for the rest, small groups where some item fits),
    and the target-makespan partition."""
    w = costs.world
    sizes = [s for s in costs.sizes if s <= w]
    used = [s for s in sizes if np.isfinite(costs.times[s]).any()]
    out: list[Partition] = [(s,) * (w // s) for s in used]
    for small in used:
        for big in (s for s in used if s > small):
            out += [(big,) * k + (small,) * ((w - k * big) // small) for k in SPLIT_COUNTS if k < w // big]
    target = target_partition(costs)
    if target is not None:
        out.append(target)
    return list(dict.fromkeys(out))


def target_partition(costs: ItemTimes, rounds: int = 24) -> Partition | None:
    """The partition of the least target makespan T (bisected between 0 and the sum of every item's longest finite
    time) for which every item, on the smallest group that trains it within T, packs first-fit-decreasing into
    groups of its size, all within `world` ranks; None when no target tried packs."""
    table = np.stack([costs.times[s] for s in costs.sizes])
    finite = np.where(np.isfinite(table), table, -np.inf).max(axis=0)
    if not np.all(np.isfinite(finite)):
        return None
    lo, hi = 0.0, float(finite.sum())
    best = _partition_for(costs, hi)
    for _ in range(rounds):
        mid = (lo + hi) / 2
        found = _partition_for(costs, mid)
        if found is None:
            lo = mid
        else:
            best, hi = found, mid
    return best


def _partition_for(costs: ItemTimes, target: float) -> Partition | None:
    """Groups per size for target makespan `target` (None when they need more than the world)."""
    per_size: dict[int, list[float]] = {}
    for i in range(costs.items):
        size = next((s for s in costs.sizes if costs.times[s][i] <= target), None)
        if size is None:
            return None
        per_size.setdefault(size, []).append(float(costs.times[size][i]))
    parts: list[int] = []
    for size, times in per_size.items():
        bins: list[float] = []
        for t in sorted(times, reverse=True):
            k = next((k for k, b in enumerate(bins) if b + t <= target), None)
            if k is None:
                bins.append(t)
            else:
                bins[k] += t
        parts += [size] * len(bins)
    used = sum(parts)
    if used > costs.world:
        return None
    return fill(parts, costs.world, costs.sizes)


def fill(parts: list[int], world: int, sizes: tuple[int, ...] | None = None) -> Partition:
    """`parts` plus idle groups to cover `world`, descending: the largest of `sizes` (default every power of two;
    1 must be among them) that still fit."""
    left, extra = world - sum(parts), []
    for size in sorted(sizes or [1 << b for b in range(world.bit_length())], reverse=True):
        while size <= left:
            extra.append(size)
            left -= size
    return tuple(sorted(parts + extra, reverse=True))


def smallest_fit_partition(costs: ItemTimes, sync: Sync) -> GroupChoice:
    """Megatron-style dynamic context parallelism: item i on the smallest group that fits it; the world's ranks
    shared among the sizes in use in proportion to their work (GPU-seconds), at least one group each (a size
    with no room left moves its items up to the next size); LPT inside each size."""
    w = costs.world
    home = {}
    for i in range(costs.items):
        home[i] = next((s for s in costs.sizes if math.isfinite(costs.times[s][i])), None)
        if home[i] is None:
            return GroupChoice((w,), ((),), math.inf, sync((w,)))
    while sum(set(home.values())) > w:  # one group of every size in use must fit
        smallest = min(home.values())
        larger = min(s for s in costs.sizes if s > smallest)
        for i, s in home.items():
            if s == smallest:
                home[i] = larger
    groups = _share_ranks(costs, home, w)
    return _assign_by_size(costs, home, fill(groups, w, costs.sizes), sync)


def _share_ranks(costs: ItemTimes, home: dict[int, int], world: int) -> list[int]:
    """Group sizes: one per size in use, then one more at a time to the size with the most work per group."""
    work = {s: sum(costs.times[s][i] for i, h in home.items() if h == s) for s in set(home.values())}
    count = dict.fromkeys(work, 1)
    left = world - sum(work)
    while True:
        grow = [s for s in work if s <= left and count[s] < sum(1 for h in home.values() if h == s)]
        if not grow:
            break
        s = max(grow, key=lambda s: (work[s] / count[s], -s))
        count[s] += 1
        left -= s
    return [s for s, k in count.items() for _ in range(k)]


def _assign_by_size(costs: ItemTimes, home: dict[int, int], sizes: Partition, sync: Sync) -> GroupChoice:
    """LPT of each item among the groups of its own size (the others stay idle)."""
    loads = [0.0] * len(sizes)
    assigned: list[list[int]] = [[] for _ in sizes]
    for i in sorted(home, key=lambda i: -costs.times[home[i]][i]):
        j = min((j for j, s in enumerate(sizes) if s == home[i]), key=lambda j: loads[j])
        loads[j] += costs.times[home[i]][i]
        assigned[j].append(i)
    return GroupChoice(sizes, tuple(map(tuple, assigned)), max(loads), sync(sizes))


def lower_bound_s(costs: ItemTimes, sync: Sync | None = None) -> float:
    """No split of the world into groups of the sizes of `costs` trains the items faster than this. A step has one
    partition, whose distinct sizes D are powers of two summing to at most the world; every item then runs on a
    group of a size in D, so the step takes at least (1) its longest item on that item's fastest size in D and
    (2) all the items' least GPU-seconds over D spread over every GPU, plus `sync` of a partition of sizes D
    (the same for every such partition: it depends on the sizes present). The bound is the least over every D."""
    sizes = costs.sizes
    table = np.stack([costs.times[s] for s in sizes])  # [sizes, items]
    gpu_seconds = table * np.array(sizes, dtype=float)[:, None]
    best = math.inf
    for mask in range(1, 1 << len(sizes)):
        chosen = [k for k in range(len(sizes)) if mask >> k & 1]
        used = [sizes[k] for k in chosen]
        if sum(used) > costs.world:
            continue
        bound = max(float(table[chosen].min(axis=0).max()), float(gpu_seconds[chosen].min(axis=0).sum()) / costs.world)
        if sync is not None and math.isfinite(bound):
            bound += sync(fill(used, costs.world, (min(used),)))
        best = min(best, bound)
    return best


def reassess(choice: GroupChoice, costs: ItemTimes, sync: Sync) -> GroupChoice:
    """`choice`'s partition and assignment priced on `costs` (another way of planning each item); a choice that
    trains no complete assignment (infinite makespan) stays infinite."""
    if not math.isfinite(choice.makespan_s):
        return choice
    loads = [sum(costs.times[s][i] for i in items) for s, items in zip(choice.sizes, choice.assignment)]
    return GroupChoice(choice.sizes, choice.assignment, max(loads), sync(choice.sizes))
