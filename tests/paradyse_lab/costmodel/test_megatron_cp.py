"""Tensor x context parallel (`megatron_cp:a`) in the catalog, the cost model and the planner: its feasibility rules
at the tensor degree a (the heads and the K/V heads split over a), its ends equal to the 1-D strategies' traffic
(a = p: megatron_ts; a = 1: megatron_cz), the sequence collectives inside groups of a, the ring over b = p / a and
the weight block fetched from the 1/p shards, and `plan --two-d` / `dynamic:dp+2d` taking it per layer where it
wins (the runtime's bytes: tests/runtime/megatron_cp_cases.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from paradyse_lab.cli import main
from paradyse_lab.core.model_spec import PRESETS, get_model
from paradyse_lab.core.strategies import CATALOG, StrategyOption, exchange_shift, get_strategy
from paradyse_lab.costmodel.schedules import schedule

QWEN, LLAMA3 = PRESETS["qwen2-7b"], PRESETS["llama3-8b"]


def _sent(model, name: str, p: int, seq: int = 16384, kind: str = "attention") -> dict:
    out: dict[str, int] = {}
    for c in schedule(model, kind, StrategyOption.parse(name), seq, 1, p).collectives:
        out[c.op] = out.get(c.op, 0) + c.sent_bytes
    return {k: v for k, v in out.items() if v}


@pytest.mark.parametrize("name, model, p, want", [
    ("megatron_cp:4", QWEN, 8, None),  # 28 heads, 4 K/V heads: one K/V head per tensor rank
    ("megatron_cp:8", QWEN, 8, "heads (28) must be divisible by the head degree a (8)"),
    ("megatron_cp:4", replace(QWEN, kv_heads=2), 8, "kv_heads (2) must be divisible by the head degree a (4)"),
    ("megatron_cp:8", LLAMA3, 8, None),
    ("megatron_cp:4", LLAMA3, 2, "p (2) must be divisible by the head degree a (4)"),
])
def test_feasibility_splits_heads_and_kv_heads_over_a(name, model, p, want):
    problem = get_strategy(name).violation(model, p, 8192)
    assert problem == want if want is None else want in problem
    assert get_strategy(name).violation(model, 8, 8192, "mlp") is None or p != 8  # the MLP has no heads


def test_the_ends_are_the_one_dimensional_strategies_traffic():
    for kind in ("attention", "mlp"):
        assert _sent(LLAMA3, "megatron_cp:8", 8, kind=kind) == _sent(LLAMA3, "megatron_ts", 8, kind=kind)
        assert _sent(LLAMA3, "megatron_cp:1", 8, kind=kind) == _sent(LLAMA3, "megatron_cz", 8, kind=kind)
        for name in ("megatron_cp:8", "megatron_cp:2"):  # megatron_ts's kept set at every degree
            assert schedule(LLAMA3, kind, StrategyOption.parse(name), 16384, 1, 8).kept_bytes == \
                schedule(LLAMA3, kind, StrategyOption("megatron_ts"), 16384, 1, 8).kept_bytes


def test_tensor_group_ring_group_and_the_weight_block():
    """2 x 4 on Llama-3-8B (32 heads, 8 K/V heads of 128): the sequence [a*t, h] gathered and reduce-scattered in
    groups of 2; K/V blocks of t tokens' full K/V width around the ring of 4 ranks 2 apart (b - 1 = 3 times each
    way); the weights: one W/p shard exchanged in the group of 8 and [W/p] -> [W/a] gathered over the ring group,
    in each pass, the fp32 a-block gradient reduce-scattered over the ring group and its shard sent back."""
    seq, p, a, b, e = 16384, 8, 2, 4, 2
    t, h, kv = seq // p, 4096, 8 * 128
    w = h * (h + 2 * kv) + h * h  # the attention's sharded parameters (no biases)
    sch = schedule(LLAMA3, "attention", StrategyOption("megatron_cp:2"), seq, 1, p)
    calls = sorted((c.op, c.ranks, c.count, c.buffer_bytes, c.stride) for c in sch.collectives if c.op != "all_reduce")
    assert calls == sorted([
        ("p2p", p, 1, w // p * e, 1), ("all_gather", b, 1, w // a * e, a),  # the forward's fetch
        ("all_gather", a, 1, a * t * h * e, 1), ("reduce_scatter", a, 1, a * t * h * e, 1),
        ("p2p", b, b - 1, t * 2 * kv * e, a),  # the ring, forward
        ("p2p", p, 1, w // p * e, 1), ("all_gather", b, 1, w // a * e, a),  # the backward's fetch
        ("all_gather", a, 2, a * t * h * e, 1), ("reduce_scatter", a, 1, a * t * h * e, 1),
        ("p2p", b, b - 1, t * 2 * kv * (e + 4), a),  # the ring, backward: K/V and fp32 dK/dV
        ("reduce_scatter", b, 1, w // a * 4, a), ("p2p", p, 1, w // p * e, 1),  # the gradient, fp32, and back
    ])
    assert sch.ring_steps == 2 * (b - 1)
    assert [keys for _, keys in sch.attention_calls] == [seq // b]  # a ring block: s / b keys
    recomputed = schedule(LLAMA3, "attention", StrategyOption("megatron_cp:2", recompute=True), seq, 1, p)
    extra = sorted((c.op, c.ranks, c.buffer_bytes) for c in recomputed.collectives if c.op != "all_reduce")
    for call in calls:
        extra.remove(call[:2] + call[3:4])
    assert extra == sorted([("all_gather", a, a * t * h * e), ("reduce_scatter", a, a * t * h * e),
                            ("p2p", b, t * 2 * kv * e)])  # the recomputed forward fetches no weights again


def test_plan_takes_it_per_layer_where_it_wins(capsys):
    """Qwen2-7B on 8 H100s (28 heads: the ring is the only 1-D attention): at 8K the ring's ZeRO-3 weight traffic
    binds, and with --two-d the planner takes megatron_cp on every layer; per sub-layer it takes megatron_cp for the
    attention and megatron_ts (which needs no heads) for the MLP. (Faster than the ring's plan: the simulate test.)"""
    run = ["plan", "--model", "qwen2-7b", "--cluster", "h100-80gb-x8", "--cost-model", "analytic", "--seq", "8K",
           "--format", "json"]

    def plan(*extra):
        assert main([*run, *extra]) == 0
        out = json.loads(capsys.readouterr().out)
        return out["plan"], out["predicted_time_s"]

    block, block_s = plan("--two-d")
    assert len(block) == QWEN.layers and all(o.startswith("megatron_cp:") for o in block), block
    sub, sub_s = plan("--two-d", "--granularity", "sublayer")
    assert all(o.startswith("megatron_cp:") for o in sub[0::2]) and set(sub[1::2]) == {"megatron_ts"}, sub
    assert sub_s <= block_s


def test_splits_without_a_weight_exchange_are_refused_for_every_sub_layer():
    """p = 6 as 2 x 3 has no cyclic exchange that leaves every rank another's shard: the catalog refuses it for
    attention and MLP alike (the runtime could not fetch the weights), and keeps the splits that have one."""
    model = get_model("gpt")
    for kind in ("attention", "mlp", None):
        why = CATALOG["megatron_cp:2"].violation(model, 6, 6 * 1024, kind)
        assert why and "no cyclic weight exchange" in why and "p = 6: 1)" in why
    assert CATALOG["megatron_cp:2"].violation(model, 8, 8 * 1024) is None
    assert exchange_shift(6, 2) is None and exchange_shift(8, 2) is not None
