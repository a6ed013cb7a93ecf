"""The health checks of a training run's steps (library module of the optimizer step): whether tensors are
finite on every rank, and the stop that ends the run, on every rank together, when a check fails.
"""

from __future__ import annotations

import torch

from paradyse_lab.errors import RunStopped
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm import record as comm_record


def finite_on_every_rank(tensors, group) -> bool:
    """Whether every tensor on every rank is finite (one all-reduce of a [1] flag: all ranks agree). The
    per-tensor checks stay on the device (one count of non-finite tensors); the host reads one number, once:
    one device sync per call, not one per parameter."""
    present = [t for t in tensors if t is not None and t.numel()]
    device = present[0].device if present else "cpu"
    flag = torch.zeros(1, device=device)  # [1]: non-finite tensors on this rank
    for t in present:
        flag += (~torch.isfinite(t).all()).to(flag.dtype)  # no host read here
    with comm_record.tagged("health"):
        return float(comm.all_reduce(flag, group)[0]) == 0.0  # [1] summed over ranks


def stop_run(bar, message: str):
    """End the run with `message` (every rank reaches this together), closing the progress bar `bar` (or None)."""
    if bar is not None:
        bar.close()
    raise RunStopped(message)
