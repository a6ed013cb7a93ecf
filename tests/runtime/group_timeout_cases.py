"""Rank function for tests/runtime/test_group_timeouts.py, importable by spawned ranks."""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from paradyse_lab.runtime.comm.nodes import node_layout
from paradyse_lab.runtime.training.grouped import StepMeshes

EXPECTED_S = 7.0
"""The `--collective-timeout` the test launches with: far from torch's 30-minute default."""


def group_timeout(group) -> timedelta:
    """The timeout a gloo process group's collectives wait (its backend's options)."""
    return group._get_backend(torch.device("cpu")).options._timeout


def groups_carry_the_run_timeout(group=None) -> None:
    """Every group the runtime makes after the world (the node and rail groups of a world of one rank per node,
    every step mesh's "dp" and "sp" groups) waits the run's collective timeout, as the world group does."""
    rank, world = dist.get_rank(), dist.get_world_size()
    want = timedelta(seconds=EXPECTED_S)
    assert group_timeout(dist.group.WORLD) == want
    os.environ.update(GROUP_RANK=str(rank), LOCAL_WORLD_SIZE="1")  # one rank per node: world nodes
    layout = node_layout()
    assert layout.nodes == world
    found = {"node": group_timeout(layout.node_group), "rail": group_timeout(layout.rail_group)}
    meshes = StepMeshes("cpu")
    for g, mesh in meshes.meshes.items():
        for dim in ("dp", "sp"):
            found[f"mesh {g} {dim}"] = group_timeout(mesh.get_group(dim))
    wrong = {name: str(t) for name, t in found.items() if t != want}
    assert not wrong, f"rank {rank}: groups not waiting {want}: {wrong}"
