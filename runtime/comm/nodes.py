"""The nodes of the world: which ranks share a machine, and the process groups inside a node and across nodes.

Library module (no command). torchrun gives every process its node's rank (`GROUP_RANK`, 0 .. nnodes - 1) and
the number of processes on its node (`LOCAL_WORLD_SIZE`), and numbers the ranks node by node (torchrun's
documentation, "Environment Variables"); the single-command launcher sets neither, and its world is one node.
`node_layout(group)` gathers every rank's node, checks that the nodes are equal blocks of consecutive ranks,
and makes (on every rank, as torch.distributed requires) the group of each node and the "rail" groups, one rank
per node with the same local rank (the ranks that talk over the network in a hierarchical collective, each
over its own NIC: docs/hardware.md section 4).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.comm.group_timeout import new_group


@dataclass(frozen=True)
class NodeLayout:
    """The world's nodes, and this rank's groups inside its node and across the nodes."""

    nodes: int
    per_node: int
    """Ranks on every node."""
    node_group: object = None
    """The ranks of this rank's node (None: the whole `group`, when there is one node)."""
    rail_group: object = None
    """One rank per node, the ones with this rank's local rank (None with one node)."""


def node_of_this_rank(env=os.environ) -> tuple[int, int]:
    """(node rank, ranks on the node) from torchrun's environment; (0, 0) when it is not set (0: the world). The
    commands check both before any rank starts (`torchrun_rank`)."""
    try:
        return int(env.get("GROUP_RANK", 0)), int(env.get("LOCAL_WORLD_SIZE", 0))
    except ValueError as err:
        raise UserInputError(f"GROUP_RANK and LOCAL_WORLD_SIZE must be integers (torchrun sets them): {err}") from None


def node_layout(group=None) -> NodeLayout:
    """The nodes of `group`'s ranks (module docstring); every rank calls it (it makes process groups)."""
    import torch.distributed as dist

    from paradyse_lab.runtime.comm import collectives as comm

    p = comm.size(group)
    node, local = node_of_this_rank()
    if p == 1:
        return NodeLayout(1, 1)
    nodes_of = [None] * p
    dist.all_gather_object(nodes_of, (node, local or p), group=group)  # [(node, ranks on it)] per rank
    per_node = nodes_of[0][1]
    if p % per_node or nodes_of != [(r // per_node, per_node) for r in range(p)]:
        raise UserInputError(f"the ranks' nodes must be equal blocks of consecutive ranks (torchrun's numbering); "
                             f"got (node, ranks on it) per rank {nodes_of}")
    nodes = p // per_node
    if nodes == 1:
        return NodeLayout(1, per_node)
    ranks = [comm.global_rank(group, r) for r in range(p)]
    mine = comm.rank(group)
    node_group = rail_group = None
    for n in range(nodes):  # every rank makes every group, in the same order
        made = new_group(ranks[n * per_node:(n + 1) * per_node])  # the run's timeout
        node_group = made if mine // per_node == n else node_group
    for j in range(per_node):
        made = new_group(ranks[j::per_node])
        rail_group = made if mine % per_node == j else rail_group
    return NodeLayout(nodes, per_node, node_group, rail_group)
