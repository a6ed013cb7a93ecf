"""The memory reserve: every plan's budget is the device memory less the cluster's reserve (CUDA context, NCCL
buffers, allocator slack; docs/hardware.md section 5), the same in `plan`, `simulate` and `train`, overridable
in the cluster file and by --reserve-gb."""

import argparse
from unittest import mock

import pytest

from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.cluster.presets import PRESETS
from paradyse_lab.cluster.spec import GIB
from paradyse_lab.errors import UserInputError


def test_presets_keep_their_sourced_reserve_out_of_the_budget():
    assert PRESETS["a100-80gb-x8"].reserve_bytes == 1 * GIB  # 300 MB + 8.1 MiB + 688 MB, rounded up
    assert PRESETS["h100-80gb-x8"].reserve_bytes == 5 * GIB  # 300 MB + 8.1 MiB + 4.34 GB + 288 MiB, rounded up
    for c in PRESETS.values():
        assert c.plan_budget_bytes == c.memory_bytes - c.reserve_bytes


def test_cluster_file_overrides_the_reserve(tmp_path):
    f = tmp_path / "node.toml"
    f.write_text('base = "h100-80gb-x8"\nmemory_gib = 80\nreserve_gib = 2.5\nreserve_fraction = 0.2\n')
    c = get_cluster(str(f))
    assert c.plan_budget_bytes == 80 * GIB - int(2.5 * GIB) - int(0.2 * 80 * GIB)
    for text, match in (("reserve_fraction = 1.5\n", "reserve_fraction must be a number in"),
                        ("reserve_gib = -1\n", "reserve_gib must be a finite number >= 0"),
                        ("memory_gib = 4\nreserve_gib = 4\n", "must leave memory to plan with")):
        f.write_text('base = "h100-80gb-x8"\n' + text)
        with pytest.raises(UserInputError, match=match):
            get_cluster(str(f))


def _plan_args(**kw) -> argparse.Namespace:
    base = dict(model="llama3-8b", cluster="h100-80gb-x8", batch="1", strategies=None, recompute=False,
                granularity="block", budget_gb=None, reserve_gb=None, seq="16K", documents=None, kv_heads=None,
                cost_model="analytic")
    return argparse.Namespace(**{**base, **kw})


def test_plan_simulate_and_train_budget_the_same_bytes():
    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import plan_policy
    from paradyse_lab.cli.solver_commands import build_problem
    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.simulator.experiments import Setup

    h100 = PRESETS["h100-80gb-x8"]
    problem, _ = build_problem(_plan_args())
    assert problem.budget_bytes == h100.plan_budget_bytes
    assert build_problem(_plan_args(reserve_gb=0.0))[0].budget_bytes == h100.memory_bytes  # --reserve-gb 0
    setup = Setup(cluster="h100-80gb-x8")
    assert h100.memory_bytes - setup.reserve_bytes == h100.plan_budget_bytes
    with mock.patch("paradyse_lab.simulator.planner.build_policy") as parse:
        plan_policy(TrainOptions(model="gpt2-tiny", dataset="uniform:8:16", cluster="h100-80gb-x8"),
                    get_model("gpt2-tiny"), 2)
    assert parse.call_args.args[3] == h100.plan_budget_bytes
