"""The `smallest-fit` group planner (`smallest_fit_partition`), one split per step: each item on the smallest
group that fits it, groups per size in proportion to the work of that size, greedy balance inside each size.
Not Megatron-Core's dynamic context-parallel scheduler, which runs a step as rounds of splits and leaves no GPU
idle. The problem and its types: `group_problem`.
"""

from __future__ import annotations

import math

from paradyse_lab.simulator.group_problem import GroupChoice, ItemTimes, Partition, Sync, fill


def smallest_fit_partition(costs: ItemTimes, sync: Sync) -> GroupChoice:
    """Item i on the smallest group that fits it; the world's ranks
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
