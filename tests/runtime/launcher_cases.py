"""Rank functions for tests/runtime/test_train_safety.py, importable by spawned ranks (no torch)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def sleepy_rank(rank: int, world: int, *args) -> None:
    """Write this rank's pid under $PARADYSE_TEST_PIDS, then run forever (a rank training on).

    It ignores SIGINT, the parent-death signal torch.multiprocessing.spawn arms: a real gloo rank survives
    it (seen with `python -m paradyse_lab.runtime.training.loop --nproc 2` before the launcher armed SIGKILL: both
    ranks kept
    running, one at full CPU, after the launcher was killed)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    folder = Path(os.environ["PARADYSE_TEST_PIDS"])
    (folder / f"rank-{rank}.pid.part").write_text(str(os.getpid()))
    os.replace(folder / f"rank-{rank}.pid.part", folder / f"rank-{rank}.pid")
    while True:
        time.sleep(0.2)


def failing_rank(rank: int, world: int, *args) -> None:
    """Every rank refuses its input, as every rank does on a checkpoint of another world size; rank 0 later."""
    from paradyse_lab.errors import UserInputError

    if rank == 0:
        time.sleep(0.5)
    raise UserInputError(f"checkpoint step-000002 was written by 1 ranks; this run has {world}")


def one_rank_refuses(rank: int, world: int, *args) -> None:
    """Rank 1 refuses its input and leaves while rank 0 waits for it on their connection: rank 0 then fails
    with the closed connection, an echo of rank 1's error, and may report first. The ranks' connection is a
    TCP socket of their own (rank 0 listens on port args[0]), not a process group: what this case checks is
    which report the launcher shows, and its ranks start without importing torch (~2.5 CPU s each). A gloo
    collective's echo of a peer that left is `one_rank_killed`'s."""
    import socket

    from paradyse_lab.errors import UserInputError

    address = ("127.0.0.1", int(args[0]))
    if rank == 0:
        with socket.create_server(address) as server:
            conn, _ = server.accept()
        with conn:
            if not conn.recv(1):  # b"": rank 1's process ended, closing its end
                raise ConnectionResetError("rank 1 closed the connection")
        return
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = socket.create_connection(address)
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # rank 0 is not listening yet
    with conn:  # closed as the error leaves: rank 0 reads the end of the stream
        time.sleep(0.3)
        raise UserInputError("bad input on rank 1 only")


def one_rank_killed(rank: int, world: int, *args) -> None:
    """Rank 1 is killed (SIGKILL, as the OOM killer does) while rank 0 waits for it in a collective: rank 0 then
    fails with a closed connection and reports that echo with a traceback."""
    import signal

    import torch
    import torch.distributed as dist

    from paradyse_lab.runtime.launch.ranks import run_rank

    def body(group=None):
        dist.barrier()
        if dist.get_rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(torch.zeros(1))
        time.sleep(5)

    run_rank(rank, world, body, (), int(args[0]))


def teardown_rank(rank: int, world: int, *args) -> None:
    """A rank that finishes: a collective, then (rank 0) `train`'s progress bar, the last step's ops, and then the
    rank's end as `run_rank` does it. Writes to $PARADYSE_TEST_PIDS/teardown-RANK.json the order of the calls
    that end it (a barrier, the group's destruction), whether the group is still initialised once `run_rank`
    returned, and the threads alive then (name, daemon)."""
    import json
    import threading
    from types import SimpleNamespace

    import torch
    import torch.distributed as dist

    from paradyse_lab.runtime.launch.ranks import run_rank
    from paradyse_lab.runtime.training.setup import progress_bar

    events = []
    real_barrier, real_destroy = dist.barrier, dist.destroy_process_group

    def barrier(*a, **k):
        events.append("barrier")
        return real_barrier(*a, **k)

    def destroy(*a, **k):
        events.append("destroy")
        return real_destroy(*a, **k)

    def body(group=None):
        bar = progress_bar(SimpleNamespace(progress=True, steps=2), 0, rank)  # what it reads of the options
        dist.all_reduce(torch.ones(4))
        if bar is not None:
            bar.update(2)
            bar.close()
        if rank == 1:
            time.sleep(0.5)  # the last rank to finish: rank 0 must not tear down before it
        dist.all_reduce(torch.ones(4))
        events.append("work done")

    dist.barrier, dist.destroy_process_group = barrier, destroy
    run_rank(rank, world, body, (), int(args[0]))
    from tqdm.std import TqdmDefaultWriteLock

    state = {"events": events, "initialized": dist.is_initialized(),
             "threads": [[t.name, t.daemon] for t in threading.enumerate() if t is not threading.main_thread()],
             "tqdm_process_lock": getattr(TqdmDefaultWriteLock, "mp_lock", None) is not None}
    (Path(os.environ["PARADYSE_TEST_PIDS"]) / f"teardown-{rank}.json").write_text(json.dumps(state))


def unflushed_rank(rank: int, world: int, *args) -> None:
    """Leave text in stdout's buffer (no newline, no flush) and an `atexit` handler that writes
    $PARADYSE_TEST_PIDS/atexit-RANK, then return (args[0] == 'refuse': rank 1 refuses its input instead): a rank
    that ends through the interpreter's finalization runs the handler."""
    import atexit
    import sys

    from paradyse_lab.errors import UserInputError

    marker = Path(os.environ["PARADYSE_TEST_PIDS"]) / f"atexit-{rank}"
    atexit.register(marker.write_text, "interpreter finalization ran")
    sys.stdout = open(1, "w", buffering=8192, closefd=False)  # block-buffered even under python -u / PYTHONUNBUFFERED
    sys.stdout.write(f"[rank {rank} unflushed]")
    if args and args[0] == "refuse" and rank == 1:
        raise UserInputError("rank 1 refuses")


def environment_rank(rank: int, world: int, out: str, launcher_pid: int) -> None:
    """Write what this rank runs in to OUT/env-RANK.json: its environment variables, whether a module that only
    the fork server's preload imports is loaded, whether its parent is the launcher, its collector's state and its
    directory; then a line to stdout and one to stderr."""
    import gc
    import json
    import sys

    state = {"environ": dict(os.environ), "colorsys": "colorsys" in sys.modules,
             "parent_is_launcher": os.getppid() == launcher_pid, "gc": gc.isenabled(), "cwd": os.getcwd()}
    Path(out, f"env-{rank}.json").write_text(json.dumps(state))
    print(f"rank {rank} to stdout", flush=True)
    print(f"rank {rank} to stderr", file=sys.stderr, flush=True)
