"""`paradyse-lab reproduce`'s background steps (`BACKGROUND_STEPS`): each runs in a forked process of its own from
the run's start, dies with its parent, and is waited for when the loop reaches it."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from pathlib import Path

from paradyse_lab.app.reproduce_settings import Settings
from paradyse_lab.app.reproduce_steps import STEP_FUNCS
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.launch.local import stop_with_parent


def _run_in_child(name: str, out: Path, s: Settings, force: bool, parent_pid: int) -> None:
    """A background step's process: the step; exit code 130 on Ctrl-C (the parent prints the one line), 2 on a
    user error (its one line printed here, no traceback). It dies with its parent (`stop_with_parent`: a
    `reproduce` killed by SIGKILL leaves no step computing on)."""
    stop_with_parent(parent_pid)
    try:
        STEP_FUNCS[name](out, s, force)
    except KeyboardInterrupt:
        os._exit(130)
    except UserInputError as err:
        print(f"paradyse-lab reproduce: error: {err}", file=sys.stderr, flush=True)
        os._exit(2)


def start_background(names, out: Path, s: Settings, force: bool) -> dict:
    """{step: (process, start time)} of `names` started in forked processes (before any thread of this one)."""
    started = {}
    for name in names:
        proc = multiprocessing.get_context("fork").Process(target=_run_in_child,
                                                           args=(name, out, s, force, os.getpid()),
                                                           name=f"reproduce-{name}")
        proc.start()
        started[name] = (proc, time.perf_counter())
    return started


def join_background(name: str, started: dict) -> float:
    """Wait for background step `name`; its seconds from start to end. A failed step is a `UserInputError`."""
    proc, began = started[name]
    proc.join()
    del started[name]  # only once joined: an interrupted join leaves it for the caller's clean-up to stop
    if proc.exitcode == 130:
        raise KeyboardInterrupt
    if proc.exitcode == 2:  # a user error: the step's one line is printed already
        raise SystemExit(2)
    if proc.exitcode:
        raise UserInputError(f"reproduce step {name} failed (exit code {proc.exitcode}); see its message above")
    return time.perf_counter() - began
