"""Results on disk: one CSV per finished run (written atomically), so an interrupted experiment loses no
finished run and a rerun skips them unless forced, or unless they were made with other settings or another
code version (`paradyse_lab.results.result_key`: a stamp under `.stamps/` beside the CSV). Schema of a run CSV:
`engine.ROW_COLUMNS`, less the measured wall-time columns, which go to `timings/NAME.csv` beside it
(`timings`): a run CSV is byte-identical between two runs with the same settings."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from paradyse_lab.files.atomic_write import atomic_open
from paradyse_lab.results.result_key import is_fresh, named_files, result_key, stamp_path, write_stamp
from paradyse_lab.results.timings import read_with_timings, write_with_timings

DEFAULT_RESULTS_DIR = Path("results")


def write_csv_atomic(df: pd.DataFrame, path: str | Path) -> Path:
    """Write `df` to `path` through a temporary file and a rename: never a partial file."""
    path = Path(path)
    with atomic_open(path, newline=None) as fh:
        df.to_csv(fh, index=False)
    return path


def run_path(root: str | Path, experiment: str, *parts: str) -> Path:
    """results/runs/EXPERIMENT/part1__part2__....csv with ':' made file-safe."""
    name = "__".join(p.replace(":", "-").replace("/", "_") for p in parts)
    return Path(root) / "runs" / experiment / f"{name}.csv"


def load_or_run(path: Path, run, force: bool = False, settings: dict | None = None,
                timing_columns=(), key_columns=("step",)) -> tuple[pd.DataFrame, bool]:
    """The rows at `path` if they were made with `settings` by this code and are unchanged since (and not
    `force`), else `run()` written there and stamped. Every file the settings name (a cluster TOML and each
    file of its base chain, a profile CSV, a workload's length file: `paradyse_lab.results.result_key.named_files`)
    is keyed on its contents. `timing_columns` (measured wall times) are written to the timings file beside
    `path` with `key_columns`, and read back joined. Returns (rows, ran)."""
    path = Path(path)
    settings = settings or {}
    key = result_key(settings, named_files(settings))
    stamp = stamp_path(path.parent, path.name)
    if not force and is_fresh(stamp, key):
        return read_with_timings(path, keep_default_na=False, na_values=[""]), False
    rows = run()
    written = write_with_timings(rows, path, timing_columns, key_columns)
    write_stamp(stamp, key, settings, written)
    return rows, True
