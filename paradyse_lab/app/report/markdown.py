"""Markdown cells and tables of REPORT.md, the report's names for datasets, models and policies,
and the results folder of each truth.

Part of REPORT.md (written by `paradyse-lab reproduce`)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from paradyse_lab.core.strategies import CATALOG, USABLE

NAMES = {"github_code": "GitHubCode", "grch38": "GRCh38", "bert": "BERT", "llama": "LLaMA", "gpt": "GPT",
         **{f"static:{name}": CATALOG[name].paper_name for name in USABLE},
         "dynamic:heuristic": "ParaDySe (heuristic)", "dynamic:dp": "dp", "dynamic:ilp": "ilp"}


_tables: list[dict] = []


@contextmanager
def reading() -> Iterator[None]:
    """Inside this block `read_csv` parses each CSV once and hands every reader a copy: the report's sections read
    the same files many times (a quick run's fig2_headline.csv fifteen times). Outside it nothing is kept."""
    _tables.append({})
    try:
        yield
    finally:
        _tables.pop()


def read_csv(path, **kw) -> pd.DataFrame:
    """`pd.read_csv(path, **kw)`; inside `reading()` the frame parsed before for the same file and arguments (a
    copy, so a reader that changes it changes no other's)."""
    if not _tables:
        return pd.read_csv(path, **kw)
    key = (str(Path(path).resolve()), repr(sorted(kw.items())))
    if key not in _tables[-1]:
        _tables[-1][key] = pd.read_csv(path, **kw)
    return _tables[-1][key].copy()


def fmt_pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.2f}%"


def fmt_num(x, fmt="{:,.0f}") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def md_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def first_row(df: pd.DataFrame, **match) -> pd.Series:
    """The first row of `df` whose columns equal `match` (an `IndexError` when none does). One mask over the
    columns' arrays, not a filtered copy of the table per column: the report asks this ~100 times."""
    mask = np.ones(len(df), dtype=bool)
    for k, v in match.items():
        mask &= (df[k] == v).to_numpy(dtype=bool)
    return df.iloc[int(np.flatnonzero(mask)[0])]


PAPER_STATICS = tuple(f"static:{name}" for name in USABLE)
"""The paper's baselines (fig2 also runs each with recomputation, beyond the paper)."""


TRUTH_LABELS = {"paper": "paper-measured times", "analytic": "analytic model"}
"""Column labels of the two truths (REPORT.md and README)."""


PAPER_SUBDIR = "paper"


TRUTH_FILES = ("fig2_headline.csv", "fig2_summary.csv", "table5.csv")
"""What a truth's folder must hold to be reported."""


SWITCH_SUBDIR = "switch-memory"


def truth_dirs(results: Path) -> dict[str, Path]:
    """Results folder of each truth that was run: the paper-measured times first, then the analytic model."""
    results = Path(results)
    out = {}
    if all((results / PAPER_SUBDIR / f).exists() for f in TRUTH_FILES):
        out["paper"] = results / PAPER_SUBDIR
    out["analytic"] = results
    return out
