"""The group planners in `bench-solvers` (kind `groups`): the greedy planner's gap to the exact one on small
global batches, and the time to plan a global batch of 64 sequences on 16 nodes.

Items are sequences of the GitHubCode sample (paradyse_lab/workload/lengths.py), priced for BERT by the analytic model
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
from paradyse_lab.simulator.grouped_steps import GroupPricer, choose, power_sizes
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
    """Per batch size: exact and greedy group planning (item times priced beforehand), the greedy's gap."""
    pricer = _pricer("a100-80gb-x8")
    lengths = get_workload("github_code", 200, seed).lengths
    rng = np.random.default_rng(seed)
    rows = []
    for n in SMALL_BATCHES:
        exact_t, greedy_t, gaps, optimal = [], [], [], 0
        for _ in range(instances):
            batch = [int(x) for x in rng.choice(lengths, n, replace=False)]
            costs = pricer.times(batch, power_sizes(pricer.cluster.gpus))
            started = time.perf_counter()
            exact = plan_exact(costs, pricer.sync_s)
            exact_t.append(time.perf_counter() - started)
            started = time.perf_counter()
            greedy = plan_greedy(costs, pricer.sync_s, [smallest_fit_partition(costs, pricer.sync_s)])
            greedy_t.append(time.perf_counter() - started)
            gaps.append(greedy.step_s / exact.step_s - 1)
            optimal += greedy.step_s <= exact.step_s * (1 + 1e-9)
        rows.append(_row("groups", n, pricer.cluster.gpus, "groups-exact", exact_t, [0.0] * instances, instances))
        rows.append(_row("groups", n, pricer.cluster.gpus, "groups-greedy", greedy_t, gaps, optimal))
    return rows


def planning_time_rows(instances: int, seed: int) -> list[dict]:
    """64 sequences on 16 nodes: the whole `sized` choice with every item priced first (solves included, the
    first steps of a run), and with the item plans already cached (a run's later steps meet known lengths)."""
    n, cluster = LARGE
    lengths = get_workload("github_code", 200, seed).lengths
    rng = np.random.default_rng(seed)
    cold, warm = [], []
    for _ in range(instances):
        pricer = _pricer(cluster)
        batch = [int(x) for x in rng.choice(lengths, n, replace=False)]
        for store in (cold, warm):
            started = time.perf_counter()
            choose("sized", batch, pricer)
            store.append(time.perf_counter() - started)
    world = get_cluster(cluster).gpus
    return [_row("groups", n, world, "groups-greedy (items priced)", cold, []),
            _row("groups", n, world, "groups-greedy (item plans cached)", warm, [])]


def run(instances: int, seed: int) -> list[dict]:
    """Both kinds of rows."""
    return gap_rows(instances, seed) + planning_time_rows(instances, seed)
