"""The two-dimensional strategies in `simulate`: `dynamic:SOLVER+2d` offers them to a dynamic policy (its name keeps
the suffix), `static:ulysses_ring:a` runs one on every layer, and a model whose heads p does not divide gains from
them (Qwen2-7B on 8 H100s: 28 heads)."""

from __future__ import annotations

import json

from paradyse_lab.cli import main
from paradyse_lab.simulator.policy_spec import PolicySpec

QWEN_RUN = ["simulate", "--model", "qwen2-7b", "--cluster", "h100-80gb-x8", "--dataset", "uniform:32768:32768",
            "--size", "2", "--format", "json", "--policy"]


def _total_s(capsys, policy: str) -> float:
    assert main([*QWEN_RUN, policy]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policy"] == policy and out["oom_at_seq_len"] is None
    return out["total_time_s"]


def test_the_2d_suffix_is_read_and_named():
    spec = PolicySpec.parse("dynamic:dp+sublayer+2d+recompute")
    assert spec.two_d and spec.recompute and spec.granularity == "sublayer"
    assert spec.name == "dynamic:dp+recompute+2d+sublayer"
    assert PolicySpec.parse("dynamic:dp+recompute").name == "dynamic:dp+recompute"  # the paper's names unchanged


def test_qwen_plans_faster_with_the_two_dimensional_strategies(capsys):
    """At 32K the sub-layer plan with them takes ulysses_ring:4 on attention (`plan` shows it) and is faster than
    the ring, the only 1-D attention that splits 28 heads over 8 GPUs; static:ulysses_ring:4 runs too."""
    without = _total_s(capsys, "dynamic:dp+sublayer")
    with_2d = _total_s(capsys, "dynamic:dp+2d+sublayer")
    assert with_2d < without
    assert _total_s(capsys, "static:ulysses_ring:4") > 0
