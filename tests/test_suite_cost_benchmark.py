"""examples/suite_cost_benchmark.py with its pytest runs stood in (no nested suite): the table and CSV, costliest
first; the exit code; the machine-wide CPU counter; the own CPU count of a descendant orphaned before it ended."""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[1] / "examples" / "suite_cost_benchmark.py"


@pytest.fixture
def bench():
    spec = importlib.util.spec_from_file_location("suite_cost_benchmark", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_busy_seconds_count_up(bench):
    before = bench.busy_seconds()
    sum(i * i for i in range(200_000))  # some CPU
    assert bench.busy_seconds() >= before > 0


def test_files_are_written_costliest_first_and_a_failing_file_fails_the_run(bench, tmp_path, monkeypatch, capsys):
    costs = {"tests/a.py": (1.0, 2.0, 2.5, 0), "tests/b.py": (3.0, 9.5, 9.0, 1), "tests/c.py": (0.5, 0.4, 0.3, 5)}
    asked = []

    def cost_of(*args):
        asked.append(args)
        return costs[args[-1]]

    monkeypatch.setattr(bench, "cost_of", cost_of)
    out = tmp_path / "cost.csv"
    assert bench.main(["--out", str(out), *costs]) == 1  # b.py failed
    assert asked == [(name,) for name in costs]
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["file"] for r in rows] == ["tests/b.py", "tests/a.py", "tests/c.py"]
    assert rows[0] == {"file": "tests/b.py", "wall_s": "3.0", "busy_cpu_s": "9.5", "own_cpu_s": "9.0",
                       "exit_code": "1"}
    assert "total: 11.8 own CPU s (11.9 machine busy) over 3 files" in capsys.readouterr().out
    costs["tests/b.py"] = (3.0, 9.5, 9.0, 0)
    assert bench.main(["--out", str(out), *costs]) == 0  # exit 5 (no test in a file) is no failure


def test_suite_runs_the_readme_commands_pytest_arguments(bench, monkeypatch, capsys):
    asked = []
    monkeypatch.setattr(bench, "cost_of", lambda *args: asked.append(args) or (10.0, 18.0, 16.5, 0))
    assert bench.main(["--suite"]) == 0
    assert asked == [("-n", "2", "--dist", "loadgroup")]
    readme = (PATH.parents[1] / "README.md").read_text()
    assert "python -m pytest -q -n 2 --dist loadgroup" in readme  # the arguments are the README command's
    out = capsys.readouterr().out
    assert "10.0 s wall, machine busy 18.0 CPU s" in out and "its own processes 16.5 CPU s" in out


def test_an_out_that_is_a_device_or_a_folder_is_one_line_before_any_run(bench, tmp_path, monkeypatch, capsys):
    asked = []
    monkeypatch.setattr(bench, "cost_of", lambda *args: asked.append(args) or (1.0, 1.0, 1.0, 0))
    for out in ("/dev/null", str(tmp_path)):
        assert bench.main(["--out", out, "tests/a.py"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("suite_cost_benchmark: error: --out ") and err.count("\n") == 1, err
    assert asked == []
    link = tmp_path / "link.csv"
    link.symlink_to(tmp_path / "target.csv")
    assert bench.main(["--out", str(link), "tests/a.py"]) == 0
    assert link.is_symlink() and (tmp_path / "target.csv").read_text().startswith("file,wall_s")


BURN_S = 0.2
"""The orphan's CPU seconds: far above what the rest of a measured run costs uncounted (the shell, ~0.01 s), so the
two measurements stay apart; small, since the test burns it twice."""
ORPHAN = """
import subprocess, sys, importlib.util
spec = importlib.util.spec_from_file_location("bench", sys.argv[1])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
if sys.argv[2] == "reap":
    bench.reap_descendants()
burn = f"import time; [0 for _ in iter(lambda: time.process_time() < {sys.argv[3]}, False)]"  # BURN_S CPU s
subprocess.run(["sh", "-c", f"{sys.executable} -c '{burn}' &"], check=True)  # sh leaves before its child ends
bench.wait_for_orphans(grace_s=30)
print(bench.children_cpu_seconds())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER")
def test_own_cpu_counts_a_descendant_whose_parent_left_without_waiting():
    """A grandchild orphaned by its parent (as the ranks a test spawns and pytest-xdist's workers often are) burns
    `BURN_S` CPU s: counted once this process is its reaper, not counted without."""
    def measured(mode: str) -> float:
        done = subprocess.run([sys.executable, "-c", ORPHAN, str(PATH), mode, str(BURN_S)], capture_output=True,
                              text=True, timeout=60, check=True)
        return float(done.stdout)

    assert measured("reap") >= 0.9 * BURN_S
    assert measured("plain") < 0.9 * BURN_S
