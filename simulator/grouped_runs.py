"""A run of grouped steps: the workload's items cut into global batches, one simulated step per batch (its
groups chosen and priced as grouped steps), and the run's summary.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import numpy as np

from paradyse_lab.costmodel.packed import PackedStep
from paradyse_lab.simulator.group_problem import lower_bound_s
from paradyse_lab.simulator.group_rounds import rounds_lower_bound_s
from paradyse_lab.simulator.grouped_steps import GroupPricer
from paradyse_lab.simulator.round_steps import ROUND_POLICIES, choose_rounds, grouped_rounds, megatron_fits

if TYPE_CHECKING:  # pandas (a second of start-up) only where a run's rows are made
    import pandas as pd  # pandas: ~0.3 s to import, only once a run's rows become a table

STEP_COLUMNS = ("step", "policy", "groups", "items", "trained", "dropped", "tokens", "longest", "rounds",
                "group_sizes", "busy_groups", "makespan_s", "sync_s", "step_time_s", "lower_bound_s", "plan_ms")
"""One simulated step of a global batch. items: sequences in the batch; trained / dropped: those that fit a
group the policy may use / fit none; tokens, longest: of the trained ones; group_sizes: the sizes in rank order
joined by ','; busy_groups: groups with items; lower_bound_s: no split of the GPUs into the groups the policy
may use trains the step faster (`group_problem.lower_bound_s`, with the synchronisation of each set of sizes);
plan_ms: wall time to price the items (solves, cached per group size and length) and choose the groups
(measured: `TIMING_COLUMNS`)."""
TIMING_COLUMNS = ("plan_ms",)
"""Measured wall time: written to the run's timings file, not its CSV."""
SUMMARY_TIMING_COLUMNS = ("plan_ms_mean", "plan_ms_max")
"""`summarize_grouped`'s measured columns."""


def simulate_grouped(batches, group_policy: str, pricer: GroupPricer, ring: GroupPricer | None = None,
                     policy_name: str = "", per_rank: int | None = None) -> pd.DataFrame:
    """One row per global batch (`STEP_COLUMNS`): items that fit no allowed group are dropped from the step (under
    `megatron`, those that do not fit the group its per-rank length gives them); `per_rank`: Megatron's per-rank
    length (the `megatron` policy, and ours' Megatron candidate)."""
    rows = []
    world = pricer.cluster.gpus
    allowed = (world,) if group_policy in ("paradyse", "static") else pricer.group_sizes()
    for step, batch in enumerate(batches):
        started = time.perf_counter()
        if group_policy == "megatron":  # the group its per-rank length gives each sequence
            fits = [n for n in batch if megatron_fits(pricer, n, per_rank)]
        else:
            fits = [n for n in batch if any(math.isfinite(pricer.item(g, n)[0]) for g in allowed)]
        choice = choose_rounds(group_policy, fits, pricer, ring, per_rank) if fits else None
        if choice is not None:
            grouped_rounds(choice, fits, pricer)  # the type the runtime runs; its checks hold for every round
        plan_ms = (time.perf_counter() - started) * 1e3
        bound_of = rounds_lower_bound_s if group_policy in ROUND_POLICIES else lower_bound_s
        bound = bound_of(pricer.times(fits, allowed), pricer.sync_s) if fits else 0.0
        rows.append({
            "step": step, "policy": policy_name or group_policy, "groups": group_policy, "items": len(batch),
            "trained": len(fits), "dropped": len(batch) - len(fits), "tokens": sum(map(item_tokens, fits)),
            "longest": max(map(item_longest, fits), default=0),
            "rounds": len(choice.rounds) if choice else 0, "group_sizes": choice.label() if choice else "",
            "busy_groups": choice.busy_groups if choice else 0,
            "makespan_s": float(choice.makespan_s) if choice else 0.0,
            "sync_s": float(choice.sync_s) if choice else 0.0,
            "step_time_s": float(choice.step_s) if choice else 0.0, "lower_bound_s": bound, "plan_ms": plan_ms,
        })
    import pandas as pd  # pandas: ~0.3 s to import, only once a run's rows become a table

    return pd.DataFrame(rows, columns=list(STEP_COLUMNS))


def item_tokens(step: int | PackedStep) -> int:
    """The real tokens of an item: a sequence's length, or a pack's documents summed."""
    return step.tokens if isinstance(step, PackedStep) else int(step)


def item_longest(step: int | PackedStep) -> int:
    """The longest sequence of an item: its length, or a pack's longest document."""
    return step.longest if isinstance(step, PackedStep) else int(step)


def workload_items(workload) -> tuple:
    """A workload's items: its sequence lengths, or its packs as `PackedStep`s (each document padded per group)."""
    if workload.packs is None:
        return tuple(workload.lengths)
    return tuple(PackedStep(tuple(pack)) for pack in workload.packs)


def global_batches(items, batch: int | None = None, tokens: int | None = None, seed: int = 0) -> list[tuple]:
    """The workload's items (sequence lengths, or packs as `PackedStep`s) shuffled (seeded, as a data loader
    does) and cut into global batches of `batch` items, or of at most `tokens` real tokens (a longer item alone);
    the last batch may be short."""
    order = np.random.default_rng(seed).permutation(len(items))
    shuffled = [items[i] if isinstance(items[i], PackedStep) else int(items[i]) for i in order]
    if batch is not None:
        return [tuple(shuffled[k:k + batch]) for k in range(0, len(shuffled), batch)]
    out, current, held = [], [], 0
    for item in shuffled:
        if current and held + item_tokens(item) > tokens:
            out.append(tuple(current))
            current, held = [], 0
        current.append(item)
        held += item_tokens(item)
    return out + ([tuple(current)] if current else [])


def summarize_grouped(rows: pd.DataFrame) -> dict:
    """Tokens per second, longest length trained, items dropped and planning time of a run of grouped steps."""
    time_s, bound_s = float(rows["step_time_s"].sum()), float(rows["lower_bound_s"].sum())
    tokens = int(rows["tokens"].sum())
    return {"steps": len(rows), "tokens": tokens, "time_s": time_s,
            "tokens_per_s": tokens / time_s if time_s else 0.0,
            "bound_tokens_per_s": tokens / bound_s if bound_s else 0.0, "longest": int(rows["longest"].max()),
            "dropped": int(rows["dropped"].sum()), "plan_ms_mean": float(rows["plan_ms"].mean()),
            "plan_ms_max": float(rows["plan_ms"].max())}
