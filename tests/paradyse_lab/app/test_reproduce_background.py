"""`reproduce`'s background step (a forked process) dies with its parent: a `reproduce` killed by SIGKILL (no
clean-up runs) leaves no step computing on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import sys, time
from pathlib import Path
from paradyse_lab.app.reproduce_background import start_background
from paradyse_lab.app.reproduce_steps import STEP_FUNCS
marker = Path(sys.argv[1])
def step(out, s, force):
    marker.write_text(str(__import__("os").getpid()))
    time.sleep(120)
STEP_FUNCS["groups"] = step
start_background(["groups"], marker.parent, None, False)
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    """Whether process `pid` has ended (no such process, or a zombie nobody reaped yet)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


def test_the_background_step_dies_when_reproduce_is_killed(tmp_path):
    marker = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", SCRIPT, str(marker)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            assert parent.poll() is None, "the parent ended before its background step started"
            time.sleep(0.05)
        child = int(marker.read_text())
        assert not _gone(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(child), "the background step outlived its killed parent"
    finally:
        parent.kill()
        if marker.exists() and marker.read_text() and not _gone(int(marker.read_text())):
            os.kill(int(marker.read_text()), signal.SIGKILL)
