"""Start N local ranks of a function and stop them with their launcher (`paradyse-lab train --nproc N`).

Library module. `launch(fn, nprocs, args)` starts `fn(rank, nprocs, *args)` in `nprocs` spawned processes
(multiprocessing's spawn start method, as torch.multiprocessing.spawn does) and waits for them:

- A rank that raises `UserInputError` or `RunStopped` reports the one-line message to the launcher, which
  stops the other ranks and raises it once (the CLI prints one line, exit 2 or 1); any other exception's
  traceback is printed once, from the launcher.
- Ranks stop with their launcher: each asks Linux to send it SIGKILL when the launcher dies
  (`prctl(PR_SET_PDEATHSIG)`, man 2 prctl), so a launcher killed by SIGTERM or SIGKILL leaves no orphan
  training on; elsewhere a watchdog thread polls `os.getppid()` once a second.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import traceback

from paradyse_lab.errors import RunStopped, UserInputError

PR_SET_PDEATHSIG = 1
"""linux/prctl.h."""


def stop_with_parent(parent_pid: int) -> None:
    """Make this process die when `parent_pid` (its parent) does (module docstring)."""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    if not armed:
        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


REPORT_GRACE_S = 3.0
"""How long the launcher waits, after the first failure, for the other ranks' reports."""
REPORT_ORDER = ("user", "stopped", "crash")
"""Which report the launcher shows when several ranks failed: the root cause before its echoes."""


def _rank_main(fn, rank: int, nprocs: int, args: tuple, report, parent_pid: int) -> None:
    """One rank: `fn`, its error sent to the launcher through `report` (a pipe's end)."""
    stop_with_parent(parent_pid)
    try:
        fn(rank, nprocs, *args)
    except UserInputError as err:
        report.send(("user", rank, str(err)))
        sys.exit(2)
    except RunStopped as err:
        report.send(("stopped", rank, str(err)))
        sys.exit(1)
    except BaseException:  # noqa: BLE001 (reported once by the launcher)
        report.send(("crash", rank, traceback.format_exc()))
        sys.exit(1)


def _stop(procs, grace_s: float = 5.0) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def launch(fn, nprocs: int, args: tuple = ()) -> None:
    """Run `fn(rank, nprocs, *args)` on `nprocs` spawned ranks (module docstring); raises the first rank's
    `UserInputError` / `RunStopped`, or `RunStopped` when a rank crashes or is killed."""
    ctx = multiprocessing.get_context("spawn")
    pipes = [ctx.Pipe(duplex=False) for _ in range(nprocs)]  # (launcher's end, rank's end)
    procs = [ctx.Process(target=_rank_main, args=(fn, r, nprocs, args, pipes[r][1], os.getpid()), name=f"rank-{r}")
             for r in range(nprocs)]
    for p in procs:
        p.start()
    reports = [read for read, _ in pipes]
    try:
        while True:
            failed = [p for p in procs if p.exitcode not in (None, 0)]
            said = [c for c in reports if c.poll()]
            if failed or said:
                break
            if all(p.exitcode == 0 for p in procs):
                return
            running = [p.sentinel for p in procs if p.exitcode is None]
            multiprocessing.connection.wait(running + reports, timeout=0.5)
        # A rank's error closes its connections, so its peers fail in their collectives too and may report
        # first: give every rank a moment to report, then tell the root cause (a user error or a stop) first.
        deadline = time.monotonic() + REPORT_GRACE_S
        while time.monotonic() < deadline and any(p.exitcode is None for p in procs):
            running = [p.sentinel for p in procs if p.exitcode is None]
            multiprocessing.connection.wait(running, timeout=max(0.0, deadline - time.monotonic()))
    finally:
        _stop(procs)
    said = [c.recv() for c in reports if c.poll()]
    if not said:
        failed = [p for p in procs if p.exitcode not in (None, 0)]
        rank = procs.index(failed[0])
        raise RunStopped(f"rank {rank} ended with exit code {failed[0].exitcode} (killed?)")
    kind, rank, message = min(said, key=lambda r: (REPORT_ORDER.index(r[0]), r[1]))
    if kind == "user":
        raise UserInputError(message)
    if kind == "crash":
        print(message, file=sys.stderr, end="")
        message = f"rank {rank} failed with the error above"
    raise RunStopped(message)
