"""What the test suite costs, file by file: `python examples/suite_cost_benchmark.py [--out suite_cost.csv]`, or
whole: `python examples/suite_cost_benchmark.py --suite` (the README's pytest command, two xdist workers).

Runs each test file alone (`python -m pytest -q -p no:cacheprovider FILE`, one process, no xdist) and records
its wall seconds, the machine's busy CPU seconds over the run (user + nice + system + irq + softirq from
/proc/stat, Linux only) and the CPU seconds of the run's own processes (user + system of pytest and every process
it started, at any depth). `/usr/bin/time` and a plain `getrusage` count only the descendants that were waited
for: the ranks a test spawns and ends with `os._exit`, and pytest-xdist's workers, are often not, and
`/usr/bin/time` then reports a fraction of the real cost. Here this process is their reaper (Linux's
PR_SET_CHILD_SUBREAPER): a descendant whose parent left without waiting for it is handed to this process, which
waits for it, so every descendant's CPU time is counted. The own CPU seconds hold on a machine shared with
other work (busy CPU counts that work too), though contention still adds some. Each file's number includes
pytest's start-up and the collection of that
file (about 4-5 s here: tests/gpu/test_runtime_gpu.py, every test of it skipped without a GPU, costs that), which
the whole suite pays once per worker instead. Prints a table, costliest (own CPU) first, and writes the CSV.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import os
import resource
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


PR_SET_CHILD_SUBREAPER = 36
"""Linux prctl option (linux/prctl.h): orphaned descendants are handed to this process instead of init."""


def reap_descendants() -> None:
    """Make this process the reaper of its orphaned descendants (`PR_SET_CHILD_SUBREAPER`), so that
    `children_cpu_seconds` counts every one of them once it has waited for them (`wait_for_orphans`)."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def wait_for_orphans(grace_s: float = 10.0) -> None:
    """Wait for the descendants handed to this process (their parents left without waiting), for at most
    `grace_s` seconds after the last one ended: one that lives on longer is left running, uncounted."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # none left
        if pid:
            deadline = time.monotonic() + grace_s
        elif time.monotonic() > deadline:
            return
        else:
            time.sleep(0.1)


def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's descendants that have ended and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cost_of(*pytest_args: str) -> tuple[float, float, float, int]:
    """(wall s, busy CPU s, own CPU s, pytest exit code) of `pytest -q -p no:cacheprovider ARGS` in its own
    process; own CPU counts that process and all its descendants (`reap_descendants` first)."""
    busy, own, began = busy_seconds(), children_cpu_seconds(), time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
                          cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - began
    wait_for_orphans()
    return wall, busy_seconds() - busy, children_cpu_seconds() - own, done.returncode


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
    reap_descendants()
    if args.suite:
        wall, cpu, own, code = cost_of(*SUITE_ARGS)
        print(f"suite (pytest {' '.join(SUITE_ARGS)}): {wall:.1f} s wall, machine busy {cpu:.1f} CPU s of "
              f"{wall * (os.cpu_count() or 1):.1f} core-seconds, its own processes {own:.1f} CPU s, exit {code}")
        return 0 if code == 0 else 1
    files = [Path(p) for p in args.paths] or sorted(p.relative_to(ROOT) for p in (ROOT / "tests").rglob("test_*.py"))
    rows = []
    for i, path in enumerate(files, 1):
        wall, cpu, own, code = cost_of(str(path))
        rows.append({"file": str(path), "wall_s": round(wall, 1), "busy_cpu_s": round(cpu, 1),
                     "own_cpu_s": round(own, 1), "exit_code": code})
        print(f"[{i}/{len(files)}] {path}: {wall:.1f} s wall, {cpu:.1f} busy CPU s, {own:.1f} own CPU s, exit {code}",
              file=sys.stderr)
    rows.sort(key=lambda r: -r["own_cpu_s"])
    with atomic_open(args.out) as f:  # replaced whole once written; a symbolic link stays, written through
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"{'file':<62} {'wall s':>7} {'busy s':>7} {'own s':>7} {'exit':>4}")
    for r in rows:
        print(f"{r['file']:<62} {r['wall_s']:>7.1f} {r['busy_cpu_s']:>7.1f} {r['own_cpu_s']:>7.1f} {r['exit_code']:>4}")
    print(f"total: {sum(r['own_cpu_s'] for r in rows):.1f} own CPU s ({sum(r['busy_cpu_s'] for r in rows):.1f} "
          f"machine busy) over {len(rows)} files (each with its own start-up); wrote {args.out}")
    return 0 if all(r["exit_code"] in (0, 5) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
