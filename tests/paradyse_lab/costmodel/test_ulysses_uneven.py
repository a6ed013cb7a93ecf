"""Ulysses with uneven heads (`ulysses_uneven`) in the catalog and the cost model: the head split (ceil or floor per
rank, the K/V heads each rank's query heads read, the kernel calls), its feasibility rules, its schedule (the busiest
rank's attention share, all-to-all bytes and kept bytes; ulysses_z's where the split is even), and `cost` / `plan
--two-d` offering and choosing it for GPT-2 XL on 8 GPUs (the runtime's bytes:
tests/runtime/ulysses_uneven_cases.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from paradyse_lab.cli import main
from paradyse_lab.core.head_split import head_split
from paradyse_lab.core.model_spec import PRESETS
from paradyse_lab.core.strategies import TWO_D, USABLE, StrategyOption, get_strategy
from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.schedules import schedule

GPT2_XL, QWEN, LLAMA3 = PRESETS["gpt2-xl"], PRESETS["qwen2-7b"], PRESETS["llama3-8b"]
UNEVEN = StrategyOption("ulysses_uneven")


def test_head_split_gives_ceil_then_floor_heads_and_the_kv_heads_they_read():
    xl = head_split(25, 25, 8)
    assert xl.queries == ((0, 4), (4, 7), (7, 10), (10, 13), (13, 16), (16, 19), (19, 22), (22, 25))
    assert xl.kv == xl.queries and xl.most_queries == 4 and xl.widest == 12  # MHA: each query head its own K/V
    qwen = head_split(28, 4, 8)  # 7 query heads per K/V head
    assert [q1 - q0 for q0, q1 in qwen.queries] == [4, 4, 4, 4, 3, 3, 3, 3]
    assert qwen.kv[1] == (0, 2)  # query heads 4..7 read K/V heads 0 (4, 5, 6) and 1 (7)
    assert qwen.kernel_groups(1) == ((3, 1), (1, 1)) and qwen.kernel_groups(3) == ((4, 2),)
    assert qwen.widest == 8  # rank 1 and 3: 4 query heads and 2 K/V heads, twice (k and v)
    assert head_split(6, 2, 4).kv == ((0, 1), (0, 2), (1, 2), (1, 2))  # K/V head 1 read by three ranks
    with pytest.raises(ValueError):
        head_split(3, 3, 4)  # a rank without a query head


@pytest.mark.parametrize("model, p, want", [
    (GPT2_XL, 8, None), (QWEN, 8, None),
    (PRESETS["gpt2"], 8, None),  # 12 heads over 8
    (LLAMA3, 8, "that is ulysses_z, the same split"),
    (QWEN, 32, "heads (28) must be at least p (32)"),
])
def test_rules_offer_it_where_ulysses_z_cannot_split(model, p, want):
    got = get_strategy("ulysses_uneven").violation(model, p, 8192, "attention")
    assert (got is None) if want is None else (want in got), got
    assert get_strategy("ulysses_uneven").violation(LLAMA3, 8, 8192, "mlp") is None  # an MLP has no heads
    assert "ulysses_uneven" in TWO_D and "ulysses_uneven" not in USABLE  # offered on request, never by reproduce


def test_schedule_prices_the_busiest_rank():
    seq, p = 16384, 8
    t, d, e = seq // p, QWEN.head_dim, QWEN.dtype_bytes
    sch = schedule(QWEN, "attention", UNEVEN, seq, 1, p)
    a2a = [c for c in sch.collectives if c.op == "all_to_all"]
    # q|k|v at the widest rank (4 query heads + 2 x 2 K/V heads), the output at the most query heads (4)
    assert sorted(c.sent_bytes for c in a2a) == sorted([7 * t * 8 * d * e, 7 * t * 4 * d * e] * 2)
    even = schedule(QWEN, "attention", StrategyOption("ulysses_ring:4"), seq, 1, p)
    assert sch.attention_flops == pytest.approx(even.attention_flops * 4 / (28 / 8))  # 4 heads, not 3.5
    head_layout = seq * d * (2 * 4 + 2 * 2) * e + seq * 4 * F.LSE_BYTES  # rank 1's q, o, k, v, lse
    assert sch.kept_bytes == 3 * t * QWEN.hidden * e + head_layout


def test_where_the_split_is_even_it_prices_as_ulysses_z():
    for model in (LLAMA3, PRESETS["gpt2"]):  # 32 heads / 8 K/V heads, 12 heads, both over 4
        ours, theirs = (schedule(model, "attention", StrategyOption(name), 8192, 1, 4)
                        for name in ("ulysses_uneven", "ulysses_z"))
        assert ours.collectives == theirs.collectives
        assert (ours.kept_bytes, ours.transient_bytes) == (theirs.kept_bytes, theirs.transient_bytes)
        assert ours.attention_flops == theirs.attention_flops


def test_cost_lists_it_for_gpt2_xl_and_plan_takes_it(capsys):
    xl = ["--model", "gpt2-xl", "--cluster", "h100-80gb-x8", "--seq", "1024", "--cost-model", "analytic",
          "--format", "json"]
    assert main(["cost", *xl]) == 0
    assert list(json.loads(capsys.readouterr().out)["strategies"]) == ["megatron_cz"]  # the paper's four: the ring
    assert main(["cost", *xl, "--two-d"]) == 0
    assert list(json.loads(capsys.readouterr().out)["strategies"]) == [  # 25 heads: 13/12 and 7/6 in head groups
        "megatron_cz", "ulysses_ring:1", "ulysses_ring:2", "ulysses_ring:4", "megatron_cp:1", "ulysses_uneven"]
    assert main(["plan", *xl, "--two-d"]) == 0
    assert set(json.loads(capsys.readouterr().out)["plan"]) == {"ulysses_uneven"}  # faster than the ring
    assert main(["plan", *xl, "--two-d", "--granularity", "sublayer"]) == 0  # attention, MLP, attention, ...
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert set(plan[0::2]) == {"ulysses_uneven"} and set(plan[1::2]) == {"megatron_ts"}  # the MLPs' best stays


def test_head_groups_of_ulysses_ring_split_unevenly_below_p():
    ring = get_strategy("ulysses_ring:4")
    assert ring.violation(GPT2_XL, 8, 1024, "attention") is None  # 25 heads over a = 4: 7, 6, 6, 6
    assert "at a = p that is ulysses_uneven" in get_strategy("ulysses_ring:8").violation(GPT2_XL, 8, 1024)
    twelve_three = replace(LLAMA3, heads=12, kv_heads=3, hidden=12 * 128)  # a = 2: 6 heads read 4 + 2 of 2 K/V heads
    assert "member 0's query heads would read their K/V heads unevenly" in get_strategy(
        "ulysses_ring:2").violation(twelve_three, 8, 8192, "attention")
    sch = schedule(GPT2_XL, "attention", StrategyOption("ulysses_ring:4"), 1024, 1, 8)
    t, d, e = 1024 // 8, GPT2_XL.head_dim, GPT2_XL.dtype_bytes
    sent = {}
    for c in sch.collectives:
        sent[c.op] = sent.get(c.op, 0) + c.sent_bytes
    # in groups of 4: q|k|v at the widest member (7 heads x 3) and the output (7), forward and backward; the ring
    # over 2 passes the widest member's 7 K/V heads of the group's 4t tokens once each way (dK/dV in fp32 too)
    assert sent["all_to_all"] == 2 * 3 * t * (21 + 7) * d * e
    assert sent["p2p"] == 4 * t * 2 * 7 * d * (e + e + 4)
    assert sch.attention_flops == pytest.approx(schedule(GPT2_XL, "attention", StrategyOption("megatron_cz"), 1024,
                                                         1, 8).attention_flops * 7 / 6.25)  # 7 heads, not 25/4
