"""REPORT.md's packing section: one sequence per step against packed steps (packing.csv of each truth)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from paradyse_lab.app.report.markdown import (
    NAMES,
    PAPER_STATICS,
    TRUTH_LABELS,
    first_row,
    fmt_num,
    fmt_pct,
    md_table,
    read_csv,
    truth_dirs,
)

PACKING_HEADER = ["panel", "truth", "tokens per step", "best static: time per token, longest document",
                  "ParaDySe (heuristic)", "dp", "ParaDySe's saving per token",
                  "ParaDySe's strategies (share of layers x tokens)"]


def best_static(panel: pd.DataFrame) -> pd.Series:
    """The static strategy of a packing panel that trains its whole dataset fastest per token, else the one
    that reaches the longest document (then the fastest)."""
    statics = panel[panel.policy.isin(PAPER_STATICS)]
    done = statics[statics.finished.astype(bool)]
    if len(done):
        return done.sort_values("time_per_token_us").iloc[0]
    return statics.sort_values(["max_doc_trained", "total_time_s"], ascending=[False, True]).iloc[0]


def _reach(row: pd.Series) -> str:
    return f"{row.max_doc_trained:,}" + ("" if row.finished else " (OOM)")


def packing_rows(results: Path) -> list[list]:
    """Per truth, panel and step size: the best static strategy against ParaDySe and dp (packing.csv)."""
    rows = []
    for truth, folder in truth_dirs(results).items():
        path = folder / "packing.csv"
        if not path.exists():
            continue
        t = read_csv(path, keep_default_na=False, na_values=[""])
        for (d, m, b), panel in t.groupby(["dataset", "model", "pack_tokens"], sort=False):
            best = best_static(panel)
            heur, dp = first_row(panel, policy="dynamic:heuristic"), first_row(panel, policy="dynamic:dp")
            saving = 1 - heur.time_per_token_us / best.time_per_token_us if best.finished and heur.finished else None
            rows.append([f"{NAMES[d]}, {NAMES[m]}", TRUTH_LABELS[truth], f"{b // 1024}K" if b else "1 sequence",
                         f"{NAMES[best.policy]}: {fmt_num(best.time_per_token_us, '{:.2f}')} µs, {_reach(best)}",
                         f"{fmt_num(heur.time_per_token_us, '{:.2f}')} µs, {_reach(heur)}",
                         fmt_num(dp.time_per_token_us, "{:.2f}") + " µs", fmt_pct(saving),
                         heur.strategy_mix.replace(";", ", ")])
    return rows


def packing_section(results: Path) -> str:
    """The section's text and table ("(not run)" without a packing.csv)."""
    rows = packing_rows(results)
    return f"""The paper trains one sequence per step. Here the same documents are packed into steps of 32K and 128K
tokens (greedy first-fit decreasing, steps ordered short to long, attention confined to each document; a document
longer than the budget is a step alone; `paradyse-lab experiment packing`, packing.csv, paper/packing.csv).
A packed step's cost (paradyse_lab/costmodel/packed.py): attention per document, the linear parts, traffic
and memory over the pack's tokens; under the paper-measured times the fit's c + b S + a (sum of n_i^2). Ring
strategies (zig-zag per document, as the runtime lays it out) are charged their busiest rank's attention
(paradyse_lab/workload/zigzag_balance.py). The
best static strategy is the one that trains every document fastest per token (else the one that reaches the
longest document, marked OOM); the saving compares time per token of runs that both finish.

{md_table(PACKING_HEADER, rows) if rows else "(not run)"}"""
