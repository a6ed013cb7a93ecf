"""`reproduce`'s background step (a forked process) dies with its parent: a `reproduce` killed by SIGKILL (no
clean-up runs) leaves no step computing on."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from paradyse_lab.app import reproduce_background, reproduce_steps


def _reproduce_with_a_background_step(marker: Path) -> int:
    """The pid of a process forked from this one that starts `reproduce`'s background step 'groups' (which writes
    its pid into `marker`, then computes for two minutes) and waits: a `reproduce` in the middle of its run. Forked
    from this process, which imported the application already, instead of a new interpreter importing it again
    (~0.7 CPU s)."""
    pid = os.fork()
    if pid:
        return pid
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1), os.dup2(null, 2)

        def step(out, s, force):
            marker.write_text(str(os.getpid()))
            time.sleep(120)

        reproduce_steps.STEP_FUNCS["groups"] = step  # the forked step's table (this process's copy)
        reproduce_background.start_background(["groups"], marker.parent, None, False)
        time.sleep(120)
    finally:
        os._exit(1)  # never back into pytest


def _gone(pid: int) -> bool:
    """Whether process `pid` has ended (no such process, or a zombie nobody reaped yet)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


def test_the_background_step_dies_when_reproduce_is_killed(tmp_path):
    marker = tmp_path / "child.pid"
    parent = _reproduce_with_a_background_step(marker)
    try:
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            assert os.waitpid(parent, os.WNOHANG)[0] == 0, "the parent ended before its background step started"
            time.sleep(0.05)
        child = int(marker.read_text())
        assert not _gone(child)
        os.kill(parent, signal.SIGKILL)
        os.waitpid(parent, 0)
        parent = None
        deadline = time.monotonic() + 10
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(child), "the background step outlived its killed parent"
    finally:
        if parent is not None:
            os.kill(parent, signal.SIGKILL)
            os.waitpid(parent, 0)
        if marker.exists() and marker.read_text() and not _gone(int(marker.read_text())):
            os.kill(int(marker.read_text()), signal.SIGKILL)
