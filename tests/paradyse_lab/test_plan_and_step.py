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
    names = ("FFN_KINDS", "NORM_KINDS")
    files = [p for pkg in ("paradyse_lab", "runtime", "simulator", "solvers") for p in (root / pkg).rglob("*.py")
             if any(name in p.read_text(encoding="utf-8") for name in names)]  # only these can bind them
    homes = [f"{p.relative_to(root)}:{t.id}" for p in files for node in parsed(p).body
             if isinstance(node, ast.Assign) for t in node.targets
             if isinstance(t, ast.Name) and t.id in names]
    assert sorted(homes) == ["paradyse_lab/core/model_spec.py:FFN_KINDS", "paradyse_lab/core/model_spec.py:NORM_KINDS"]


def test_a_plan_in_short_as_the_train_log_and_validate_run_print_it():
    from paradyse_lab.core.plan import short_text

    assert Plan.from_names(["megatron_ts", "metp+recompute"]).short_text() == "TS,ME+r"
    assert short_text(["colossal_z", ""]) == "colossal_z,"  # no abbreviation: the name as it is


def test_the_runtime_builds_from_the_model_spec_and_checkpoints_record_it_as_before():
    """The model has one description, `ModelSpec`, with one rotary encoding (`rope_theta` > 0; `max_positions` the
    learned positions, or under rotary embeddings the longest sequence allowed): the runtime builds from it, and a
    checkpoint records its layer under the keys, order and values it always had (the norms' epsilon as `eps`),
    which read back as the same model for every preset the runtime can run."""
    from dataclasses import replace

    from paradyse_lab.core.model_spec import PRESETS, ModelSpec
    from paradyse_lab.runtime.checkpoints.architecture import RECORD_KEYS, architecture_record, spec_of_record

    runnable = [spec for spec in PRESETS.values() if spec.embedding_and_head]
    assert len(runnable) >= 8
    for spec in runnable:
        record = architecture_record(spec)
        assert tuple(record) == RECORD_KEYS and record["eps"] == spec.norm_eps, spec.name
        assert replace(spec_of_record(record), name=spec.name, dtype=spec.dtype) == spec, spec.name
    llama = architecture_record(PRESETS["llama-tiny"])  # what a llama-tiny checkpoint's meta.json has held
    assert (llama["max_positions"], llama["rope_theta"], llama["tied"], llama["kv_heads"]) == (0, 10000.0, False, 2)
    gpt2 = architecture_record(PRESETS["gpt2-tiny"])
    assert (gpt2["max_positions"], gpt2["rope_theta"], gpt2["ffn_hidden"]) == (1024, 0.0, 4 * 96)
    # one rotary encoding: no learned positions and no base given is the default base; a limit stays a limit
    plain = ModelSpec(name="x", hidden=64, heads=4, layers=1, vocab_size=32)
    assert plain.rope and plain.rope_theta == 10000.0 and plain.position_rows == 0 and plain.ffn_hidden == 256
    limited = replace(plain, max_positions=128)
    assert limited.rope and limited.position_rows == 0 and limited.max_positions == 128
    learned = ModelSpec(name="x", hidden=64, heads=4, layers=1, vocab_size=32, max_positions=128)
    assert not learned.rope and learned.position_rows == 128
