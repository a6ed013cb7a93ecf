"""paradyse_lab/core/plan.py (the plan's one type), the one rule for a step's length, the model shapes' one home (kinds
included)."""

import pickle

import pytest

from paradyse_lab.core.plan import Plan
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.errors import UserInputError


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


def test_the_layer_kinds_have_one_home():
    """The model spec's FFN and norm kinds are the runtime's: one tuple each, defined in
    paradyse_lab/core/model_spec.py."""
    import ast
    from pathlib import Path

    from source_trees import parsed

    root = Path(__file__).resolve().parents[2]
    homes = [f"{p.relative_to(root)}:{t.id}" for pkg in ("paradyse_lab", "runtime", "simulator", "solvers")
             for p in (root / pkg).rglob("*.py") for node in parsed(p).body
             if isinstance(node, ast.Assign) for t in node.targets
             if isinstance(t, ast.Name) and t.id in ("FFN_KINDS", "NORM_KINDS")]
    assert sorted(homes) == ["paradyse_lab/core/model_spec.py:FFN_KINDS", "paradyse_lab/core/model_spec.py:NORM_KINDS"]


def test_a_plan_in_short_as_the_train_log_and_validate_run_print_it():
    from paradyse_lab.core.plan import short_text

    assert Plan.from_names(["megatron_ts", "metp+recompute"]).short_text() == "TS,ME+r"
    assert short_text(["colossal_z", ""]) == "colossal_z,"  # no abbreviation: the name as it is


def test_the_runtime_config_is_a_view_of_the_model_spec():
    """The model's shapes have one home, `ModelSpec`: the runtime's `ModelSpec` holds its fields under the same
    names (the norms' epsilon is `eps`; a checkpoint records them so) and adds none, and every preset the runtime
    can run goes ModelSpec -> ModelSpec -> ModelSpec unchanged (what `train` builds its model from)."""
    from dataclasses import fields, replace

    from paradyse_lab.core.model_spec import PRESETS, ModelSpec

    renamed = {"eps": "norm_eps"}
    spec_fields = {f.name for f in fields(ModelSpec)}
    assert {renamed.get(f.name, f.name) for f in fields(ModelSpec)} - spec_fields == set()
    runnable = [spec for spec in PRESETS.values() if spec.embedding_and_head]
    assert len(runnable) >= 8
    for spec in runnable:
        assert spec.with_dtype(spec.dtype) == replace(spec, name="runtime"), spec.name
