"""Ulysses x ring (`ulysses_ring:a`) in the catalog and the cost model: its feasibility rules at the head degree
a, its ends equal to the 1-D strategies' traffic (a = p: ulysses_z; a = 1: megatron_cz's ring), the all-to-all
inside groups of a and the ring over b = p / a, a strided ring priced over the network when it leaves the node,
and `cost` / `plan --two-d` offering every factorisation (the runtime's bytes: tests/runtime/ulysses_ring_cases.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from paradyse_lab.cli import main
from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.model_spec import PRESETS
from paradyse_lab.core.strategies import HEAD_DEGREES, TWO_D, USABLE, StrategyOption, get_strategy
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.schedules import schedule

QWEN, LLAMA3 = PRESETS["qwen2-7b"], PRESETS["llama3-8b"]


def _sent(model, name: str, p: int, seq: int = 16384, op: str | None = None, kind: str = "attention") -> dict:
    out: dict[str, int] = {}
    for c in schedule(model, kind, StrategyOption.parse(name), seq, 1, p).collectives:
        out[c.op] = out.get(c.op, 0) + c.sent_bytes
    return {k: v for k, v in out.items() if v} if op is None else out.get(op, 0)


def test_option_names_parse_and_the_paper_strategies_stay_the_default_set():
    assert TWO_D == (*(f"{name}:{a}" for name in ("ulysses_ring", "megatron_cp") for a in HEAD_DEGREES),
                     "ulysses_uneven")
    assert USABLE == ("megatron_ts", "megatron_cz", "ulysses_z", "metp")  # reproduce's options unchanged
    option = StrategyOption.parse("ulysses_ring:4+recompute+offload")
    assert (option.strategy, option.recompute, option.offload, option.name) == (
        "ulysses_ring:4", True, True, "ulysses_ring:4+recompute+offload")


@pytest.mark.parametrize("name, p, want", [
    ("ulysses_ring:2", 8, None), ("ulysses_ring:4", 8, None),  # 28 heads and 4 K/V heads split over a = 2, 4
    ("ulysses_ring:8", 8, "heads (28) must be divisible by the head degree a (8)"),
    ("ulysses_ring:4", 2, "p (2) must be divisible by the head degree a (4)"),
    ("ulysses_z", 8, "heads (28) must be divisible by p (8)"),
])
def test_feasibility_binds_the_heads_to_a_not_p(name, p, want):
    problem = get_strategy(name).violation(QWEN, p, 8192)
    assert problem == want if want is None else want in problem


def test_kv_heads_replicate_up_to_a():
    one_kv = replace(QWEN, kv_heads=1, hidden=28 * 128)
    assert get_strategy("ulysses_ring:4").violation(one_kv, 8, 8192, "attention") is None  # 4 copies of one head
    three_kv = replace(PRESETS["gpt2-tiny"], kv_heads=3)  # 12 heads, 3 K/V heads: 2 neither divides nor is divided
    assert "kv_heads (3) must be divisible by the head degree a (2)" in get_strategy("ulysses_ring:2").violation(
        three_kv, 2, 64, "attention")


def test_the_ends_are_the_one_dimensional_strategies_traffic():
    for model in (LLAMA3, replace(LLAMA3, kv_heads=2)):  # with K/V heads replicated at a = 8
        assert _sent(model, "ulysses_ring:8", 8) == _sent(model, "ulysses_z", 8)
        assert _sent(model, "ulysses_ring:1", 8) == _sent(model, "megatron_cz", 8)
        assert schedule(model, "attention", StrategyOption("ulysses_ring:8"), 16384, 1, 8).kept_bytes == \
            schedule(model, "attention", StrategyOption("ulysses_z"), 16384, 1, 8).kept_bytes
    assert _sent(LLAMA3, "ulysses_ring:2", 8, kind="mlp") == _sent(LLAMA3, "megatron_cz", 8, kind="mlp")  # ZeRO-3


def test_all_to_all_within_a_and_ring_over_b():
    """2 x 4 on Llama-3-8B (32 heads, 8 K/V heads of 128): the all-to-all inside groups of 2 carries (a-1)/a of
    the rank's q, k, v and output (forward and backward); the ring passes each rank's group's K/V block, a*t tokens
    of kv/a width (= t tokens of the full K/V width) b - 1 = 3 times forward, with fp32 dK/dV backward."""
    seq, p, a, e = 16384, 8, 2, 2
    t, h, kv = seq // p, 4096, 8 * 128
    sch = schedule(LLAMA3, "attention", StrategyOption("ulysses_ring:2"), seq, 1, p)
    a2a = [c for c in sch.collectives if c.op == "all_to_all"]
    assert {c.ranks for c in a2a} == {a}
    assert sum(c.sent_bytes for c in a2a) == 2 * (t * (h + 2 * kv) * e + t * h * e) * (a - 1) // a
    ring = [c for c in sch.collectives if c.op == "p2p"]
    assert [(c.ranks, c.count, c.buffer_bytes, c.stride) for c in ring] == [
        (4, 3, t * 2 * kv * e, a), (4, 3, t * 2 * kv * (e + 4), a)]
    assert sch.ring_steps == 2 * 3
    assert [keys for _, keys in sch.attention_calls] == [seq // 4]  # a ring block: s / b keys


def test_a_ring_that_leaves_the_node_is_priced_over_the_network():
    """On 2 x 8 GPUs, 8 x 2 puts each ring's two ranks on different nodes; 2 x 8's ring has 4 per node."""
    model = AnalyticCostModel(LLAMA3, get_cluster("h100-80gb-2x8"), p=16)
    call = next(c for c in schedule(LLAMA3, "attention", StrategyOption("ulysses_ring:8"), 65536, 1, 16).collectives
                if c.op == "p2p")
    assert model.collective_s(call) > model.collective_s(replace(call, stride=1))  # NVLink if it stayed inside
    one_node = AnalyticCostModel(LLAMA3, get_cluster("h100-80gb-x8"), p=8)
    call8 = next(c for c in schedule(LLAMA3, "attention", StrategyOption("ulysses_ring:2"), 65536, 1, 8).collectives
                 if c.op == "p2p")
    assert one_node.collective_s(call8) == one_node.collective_s(replace(call8, stride=1))


def test_cost_lists_the_factorisations_with_two_d_and_plan_may_take_them(capsys):
    qwen = ["--model", "qwen2-7b", "--cluster", "h100-80gb-x8", "--seq", "32K", "--format", "json"]
    assert main(["cost", *qwen]) == 0
    assert list(json.loads(capsys.readouterr().out)["strategies"]) == ["megatron_cz"]  # the paper's four: the ring
    assert main(["cost", *qwen, "--two-d"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out["strategies"]) == ["megatron_cz", "ulysses_ring:1", "ulysses_ring:2", "ulysses_ring:4",
                                       "megatron_cp:1", "megatron_cp:2", "megatron_cp:4", "ulysses_uneven"]
    assert "heads (28) must be divisible by the head degree a (8)" in out["cannot_split"]["ulysses_ring:8"]
    assert main(["plan", "--model", "qwen2-7b", "--cluster", "h100-80gb-x8", "--seq", "32K", "--granularity",
                 "sublayer", "--strategies", "ulysses_ring:2,ulysses_ring:4", "--format", "json"]) == 0
    assert "ulysses_ring:" in capsys.readouterr().out
