"""The cost of a packed step: several documents in one sequence, attention confined to each document.

A packed step (`pack_document_indices` makes them) is its documents' lengths n_1..n_k, each padded to the
layout unit U (2p: the per-document zig-zag layout every strategy reads, so one padded
length serves every layer of a mixed plan) and concatenated; each document's padding is one more segment
of the pack, which the linear parts process and whose tokens attend only to each other. What each cost
model charges for it:

- analytic and calibrated (`schedules.schedule(segments=...)`): attention FLOPs summed per document with the
  block-diagonal mask (4 n_i^2 h, halved when causal), each document's kernel at its own length (ring
  strategies: at most S/p keys per block), so the FlashAttention efficiency of short documents is charged;
  GEMMs, element-wise traffic, communication, kept and transient bytes over the S = n_1 + ... + n_k + padding
  tokens (all linear in the tokens: the runtime's varlen kernels keep no s^2 tensor). Ring
  strategies (megatron_cz, metp) cut every document into 2p chunks, as the runtime does, so their ranks'
  attention is even but for the padding's share; each is charged the busiest rank's share;
  they still pass every K/V block round the whole ring, so packing shrinks
  the attention they hide their traffic behind.
- paper (the authors' fits t(s) = a s^2 + b s + c per layer): fixed c + linear b S + quadratic a (n_1^2 +
  ... + padding^2) (ring strategies: times the busiest rank's share, non-causal as the fits were measured),
  never less than t(longest document) alone. The decomposition takes the fit's whole s^2
  term as attention and its s term as the linear parts, which holds for the fits with b >= 0 (15 of 16; the
  floor never binds there); BERT's METP fit has b < 0 (it bends round a 57 ms fixed cost that hides the
  compute), so c + b S turns negative for large packs of short documents and the floor charges what its
  longest document costs. The fits were measured on single sequences, non-causal, with no document
  boundaries: this is a model of what a packed step costs on the authors' node, not a measurement of one.
- learned kinds (`hybrid`, `forest`, `polynomial`: whole-model time and peak regressed on the length): the
  prediction at the padded length S, its time scaled by the analytic model's packed / unpacked whole-model time
  of the same option; memory is the prediction at S unchanged. The regressors see only a length, so how
  packing splits a layer's time comes from the analytic model, not from the profile. `residual`: the
  analytic packed cost times the learned measured / analytic ratios at S.

A pack of one document with no padding is the unpacked step, exactly, under every cost model.
Command: `paradyse-lab simulate --model gpt --dataset github_code --policy dynamic:dp --pack-tokens 32768`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.core.strategies import pad_to_unit
from paradyse_lab.costmodel.lowering import problem_from_cost_model
from paradyse_lab.errors import UserInputError, require_positive_int


@dataclass(frozen=True)
class PackedStep:
    """One training step of packed documents, each padded to the layout unit."""

    documents: tuple[int, ...]
    """Document lengths in tokens, in the order they are concatenated."""
    unit: int = 1
    """Layout unit every document is padded to (2p for the unified layout)."""

    def __post_init__(self):
        if not self.documents:
            raise UserInputError("a packed step needs at least one document")
        object.__setattr__(self, "documents", tuple(require_positive_int("document length", n)
                                                    for n in self.documents))
        require_positive_int("layout unit", self.unit)

    @property
    def tokens(self) -> int:
        """Real tokens: the documents' lengths summed."""
        return sum(self.documents)

    @property
    def paddings(self) -> tuple[int, ...]:
        """Tokens added after each document to reach a multiple of the unit (at most unit - 1 each)."""
        return tuple(-n % self.unit for n in self.documents)

    @property
    def padded_len(self) -> int:
        """Tokens of the sequence every layer sees: each document rounded up to the unit (`pad_to_unit`), summed."""
        return sum(pad_to_unit(n, self.unit) for n in self.documents)

    @property
    def padding(self) -> int:
        """Padding tokens of the step (fewer than the unit per document)."""
        return sum(self.paddings)

    @property
    def segments(self) -> tuple[int, ...]:
        """The attention segments: each document, then its padding as one segment when there is any."""
        return tuple(x for n, pad in zip(self.documents, self.paddings) for x in ((n, pad) if pad else (n,)))

    @property
    def longest(self) -> int:
        """The longest document."""
        return max(self.documents)


class PackedCostModel:
    """A cost model seen at one packed step: `sublayer(kind, option, step.padded_len)` is the packed cost.

    Everything solvers and `problem_from_cost_model` (`lowering`) ask of a cost model keeps its meaning, so a
    packed step's problem is built, and solved by every solver, unchanged (`step_problem`).
    """

    def __init__(self, cost_model, step: PackedStep):
        self.inner, self.step = cost_model, step

    def __getattr__(self, name):  # model, p, cluster, name, label, collective_s, budget_bytes, ...
        return getattr(self.inner, name)

    def _check(self, seq_len: int, batch: int) -> None:
        if seq_len != self.step.padded_len or batch != 1:
            raise ValueError(f"this packed step is seq_len {self.step.padded_len} at batch 1, "
                             f"asked for seq_len {seq_len} at batch {batch}")

    def sublayer(self, kind: str, option, seq_len: int, batch: int = 1):
        """The sub-layer's cost over the pack's documents (module docstring)."""
        self._check(seq_len, batch)
        return self.inner.sublayer(kind, option, seq_len, 1, segments=self.step.segments)

    def fixed(self, seq_len: int, batch: int = 1):
        """Embedding, head and loss: per token, so the padded pack's (no attention in them)."""
        self._check(seq_len, batch)
        return self.inner.fixed(seq_len, 1)


def step_problem(graph, cost_model, step: int | PackedStep, batch: int = 1, budget_bytes: int | None = None,
                 options: Sequence | None = None) -> SearchProblem:
    """The `SearchProblem` of one training step: a sequence of `step` tokens, or a `PackedStep`."""
    if isinstance(step, PackedStep):
        if batch != 1:
            raise UserInputError(f"a packed step is one sequence of documents: batch must be 1, got {batch}")
        return problem_from_cost_model(graph, PackedCostModel(cost_model, step), step.padded_len, 1, budget_bytes,
                                       options)
    return problem_from_cost_model(graph, cost_model, step, batch, budget_bytes, options)
