"""Tensor x context parallel in `simulate`: `dynamic:SOLVER+2d` takes `megatron_cp:a` where it wins (Qwen2-7B at 8K
on 8 H100s: each step costs what `plan --two-d` predicts for its plan, megatron_cp:4 on every layer) and the run is
faster than with the paper's four, whose only attention for 28 heads on 8 GPUs is the ring."""

from __future__ import annotations

import json

import pytest

from paradyse_lab.cli import main

QWEN_8K = ["simulate", "--model", "qwen2-7b", "--cluster", "h100-80gb-x8", "--dataset", "uniform:8192:8192",
           "--size", "2", "--cost-model", "analytic", "--format", "json", "--policy"]


def _total_s(capsys, policy: str) -> float:
    assert main([*QWEN_8K, policy]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policy"] == policy and out["oom_at_seq_len"] is None
    return out["total_time_s"]


def test_the_dynamic_policy_takes_megatron_cp_where_it_wins(capsys):
    assert main(["plan", "--model", "qwen2-7b", "--cluster", "h100-80gb-x8", "--cost-model", "analytic", "--seq", "8K",
                 "--two-d", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert set(plan["plan"]) == {"megatron_cp:4"}
    with_2d = _total_s(capsys, "dynamic:dp+2d")
    assert with_2d == pytest.approx(2 * plan["predicted_time_s"], rel=1e-9)  # two 8K steps of that plan
    assert with_2d < _total_s(capsys, "dynamic:dp")
