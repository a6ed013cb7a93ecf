"""REPORT.md's section on global batches over groups sized per step (groups.csv of `experiment groups`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from paradyse_lab.app.report.markdown import NAMES, md_table
from paradyse_lab.results.timings import read_with_timings
from paradyse_lab.simulator.groups_experiment import target_checks

GROUPS_COMMAND = "paradyse-lab experiment groups --out RESULTS"
GROUPS_HEADER = ["cluster", "panel", "ParaDySe tokens/s", "ours tokens/s (x ParaDySe)", "ours: of its bound",
                 "bound (x ParaDySe)", "Megatron (x ParaDySe)", "smallest-fit CP (x ParaDySe)",
                 "best static (x ParaDySe)", "longest trainable (ours / ParaDySe / Megatron)",
                 "untrainable (ours / Megatron)",
                 "ours: plan ms per step", "ours: group sizes per step (rounds split by /)"]


def groups_rows(table: pd.DataFrame) -> list[list]:
    """One row per panel: the four series side by side."""
    rows = []
    for (c, d, m), panel in table.groupby(["cluster", "dataset", "model"], sort=False):
        by = {r.series: r for r in panel.itertuples()}
        para, ours, dcp, best = by["ParaDySe"], by["ours"], by["Megatron"], by["best static"]
        one_split = by["smallest-fit CP"]
        rows.append([c, f"{NAMES.get(d, d)}, {NAMES.get(m, m)}", f"{para.tokens_per_s:,.0f}",
                     f"{ours.tokens_per_s:,.0f} ({ours.vs_paradyse:.2f}x)",
                     f"{ours.tokens_per_s / ours.bound_tokens_per_s:.0%}",
                     f"{ours.bound_tokens_per_s / para.tokens_per_s:.2f}x",
                     f"{dcp.vs_paradyse:.2f}x (per rank {dcp.megatron_per_rank:,})", f"{one_split.vs_paradyse:.2f}x",
                     f"{best.policy.removeprefix('static:')} {best.vs_paradyse:.2f}x",
                     f"{ours.longest_trainable:,} / {para.longest_trainable:,} / {dcp.longest_trainable:,}",
                     f"{ours.untrainable} / {dcp.untrainable}",
                     f"{ours.plan_ms_mean:.0f}", str(ours.group_sizes).replace(",", " ")])
    return rows


def groups_section(results: Path) -> str:
    """The section's text, table and targets ("(not run)" without a groups.csv)."""
    path = Path(results) / "groups.csv"
    if not path.exists():
        return f"(not run: `{GROUPS_COMMAND.replace('RESULTS', str(results))}` writes groups.csv and the figure)"
    table = read_with_timings(path, keep_default_na=False, na_values=[""])
    checks = md_table(["target", "met", "measured"],
                      [[n, "yes" if ok else "**no**", v] for n, ok, v in target_checks(table)])
    return f"""Each panel's sequences (128 per dataset, seeded) are shuffled and trained in global batches of 32
sequences (`{GROUPS_COMMAND.replace('RESULTS', str(results))}`, or a full `paradyse-lab reproduce`; groups.csv,
runs/groups/, figures/groups.png; simulator/groups_experiment.py). Per step: ParaDySe runs every sequence on one
group of all GPUs with its per-layer plan; ours runs the step as rounds, one after another, each a split of the
GPUs into aligned power-of-two groups (inside a node first), places each sequence on a group of a round and plans
it per layer for that group's size (the greedy rounds planner, simulator/group_rounds.py); Megatron is
Megatron-Core's dynamic context-parallel scheduler (its rules from megatron-core 0.19.2's BalancedCPScheduler,
simulator/group_megatron.py; ring attention; its per-rank length chosen on held-out batches); smallest-fit CP is
one split per step with ring attention on the smallest group that fits each sequence; best static: one group of
all GPUs and the one strategy that trains the most tokens, then fastest. Per-layer plans come from the exact dp
solver for ParaDySe and ours alike. A step takes the sum of its rounds' slowest groups plus one gradient
synchronisation across groups (states in one layout over the world; each group's shards gathered from it for the
step and their gradients reduce-scattered back; simulator/grouped_steps.py), priced on clusters of 1, 4 and 16
nodes with hierarchical collectives between nodes (docs/hardware.md section 4). Analytic cost model. Throughput is
at equal global batch: every series trains the same batches, cut from the sequences both ParaDySe and ring
attention on some group can train (a static strategy drops from its steps what it cannot fit); reach is over the
whole sample: the longest sequence a series can train on some group it may use, and how many it cannot train at
all. The bound: whatever rounds a step has, for every set of group sizes they could use, no schedule trains the
step faster than its longest sequence on its fastest group of those sizes, or than all its sequences' least
GPU-seconds on them spread over every GPU, plus the synchronisation of the smallest of those sizes; the least over
the sets bounds the step (`group_rounds.rounds_lower_bound_s`); "bound (x ParaDySe)" is the most any schedule of
rounds could gain on that panel under the cost model.

{md_table(GROUPS_HEADER, groups_rows(table))}

{checks}"""
