"""REPORT.md's section on global batches over groups sized per step (groups.csv of `experiment groups`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from paradyse_lab.app.report.markdown import NAMES, md_table
from paradyse_lab.results.timings import read_with_timings

GROUPS_COMMAND = "paradyse-lab experiment groups --out RESULTS"
GROUPS_HEADER = ["cluster", "panel", "ParaDySe tokens/s", "ours tokens/s (x ParaDySe)", "ours: of its bound",
                 "bound (x ParaDySe)", "dynamic CP (x ParaDySe)",
                 "best static (x ParaDySe)", "longest trainable (ours / ParaDySe / dynamic CP)",
                 "untrainable (ours / dynamic CP)",
                 "ours: plan ms per step", "ours: group sizes per step"]


def groups_rows(table: pd.DataFrame) -> list[list]:
    """One row per panel: the four series side by side."""
    rows = []
    for (c, d, m), panel in table.groupby(["cluster", "dataset", "model"], sort=False):
        by = {r.series: r for r in panel.itertuples()}
        para, ours, dcp, best = by["ParaDySe"], by["ours"], by["dynamic CP"], by["best static"]
        rows.append([c, f"{NAMES.get(d, d)}, {NAMES.get(m, m)}", f"{para.tokens_per_s:,.0f}",
                     f"{ours.tokens_per_s:,.0f} ({ours.vs_paradyse:.2f}x)",
                     f"{ours.tokens_per_s / ours.bound_tokens_per_s:.0%}",
                     f"{ours.bound_tokens_per_s / para.tokens_per_s:.2f}x", f"{dcp.vs_paradyse:.2f}x",
                     f"{best.policy.removeprefix('static:')} {best.vs_paradyse:.2f}x",
                     f"{ours.longest_trainable:,} / {para.longest_trainable:,} / {dcp.longest_trainable:,}",
                     f"{ours.untrainable} / {dcp.untrainable}",
                     f"{ours.plan_ms_mean:.0f}", str(ours.group_sizes).replace(",", " ")])
    return rows


def groups_section(results: Path) -> str:
    """The section's text, table and targets ("(not run)" without a groups.csv)."""
    from paradyse_lab.simulator.groups_experiment import target_checks

    path = Path(results) / "groups.csv"
    if not path.exists():
        return f"(not run: `{GROUPS_COMMAND.replace('RESULTS', str(results))}` writes groups.csv and the figure)"
    table = read_with_timings(path, keep_default_na=False, na_values=[""])
    checks = md_table(["target", "met", "measured"],
                      [[n, "yes" if ok else "**no**", v] for n, ok, v in target_checks(table)])
    return f"""Each panel's sequences (128 per dataset, seeded) are shuffled and trained in global batches of 32
sequences (`{GROUPS_COMMAND.replace('RESULTS', str(results))}`, or a full `paradyse-lab reproduce`; groups.csv,
runs/groups/, figures/groups.png; simulator/groups_experiment.py). Per step: ParaDySe runs every sequence on one
group of all GPUs with its per-layer plan; ours splits the GPUs into aligned power-of-two groups sized for that
step (inside a node first), places each sequence on a group and plans it per layer for that group's size (the
greedy group planner, simulator/group_greedy.py); dynamic CP is Megatron-style dynamic context parallelism
(ring attention on the smallest group that fits each sequence, greedy balance); best static: one group of all
GPUs and the one strategy that trains the most tokens, then fastest. Per-layer plans come from the exact dp
solver for ParaDySe and ours alike. A step takes its slowest group plus the gradient synchronisation across
groups (states in one layout over the world; each group's shards gathered from it for the step and their
gradients reduce-scattered back; simulator/grouped_steps.py), priced on clusters of 1, 4 and 16 nodes with
hierarchical collectives between nodes (docs/hardware.md section 4). Analytic cost model. Throughput is at equal
global batch: every series trains the same batches, cut from the sequences both ParaDySe and dynamic CP can
train (a static strategy drops from its steps what it cannot fit); reach is over the whole sample: the longest
sequence a series can train on some group it may use, and how many it cannot train at all. The bound: a step has
one split of the GPUs, so for every set of group sizes a split could have, no split with those sizes trains the
step faster than its longest sequence on its fastest group of those sizes, or than all its sequences' least
GPU-seconds on them spread over every GPU, plus the synchronisation of those sizes; the least over the sets bounds
the step (`group_problem.lower_bound_s`; a step with a sequence that fits only all the GPUs is one group of all of
them, exactly); "bound (x ParaDySe)" is the most any grouping could gain on that panel under the cost model.

{md_table(GROUPS_HEADER, groups_rows(table))}

{checks}"""
