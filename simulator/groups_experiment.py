"""`paradyse-lab experiment groups`: global batches over groups sized per step, against one group of all GPUs.

Panels: both paper datasets x the GPT, LLaMA and BERT shapes on 1, 4 and 16 nodes of 8 A100-80GB (the paper's
node), and `llama3-8b` on 1, 4 and 16 nodes of 8 H100. Each panel's workload (`size` sequences, seeded) is
shuffled and cut into global batches of `global_batch` sequences
(`global_batches`); every series trains the same batches, of the sequences both ParaDySe and ring attention on
some group can train (throughput at equal global batch; what each series can train at all is its reach,
`run_panel`):

- ParaDySe: one group of all GPUs, a per-layer plan per sequence (the paper's design);
- ours: a step as rounds of group splits, a per-layer plan per sequence (`rounds`, the greedy rounds planner);
- Megatron: Megatron-Core's dynamic context-parallel scheduler (`megatron`: its
  rules from megatron-core 0.19.2's BalancedCPScheduler) with ring attention (megatron_cz), its per-rank length
  (`max_seqlen_per_dp_cp_rank`) chosen on held-out batches of the same dataset (the workload of the next seed);
- smallest-fit CP (one split): ring attention on the smallest group that fits each sequence, groups shared in
  proportion to the work, one split per step (`smallest-fit`; this experiment's former "dynamic CP");
- best static: one group of all GPUs and one strategy, the one that trains the most tokens, then fastest.

Per-layer plans use the exact dp solver for ParaDySe and ours alike, so the difference between them is the
grouping alone. Charged by the analytic cost model. Writes results/groups.csv (one row per panel and series)
and one CSV of steps per run under results/runs/groups/ (reused unless --force or the settings changed); the
planning wall times go to timings/ beside each.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import USABLE
from paradyse_lab.results.timings import write_with_timings
from paradyse_lab.simulator import shared
from paradyse_lab.simulator.grouped_runs import (
    SUMMARY_TIMING_COLUMNS,
    TIMING_COLUMNS,
    global_batches,
    simulate_grouped,
    summarize_grouped,
)
from paradyse_lab.simulator.grouped_steps import RING_POLICY, GroupPricer, power_sizes
from paradyse_lab.simulator.results import DEFAULT_RESULTS_DIR, load_or_run, run_path
from paradyse_lab.simulator.round_steps import held_out_per_rank, megatron_fits
from paradyse_lab.workload.lengths import get_workload

DATASETS = ("github_code", "grch38")
NODE_COUNTS = (1, 4, 16)
PANELS = (("a100-80gb", ("bert", "llama", "gpt")), ("h100-80gb", ("llama3-8b",)))
"""(GPU, models): the paper's node with the paper's shapes, and H100 with llama3-8b."""
SOLVER_POLICY = "dynamic:dp"
SERIES = (("ParaDySe", "paradyse", SOLVER_POLICY), ("ours", "rounds", SOLVER_POLICY),
          ("Megatron", "megatron", RING_POLICY), ("smallest-fit CP", "smallest-fit", RING_POLICY))
"""(label, group policy, planning policy); the best static series is chosen among `static:NAME` runs."""
TARGET_SPEEDUP = 1.5
TARGET_PANELS = (("a100-80gb-x8", "github_code", "bert"), ("h100-80gb-x8", "github_code", "llama3-8b"))
"""Where ours should reach `TARGET_SPEEDUP` x ParaDySe's tokens per second."""


@dataclass(frozen=True)
class GroupsSetup:
    """What every run of the experiment shares."""

    size: int = 128
    """Sequences sampled per dataset."""
    global_batch: int = 32
    """Sequences per step."""
    seed: int = 0
    node_counts: tuple[int, ...] = NODE_COUNTS


def cluster_name(gpu: str, nodes: int) -> str:
    return f"{gpu}-x8" if nodes == 1 else f"{gpu}-{nodes}x8"


def panels(setup: GroupsSetup) -> list[tuple[str, str, str]]:
    """(cluster, dataset, model) of every panel."""
    return [(cluster_name(gpu, n), d, m) for gpu, models in PANELS for n in setup.node_counts
            for d in DATASETS for m in models]


def trainable(pricer: GroupPricer, sizes: tuple[int, ...], lengths) -> list[int]:
    """The lengths `pricer` fits on some group of `sizes`."""
    return [n for n in lengths if any(math.isfinite(pricer.item(g, n)[0]) for g in sizes)]


def run_panel(setup: GroupsSetup, cluster_id: str, dataset: str, model_name: str, root, force: bool) -> list[dict]:
    """Every series of one panel: one summary row each (the best static strategy's only).

    Throughput at equal global batch: every series trains the same batches, cut from the sequences that
    ParaDySe and ring attention can both train on some group (ours can train whatever ParaDySe can). Megatron's
    scheduler at its per-rank length (`megatron_per_rank`) drops the sequences that do not fit the group that
    length gives them; ours is also run on exactly the sequences it trains, and compared with it there
    (`tokens_per_s_megatron_batches`, `with_speedups`). Reach: `longest_trainable` and `untrainable` say, over
    the whole sample, the longest sequence a series can train on some group it may use and how many it cannot
    train at all."""
    cluster, model = get_cluster(cluster_id), get_model(model_name)
    lengths = get_workload(dataset, setup.size, setup.seed).lengths
    pricers: dict[str, GroupPricer] = {}

    def pricer(policy: str) -> GroupPricer:
        if policy not in pricers:
            pricers[policy] = GroupPricer(model, cluster, policy, cluster.plan_budget_bytes)
        return pricers[policy]

    every, whole = power_sizes(cluster.gpus), (cluster.gpus,)
    ring = pricer(RING_POLICY)
    held_out = [n for n in get_workload(dataset, setup.size, setup.seed + 1).lengths
                if trainable(pricer(SOLVER_POLICY), whole, [n]) and megatron_fits(ring, n, None)]
    per_rank = held_out_per_rank(ring, global_batches(held_out, setup.global_batch, seed=setup.seed + 1))
    common = set(trainable(pricer(SOLVER_POLICY), whole, lengths)) & set(trainable(ring, every, lengths))
    batches = global_batches([n for n in lengths if n in common], setup.global_batch, seed=setup.seed)

    megatron_batches = [tuple(n for n in b if megatron_fits(ring, n, per_rank)) for b in batches]

    def run(groups: str, policy: str, steps, tag: str = ""):
        path = run_path(root, "groups", cluster_id, dataset, model_name, groups + tag, policy)
        baseline = ring if groups in ("sized", "rounds") else None
        rows, _ = load_or_run(path, lambda: simulate_grouped(steps, groups, pricer(policy), baseline, groups,
                                                             per_rank), force,
                              settings={**asdict(setup), "run": [cluster_id, dataset, model_name, groups, policy],
                                        "megatron_per_rank": per_rank, "batches": tag or "common"},
                              timing_columns=TIMING_COLUMNS)
        return rows

    def one(groups: str, policy: str) -> dict:
        rows = run(groups, policy, batches)
        extra = {}
        if groups == "rounds":  # ours on exactly the sequences Megatron's scheduler trains, to compare with it
            same = megatron_batches == batches
            on_megatron = rows if same else run(groups, policy, megatron_batches, "-megatron-batches")
            extra["tokens_per_s_megatron_batches"] = summarize_grouped(on_megatron)["tokens_per_s"]
        if groups == "megatron":
            reach = [n for n in lengths if megatron_fits(ring, n, per_rank)]
        else:
            reach = trainable(pricer(policy), whole if groups in ("paradyse", "static") else every, lengths)
        return {"cluster": cluster_id, "nodes": cluster.nodes, "gpus": cluster.gpus, "dataset": dataset,
                "model": model_name, "groups": groups, "policy": policy, **summarize_grouped(rows),
                "longest_trainable": max(reach, default=0), "untrainable": len(lengths) - len(reach),
                "megatron_per_rank": per_rank, **extra,
                "group_sizes": " | ".join(map(str, rows["group_sizes"]))}

    out = [{"series": label, **one(groups, policy)} for label, groups, policy in SERIES]
    statics = [one("static", f"static:{s}") for s in USABLE]
    best = max(statics, key=lambda r: (r["tokens"], r["tokens_per_s"]))
    out.append({"series": "best static", **best})
    return out


def with_speedups(table: pd.DataFrame) -> pd.DataFrame:
    """Each row's tokens per second over its panel's ParaDySe and Megatron rows; ours' over Megatron's on the
    sequences Megatron's scheduler trains (where it drops some that do not fit the group its per-rank length
    gives them, Megatron's tokens per second is over fewer sequences)."""
    key = ["cluster", "dataset", "model"]
    base = table.set_index(key + ["series"])["tokens_per_s"]
    for label, column in (("ParaDySe", "vs_paradyse"), ("Megatron", "vs_megatron")):
        ref = [base.get((c, d, m, label)) for c, d, m in zip(table.cluster, table.dataset, table.model)]
        table[column] = [t / r if r else None for t, r in zip(table.tokens_per_s, ref)]
    if "tokens_per_s_megatron_batches" in table:  # ours against Megatron on the sequences Megatron trains
        ours = table.series == "ours"
        ref = [base.get((c, d, m, "Megatron")) for c, d, m in zip(table.cluster, table.dataset, table.model)]
        table.loc[ours, "vs_megatron"] = [t / r if r else math.nan for t, r, o in
                                          zip(table.tokens_per_s_megatron_batches, ref, ours) if o]
    return table


def groups(setup: GroupsSetup, root=DEFAULT_RESULTS_DIR, force: bool = False, progress: bool = True) -> pd.DataFrame:
    """Run every panel (module docstring); writes and returns results/groups.csv."""
    rows = []
    with shared.sharing():  # the panels of a cluster and model share cost models and problems
        for cluster_id, dataset, model in tqdm(panels(setup), desc="groups panels", unit="panel",
                                               disable=not progress):
            rows += run_panel(setup, cluster_id, dataset, model, root, force)
    table = with_speedups(pd.DataFrame(rows))
    write_with_timings(table, Path(root) / "groups.csv", SUMMARY_TIMING_COLUMNS,
                       ("cluster", "dataset", "model", "series"))
    return table


def target_checks(table: pd.DataFrame) -> list[tuple[str, bool, str]]:
    """The targets (name, met, what was measured): ours never slower than ParaDySe or Megatron on any panel;
    at least `TARGET_SPEEDUP` x ParaDySe on `TARGET_PANELS`; the longest length unchanged."""
    ours = table[table.series == "ours"]
    slower = ours[(ours.vs_paradyse < 1 - 1e-9) | (ours.vs_megatron < 1 - 1e-9)]
    out = [("never slower than ParaDySe or Megatron", slower.empty,
            f"{len(ours) - len(slower)} of {len(ours)} panels; min {ours.vs_paradyse.min():.3f}x ParaDySe, "
            f"min {ours.vs_megatron.min():.3f}x Megatron")]
    for cluster_id, dataset, model in TARGET_PANELS:
        row = ours[(ours.cluster == cluster_id) & (ours.dataset == dataset) & (ours.model == model)]
        if len(row):
            x = float(row.vs_paradyse.iloc[0])
            out.append((f">= {TARGET_SPEEDUP}x ParaDySe, {model} on {dataset}, {cluster_id}", x >= TARGET_SPEEDUP,
                        f"{x:.2f}x"))
    para = table[table.series == "ParaDySe"].set_index(["cluster", "dataset", "model"])["longest_trainable"]
    mine = ours.set_index(["cluster", "dataset", "model"])["longest_trainable"]
    same = bool((mine >= para.reindex(mine.index)).all())
    out.append(("longest length trained unchanged", same, "ours >= ParaDySe on every panel" if same else "shorter"))
    return out
