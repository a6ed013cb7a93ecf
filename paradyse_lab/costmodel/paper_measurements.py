"""The ParaDySe authors' measured A100 training times, as numbers: quadratic fits t(s) = a s^2 + b s + c.

Provenance (`PROVENANCE`): the authors' released code hard-codes these coefficients, fitted to training
times they measured on their node (8x A100-SXM4-80GB with NVLink; PyTorch 2.5.1, NCCL 2.21.5,
FlashAttention 2.7.4; fp16, non-causal attention, forward + backward of one sequence, batch 1). Only the
numbers are taken from there (they are measurements); the code here is ours. docs/paper_measurements.md
restates them with their reading.

How to read a fit: s is the sequence length in tokens, t is in seconds. For GPT (measured with 1 layer) the
expression is the time of one layer; for the other shapes the authors' code divides the whole expression by
the layer count it was measured with (5 for LLaMA, 24 for BERT, 32 for the 7B-like shape), so
`per_layer_time_s` = t(s) / `divisor`. The fits carry no memory: the project's analytic model supplies it.
"""

from __future__ import annotations

from dataclasses import dataclass

PROVENANCE = {
    "repository": "github.com/Carrie-ou/ParaDySe",
    "path": "paradyse/utils/time_calculator.py",
    "commit": "1ed6752c4cbd409a07187dfd1bcbca305df7e132",
    "node": "8x A100-SXM4-80GB, NVLink; PyTorch 2.5.1, CUDA 12.4, NCCL 2.21.5, FlashAttention 2.7.4",
    "conditions": "fp16, non-causal attention, forward + backward of one sequence, batch 1",
}
"""Where the coefficients come from (written into every row of the bundled paper profile)."""

PAPER_DEVICE = "a100-80gb-x8"
"""The cluster preset that describes the authors' node."""
PAPER_P = 8
PAPER_GPU = "A100-SXM4-80GB"


@dataclass(frozen=True)
class TimeFit:
    """One strategy's measured time fit on one shape: t(s) = a s^2 + b s + c seconds, divided by `divisor`."""

    a: float
    b: float
    c: float
    divisor: int
    """Layers the expression covers (the authors' code divides by it to get one layer's time)."""

    def per_layer_time_s(self, seq_len: float, segments: tuple[int, ...] | None = None,
                         attention_imbalance: float = 1.0) -> float:
        """Forward + backward seconds of one layer at `seq_len` tokens (batch 1, p = 8).

        `segments`: the documents of a packed step of seq_len tokens: c + b S + a (sum of n_i^2) x
        `attention_imbalance`, the s^2 term taken as attention, per document, times the
        busiest rank's share over the mean for a ring strategy on a packed step
        (1.0 otherwise), and never less than the pack's longest document alone. That floor binds only for a fit
        with b < 0 (BERT's METP: b = -1.2e-5, the fit bending round the fixed cost of the weight ring that
        hides the compute), where c + b S alone would turn negative."""
        s = float(seq_len)
        if segments is None:
            return (self.a * s * s + self.b * s + self.c) / self.divisor
        squares = sum(float(n) * n for n in segments) * attention_imbalance
        packed = (self.a * squares + self.b * s + self.c) / self.divisor
        return max(packed, self.per_layer_time_s(max(segments)))


@dataclass(frozen=True)
class MeasuredShape:
    """A layer shape the authors measured, and the model preset (with the layers run on the node) it maps to."""

    preset: str
    """`paradyse-lab catalog models` name with this shape."""
    hidden: int
    heads: int
    layers: int
    """Layers the paper runs on the node (the preset's); the time fits are per layer."""
    fits: dict
    """strategy -> `TimeFit`."""

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.hidden, self.heads, self.layers)

    def describe(self) -> str:
        return f"{self.preset} (h {self.hidden}, {self.heads} heads, {self.layers} layers)"


def _fits(divisor: int, rows: dict) -> dict:
    return {name: TimeFit(a, b, c, divisor) for name, (a, b, c) in rows.items()}


MEASURED_SHAPES: tuple[MeasuredShape, ...] = (
    MeasuredShape("bert", 1024, 16, 24, _fits(24, {
        "megatron_ts": (2.36e-10, 5.22e-06, 0.028366),
        "ulysses_z": (2.41e-10, 7.30e-07, 0.162314),
        "megatron_cz": (2.30e-10, 3.37e-06, 0.222728),
        "metp": (3.28e-10, -1.2e-05, 1.368680),
    })),
    MeasuredShape("llama", 8192, 64, 8, _fits(5, {
        "megatron_ts": (3.59e-10, 1.6e-05, 0.017448),
        "ulysses_z": (3.41e-10, 1.2e-05, 0.316047),
        "megatron_cz": (3.53e-10, 1.4e-05, 0.342677),
        "metp": (3.33e-10, 2.0e-05, 0.290053),
    })),
    MeasuredShape("gpt", 12288, 96, 8, _fits(1, {
        "megatron_ts": (1.08e-10, 6.22e-06, 0.010117),
        "ulysses_z": (1.03e-10, 5.07e-06, 0.093456),
        "megatron_cz": (1.03e-10, 5.89e-06, 0.093685),
        "metp": (1.04e-10, 6.81e-06, 0.112750),
    })),
    MeasuredShape("paper-7b", 4096, 32, 32, _fits(32, {
        "megatron_ts": (1.23e-09, 3.3e-05, 0.098259),
        "ulysses_z": (1.05e-09, 2.7e-05, 0.970848),
        "megatron_cz": (1.05e-09, 2.7e-05, 0.970848),
        "metp": (1.18e-09, 3.9e-05, 1.436488),
    })),
)
"""The four measured shapes, in the order above (BERT, LLaMA, GPT of Table 4 and the 7B-like shape)."""


def covers_node(gpu_name: str, p: int) -> bool:
    """Whether the fits were measured on this GPU at this world size (the authors' node only)."""
    return gpu_name == PAPER_GPU and p == PAPER_P


def covered_shapes_text() -> str:
    """The four shapes, for error messages."""
    return ", ".join(m.describe() for m in MEASURED_SHAPES) + f"; p = {PAPER_P} on {PAPER_DEVICE}, batch 1"


def shape_for(hidden: int, heads: int, layers: int) -> MeasuredShape | None:
    """The measured shape with these dimensions, or None."""
    for m in MEASURED_SHAPES:
        if m.key == (hidden, heads, layers):
            return m
    return None
