"""Ctrl-C anywhere in the CLI ends with one line and exit code 130, no traceback, no half-written file, also
after an ILP solve (OR-Tools' CP-SAT used to put SIGINT back to the default action after each solve: a
Ctrl-C then killed the process without cleanup)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import signal, sys, time
# Ctrl-C raises KeyboardInterrupt, as in a command typed at an interactive shell: a shell without job control
# starts a background command (`pytest ... &` in a script) with SIGINT ignored, the child inherits that and
# Python then installs no handler, so the Ctrl-C under test would be dropped and the command run to its end
signal.signal(signal.SIGINT, signal.default_int_handler)
from pathlib import Path
from paradyse_lab.solvers import ilp
marker = Path(sys.argv[1])
solve = ilp.ILPSolver.solve
def solve_and_mark(self, problem):
    solution = solve(self, problem)
    if marker.exists():
        time.sleep(0.05)  # a long run: later steps take a while
    marker.touch()
    return solution
ilp.ILPSolver.solve = solve_and_mark
from paradyse_lab.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_ctrl_c_after_an_ilp_solve_ends_with_one_line_and_exit_130(tmp_path):
    marker, out = tmp_path / "solved", tmp_path / "sim.json"
    argv = ["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "dynamic:ilp", "--size", "5000",
            "--gamma", "0", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(marker), *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)  # a few solves later
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = err.strip().splitlines()
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert len(lines) == 1 and "interrupted" in lines[0] and "Traceback" not in err, err[-2000:]
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no partial output
