"""Measured wall-clock columns kept apart from the results, so that a result CSV is a function of its settings.

A result CSV (a simulated run's steps, a summary, a benchmark's gaps) is written without the columns that
measure this machine's wall time (planning and solve times); those go to a CSV of the same name in a
`timings/` folder beside it, with the columns that name each row (`runs/fig2/X.csv` ->
`runs/fig2/timings/X.csv`, `fig2_summary.csv` -> `timings/fig2_summary.csv`). Two runs with the same settings
then write byte-identical result CSVs; only the files under a `timings/` folder differ. Readers that show a
timing (REPORT.md) read the pair back joined (`read_with_timings`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from paradyse_lab.files.atomic_write import atomic_open

TIMINGS_DIR = "timings"


def timings_path(path: str | Path) -> Path:
    """The timings CSV of the result CSV `path`: `timings/NAME` beside it."""
    path = Path(path)
    return path.parent / TIMINGS_DIR / path.name


def is_timings_file(path: str | Path) -> bool:
    """Whether `path` is a timings CSV (its folder is a `timings/` folder)."""
    return Path(path).parent.name == TIMINGS_DIR


def _write(df: pd.DataFrame, path: Path) -> None:
    with atomic_open(path, newline=None) as fh:
        df.to_csv(fh, index=False)


def write_with_timings(df: pd.DataFrame, path: str | Path, timing_columns, key_columns) -> list[Path]:
    """Write `df` less `timing_columns` to `path` and `key_columns` + `timing_columns` (in `df`'s row order)
    to `timings_path(path)`, each atomically; returns the files written (the timings file only when `df` has
    a timing column)."""
    path = Path(path)
    timing = [c for c in timing_columns if c in df.columns]
    columns = list(df.columns)
    # the columns taken by position (`take`): a third of what dropping or selecting them by name costs, and a
    # simulated run writes its two files once per run
    _write(df.take([i for i, c in enumerate(columns) if c not in timing], axis=1), path)
    if not timing:
        timings_path(path).unlink(missing_ok=True)  # an earlier run's timings would be read beside these rows
        return [path]
    keys = [c for c in key_columns if c in df.columns and c not in timing]
    _write(df.take([columns.index(c) for c in keys + timing], axis=1), timings_path(path))
    return [path, timings_path(path)]


def read_with_timings(path: str | Path, **read_kw) -> pd.DataFrame:
    """The rows of the result CSV `path` with the timing columns of its timings file beside them (row by row,
    the key columns checked to agree); without a timings file (or one of other rows, or one without key columns),
    the results alone."""
    path = Path(path)
    rows = pd.read_csv(path, **read_kw)
    tpath = timings_path(path)
    if not tpath.is_file():
        return rows
    timing = pd.read_csv(tpath, **read_kw)
    keys = [c for c in timing.columns if c in rows.columns]
    if not keys or len(timing) != len(rows) or not timing[keys].astype(str).equals(rows[keys].astype(str)):
        return rows
    extra = [c for c in timing.columns if c not in rows.columns]
    return pd.concat([rows, timing[extra]], axis=1)
