"""The run's collective timeout, carried to every process group made after the world's.

Library module (no command). torch gives a group made by `new_group` without a timeout its backend's default
(30 minutes for gloo, 10 for NCCL: `torch.distributed.new_group`'s documentation), not the world group's: a
stopped peer would leave a node group's or a device mesh's collective waiting that long whatever
`--collective-timeout` says. The rank records the timeout where it joins the world (`set_run_timeout`), and the
runtime's groups are made here (`new_group`, `new_subgroups`) with it.
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

_TIMEOUT: list[timedelta] = []
"""[the timeout the world group was joined with], empty when this process joined none through the runtime."""


def set_run_timeout(timeout: timedelta | None) -> None:
    """Record `timeout` as the wait of every group made from now on (None: forget it, torch's default again)."""
    _TIMEOUT[:] = [] if timeout is None else [timeout]


def run_timeout() -> timedelta | None:
    """The recorded timeout, or None (torch's default) when the world was joined without the runtime."""
    return _TIMEOUT[0] if _TIMEOUT else None


def new_group(ranks: list[int]):
    """`dist.new_group(ranks)` waiting the run's timeout; every rank of the world calls it, in the same order."""
    return dist.new_group(ranks, timeout=run_timeout())


def new_subgroups(ranks_per_group: list[list[int]]):
    """This rank's group among `ranks_per_group` (a partition of the world's ranks), every one made with the run's
    timeout (`dist.new_subgroups_by_enumeration`); every rank of the world calls it, in the same order."""
    mine, _ = dist.new_subgroups_by_enumeration(ranks_per_group, timeout=run_timeout())
    return mine
