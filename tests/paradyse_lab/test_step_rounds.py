"""`StepRounds`: the rounds of a step cover its items once, on the same world, and say their groups."""

from __future__ import annotations

import pytest

from paradyse_lab.core.plan import Plan
from paradyse_lab.core.step_groups import GroupedStep, StepGroup
from paradyse_lab.core.step_rounds import StepRounds
from paradyse_lab.errors import UserInputError

PLAN = Plan.for_layers(["megatron_cz"], 1)
WHOLE = GroupedStep(4, 1, (StepGroup(0, 4, (0,), (PLAN,)),))
"""One sequence on one group of all four ranks."""
HALVES = GroupedStep(4, 2, (StepGroup(0, 2, (0,), (PLAN,)), StepGroup(2, 2, (1,), (PLAN,))))
"""Two sequences on two groups of two."""


def test_rounds_map_their_items_to_the_steps_and_say_their_groups():
    step = StepRounds(4, 3, (WHOLE, HALVES), ((2,), (0, 1)))
    assert step.size_of() == {2: 4, 0: 2, 1: 2}
    assert step.label() == "rounds 4 / 2,2"
    assert StepRounds.one(HALVES).label() == "groups 2/2" and StepRounds.one(HALVES).size_of() == {0: 2, 1: 2}


@pytest.mark.parametrize("rounds, items, match", [
    ((WHOLE, HALVES), ((0,), (0, 1)), "cover items 0..2 once"),  # item 0 twice, item 2 never
    ((WHOLE, HALVES), ((2,), (0,)), "trains 2 items but names 1"),
    ((WHOLE,), ((0,), (1, 2)), "one or more rounds, each with its items"),
    ((), (), "one or more rounds"),
])
def test_rounds_that_do_not_cover_the_step_once_are_refused(rounds, items, match):
    with pytest.raises(UserInputError, match=match):
        StepRounds(4, 3, rounds, items)


def test_a_round_of_another_world_is_refused():
    with pytest.raises(UserInputError, match="covers 2 ranks, the step 4"):
        StepRounds(4, 1, (GroupedStep(2, 1, (StepGroup(0, 2, (0,), (PLAN,)),)),), ((0,),))
