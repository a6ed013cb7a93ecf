"""What the test suite costs, file by file: `python examples/suite_cost_benchmark.py [--out suite_cost.csv]`, or
whole: `python examples/suite_cost_benchmark.py --suite` (the README's pytest command, two xdist workers).

Runs each test file alone (`python -m pytest -q -p no:cacheprovider FILE`, one process, no xdist) and records
its wall seconds and the machine's busy CPU seconds over the run (user + nice + system + irq + softirq from
/proc/stat, Linux only). The machine-wide counter is used because `/usr/bin/time` and `getrusage` count only
the descendants that were waited for: the ranks a test spawns and ends with `os._exit`, and pytest-xdist's
workers, are often not, and `/usr/bin/time` then reports a fraction of the real cost. Run it on a quiet machine:
anything else running is counted too. Each file's number includes pytest's start-up and the collection of that
file (about 4-5 s here: tests/gpu/test_runtime_gpu.py, every test of it skipped without a GPU, costs that), which
the whole suite pays once per worker instead. Prints a table, costliest first, and writes the CSV.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
from pathlib import Path

from paradyse_lab.errors import UserInputError
from paradyse_lab.files.atomic_write import atomic_open, check_output_file

ROOT = Path(__file__).resolve().parents[1]


def busy_seconds() -> float:
    """The machine's busy CPU seconds since boot (all cores): /proc/stat's first line, in clock ticks."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[:7])
    return (user + nice + system + irq + softirq) / 100.0  # USER_HZ is 100 on Linux


SUITE_ARGS = ("-n", "2", "--dist", "loadgroup")
"""The README's test command's pytest arguments (`--suite`)."""


def cost_of(*pytest_args: str) -> tuple[float, float, int]:
    """(wall s, busy CPU s, pytest exit code) of `pytest -q -p no:cacheprovider ARGS` in its own process."""
    busy, began = busy_seconds(), time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
                          cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - began, busy_seconds() - busy, done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("suite_cost.csv"),
                        help="the CSV written (default: %(default)s)")
    parser.add_argument("--suite", action="store_true",
                        help="time the whole suite once, as the README's test command runs it, instead of each file")
    parser.add_argument("paths", nargs="*", help="test files (default: every tests/**/test_*.py)")
    args = parser.parse_args(argv)
    if not Path("/proc/stat").is_file():
        print("suite_cost_benchmark: error: needs Linux's /proc/stat", file=sys.stderr)
        return 2
    try:  # a bad --out is named now, not after the runs; never written through a device node or over a folder
        check_output_file(args.out)
    except UserInputError as err:
        print(f"suite_cost_benchmark: error: {err}", file=sys.stderr)
        return 2
    if args.suite:
        wall, cpu, code = cost_of(*SUITE_ARGS)
        print(f"suite (pytest {' '.join(SUITE_ARGS)}): {wall:.1f} s wall, machine busy {cpu:.1f} CPU s of "
              f"{wall * (os.cpu_count() or 1):.1f} core-seconds, exit {code}")
        return 0 if code == 0 else 1
    files = [Path(p) for p in args.paths] or sorted(p.relative_to(ROOT) for p in (ROOT / "tests").rglob("test_*.py"))
    rows = []
    for i, path in enumerate(files, 1):
        wall, cpu, code = cost_of(str(path))
        rows.append({"file": str(path), "wall_s": round(wall, 1), "busy_cpu_s": round(cpu, 1), "exit_code": code})
        print(f"[{i}/{len(files)}] {path}: {wall:.1f} s wall, {cpu:.1f} CPU s, exit {code}", file=sys.stderr)
    rows.sort(key=lambda r: -r["busy_cpu_s"])
    with atomic_open(args.out) as f:  # replaced whole once written; a symbolic link stays, written through
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"{'file':<62} {'wall s':>7} {'CPU s':>7} {'exit':>4}")
    for r in rows:
        print(f"{r['file']:<62} {r['wall_s']:>7.1f} {r['busy_cpu_s']:>7.1f} {r['exit_code']:>4}")
    print(f"total: {sum(r['busy_cpu_s'] for r in rows):.1f} CPU s over {len(rows)} files (each with its own "
          f"start-up); wrote {args.out}")
    return 0 if all(r["exit_code"] in (0, 5) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
