"""What every collective and point-to-point call records: the bytes this rank sends, and the
call itself.

Library module (no command). Byte counting: each call records the bytes this rank sends under the
ring-algorithm convention of `paradyse_lab.costmodel.types.CollectiveCall.sent_bytes` (nccl-tests' buffer S,
docs/hardware.md section 3): all_gather / reduce_scatter / all_to_all S(n-1)/n, all_reduce 2S(n-1)/n, p2p the
message; an all-to-all with unequal parts, the larger of what this rank sends and receives (its busiest member's
count is then the even all-to-all's at the largest part, the cost model's price). The count is of the logical
collective, whatever the backend does underneath, so it can be compared with the analytic schedule. Wrap code
in `count_bytes()` to collect them, and in `trace_calls()` to record every call with its shapes, dtypes and peers
in posting order (replayed across ranks by `replay` to find deadlocks and mismatches without a GPU). `tagged()`
labels the calls made inside it (layer and sub-layer) in both records. A group of size 1 short-circuits before
anything is recorded; a `paradyse_lab.runtime.comm.fake_group.FakeGroup` records as a real group would.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch


@dataclass
class ByteCounter:
    """Bytes this rank sent, by collective kind, and the list of calls."""

    by_op: dict[str, int] = field(default_factory=dict)
    """Sent bytes per op ('all_gather', 'reduce_scatter', 'all_to_all', 'all_reduce', 'p2p')."""
    calls: list[tuple[str, int, str]] = field(default_factory=list)
    """(op, sent bytes, tag) per call."""

    def add(self, op: str, nbytes: int, tag: str = "") -> None:
        self.by_op[op] = self.by_op.get(op, 0) + nbytes
        self.calls.append((op, nbytes, tag))

    def total(self, tag: str | None = None) -> dict[str, int]:
        """Bytes by op, only of calls with `tag` when given."""
        out: dict[str, int] = {}
        for op, n, t in self.calls:
            if tag is None or t == tag:
                out[op] = out.get(op, 0) + n
        return out


@dataclass(frozen=True)
class TracedCall:
    """One call as this rank posts it (for `replay`): a collective, or one point-to-point
    exchange (its sends and receives, posted together: one `batch_isend_irecv` on NCCL)."""

    op: str
    """'all_gather', 'reduce_scatter', 'all_to_all', 'all_reduce' or 'p2p'."""
    group_size: int
    shape: tuple[int, ...] = ()
    """Collectives: the input's shape."""
    dtype: str = ""
    sends: tuple[tuple[int, tuple[int, ...], str, int], ...] = ()
    """p2p: (destination group rank, shape, dtype, message tag) per message sent."""
    recvs: tuple[tuple[int, tuple[int, ...], str, int], ...] = ()
    """p2p: (source group rank, shape, dtype, message tag) per message received."""
    tag: str = ""
    """The `tagged()` label (layer and sub-layer) the call was made under."""


_COUNTERS: list[ByteCounter] = []
_TRACES: list[list[TracedCall]] = []
_TAG: list[str] = [""]


@contextlib.contextmanager
def count_bytes():
    """Collect the bytes every call inside the block sends: `with count_bytes() as c: ...; c.by_op`."""
    counter = ByteCounter()
    _COUNTERS.append(counter)
    try:
        yield counter
    finally:
        _COUNTERS.remove(counter)


@contextlib.contextmanager
def trace_calls():
    """Record every call inside the block, in posting order: `with trace_calls() as calls: ...`."""
    calls: list[TracedCall] = []
    _TRACES.append(calls)
    try:
        yield calls
    finally:
        _TRACES.remove(calls)


@contextlib.contextmanager
def tagged(tag: str):
    """Label the calls made inside the block (for example 'loss' or 'embedding')."""
    _TAG.append(tag)
    try:
        yield
    finally:
        _TAG.pop()


def record_sent_bytes(op: str, nbytes: int) -> None:
    """Add `nbytes` sent by one `op` call to every open `count_bytes()` block, under the current tag."""
    for c in _COUNTERS:
        c.add(op, int(nbytes), _TAG[-1])


def tracing() -> bool:
    """Whether a `trace_calls()` block is open: what `record_call` appends to."""
    return bool(_TRACES)


def record_call(op: str, group_size: int, x: torch.Tensor | None = None, sends=(), recvs=()) -> None:
    """Append one call (a collective on `x`, or a point-to-point exchange's `sends` and `recvs`) to every open
    `trace_calls()` block, under the current tag."""
    if not tracing():
        return
    call = TracedCall(op, group_size, tuple(x.shape) if x is not None else (), dtype_name(x) if x is not None else "",
                      tuple(sends), tuple(recvs), _TAG[-1])
    for t in _TRACES:
        t.append(call)


def dtype_name(x: torch.Tensor) -> str:
    """`x`'s dtype without the 'torch.' prefix (for example 'bfloat16')."""
    return str(x.dtype).replace("torch.", "")


def tensor_bytes(x: torch.Tensor) -> int:
    """Bytes of `x`'s elements."""
    return x.numel() * x.element_size()
