"""The greedy group planner (`plan_greedy`): longest-processing-time-first assignment (`lpt`: each item,
longest first, to the group where it would finish first) over a small set of candidate partitions: one group of
all ranks, groups of one size, two sizes (k large groups and the rest small), the groups a target makespan asks
for (each item on the smallest group that trains it within the target, bisected on the target: the classic
approach to scheduling malleable jobs, Turek, Wolf and Yu, SPAA 1992), and any partitions the caller adds (the
baselines'); then a local search splits or merges groups while that helps (`refine`), and one moves or swaps
items out of the slowest group while that helps (`rebalance`). Never worse than a candidate it was given.
The problem and its types: `group_problem`.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Iterable

import numpy as np

from paradyse_lab.simulator.group_problem import GroupChoice, ItemTimes, Partition, Sync, fill, objective


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


def plan_greedy(costs: ItemTimes, sync: Sync, extra: Iterable[GroupChoice] = ()) -> GroupChoice:
    """LPT over the candidate partitions (module docstring); `extra`: choices the result must not be worse than."""
    sync = functools.cache(sync)
    best = min([lpt(costs, (costs.world,), sync), *extra], key=objective)
    for partition in candidate_partitions(costs):
        found = lpt(costs, partition, sync, best.step_s)
        if objective(found) < objective(best):
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
            if objective(found) < objective(best):
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

