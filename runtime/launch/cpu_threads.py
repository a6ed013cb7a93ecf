"""Threads a CPU rank computes with: the cores this process may run on (`os.sched_getaffinity`) less those the
machine is already busy with (the one-minute load average), shared by the ranks, at least one. A loaded machine
given as many threads as it has cores makes each matrix product wait on threads that cannot run (a 2-core box
with two busy cores ran a one-rank `train` 5x slower on 2 threads than on 1). `OMP_NUM_THREADS` set by the user
wins."""

from __future__ import annotations

import os


def free_cores() -> int:
    """Cores this process may use that the load average does not already keep busy (at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except OSError:
        busy = 0.0
    return max(1, cores - int(busy + 0.5))


def rank_threads(ranks: int = 1) -> int:
    """Threads for each of `ranks` CPU ranks of this machine (module docstring)."""
    return max(1, free_cores() // max(1, ranks))


def set_rank_threads(ranks: int = 1) -> int | None:
    """Give torch `rank_threads(ranks)` threads unless OMP_NUM_THREADS is set; the count set, or None."""
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    import torch

    threads = rank_threads(ranks)
    torch.set_num_threads(threads)
    return threads
