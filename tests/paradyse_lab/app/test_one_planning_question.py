"""`cost`, `plan` and the API's `plan_step` answer one question the same way: the same flags give the same head
option, plan, predicted time and peak memory through the three, and `cost` calls a uniform plan fitting exactly
when `plan` restricted to that option finds it fits."""

from __future__ import annotations

import json

import pytest

import paradyse_lab as pl
from paradyse_lab.cli import main

QUESTION = ("--model", "llama3-8b", "--cluster", "h100-80gb-x8", "--seq", "128K", "--cost-model", "analytic")
"""A model with a large vocabulary at a length where the head option decides the plan (the analytic model: the
question is one through the three, whichever model prices it; replay would trace llama3-8b's layers first)."""


def _json(capsys, *argv) -> dict:
    code = main(list(argv) + ["--format", "json"])
    out, _ = capsys.readouterr()
    assert code in (0, 1)
    return json.loads(out)


def test_plan_and_plan_step_give_one_answer(capsys):
    cli = _json(capsys, "plan", *QUESTION)
    api = pl.plan_step("llama3-8b", cluster="h100-80gb-x8", seq_len=128 * 1024, cost_model="analytic")
    assert api.head == cli["head"]
    assert list(api.strategies) == cli["plan"]
    assert api.predicted_time_s == pytest.approx(cli["predicted_time_s"], rel=1e-12)
    assert api.memory["peak"] == cli["peak_bytes"]


@pytest.mark.parametrize("option", ["megatron_cz", "metp", "ulysses_z+recompute"])
def test_cost_prices_an_option_as_plan_does(capsys, option):
    cost = _json(capsys, "cost", *QUESTION, "--strategies", option)["strategies"][option]
    plan = _json(capsys, "plan", *QUESTION, "--strategies", option)
    api = pl.plan_step("llama3-8b", cluster="h100-80gb-x8", seq_len=128 * 1024, cost_model="analytic",
                       strategies=[option])
    assert cost["head"] == plan["head"] == api.head
    assert cost["total_time_s"] == pytest.approx(plan["predicted_time_s"], rel=1e-9)
    assert cost["peak_bytes"] == plan["peak_bytes"] == api.memory["peak"]
    assert cost["fits"] == (plan["status"] != "infeasible") == api.feasible


def test_a_fixed_head_is_one_option_of_all_three(capsys):
    cost = _json(capsys, "cost", *QUESTION, "--strategies", "metp", "--head", "whole")["strategies"]["metp"]
    plan = _json(capsys, "plan", *QUESTION, "--strategies", "metp", "--head", "whole")
    api = pl.plan_step("llama3-8b", cluster="h100-80gb-x8", seq_len=128 * 1024, cost_model="analytic",
                       strategies=["metp"], head="whole")
    assert cost["head"] == plan["head"] == api.head == "whole"
    assert cost["peak_bytes"] == plan["peak_bytes"] == api.memory["peak"]


def test_a_reserve_of_the_whole_gpu_is_refused_by_all_three(capsys):
    """A reserve at or above the GPU's memory leaves nothing to plan in: `cost`, `plan` and `plan_step` refuse
    it alike, naming --reserve-gib and the GPU's memory (never a negative budget or an internal field)."""
    from paradyse_lab.errors import UserInputError

    for command in ("cost", "plan"):
        assert main([command, *QUESTION, "--reserve-gib", "100"]) == 2
        assert "--reserve-gib 100 is not below the GPU memory of h100-80gb-x8" in capsys.readouterr().err
    with pytest.raises(UserInputError, match="--reserve-gib 100 is not below the GPU memory of h100-80gb-x8"):
        pl.plan_step("llama3-8b", cluster="h100-80gb-x8", seq_len=128 * 1024, cost_model="analytic", reserve_gib=100)
