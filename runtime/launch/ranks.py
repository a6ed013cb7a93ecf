"""Run a function on every rank of a process group: under torchrun, as p local processes, or alone.

Library module of the commands that measure or train on the machine they run on (`paradyse-lab calibrate`,
`paradyse-lab validate-run`): `launch(fn, nproc, *args)` calls `fn(*args, group=None)` on every rank, with
torch.distributed initialised (NCCL when every process of the node has a GPU of its own, else gloo on CPU,
`backend_for`; the same code either way). Under torchrun (RANK and WORLD_SIZE set) the
current process is one rank; with nproc > 1 it starts nproc processes on this machine, forked from a fork
server that imported torch and `fn`'s module once (a rank's error is raised once by the launcher; the ranks die
with it); with nproc = 1 it calls `fn` in this process
inside a one-rank group (comm.py's calls then short-circuit). CPU ranks get cores / nproc threads each, so
that p processes do not oversubscribe the machine.
"""

from __future__ import annotations

import gc
import os
import socket
from datetime import timedelta

from paradyse_lab.errors import RunStopped, UserInputError
from paradyse_lab.runtime.launch.heartbeat import Heartbeat, store_host_rank
from paradyse_lab.runtime.launch.local import PeerSilent, restored_environ

COLLECTIVE_TIMEOUT_S = 300.0
"""How long a rank waits for its peers (to meet, in one collective) before the run stops, naming the rank that
did not answer (`--collective-timeout`). torch's own default is 30 minutes for gloo (10 for NCCL), during which
a stopped or hung rank leaves every other rank idle; 5 minutes is far above any wait between two collectives
of this runtime's steps on healthy ranks (a step's planner solve, a checkpoint's hashing on rank 0 of a model
that trains here), and still ends a stuck run on its own. A slower machine or a larger checkpoint raises it."""

_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
"""The variables torchrun sets for each rank (and the local launcher sets for its own ranks)."""


def _env_int(name: str, low: int, high: int | None = None) -> int:
    """Environment variable `name` as a decimal integer in [low, high], read exactly (never through float)."""
    text = os.environ[name]
    value = int(text.strip()) if text.strip().isdigit() and text.strip().isascii() else None
    if value is None or value < low or (high is not None and value > high):
        rule = f"an integer in [{low}, {high}]" if high is not None else f"an integer >= {low}"
        raise UserInputError(f"environment variable {name} must be {rule}, got {text!r}")
    return value


def torchrun_rank(nproc: int | None = None) -> tuple[int, int] | None:
    """(RANK, WORLD_SIZE) when this process is one rank of torchrun's, None when torchrun's variables are not
    set. Refused with one line: `--nproc` (`nproc` not None: a launcher of its own) while any of torchrun's
    variables is set (the ranks would wait for peers that never come), RANK without WORLD_SIZE or the other way
    round, values that are not integers in range, and no MASTER_ADDR / MASTER_PORT to meet at."""
    present = [k for k in _ENV if k in os.environ]
    if nproc is not None and present:
        shown = ", ".join(f"{k}={os.environ[k]}" for k in present)
        raise UserInputError(f"--nproc {nproc} starts its own ranks but torchrun's variables are set ({shown}): "
                             "give --nproc-per-node to torchrun instead, or unset them")
    if "RANK" not in os.environ and "WORLD_SIZE" not in os.environ:
        return None
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise UserInputError(f"environment variable {'WORLD_SIZE' if 'RANK' in os.environ else 'RANK'} is not set; "
                             "torchrun sets RANK and WORLD_SIZE together")
    world = _env_int("WORLD_SIZE", 1, 2**16)
    rank = _env_int("RANK", 0, world - 1)
    local_world = _env_int("LOCAL_WORLD_SIZE", 1, world) if "LOCAL_WORLD_SIZE" in os.environ else world
    if "LOCAL_RANK" in os.environ:
        _env_int("LOCAL_RANK", 0, local_world - 1)
    if "GROUP_RANK" in os.environ:  # the node's rank: at most one node per rank
        _env_int("GROUP_RANK", 0, world - 1)
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(name, "").strip():
            raise UserInputError(f"environment variable {name} is not set; under torchrun (RANK, WORLD_SIZE) the "
                                 "ranks meet at MASTER_ADDR:MASTER_PORT")
    _env_int("MASTER_PORT", 1, 65535)
    return rank, world


def leave_process_group() -> None:
    """The end of a rank whose work finished, in one order on every rank:

    1. a barrier: every rank has finished its last collective and point-to-point message (gloo's barrier also
       waits for this rank's queued work), so no rank shuts its connections, or rank 0 the TCPStore every rank
       meets at, while a peer still uses them;
    2. `destroy_process_group()`: every group (the world's and any other) shut down and unregistered;
    3. a garbage collection: groups kept only by reference cycles are freed now, while the interpreter is whole,
       not by its finalization.

    A training run's gloo group can still outlive step 2 (its worker, tcp-loop and, on rank 0, TCPStore threads
    keep running, held from C++), and threads destroyed while joinable during the C++ teardown at exit abort a
    finished process ("terminate called without an active exception", exit -6): so a process that joined a group
    ends without that teardown (`end_process`): a spawned rank once its function returned,
    and a torchrun rank or a command that ran a one-rank group in its own process once its command is done
    (paradyse_lab/cli `main`, `joined_a_process_group`)."""
    import torch.distributed as dist

    from paradyse_lab.runtime.comm.group_timeout import set_run_timeout
    from paradyse_lab.runtime.strategies.ulysses_ring import forget_subgroups
    from paradyse_lab.runtime.training.grouped import forget_shared_meshes

    dist.barrier()
    _stop_heartbeat()
    forget_shared_meshes()  # the meshes' groups belong to the world being left
    forget_subgroups()  # and so do the two-dimensional strategies' head and ring groups
    dist.destroy_process_group()
    set_run_timeout(None)
    gc.collect()


_joined_group: list[bool] = []
"""Whether this process ever joined a process group (`join_process_group`): [True] once it did."""
_heartbeat: list[Heartbeat] = []
"""This rank's heartbeat in its group's store (`join_process_group`): [Heartbeat] once it joined."""


def rendezvous_store(timeout_s: float | None = None):
    """The store a launcher's own ranks meet at, served by the launcher on a port the operating system picks and held
    until the ranks are done: a port found free and released before rank 0 binds it again can be taken by another
    run started at the same moment, whose ranks then join this run's world and both hang. `timeout_s`: how long a
    request to it waits (default torch's)."""
    import datetime

    import torch.distributed as dist

    wait = {} if timeout_s is None else {"timeout": datetime.timedelta(seconds=timeout_s)}
    return dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False, **wait)


def check_collective_timeout(seconds) -> float:
    """`--collective-timeout` as a number of seconds, or a `UserInputError` naming the allowed values."""
    import math

    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
            or not 0 < seconds <= 86400:
        raise UserInputError(f"--collective-timeout must be a number of seconds in (0, 86400], got {seconds!r}")
    return float(seconds)


def _master_address() -> str:
    """torchrun's MASTER_ADDR, checked to resolve (an address that does not would leave a rank retrying to
    connect until its timeout, with the C++ store's log lines on stderr)."""
    host = os.environ["MASTER_ADDR"].strip()
    try:
        socket.getaddrinfo(host, None)
    except (OSError, UnicodeError) as err:
        why = getattr(err, "strerror", None) or err
        raise UserInputError(f"environment variable MASTER_ADDR {host!r} does not resolve to an address ({why}); "
                             "the ranks meet at MASTER_ADDR:MASTER_PORT") from None
    return host


def join_process_group(backend: str, local: tuple[int, int, int] | None = None,
                       timeout_s: float = COLLECTIVE_TIMEOUT_S) -> None:
    """`torch.distributed.init_process_group(backend)`, remembered: a process that joined a group ends without
    interpreter finalization once its command is done (`joined_a_process_group`). `local` = (rank, world, port)
    joins a local launcher's world at its held store (`rendezvous_store`) instead of torchrun's environment.
    Meeting and every collective wait at most `timeout_s` (`COLLECTIVE_TIMEOUT_S`); ranks that cannot meet (no
    peers, a busy MASTER_PORT) end with one line (`RunStopped`) within it."""
    import torch.distributed as dist

    from paradyse_lab.runtime.comm.group_timeout import set_run_timeout

    timeout = timedelta(seconds=timeout_s)
    where = "the launcher's store" if local is not None else None
    try:
        if local is None:
            where = f"{_master_address()}:{os.environ['MASTER_PORT'].strip()}"
            dist.init_process_group(backend, timeout=timeout)
        else:
            rank, world, port = local
            store = dist.TCPStore("127.0.0.1", port, None, False, timeout=timeout)
            dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    except dist.DistError as err:
        raise RunStopped(f"the ranks did not meet at {where} within {timeout_s:g} s (--collective-timeout): "
                         f"{_first_line(err)}") from None
    _joined_group[:] = [True]
    set_run_timeout(timeout)  # every group made later waits it too, not torch's default
    _heartbeat[:] = [Heartbeat(dist.distributed_c10d._get_default_store(), dist.get_rank(), dist.get_world_size())]


def _stop_heartbeat() -> Heartbeat | None:
    """Stop this rank's heartbeat (before its group and store are left); the heartbeat, or None."""
    beat = _heartbeat[0] if _heartbeat else None
    if beat is not None:
        beat.stop()
    return beat


def _silent_peer_line(rank: int, timeout_s: float, beat: Heartbeat | None, local: bool) -> str:
    """The one line of a rank whose collective waited past `timeout_s`: the peers whose heartbeat stopped, or,
    when the store itself did not answer, the rank that serves it (torchrun's `env://`: rank 0)."""
    waited = f"rank {rank} waited more than {timeout_s:g} s (--collective-timeout) for"
    silent = beat.silent_peers() if beat is not None else None
    if silent is None and not local and store_host_rank() is not None and rank != store_host_rank():
        silent = [store_host_rank()]
        why = "which serves the ranks' store and did not answer it either (stopped, hung, or dead)"
    else:
        why = "whose heartbeat stopped (stopped, hung, or dead)"
    if not silent:
        return f"{waited} a peer rank that did not answer (stopped, hung, or too slow)"
    who = f"rank {silent[0]}" if len(silent) == 1 else "ranks " + ", ".join(map(str, silent))
    return f"{waited} {who}, {why}"


def _first_line(err: BaseException) -> str:
    """The first line of `err`'s message, without the C++ source location torch puts in front of it."""
    text = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return text.split("] ", 1)[1] if text.startswith("[") and "] " in text else text


def is_collective_timeout(err: BaseException) -> bool:
    """Whether `err` is a collective that waited past the process group's timeout (gloo: 'Timed out waiting
    ...ms for recv operation', NCCL's watchdog: 'timeout'), not a peer that left or a bug."""
    import torch.distributed as dist

    return isinstance(err, (RuntimeError, dist.DistError)) and "timed out" in str(err).lower()


def joined_a_process_group() -> bool:
    """Whether this process joined a process group (`join_process_group`): its gloo/NCCL threads can outlive
    `destroy_process_group`, so its end must skip the C++ teardown at exit (`leave_process_group`)."""
    return bool(_joined_group)


def backend_for(world: int, env, cuda_available: bool, device_count: int) -> str:
    """'nccl' when every process on this node has a GPU of its own, else 'gloo'. The node's process count
    is torchrun's LOCAL_WORLD_SIZE (the world size under the single-machine launcher, which does not set it),
    so a multi-node torchrun with 8 GPUs per node and 16 ranks uses NCCL."""
    local_world = int(env.get("LOCAL_WORLD_SIZE", world))
    return "nccl" if cuda_available and device_count >= local_world else "gloo"


def run_rank(rank: int, world: int, fn, args, port: int | None, timeout_s: float = COLLECTIVE_TIMEOUT_S) -> None:
    """One rank: join the process group (torchrun's environment, or the local launcher's on `port`), call
    `fn(*args, group=None)`, leave (`leave_process_group`; a rank whose `fn` raised destroys its group at once,
    with no barrier: its peers may never reach one). NCCL when every process of the node has a GPU, else gloo.
    A collective that waits past `timeout_s` for a peer ends the rank with `PeerSilent`, one line naming the
    peers whose heartbeat stopped (the local launcher also tells a stopped rank)."""
    import torch
    import torch.distributed as dist

    from paradyse_lab.runtime.launch.cpu_threads import set_rank_threads

    if port is not None:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    gpu = backend_for(world, os.environ, torch.cuda.is_available(), torch.cuda.device_count()) == "nccl"
    if gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    else:  # CPU ranks share the machine's cores; oversubscribed threads make gloo crawl
        set_rank_threads(world)
    join_process_group("nccl" if gpu else "gloo", None if port is None else (rank, world, port), timeout_s)
    try:
        fn(*args, group=None)
        leave_process_group()
    except BaseException as err:
        beat = _heartbeat[0] if _heartbeat else None  # still beating while it watches: its peers watch it too
        line = _silent_peer_line(rank, timeout_s, beat, port is not None) if is_collective_timeout(err) else None
        _stop_heartbeat()
        if dist.is_initialized():
            dist.destroy_process_group()
        if line is not None:
            raise PeerSilent(line) from None
        raise


def launch(fn, nproc: int, *args, timeout_s: float = COLLECTIVE_TIMEOUT_S) -> None:
    """Call `fn(*args, group=None)` on every rank (module docstring), each collective waiting at most
    `timeout_s` for its peers."""
    under_torchrun = torchrun_rank()
    if under_torchrun is not None:
        run_rank(*under_torchrun, fn, args, None, timeout_s)
        return
    store = rendezvous_store()  # held until every rank is done
    if nproc > 1:
        from paradyse_lab.runtime.launch.local import launch as spawn

        module = getattr(fn, "__module__", None)  # what every rank imports to find `fn`: imported once too
        preload = ("torch", "torch.distributed", *([module] if module and module != "__main__" else []))
        spawn(run_rank, nproc, (fn, args, store.port, timeout_s), preload)
        return
    with restored_environ(_ENV):  # a one-rank group in this process: nothing to start
        run_rank(0, 1, fn, args, store.port, timeout_s)


def default_nproc() -> int:
    """GPUs on this machine, else min(2, CPU cores)."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.device_count()
    return max(1, min(2, os.cpu_count() or 1))


def agree(value, group=None):
    """Rank 0's `value` on every rank (decisions that must not differ: what to measure next)."""
    from paradyse_lab.runtime.comm import collectives as comm

    return comm.broadcast_object(value, 0, group)


def agree_flag(flag: bool, group=None) -> bool:
    """Rank 0's yes-or-no `flag` on every rank (each rank passes a bool): `agree` in one collective instead of
    two, for the decisions a measuring loop takes before each point."""
    from paradyse_lab.runtime.comm import collectives as comm

    return comm.broadcast_flag(flag, 0, group)
