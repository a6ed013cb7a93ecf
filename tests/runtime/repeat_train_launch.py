"""Launch the same small `paradyse-lab train --nproc 2` run many times and count the runs that exit 0.

A finished run must exit 0 every time; a teardown race (a rank aborting at exit with "terminate called without
an active exception") shows up as an occasional non-zero exit. Slow (one launch: a few seconds on an idle
machine), so not part of the default suite; tests/runtime/test_train_exit_repeat.py runs it when
PARADYSE_SLOW_TESTS=1, and by hand:

    python tests/runtime/repeat_train_launch.py --runs 20 [--jobs 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["-m", "paradyse_lab", "train", "--nproc", "2", "--model", "gpt2-tiny", "--steps", "8"]
DATASET = "uniform:256:1024"


def one_launch(index: int, folder: Path, dataset: str = DATASET) -> tuple[int, str]:
    """(exit code, last stderr line) of one launch, writing its log under `folder`."""
    log = folder / f"run-{index}.csv"
    done = subprocess.run([sys.executable, *TRAIN, "--dataset", dataset, "--log-file", str(log)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    lines = done.stderr.strip().splitlines()
    return done.returncode, lines[-1] if lines else ""


def repeat(runs: int, jobs: int = 1, dataset: str = DATASET) -> list[tuple[int, str]]:
    """Every launch's (exit code, last stderr line)."""
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(lambda i: one_launch(i, Path(tmp), dataset), range(runs)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=1, help="launches at once")
    parser.add_argument("--dataset", default=DATASET)
    args = parser.parse_args()
    results = repeat(args.runs, args.jobs, args.dataset)
    for code, last in results:
        if code:
            print(f"exit {code}: {last}")
    ok = sum(code == 0 for code, _ in results)
    print(f"{ok} of {len(results)} runs exited 0")
    return 0 if ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
