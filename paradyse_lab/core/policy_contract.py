"""What the training loop and the simulator ask of a planning policy, as `typing.Protocol`s: every policy decides
each step's plan; evaluating held-out steps needs a fresh copy that leaves training's cache alone; a policy with
head options also fixes where the run stores its embedding and head. Checked with `isinstance` (the protocols are
runtime-checkable), so a stand-in policy needs only the methods its use asks for."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class StepPolicy(Protocol):
    """Decides each step: `decide(seq_len or packed step, batch)` returns a decision carrying its `Plan`."""

    def decide(self, seq_len, batch: int): ...


@runtime_checkable
class CopyablePolicy(StepPolicy, Protocol):
    """A policy whose `fresh_copy()` plans as it would from the start (no cache, no smoothing history)."""

    def fresh_copy(self) -> CopyablePolicy: ...


@runtime_checkable
class HeadPolicy(StepPolicy, Protocol):
    """A policy that plans the head too: `storage_head` is its head at a length (where the run stores the
    embedding and head), `restrict_heads` limits every later plan to the heads that storage runs."""

    def storage_head(self, seq_len: int, batch: int) -> str: ...

    def restrict_heads(self, heads: tuple[str, ...]) -> None: ...
