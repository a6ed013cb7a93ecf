"""The plan reaches the runtime as a `paradyse_lab.core.plan.Plan` (one process, no group)."""

from types import SimpleNamespace

import pytest

from paradyse_lab.core.plan import Plan
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.model.parallel_gpt import as_plan
from paradyse_lab.runtime.training.plan_handoff import decide_plan_on_rank0


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


def test_train_pads_a_step_as_simulate_does(tmp_path):
    """One rule for a step's length: on 2 ranks (unit 4) train trains each workload length padded up to the
    unit, as the simulator charges it (engine `padded_len`), the padding masked out of the loss; a length above
    --max-len is cut to it."""
    import torch

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.cluster.files import get_cluster
    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.runtime.training.step_inputs import StepInputs
    from paradyse_lab.simulator.engine import simulate
    from paradyse_lab.simulator.planner import build_planner
    from paradyse_lab.workload.lengths import Workload

    path = tmp_path / "lengths.txt"
    path.write_text("9\n16\n21\n")
    opts = TrainOptions(model="gpt2-tiny", dataset=f"file:{path}", steps=3, max_len=20)
    inputs = StepInputs.build(opts, 2, get_model("gpt2-tiny"))
    assert [inputs.length(i) for i in range(3)] == [12, 16, 20]
    planner = build_planner("static:megatron_ts", get_model("gpt2-tiny"), get_cluster("a100-80gb-x8"), p=2)
    rows = simulate(Workload("w", (9, 16)), planner.policy, planner.charger())
    assert rows["padded_len"].tolist() == [12, 16]
    tokens, labels, cu = inputs.batch(0, 64)
    assert tokens.shape == (1, 12) and cu is None
    assert torch.equal(labels[0, :8], tokens[0, 1:9]) and bool((labels[0, 8:] == -100).all())
