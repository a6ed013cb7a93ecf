"""`StepRounds`: one training step of a global batch as rounds of group splits, run one after another.

Each round is a `GroupedStep` (a split of every rank into aligned power-of-two groups, each training its items
under its own per-layer plans) over some of the step's items; the rounds train every item of the step once, and
the step's gradients are reduced once, after its last round. One round is one split (`StepRounds.one`).

The planner (simulator side) produces it; the runtime executes it; both only import this module.
"""

from __future__ import annotations

from dataclasses import dataclass

from paradyse_lab.core.step_groups import GroupedStep
from paradyse_lab.errors import UserInputError


@dataclass(frozen=True)
class StepRounds:
    """The rounds of one step, in the order they run: round k's item j is the step's item `items[k][j]`."""

    world: int
    batch: int
    rounds: tuple[GroupedStep, ...]
    items: tuple[tuple[int, ...], ...]
    """Per round, the step's index of each of the round's items (the round's own indices are 0 .. its batch - 1)."""

    def __post_init__(self):
        if not self.rounds or len(self.items) != len(self.rounds):
            raise UserInputError(f"a step needs one or more rounds, each with its items: {len(self.rounds)} rounds, "
                                 f"{len(self.items)} item lists")
        for k, (r, items) in enumerate(zip(self.rounds, self.items)):
            if r.world != self.world:
                raise UserInputError(f"round {k + 1} covers {r.world} ranks, the step {self.world}")
            if len(items) != r.batch:
                raise UserInputError(f"round {k + 1} trains {r.batch} items but names {len(items)}")
        every = sorted(i for items in self.items for i in items)
        if every != list(range(self.batch)):
            raise UserInputError(f"the rounds' items must cover items 0..{self.batch - 1} once each, got {every}")

    @classmethod
    def one(cls, step: GroupedStep) -> StepRounds:
        """`step` as a step of one round."""
        return cls(step.world, step.batch, (step,), (tuple(range(step.batch)),))

    def size_of(self) -> dict[int, int]:
        """The step's item -> the size of the group that trains it."""
        return {items[i]: g.size for r, items in zip(self.rounds, self.items) for g in r.groups for i in g.items}

    def label(self) -> str:
        """What a log row prints: one round as `groups 2/1/1` (its sizes in rank order), several as
        `rounds 4 / 2,2` (each round's sizes joined by ',', the rounds by ' / ', as `simulate`'s step CSV)."""
        if len(self.rounds) == 1:
            return f"groups {'/'.join(map(str, self.rounds[0].sizes))}"
        return "rounds " + " / ".join(",".join(map(str, r.sizes)) for r in self.rounds)
