"""A fake process group: one process plays rank `rank` of a `size`-rank world without communicating.

Library module (no command). `paradyse_lab.runtime.comm.collectives` and `paradyse_lab.runtime.comm.p2p` accept a
`FakeGroup` wherever they take a
process group: `comm.size` / `comm.rank` answer from it, and every collective and point-to-point call returns a
tensor of exactly the shape (and dtype, device) the real call would return, without sending anything:
- all_gather [n, ..] -> [p*n, ..]: the local tensor repeated p times (every rank "sent" the same values);
- reduce_scatter [p*n, ..] -> [n, ..]: this rank's chunk, not summed;
- all_to_all: a copy of the input; all_reduce: the input unchanged;
- exchange / ring_exchange / chain_*: the received tensor is a copy of the tensor sent (or of `recv_like`).
Values are therefore not those of a real run (the outputs are garbage but finite); shapes, dtypes, the
sequence of kernels this rank runs and the tensors it keeps for backward are exact, which is what the
rank-local profiler measures. Byte counting (`comm_record.count_bytes`)
records every call as the real group would, so the modelled communication time can be priced from the same
calls.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FakeGroup:
    """Rank `rank` of a world of `size` ranks that never communicates (module docstring)."""

    size: int
    """Ranks in the emulated group (p)."""
    rank: int = 0
    """The rank this process plays."""
    is_fake: bool = True
    """Marker `paradyse_lab.runtime.comm.collectives` looks for (duck typing keeps this module free of torch)."""

    def __post_init__(self):
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise ValueError(f"FakeGroup needs size >= 1 and 0 <= rank < size, got size={self.size} rank={self.rank}")


def is_fake(group) -> bool:
    """True for a `FakeGroup` (or any group object marked `is_fake`)."""
    return bool(getattr(group, "is_fake", False))
