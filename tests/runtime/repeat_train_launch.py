"""Launch the same small `paradyse-lab train --nproc 2` run many times and count the runs that exit 0.

A finished run must exit 0 every time; a teardown race (a rank aborting at exit with "terminate called without
an active exception") shows up as an occasional non-zero exit. Every other launch packs its documents
(`--pack-tokens`), as the report of the race had it. `--load N` keeps N busy-loop processes running meanwhile
(CPU contention, which widens any race). Prints one line per failed run and a summary table, and writes one CSV
row per launch (index, packed, exit code, seconds, the 1-minute load average at its end, last stderr line).
Slow (one launch: a few seconds on an idle machine, minutes on a loaded one), so not part of the default suite;
tests/runtime/test_train_exit_repeat.py runs it when PARADYSE_SLOW_TESTS=1, and by hand:

    python tests/runtime/repeat_train_launch.py --runs 40 --jobs 2 --load 2 --csv results/repeat_launch.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["-m", "paradyse_lab", "train", "--nproc", "2", "--model", "gpt2-tiny", "--steps", "8", "--no-progress"]
DATASET = "uniform:256:1024"
PACK_TOKENS = "2048"
FIELDS = ("run", "packed", "exit_code", "seconds", "load_1min", "last_stderr_line")


def one_launch(index: int, folder: Path, dataset: str = DATASET) -> dict:
    """One launch (packed when `index` is odd), writing its log under `folder`: its CSV row."""
    packed = index % 2 == 1
    log = folder / f"run-{index}.csv"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *TRAIN, "--dataset", dataset, "--log-file", str(log),
                           *(["--pack-tokens", PACK_TOKENS] if packed else [])], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    lines = done.stderr.strip().splitlines()
    return {"run": index, "packed": packed, "exit_code": done.returncode,
            "seconds": round(time.perf_counter() - started, 1), "load_1min": os.getloadavg()[0],
            "last_stderr_line": lines[-1] if lines else ""}


def repeat(runs: int, jobs: int = 1, dataset: str = DATASET, load: int = 0, on_row=None) -> list[dict]:
    """Every launch's CSV row (each also given to `on_row` as it comes), with `load` busy-loop processes running
    meanwhile."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(load)]
    try:
        with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(jobs) as pool:
            rows = []
            for row in pool.map(lambda i: one_launch(i, Path(tmp), dataset), range(runs)):
                rows.append(row)
                if on_row is not None:
                    on_row(row)
            return rows
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=1, help="launches at once")
    parser.add_argument("--dataset", default=DATASET)
    parser.add_argument("--load", type=int, default=0, help="busy-loop processes running meanwhile")
    parser.add_argument("--csv", default="", help="write one row per launch here")
    args = parser.parse_args()
    with open(args.csv or os.devnull, "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()

        def write(row: dict) -> None:  # row by row: an interrupted benchmark keeps what it measured
            writer.writerow(row)
            f.flush()

        rows = repeat(args.runs, args.jobs, args.dataset, args.load, write)
    for row in rows:
        if row["exit_code"]:
            print(f"run {row['run']} exit {row['exit_code']}: {row['last_stderr_line']}")
    ok = sum(row["exit_code"] == 0 for row in rows)
    seconds = sorted(row["seconds"] for row in rows)
    print(f"{'runs':>5} {'exit 0':>7} {'other':>6} {'median s':>9} {'max load':>9}")
    print(f"{len(rows):>5} {ok:>7} {len(rows) - ok:>6} {seconds[len(seconds) // 2]:>9} "
          f"{max(row['load_1min'] for row in rows):>9.1f}")
    return 0 if ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
