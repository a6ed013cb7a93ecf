"""The plan reaches the runtime as a `paradyse_lab.plan.Plan` (one process, no group)."""

from types import SimpleNamespace

import pytest

from paradyse_lab.errors import UserInputError
from paradyse_lab.plan import Plan
from runtime.model import as_plan
from runtime.train import decide_plan_on_rank0


def test_the_training_loop_refuses_a_plan_of_names():
    with pytest.raises(TypeError, match="Plan"):
        decide_plan_on_rank0(lambda: SimpleNamespace(plan=("megatron_ts", "metp")))
    typed = SimpleNamespace(plan=Plan.from_names(("megatron_ts", "metp")))
    assert decide_plan_on_rank0(lambda: typed) is typed


def test_the_model_runs_a_plan_of_its_own_granularity_and_reads_hand_written_names():
    sub = Plan.from_names(("megatron_ts", "metp+recompute"), "sublayer")
    assert as_plan(sub, 1).layer_options(1)[0][1].recompute
    assert as_plan(["metp", "ulysses_z"], 2).granularity == "block"  # two names, two layers
    assert as_plan(["metp", "ulysses_z"], 1).granularity == "sublayer"  # two names, one layer
    with pytest.raises(UserInputError, match="block plan has 2 entries but the model has 1 layers"):
        as_plan(Plan.from_names(("metp", "metp")), 1).layer_options(1)
    with pytest.raises(UserInputError, match="no runtime implementation"):
        as_plan(["colossal_z"], 1)
