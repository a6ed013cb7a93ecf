"""Grouped-query attention in the cost model: ring K/V traffic scales by kv_heads / heads, Ulysses replicates
K/V heads when kv_heads < p (the rule in paradyse_lab/core/strategies.py), and `paradyse-lab cost --kv-heads`."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from paradyse_lab.cli import main
from paradyse_lab.core.model_spec import PRESETS
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.schedules import schedule

LLAMA = PRESETS["llama"]  # the paper's layer: h 8192, 64 heads


def _bytes(model, name: str, op: str, p: int = 8, seq: int = 16384) -> int:
    calls = schedule(model, "attention", StrategyOption(name), seq, 1, p).collectives
    return sum(c.sent_bytes for c in calls if c.op == op)


def test_ring_kv_traffic_scales_by_kv_heads_over_heads():
    mha, gqa = LLAMA, replace(LLAMA, kv_heads=8)
    assert _bytes(gqa, "megatron_cz", "p2p") * 8 == _bytes(mha, "megatron_cz", "p2p")  # 64 -> 8 K/V heads
    assert _bytes(gqa, "metp", "p2p") < _bytes(mha, "metp", "p2p")


def test_ulysses_replicates_kv_heads_below_p():
    """With kv_heads < p each K/V head goes to p / kv_heads ranks: the Q/K/V all-to-all carries h + 2 p d
    per token, and the kernel keeps p / kv_heads times the K/V of kv_heads % p == 0."""
    h, d, p, seq = LLAMA.hidden, LLAMA.head_dim, 8, 16384
    t = seq // p
    e = LLAMA.dtype_bytes
    o_bytes = t * h * e * (p - 1) // p  # the output's all-to-all (forward and backward)
    for kv, sent in ((8, 8), (2, 8), (1, 8), (16, 16)):
        model = replace(LLAMA, kv_heads=kv)
        qkv = t * (h + 2 * sent * d) * e * (p - 1) // p
        assert _bytes(model, "ulysses_z", "all_to_all") == 2 * qkv + 2 * o_bytes, kv
    kept = {kv: schedule(replace(LLAMA, kv_heads=kv), "attention", StrategyOption("ulysses_z"), seq, 1, p).kept_bytes
            for kv in (2, 8)}
    assert kept[2] - kept[8] == 0  # 2 K/V heads replicated to 8 keep what 8 K/V heads keep


def test_cost_kv_heads_override(capsys):
    assert main(["cost", "--model", "llama", "--seq", "16K", "--kv-heads", "8", "--format", "json"]) == 0
    gqa = json.loads(capsys.readouterr().out)
    assert main(["cost", "--model", "llama", "--seq", "16K", "--format", "json"]) == 0
    mha = json.loads(capsys.readouterr().out)
    assert gqa["model"] == "llama kv=8" and mha["model"] == "llama"
    ring = [d["strategies"]["megatron_cz"]["comm_bytes_per_layer"]["p2p"] for d in (mha, gqa)]
    assert ring[0] == 8 * ring[1]
    assert gqa["strategies"]["megatron_cz"]["time_s_per_layer"] < mha["strategies"]["megatron_cz"]["time_s_per_layer"]


@pytest.mark.parametrize("value, fragment", [("7", "--kv-heads must divide the model's heads (64), got 7"),
                                             ("0", "--kv-heads")])
def test_cost_kv_heads_errors(capsys, value, fragment):
    assert main(["cost", "--model", "llama", "--seq", "16K", "--kv-heads", value]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1


@pytest.mark.parametrize("name, keys, query_width", [
    ("megatron_ts", "T", "h/p"), ("ulysses_z", "T", "h/p"), ("megatron_cz", "t", "h"), ("metp", "t", "h/p"),
])
def test_transient_counts_flash_backwards_full_heads_dk_dv(monkeypatch, name, keys, query_width):
    """Under GQA, FlashAttention-2's backward computes dK and dV per query head ([keys, query width] each, in
    the model dtype) before summing each group: the attention sub-layer's transient bytes hold those two
    buffers of the strategy's kernel call (whole sequence for TS and Ulysses, one ring block for the rings;
    every head for the ring, h/p for the head splits), with or without recompute; an MHA model and the
    MLP hold none."""
    from paradyse_lab.costmodel import strategy_work

    gqa, p, seq = replace(LLAMA, kv_heads=8), 8, 16384
    option = StrategyOption(name)
    with_term = schedule(gqa, "attention", option, seq, 1, p).transient_bytes
    monkeypatch.setattr(strategy_work, "flash_gqa_grad_bytes", lambda *args: 0)
    without = schedule(gqa, "attention", option, seq, 1, p).transient_bytes
    monkeypatch.undo()
    n_keys = {"T": seq, "t": seq // p}[keys]
    width = {"h": gqa.hidden, "h/p": gqa.hidden // p}[query_width]
    assert with_term - without == 2 * n_keys * width * gqa.dtype_bytes
    recomputed = StrategyOption(name, recompute=True)
    assert schedule(gqa, "attention", recomputed, seq, 1, p).transient_bytes >= with_term
    mha_attention = strategy_work.Sublayer.of(LLAMA, "attention", seq, 1, p)
    assert strategy_work.flash_gqa_grad_bytes(mha_attention, seq, 64, 64) == 0


def test_sublayer_plans_may_run_head_splitting_strategies_on_mlps_under_gqa():
    """One K/V head on 8 GPUs: megatron_ts and metp cannot run the attention sub-layers but can run the
    MLPs. At sub-layer granularity they stay options, their attention cells exceed the budget (no feasible
    plan picks them) and the optimum runs megatron_ts on the MLPs; a static plan of them is refused with the
    rule; at block granularity they are left out as before."""
    from paradyse_lab.cluster.files import get_cluster
    from paradyse_lab.core.layer_graph import LayerGraph
    from paradyse_lab.costmodel.analytic import AnalyticCostModel
    from paradyse_lab.costmodel.lowering import problem_from_cost_model
    from paradyse_lab.errors import UserInputError
    from paradyse_lab.solvers.registry import get_solver

    model = replace(PRESETS["llama3-8b"], kv_heads=1, layers=2)
    cm = AnalyticCostModel(model, get_cluster("a100-80gb-x8"))
    sub = problem_from_cost_model(LayerGraph(model, "sublayer"), cm, 2048)
    assert set(sub.options) == {"megatron_ts", "megatron_cz", "ulysses_z", "metp"}
    assert set(sub.dropped) == {"megatron_ts", "metp"} and "kv_heads (1)" in sub.dropped["metp"]
    for name in ("megatron_ts", "metp"):
        j = sub.option_index(name)
        for d, label in enumerate(sub.labels):
            assert (sub.kept_bytes[d, j] > sub.budget_bytes) == label.endswith("attn"), (name, label)
        assert sub.kept_bytes[1, j] == cm.sublayer("mlp", StrategyOption(name), 2048).kept_bytes
    plan = get_solver("dp").solve(sub).assignment
    assert plan == ("megatron_cz", "megatron_ts") * 2 and sub.is_feasible(plan)
    with pytest.raises(UserInputError, match=r"kv_heads \(1\)"):
        get_solver("static:metp").solve(sub)
    block = problem_from_cost_model(LayerGraph(model, "block"), cm, 2048)
    assert set(block.options) == {"megatron_cz", "ulysses_z"} and set(block.dropped) == {"megatron_ts", "metp"}
