"""The group planners in `solvers bench` (kind `groups`): the greedy planners' gaps to the exact ones on small
global batches (one split per step, and steps as rounds of splits), and the time to plan a global batch of 64
sequences on 16 nodes (one split, and rounds).

Items are sequences of the GitHubCode sample, priced for BERT by the analytic model
with per-layer plans (dp). Rows use the solver benchmark's columns: `layers` holds the sequences of a step,
`options` the GPUs.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from paradyse_lab.cluster.files import cluster_with_gpus, get_cluster
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.simulator.group_dynamic_cp import smallest_fit_partition
from paradyse_lab.simulator.group_exact import plan_exact
from paradyse_lab.simulator.group_greedy import plan_greedy
from paradyse_lab.simulator.group_rounds import MAX_EXACT_ROUND_ITEMS, plan_rounds, plan_rounds_exact
from paradyse_lab.simulator.grouped_steps import GroupPricer, choose, power_sizes
from paradyse_lab.simulator.round_steps import choose_rounds
from paradyse_lab.workload.lengths import get_workload

SMALL_BATCHES = (4, 6, 8)
"""Sequences per step of the gap rows (on one 8-GPU node)."""
LARGE = (64, "h100-80gb-16x8")
"""The planning-time row: 64 sequences on 16 nodes of 8 H100."""


def _pricer(cluster_name: str, gpus: int | None = None) -> GroupPricer:
    cluster = cluster_with_gpus(get_cluster(cluster_name), gpus)
    return GroupPricer(get_model("bert"), cluster, "dynamic:dp", cluster.plan_budget_bytes)


def _row(kind: str, items: int, world: int, solver: str, times: list, gaps: list, optimal: int = 0) -> dict:
    return {"kind": kind, "layers": items, "options": world, "solver": solver, "instances": len(times),
            "median_ms": round(1e3 * statistics.median(times), 3), "max_ms": round(1e3 * max(times), 3),
            "mean_gap_pct": round(100 * statistics.fmean(gaps), 3) if gaps else None,
            "max_gap_pct": round(100 * max(gaps), 3) if gaps else None,
            "optimal": optimal, "infeasible": 0, "disagree": 0}


def gap_rows(instances: int, seed: int) -> list[dict]:
    """Per batch size: exact and greedy group planning (item times priced beforehand), the greedy's gap; one split
    per step, then steps as rounds of splits (up to the exact rounds planner's limit)."""
    pricer = _pricer("a100-80gb-x8")
    lengths = get_workload("github_code", 200, seed).lengths
    rng = np.random.default_rng(seed)
    sync = pricer.sync_s
    kinds = (("groups", SMALL_BATCHES, lambda c: plan_exact(c, sync),
              lambda c: plan_greedy(c, sync, [smallest_fit_partition(c, sync)])),
             ("rounds", [k for k in SMALL_BATCHES if k <= MAX_EXACT_ROUND_ITEMS],
              lambda c: plan_rounds_exact(c, sync), lambda c: plan_rounds(c, sync)))
    rows = []
    for name, batch_sizes, exact_of, greedy_of in kinds:
        for n in batch_sizes:
            exact_t, greedy_t, gaps, optimal = [], [], [], 0
            for _ in range(instances):
                batch = [int(x) for x in rng.choice(lengths, n, replace=False)]
                costs = pricer.times(batch, power_sizes(pricer.cluster.gpus))
                started = time.perf_counter()
                exact = exact_of(costs)
                exact_t.append(time.perf_counter() - started)
                started = time.perf_counter()
                greedy = greedy_of(costs)
                greedy_t.append(time.perf_counter() - started)
                gaps.append(greedy.step_s / exact.step_s - 1)
                optimal += greedy.step_s <= exact.step_s * (1 + 1e-9)
            world = pricer.cluster.gpus
            rows.append(_row("groups", n, world, f"{name}-exact", exact_t, [0.0] * instances, instances))
            rows.append(_row("groups", n, world, f"{name}-greedy", greedy_t, gaps, optimal))
    return rows


def planning_time_rows(instances: int, seed: int) -> list[dict]:
    """64 sequences on 16 nodes: the whole `sized` choice with every item priced first (solves included, the
    first steps of a run), and with the item plans already cached (a run's later steps meet known lengths)."""
    n, cluster = LARGE
    lengths = get_workload("github_code", 200, seed).lengths
    rng = np.random.default_rng(seed)
    cold, warm, rounds = [], [], []
    for _ in range(instances):
        pricer = _pricer(cluster)
        batch = [int(x) for x in rng.choice(lengths, n, replace=False)]
        for store in (cold, warm):
            started = time.perf_counter()
            choose("sized", batch, pricer)
            store.append(time.perf_counter() - started)
        started = time.perf_counter()
        choose_rounds("rounds", batch, pricer)
        rounds.append(time.perf_counter() - started)
    world = get_cluster(cluster).gpus
    return [_row("groups", n, world, "groups-greedy (items priced)", cold, []),
            _row("groups", n, world, "groups-greedy (item plans cached)", warm, []),
            _row("groups", n, world, "rounds-greedy (item plans cached)", rounds, [])]


def run(instances: int, seed: int) -> list[dict]:
    """Both kinds of rows."""
    return gap_rows(instances, seed) + planning_time_rows(instances, seed)
