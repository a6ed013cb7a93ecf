"""Run a function on every rank of a process group: under torchrun, as p spawned local processes, or alone.

Library module of the commands that measure or train on the machine they run on (`paradyse-lab calibrate`,
`paradyse-lab validate-run`): `launch(fn, nproc, *args)` calls `fn(*args, group=None)` on every rank, with
torch.distributed initialised (NCCL when every process of the node has a GPU of its own, else gloo on CPU,
`runtime.train.backend_for`; the same code either way). Under torchrun (RANK and WORLD_SIZE set) the
current process is one rank; with nproc > 1 it spawns nproc processes through runtime/launcher.py (a rank's
error is raised once by the launcher; the ranks die with it); with nproc = 1 it calls `fn` in this process
inside a one-rank group (comm.py's calls then short-circuit). CPU ranks get cores / nproc threads each, so
that p processes do not oversubscribe the machine.
"""

from __future__ import annotations

import os

_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def run_rank(rank: int, world: int, fn, args, port: int | None) -> None:
    """One rank: join the process group (torchrun's environment, or the local launcher's on `port`), call
    `fn(*args, group=None)`, leave. NCCL when every process of the node has a GPU, else gloo."""
    import torch
    import torch.distributed as dist

    from runtime.train import backend_for

    if port is not None:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    gpu = backend_for(world, os.environ, torch.cuda.is_available(), torch.cuda.device_count()) == "nccl"
    if gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    else:  # CPU ranks share the machine's cores; oversubscribed threads make gloo crawl
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("nccl" if gpu else "gloo")
    try:
        fn(*args, group=None)
    finally:
        dist.destroy_process_group()


def launch(fn, nproc: int, *args) -> None:
    """Call `fn(*args, group=None)` on every rank (module docstring)."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        run_rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), fn, args, None)
        return
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    if nproc > 1:
        from runtime.launcher import launch as spawn

        spawn(run_rank, nproc, (fn, args, port))
        return
    saved = {k: os.environ.get(k) for k in _ENV}  # a one-rank group in this process: nothing to spawn
    try:
        run_rank(0, 1, fn, args, port)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def default_nproc() -> int:
    """GPUs on this machine, else min(2, CPU cores)."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.device_count()
    return max(1, min(2, os.cpu_count() or 1))


def agree(value, group=None):
    """Rank 0's `value` on every rank (decisions that must not differ: what to measure next)."""
    from runtime import comm

    return comm.broadcast_object(value, 0, group)
