"""The local launcher's rendezvous: its ranks meet at a store the launcher serves and holds, on a port the operating
system picked, so that two runs started at the same moment can never meet at one port."""

from __future__ import annotations

import socket

import pytest

from paradyse_lab.runtime.launch.ranks import launch, rendezvous_store


def test_the_rendezvous_port_stays_taken_while_the_ranks_meet():
    store = rendezvous_store()
    with socket.socket() as other, pytest.raises(OSError):
        other.bind(("127.0.0.1", store.port))  # another run asking for this port cannot have it


def _world_size(out: list, group=None) -> None:
    import torch.distributed as dist

    out.append(dist.get_world_size())


def test_a_one_rank_launch_meets_at_its_own_store():
    seen: list[int] = []
    launch(_world_size, 1, seen)
    launch(_world_size, 1, seen)  # a second world after the first, each at a store of its own
    assert seen == [1, 1]
