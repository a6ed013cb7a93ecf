"""Megatron-Core's dynamic (hybrid) context-parallel scheduler as a group planner (`megatron_rounds`): a step's
global batch as rounds, each a split of every GPU into context-parallel groups.

The rules follow megatron-core 0.19.2, `megatron/core/pipeline_parallel/hybrid_cp_schedule.py`,
`BalancedCPScheduler` (`get_groups_and_subsamples`, `next_hdp_group`, `make_buckets_equal`, `trim_overload`,
`fill_empty_gpus`); the code is ours. A sequence of length L is estimated at L^2 / cp of work per rank
(`workload`) and needs `gpus_needed` ranks, a power of two from the per-rank length `per_rank` (Megatron's
`max_seqlen_per_dp_cp_rank`, the most a rank holds without running out of memory). The lengths, longest first,
are cut into k buckets (k: the distinct rank counts), a bucket closed when it would pass 1.1x the mean work.
A round places the head of the first bucket that can be placed on the least-loaded group of its size or on new
free ranks; once a smaller size than the round's first has been placed it stops as soon as the per-rank load
spread is within 5% of the largest load, trims the most-loaded group's last sequence while that narrows the
spread, then doubles the smallest group until no rank is idle; what is left starts the next round. Megatron runs
the rounds one after another with a barrier between them and synchronises the gradients once per step; here
each round's groups are priced by the caller's item times (the placement of a round's groups in rank order does
not change their price, so a round is given as its sizes, largest first: aligned).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from paradyse_lab.simulator.group_problem import GroupChoice, ItemTimes
from paradyse_lab.simulator.group_rounds import RoundsChoice, rounds_choice, subset

BALANCE_SLACK = 0.05
"""A round stops once the per-rank load spread is within this share of the largest load."""
BUCKET_SLACK = 1.1
"""A bucket is closed when its work would pass this multiple of the mean work per bucket."""


def gpus_needed(length: int, per_rank: int) -> int:
    """Ranks a sequence of `length` tokens needs: the next power of two of length / per_rank, at least one (no cap
    at the world: a longer sequence cannot be placed)."""
    return max(1, 2 ** math.ceil(math.log2(length / per_rank)))


def workload(length: int, cp: int) -> float:
    """Megatron's work estimate of a sequence on cp ranks, per rank (not a FLOP count, its source says)."""
    return length * length / cp


def buckets(items: Sequence[tuple[int, int]], per_rank: int) -> list[list[tuple[int, int]]]:
    """(item, length) pairs in their order cut into k buckets of about equal work (module docstring); a bucket is
    also closed while the items left are no more than the buckets still to open."""
    k = len({gpus_needed(n, per_rank) for _, n in items})
    target = sum(workload(n, gpus_needed(n, per_rank)) for _, n in items) / k
    out: list[list[tuple[int, int]]] = []
    current, work = [], 0.0
    for i, (item, n) in enumerate(items):
        w = workload(n, gpus_needed(n, per_rank))
        if current and (work + w > BUCKET_SLACK * target or len(items) - i <= k - len(out) - 1):
            out.append(current)
            current, work = [], 0.0
        current.append((item, n))
        work += w
    return out + ([current] if current else [])


def one_round(items: Sequence[tuple[int, int]], per_rank: int, world: int) -> tuple[list[tuple[int, list]], list]:
    """One round: its groups as (size, [(item, length), ...]) and the (item, length) pairs left for later rounds.
    Empty when no item can be placed (one needs more than `world` ranks)."""
    queue = buckets(items, per_rank)
    load = [0.0] * world
    free = list(range(world))
    groups: list[tuple[int, list]] = []
    members: list[list[int]] = []
    first_need, check = None, False
    while queue:
        pick = next(((b, gpus_needed(q[0][1], per_rank)) for b, q in enumerate(queue)
                     if q and (any(s == gpus_needed(q[0][1], per_rank) for s, _ in groups)
                               or len(free) >= gpus_needed(q[0][1], per_rank))), None)
        if pick is None:
            break
        b, need = pick
        first_need = need if first_need is None else first_need
        same = [g for g, (s, _) in enumerate(groups) if s == need]
        best = min(same, key=lambda g: max(load[r] for r in members[g]), default=None)
        best_load = math.inf if best is None else max(load[r] for r in members[best])
        if len(free) >= need and 0.0 < best_load:  # new ranks are idle: load 0
            best = len(groups)
            groups.append((need, []))
            members.append(free[:need])
            free = free[need:]
        item = queue[b].pop(0)
        groups[best][1].append(item)
        for r in members[best]:
            load[r] += workload(item[1], need)
        while queue and not queue[0]:
            queue.pop(0)
        check = check or need < first_need
        if check and queue and max(load) - min(load) <= BALANCE_SLACK * max(load):
            break
    left = [item for q in queue for item in q]
    _trim(groups, members, load, left)
    sizes = [s for s, _ in groups]
    while groups and sum(sizes) < world:  # double the first smallest group until no rank is idle
        g = sizes.index(min(sizes))
        sizes[g] = min(2 * sizes[g], world)
    return [(s, placed) for s, (_, placed) in zip(sizes, groups)], left


def _trim(groups, members, load, left) -> None:
    """Take the most-loaded group's last sequence back while that narrows the per-rank load spread (and no rank
    is idle, and the group keeps a sequence)."""
    while True:
        top, low = max(load), min(load)
        if top - low <= BALANCE_SLACK * top or low == 0.0:
            return
        g = next(g for g, ranks in enumerate(members) if load.index(top) in ranks)
        size, placed = groups[g]
        if len(placed) <= 1:
            return
        cost = workload(placed[-1][1], size)
        after = [x - cost if r in members[g] else x for r, x in enumerate(load)]
        if max(after) - min(after) >= top - low:
            return
        left.append(placed.pop())
        load[:] = after


def schedule(lengths: Sequence[int], per_rank: int, world: int) -> list[list[tuple[int, list[int]]]] | None:
    """Megatron's rounds for a global batch: per round its groups as (size, item indices); None when some item
    needs more than `world` ranks."""
    if any(gpus_needed(n, per_rank) > world for n in lengths):
        return None
    items = sorted(enumerate(lengths), key=lambda x: -x[1])
    rounds = []
    while items:
        groups, items = one_round(items, per_rank, world)
        rounds.append([(s, [i for i, _ in placed]) for s, placed in groups])
    return rounds


def megatron_rounds(costs: ItemTimes, lengths: Sequence[int], per_rank: int,
                    sync: Callable[[tuple[int, ...]], float]) -> RoundsChoice:
    """Megatron's schedule of `lengths` priced on `costs` (item times per group size): each round's groups train
    their items one after another; infinite when an item needs more than the world or does not fit its group."""
    rounds = schedule(lengths, per_rank, costs.world)
    if rounds is None:
        return rounds_choice([GroupChoice((costs.world,), ((),), math.inf, 0.0)], sync)
    out = []
    for groups in rounds:
        groups = sorted(groups, key=lambda g: -g[0])
        loads = [sum(costs.times[s][i] for i in items) for s, items in groups]
        out.append(GroupChoice(tuple(s for s, _ in groups), tuple(tuple(items) for _, items in groups),
                               float(max(loads)), sync(tuple(s for s, _ in groups))))
    return rounds_choice(out, sync, costs)


PER_RANK_CANDIDATES = tuple(1 << k for k in range(9, 21))
"""Per-rank lengths tried (512 to 1M tokens)."""


def fitting(costs: ItemTimes, lengths: Sequence[int], per_rank: int) -> list[int]:
    """The items that fit the group Megatron gives them (no more ranks than the world, in memory)."""
    return [i for i, n in enumerate(lengths) if gpus_needed(n, per_rank) <= costs.world
            and math.isfinite(costs.times[gpus_needed(n, per_rank)][i])]


def choose_per_rank(batches: Sequence[tuple[ItemTimes, Sequence[int]]],
                    sync: Callable[[tuple[int, ...]], float]) -> int:
    """Megatron's `max_seqlen_per_dp_cp_rank` chosen on held-out batches (their item times and lengths): the
    candidate with which the most held-out items fit their groups, then whose schedules train those items
    fastest, then the larger."""
    best = None
    for per_rank in PER_RANK_CANDIDATES:
        count, total = 0, 0.0
        for costs, lengths in batches:
            keep = fitting(costs, lengths, per_rank)
            count += len(keep)
            if keep:
                total += megatron_rounds(subset(costs, keep), [lengths[i] for i in keep], per_rank, sync).step_s
        key = (-count, total, -per_rank)
        if best is None or key < best[0]:
            best = (key, per_rank)
    return best[1]
