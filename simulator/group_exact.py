"""The exact group planner: every partition of `world` into powers of two, each with the optimal assignment
(dynamic programming over subsets of items, `best_assignment`): exact, for small instances (a handful of items).
The problem and its types: `group_problem`.
"""

from __future__ import annotations

import math

import numpy as np

from paradyse_lab.errors import UserInputError
from paradyse_lab.simulator.group_problem import GroupChoice, ItemTimes, Partition, Sync, binary_partitions, objective


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
               key=objective)
