"""REPORT.md's section on the strategies beyond the paper's four on one 8-GPU node (two_d.csv of the `two_d`
step): the step time and longest length of models whose head counts 8 does not divide, with and without them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from paradyse_lab.app.report.markdown import md_table, read_csv

TWO_D_HEADER = ["model", "step", "paper's four: s per step (options)", "+ 2-D and uneven heads: s per step (options)",
                "saving"]


def two_d_table_rows(table: pd.DataFrame) -> list[list]:
    """One row per model and step: the two option sets side by side (the longest-length rows name the length)."""
    rows = []
    for (model, step), pair in table.groupby(["model", "step"], sort=False):
        by = {r.series: r for r in pair.itertuples()}
        four, more = by["paper's four"], by["+ 2-D and uneven heads"]
        cells = [_cell(r, step) for r in (four, more)]
        saving = 1 - more.predicted_time_s / four.predicted_time_s if four.feasible and more.feasible else None
        rows.append([model, step, *cells, "-" if saving is None or step.startswith("longest") else f"{saving:.1%}"])
    return rows


def _cell(r, step: str) -> str:
    if not r.feasible:
        return "does not fit"
    length = f"{r.seq_len:,} tokens, " if step.startswith("longest") else ""
    return f"{length}{r.predicted_time_s:.4f} ({r.options})"


def two_d_section(results: Path) -> str:
    """The table, or a line saying the step has not run."""
    path = results / "two_d.csv"
    if not path.exists():
        return "Not run (the `two_d` step writes two_d.csv)."
    return md_table(TWO_D_HEADER, two_d_table_rows(read_csv(path)))
