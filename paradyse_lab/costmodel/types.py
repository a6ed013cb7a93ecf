"""Value types every cost model returns, and the `CostModel` protocol solvers and the simulator use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from paradyse_lab.cluster.spec import COLLECTIVES, ClusterSpec
from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.strategies import StrategyOption


@dataclass(frozen=True)
class CollectiveCall:
    """One collective (or, for `p2p`, one ring step) a rank takes part in, `count` times.

    `buffer_bytes` follows the nccl-tests convention (docs/hardware.md section 3): the full output of an
    all_gather, the full input of a reduce_scatter, a rank's send buffer for all_to_all, the message of a
    point-to-point step, the buffer of all_reduce and broadcast.
    """

    op: str
    """One of `COLLECTIVES`."""
    buffer_bytes: int
    """S in the nccl-tests convention."""
    ranks: int
    """Group size n."""
    count: int = 1
    """How many identical calls."""
    overlapped: bool = False
    """Whether the strategy hides this behind compute (ring point-to-point with double buffering)."""
    stride: int = 1
    """Distance between the group's consecutive ranks: 1 for a block of consecutive ranks, a for the ring groups
    of a two-dimensional a x b split (one rank of every head group), so node_gpus / stride of them share a node."""

    def __post_init__(self):
        if self.op not in COLLECTIVES:
            raise ValueError(f"unknown collective {self.op!r}; valid: {', '.join(COLLECTIVES)}")

    @property
    def sent_bytes(self) -> int:
        """Bytes this rank sends over all `count` calls (ring algorithms; what the runtime's collectives count)."""
        n, s = self.ranks, self.buffer_bytes
        per_call = {
            "all_gather": s * (n - 1) // n, "reduce_scatter": s * (n - 1) // n,
            "all_to_all": s * (n - 1) // n, "all_reduce": 2 * s * (n - 1) // n,
            "broadcast": s * (n - 1) // n, "p2p": s,
        }[self.op]
        return per_call * self.count


@dataclass(frozen=True)
class SubLayerCost:
    """Cost of one sub-layer (attention or MLP) under one strategy option, one training step, per rank."""

    time_s: float
    """Forward + backward wall time, overlap accounted for."""
    compute_s: float
    """Time of the arithmetic (GEMMs, attention kernels, element-wise ops), including recomputation."""
    exposed_comm_s: float
    """Communication time not hidden behind compute."""
    kept_bytes: int
    """Activation bytes kept from the forward pass for the backward pass."""
    transient_bytes: int
    """Extra bytes alive only while this sub-layer runs (gathered weights, buffers, gradients in flight)."""
    model_state_bytes: int
    """Weights, gradients and optimizer states of this sub-layer held by the rank."""
    collectives: tuple[CollectiveCall, ...] = field(default=())
    """What the rank communicates."""
    host_bytes: int = 0
    """Activation bytes moved to host memory from the forward to the backward (`+offload`); kept_bytes is then
    what stays on the device."""

    def comm_bytes(self) -> dict[str, int]:
        """Bytes this rank sends, by collective kind."""
        out: dict[str, int] = {}
        for c in self.collectives:
            out[c.op] = out.get(c.op, 0) + c.sent_bytes
        return out


@dataclass(frozen=True)
class FixedCost:
    """The parts outside the strategy-switched layers: embedding, final norm, head and loss."""

    time_s: float
    """Forward + backward time, including the all-reduce of replicated gradients."""
    model_state_bytes: int
    """Model states of the embedding / final norm (tied head)."""
    kept_bytes: int
    """Activations kept for the backward pass (embedding output, final norm, fp32 logits)."""
    transient_bytes: int
    """Working memory of the loss backward."""
    optimizer_s: float = 0.0
    """The optimizer step after the backward, once per training step (measured clusters only: the AdamW
    step the runtime times; not part of a profile's forward + backward step, nor of `time_s`)."""


class CostModel(Protocol):
    """What solvers and the simulator ask a cost model."""

    model: ModelSpec
    cluster: ClusterSpec
    p: int

    def budget_bytes(self, budget: int) -> int:
        """The memory a plan made with this model may use out of `budget` (a learned model of the paper's
        kind caps it at the largest peak it saw while profiling; the others give `budget` itself)."""

    def sublayer(self, kind: str, option: StrategyOption, seq_len: int, batch: int = 1,
                 segments: tuple[int, ...] | None = None) -> SubLayerCost:
        """Cost of one 'attention' or 'mlp' sub-layer; with `segments`, of a packed step of seq_len tokens
        (batch 1) whose attention stays inside each segment."""

    def fixed(self, seq_len: int, batch: int = 1) -> FixedCost:
        """Cost of the embedding and head (zero when the model has none)."""
