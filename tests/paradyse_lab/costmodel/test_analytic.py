"""Behaviour of the analytic cost model: what docs/paper.md section 2 says about the strategies."""

import pytest

from paradyse_lab.cluster.presets import PRESETS as CLUSTERS
from paradyse_lab.core.model_spec import PRESETS
from paradyse_lab.core.strategies import USABLE, StrategyOption, options
from paradyse_lab.costmodel import AnalyticCostModel, uniform_plan_cost
from paradyse_lab.errors import UserInputError

A100 = CLUSTERS["a100-80gb-x8"]
LENGTHS = [512 * 2**k for k in range(11)]  # 512 .. 512K


def costs(model_name, seq, cluster=A100):
    cm = AnalyticCostModel(PRESETS[model_name], cluster)
    return {o.strategy: uniform_plan_cost(cm, o, seq) for o in options()}


METP_LOWEST_FROM = {"bert": 0, "llama": 4096, "gpt": 8192}
"""The length from which METP has the lowest peak (docs/results.md, "What the cost model says"): its weight and fp32
gradient-partial double buffers outweigh MegatronTS's gathered activations below it for big-h models."""


@pytest.mark.parametrize("model_name", ["bert", "llama", "gpt"])
def test_metp_has_the_lowest_peak_from_4k_or_8k_and_at_every_length_for_bert(model_name):
    for seq in LENGTHS:
        c = costs(model_name, seq)
        lowest = min(c, key=lambda n: c[n].peak_bytes)
        if seq >= METP_LOWEST_FROM[model_name]:
            assert lowest == "metp", (seq, {n: v.peak_bytes for n, v in c.items()})
        else:  # big-h models at short s: TS gathers small activations, METP buffers weight shards
            assert lowest == "megatron_ts"
            assert c["metp"].peak_bytes < 1.06 * c["megatron_ts"].peak_bytes


@pytest.mark.parametrize("model_name", ["bert", "llama", "gpt"])
def test_megatron_ts_is_fastest_at_short_lengths(model_name):
    for seq in (512, 1024, 2048):
        c = costs(model_name, seq)
        assert min(c, key=lambda n: c[n].time_s_per_layer) == "megatron_ts"


@pytest.mark.parametrize("model_name", ["bert", "gpt", "gpt2", "llama3-8b"])
def test_time_and_peak_grow_with_length(model_name):
    cm = AnalyticCostModel(PRESETS[model_name], A100)
    for o in options(recompute=True):
        if not all(cm.feasible(o, s) for s in LENGTHS):
            continue
        seq_costs = [uniform_plan_cost(cm, o, s) for s in LENGTHS]
        assert all(a.time_s_per_layer < b.time_s_per_layer for a, b in zip(seq_costs, seq_costs[1:]))
        assert all(a.peak_bytes < b.peak_bytes for a, b in zip(seq_costs, seq_costs[1:]))


def test_zero3_pays_a_fixed_weight_cost_that_does_not_grow_with_length():
    cm = AnalyticCostModel(PRESETS["gpt"], A100)
    for name in ("megatron_cz", "ulysses_z"):
        o = StrategyOption(name)
        short, long = cm.sublayer("mlp", o, 512), cm.sublayer("mlp", o, 65536)
        assert short.comm_bytes()["all_gather"] == long.comm_bytes()["all_gather"]
        assert short.exposed_comm_s > 0.5 * short.time_s  # weight traffic dominates short sequences
    ts = cm.sublayer("mlp", StrategyOption("megatron_ts"), 512)
    zero3 = cm.sublayer("mlp", StrategyOption("ulysses_z"), 512)
    assert ts.comm_bytes()["all_gather"] < zero3.comm_bytes()["all_gather"]


def test_megatron_ts_moves_three_gathers_and_two_scatters_of_the_activation():
    model = PRESETS["gpt2-medium"]  # 16 heads split over 8 ranks
    p, s = 8, 4096
    cm = AnalyticCostModel(model, A100)
    sent = cm.sublayer("attention", StrategyOption("megatron_ts"), s).comm_bytes()
    act = s * model.hidden * 2
    assert sent["all_gather"] == 3 * act * (p - 1) // p
    assert sent["reduce_scatter"] == 2 * act * (p - 1) // p


def test_recomputation_trades_time_for_kept_memory():
    cm = AnalyticCostModel(PRESETS["gpt"], A100)
    for name in USABLE:
        plain, rec = StrategyOption(name), StrategyOption(name, True)
        for kind in ("attention", "mlp"):
            a, b = cm.sublayer(kind, plain, 16384), cm.sublayer(kind, rec, 16384)
            assert b.kept_bytes == 16384 // 8 * PRESETS["gpt"].hidden * 2
            assert b.kept_bytes < a.kept_bytes and b.time_s > a.time_s
            assert b.transient_bytes >= a.transient_bytes


def test_single_gpu_has_no_communication():
    cm = AnalyticCostModel(PRESETS["gpt2"], A100, p=1)
    for o in options():
        for kind in ("attention", "mlp"):
            c = cm.sublayer(kind, o, 1024)
            assert sum(c.comm_bytes().values()) == 0 and c.exposed_comm_s == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("model_name", ["gpt2", "llama", "bert"])
def test_one_rank_prices_every_strategys_attention_as_the_one_kernel_it_runs(model_name):
    """At p = 1 the ring strategies run one block: the whole sequence under the model's own mask
    (runtime/attention/ring.py), so their attention costs what megatron_ts's single kernel costs."""
    from paradyse_lab.costmodel.schedules import schedule

    model = PRESETS[model_name]
    seq = 4096
    ts = schedule(model, "attention", StrategyOption("megatron_ts"), seq, 1, 1)
    for name in ("megatron_cz", "metp"):
        sch = schedule(model, "attention", StrategyOption(name), seq, 1, 1)
        assert sch.attention_kernel_causal == model.causal
        assert sch.attention_calls == ts.attention_calls
        # same GEMMs and traffic except METP's recomputed first GEMM: compare the attention part only
        attn = [flops / (A100.peak_flops * A100.attention_eff(keys, sch.attention_kernel_causal))
                for flops, keys in sch.attention_calls]
        ts_attn = [flops / (A100.peak_flops * A100.attention_eff(keys, ts.attention_kernel_causal))
                   for flops, keys in ts.attention_calls]
        assert attn == ts_attn
    ring = schedule(model, "attention", StrategyOption("megatron_cz"), seq, 1, 2)
    assert ring.attention_kernel_causal is False  # p > 1: zig-zag blocks charged as full blocks


def test_faster_gpu_is_faster_and_more_memory_fits_longer():
    for name in USABLE:
        a = costs("gpt", 65536)[name]
        h = costs("gpt", 65536, CLUSTERS["h100-80gb-x8"])[name]
        assert h.time_s_per_layer < a.time_s_per_layer
    assert not costs("gpt", 131072)["megatron_ts"].fits
    assert costs("gpt", 131072, CLUSTERS["h200-x8"])["megatron_ts"].fits


def test_embedding_and_head_only_where_the_model_has_them():
    assert AnalyticCostModel(PRESETS["gpt"], A100).fixed(4096).model_state_bytes == 0
    fixed = AnalyticCostModel(PRESETS["gpt2"], A100).fixed(4096)
    assert fixed.model_state_bytes == 16 * ((50257 + 1024) * 768 + 2 * 768)
    t, e = 4096 // 8, PRESETS["gpt2"].dtype_bytes  # the logits [t, V] in the model dtype, kept for the backward
    assert fixed.kept_bytes > t * 50257 * e and fixed.transient_bytes > t * 50257 * e and fixed.time_s > 0


def test_bad_shapes_name_the_constraint():
    cm = AnalyticCostModel(PRESETS["gpt2"], A100)
    with pytest.raises(UserInputError, match="heads \\(12\\) must be divisible by p \\(8\\)"):
        cm.sublayer("attention", StrategyOption("ulysses_z"), 4096)
    with pytest.raises(UserInputError, match="seq_len must be a positive integer"):
        cm.sublayer("attention", StrategyOption("megatron_cz"), -5)
    with pytest.raises(UserInputError, match="valid: attention, mlp"):
        cm.sublayer("embedding", StrategyOption("megatron_cz"), 4096)


def test_a_collective_priced_again_costs_what_the_formula_gives():
    """The model keeps each collective call's seconds (most recur at every length): every call of every option's
    schedule, asked once or again, two-dimensional (strided) groups and a two-node cluster included, costs
    `count` x `formulas.collective_call_s` to the bit."""
    from dataclasses import replace

    from paradyse_lab.core.strategies import TWO_D
    from paradyse_lab.costmodel import formulas as F
    from paradyse_lab.costmodel.schedules import schedule

    for cluster in (A100, CLUSTERS["a100-80gb-2x8"]):
        cm = AnalyticCostModel(replace(PRESETS["gpt"], layers=2), cluster)
        for option in [*options(), *options(TWO_D)]:
            for seq in (4096, 65536):
                if not cm.feasible(option, seq):
                    continue
                for kind in ("attention", "mlp"):
                    for call in schedule(cm.model, kind, option, seq, 1, cm.p).collectives:
                        per_node = max(1, cluster.node_gpus // call.stride) if call.stride > 1 else None
                        want = call.count * F.collective_call_s(cluster, call.op, call.buffer_bytes, call.ranks,
                                                                per_node)
                        assert cm.collective_s(call) == cm.collective_s(call) == want
