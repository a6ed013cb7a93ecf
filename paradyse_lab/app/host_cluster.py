"""The cluster a CPU run plans against when no `--cluster` is given: the default preset's speeds with this host's
memory shared by its ranks, so that `train` on a CPU refuses a model that does not fit the machine before its
first step, instead of planning it into an A100's 80 GiB and failing in the allocator.

On a CPU every rank's parameters, gradients, optimizer states and activations live in host memory, so a rank's
budget is the host's physical memory (`os.sysconf` pages times page size) divided by the ranks, less a reserve
for the Python process and torch itself.
"""

from __future__ import annotations

import os
from dataclasses import replace

from paradyse_lab.units import GIB

HOST_RESERVE_BYTES = GIB
"""Memory a CPU rank keeps for the interpreter, torch's libraries and its allocator (a rank of a tiny model holds
about 0.5 GiB before its first step)."""


def host_memory_bytes() -> int:
    """Physical memory of this machine in bytes."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def host_cluster(cluster, ranks: int, memory_bytes: int | None = None):
    """`cluster` with one "GPU" per rank holding the host's memory shared by `ranks` (module docstring)."""
    total = host_memory_bytes() if memory_bytes is None else memory_bytes
    per_rank = total // max(1, ranks)
    reserve = min(HOST_RESERVE_BYTES, per_rank // 2)
    return replace(cluster, name=f"this CPU host ({cluster.name}'s speeds)",
                   gpu_name=f"CPU, {total / GIB:.1f} GiB host memory over {ranks} rank{'s' if ranks > 1 else ''}",
                   memory_bytes=per_rank, reserve_bytes=reserve, reserve_fraction=0.0)
