"""Run a function on every rank of a process group: under torchrun, as p spawned local processes, or alone.

Library module of the commands that measure or train on the machine they run on (`paradyse-lab calibrate`,
`paradyse-lab validate-run`): `launch(fn, nproc, *args)` calls `fn(*args, group=None)` on every rank, with
torch.distributed initialised (NCCL when every rank has a GPU, else gloo on CPU; the same code either way).
Under torchrun (RANK and WORLD_SIZE set) the current process is one rank; with nproc > 1 it spawns nproc
processes (torch.multiprocessing, a free local port); with nproc = 1 it calls `fn` in this process inside a
one-rank group (comm.py's calls then short-circuit). CPU ranks get cores / nproc threads each, so that p
processes do not oversubscribe the machine.
"""

from __future__ import annotations

import os


def _one_rank(rank: int, world: int, fn, args, port: int | None) -> None:
    import torch
    import torch.distributed as dist

    if port is not None:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    local = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    gpu = torch.cuda.is_available() and torch.cuda.device_count() >= local_world  # a GPU per local rank, else gloo
    if gpu:
        torch.cuda.set_device(local)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("nccl" if gpu else "gloo")
    try:
        fn(*args, group=None)
    finally:
        dist.destroy_process_group()


def launch(fn, nproc: int, *args) -> None:
    """Call `fn(*args, group=None)` on every rank (module docstring)."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        _one_rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), fn, args, None)
    else:
        import socket

        import torch.multiprocessing as mp

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if nproc > 1:
            mp.spawn(_one_rank, args=(nproc, fn, args, port), nprocs=nproc)
        else:  # a one-rank group in this process: the same code path, nothing to spawn
            saved = {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
            try:
                _one_rank(0, 1, fn, args, port)
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
    import torch.distributed as dist

    from runtime import comm

    if comm.size(group) == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=comm.global_rank(group, 0), group=group)
    return box[0]
