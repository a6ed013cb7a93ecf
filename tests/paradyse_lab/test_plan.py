"""paradyse_lab/plan.py: the plan's one type."""

import pickle

import pytest

from paradyse_lab.errors import UserInputError
from paradyse_lab.plan import Plan
from paradyse_lab.strategies import StrategyOption


def test_a_plan_reads_names_once_and_keeps_its_granularity():
    plan = Plan.from_names(["metp", "megatron_ts+recompute"], "sublayer")
    assert plan.options == (StrategyOption("metp"), StrategyOption("megatron_ts", True))
    assert plan.names == ("metp", "megatron_ts+recompute") and len(plan) == 2
    assert plan.layer_options(1) == [plan.options]
    assert pickle.loads(pickle.dumps(plan)) == plan  # what rank 0 broadcasts


def test_a_plan_refuses_what_is_not_one():
    with pytest.raises(TypeError):
        Plan(("metp",))  # names, not options
    with pytest.raises(UserInputError, match="pairs"):
        Plan.from_names(["metp"], "sublayer")
    with pytest.raises(UserInputError, match="strategy"):
        Plan.from_names(["nope"])
    with pytest.raises(UserInputError, match="list of strategy names"):
        Plan.from_names("metp")
    with pytest.raises(UserInputError, match="3 entries but the model has 2 layers"):
        Plan.for_layers(["metp"] * 3, 2)
