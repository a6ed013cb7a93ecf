"""Packed steps in the cost models: per-document attention, linear parts over the total, one pack of one
document with no padding equal to the unpacked step under every cost model kind (with padding: the padding is
its own attention segment), and every solver planning a packed step."""

import dataclasses

import numpy as np
import pytest

from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import USABLE, StrategyOption
from paradyse_lab.core.strategies import options as make_options
from paradyse_lab.costmodel import AnalyticCostModel
from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.factory import build_cost_model
from paradyse_lab.costmodel.lowering import problem_from_cost_model
from paradyse_lab.costmodel.packed import PackedCostModel, PackedStep, step_problem
from paradyse_lab.costmodel.schedules import schedule
from paradyse_lab.errors import UserInputError
from paradyse_lab.solvers.registry import get_solver

A100 = get_cluster("a100-80gb-x8")
ALL_OPTIONS = make_options(USABLE, recompute=True)


def _arrays(problem):
    return (problem.options, problem.time_s, problem.kept_bytes, problem.transient_bytes, problem.fixed_bytes,
            problem.fixed_transient_bytes, problem.fixed_time_s)


@pytest.mark.parametrize("kind", ["analytic", "calibrated", "paper", "hybrid", "forest", "polynomial", "residual"])
def test_a_pack_of_one_document_is_the_unpacked_step_exactly(kind):
    model = get_model("gpt")
    cm = build_cost_model(kind, model, A100)
    graph = LayerGraph(model)
    for seq_len in (4096, 24576):
        unpacked = problem_from_cost_model(graph, cm, seq_len, 1, None, ALL_OPTIONS)
        packed = step_problem(graph, cm, PackedStep((seq_len,), unit=16), 1, None, ALL_OPTIONS)
        for a, b in zip(_arrays(unpacked), _arrays(packed)):
            assert np.array_equal(a, b), kind
    # one document that is not a multiple of the unit: padded to 4096, the padding its own segment (it attends
    # only to itself, as the runtime's pack), so attention is 4089^2 + 7^2, not 4096^2: never dearer than the
    # unpacked 4096-token step, cheaper somewhere, the same memory (equal only with no padding)
    step = PackedStep((4089,), unit=16)
    assert step.segments == (4089, 7)
    padded = step_problem(graph, cm, step, 1, None, ALL_OPTIONS)
    unpacked = problem_from_cost_model(graph, cm, 4096, 1, None, ALL_OPTIONS)
    assert (padded.time_s <= unpacked.time_s).all() and (padded.time_s < unpacked.time_s).any(), kind
    assert np.array_equal(padded.kept_bytes, unpacked.kept_bytes) and padded.fixed_bytes == unpacked.fixed_bytes
    # several documents: cheaper attention, never dearer, under every kind
    pack = step_problem(graph, cm, PackedStep((8192, 8192, 4096, 4096), unit=16), 1, None, ALL_OPTIONS)
    whole = problem_from_cost_model(graph, cm, 24576, 1, None, ALL_OPTIONS)
    assert pack.options == whole.options and (pack.time_s < whole.time_s).all()
    assert np.array_equal(pack.kept_bytes, whole.kept_bytes)  # memory: linear in the tokens


def _busiest_over_mean(segments, p, causal) -> float:
    """Busiest rank's (query, key) pairs over the mean under the per-document zig-zag, token by token: a token
    at position pos of a segment of n sees pos + 1 keys (causal) or n; each document with its padding (a
    run of segments summing to a multiple of 2p) is cut into 2p chunks, rank r holds chunks r, 2p-1-r of each."""
    ranks, group = np.zeros(p), []
    for n in segments:
        group.append(n)
        if sum(group) % (2 * p):
            continue
        sizes, group = np.array(group), []
        starts = np.repeat(np.cumsum(sizes) - sizes, sizes)  # [m]: the start of each token's segment
        work = np.arange(sizes.sum()) - starts + 1 if causal else np.repeat(sizes, sizes)  # [m]
        chunks = work.reshape(2 * p, -1).sum(1)  # [m] -> [2p, m/2p] -> [2p]
        ranks += [chunks[r] + chunks[2 * p - 1 - r] for r in range(p)]
    return max(ranks) * p / sum(ranks)


def test_ring_strategies_are_charged_the_busiest_ranks_attention():
    """Under the per-document zig-zag (the runtime's layout) a pack of one long and several short documents is
    balanced but for the documents' padding (8 tokens after each of two documents at p = 8: 1.0001x the mean);
    megatron_cz and metp pay that, megatron_ts and ulysses_z (heads split over the whole pack) the even
    share; documents without padding are balanced exactly (1.0)."""
    from paradyse_lab.workload.zigzag_balance import rank_attention_pairs, zigzag_imbalance

    model, p = get_model("llama"), 8
    step = PackedStep((20000, 8000, 3000, 1000), unit=2 * p)
    assert step.segments == (20000, 8000, 3000, 8, 1000, 8)
    assert zigzag_imbalance(step.segments, p, True) == pytest.approx(_busiest_over_mean(step.segments, p, True))
    assert 1.0 < zigzag_imbalance(step.segments, p, True) < 1.0002
    assert zigzag_imbalance((20000, 8000, 32000), p, True) == 1.0 and zigzag_imbalance((32000,), p, False) == 1.0
    assert rank_attention_pairs((3, 5), 1, True) == [6 + 15] and rank_attention_pairs((3, 5), 1, False) == [34]
    for name in USABLE:
        even = sum(F.attention_core_flops_forward(model, n, 1) for n in step.segments) / p * (1 + F.FLASH_BWD_OVER_FWD)
        charged = schedule(model, "attention", StrategyOption(name), 32016, 1, p, step.segments).attention_flops
        ring = name in ("megatron_cz", "metp")
        assert charged == pytest.approx(even * (zigzag_imbalance(step.segments, p, True) if ring else 1.0)), name


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("option", ALL_OPTIONS, ids=lambda o: o.name)
def test_analytic_schedule_of_a_pack(option, causal):
    model = dataclasses.replace(get_model("llama"), causal=causal)
    p, docs = 8, (3000, 512, 17, 560)  # 4089 tokens, each document padded to a multiple of 16: 4112
    step = PackedStep(docs, unit=2 * p)
    assert (step.tokens, step.padded_len, step.padding) == (4089, 4112, 23)
    assert step.segments == (3000, 8, 512, 17, 15, 560)
    whole = schedule(model, "attention", option, 4112, 1, p)
    pack = schedule(model, "attention", option, 4112, 1, p, step.segments)
    passes = 1 + F.FLASH_BWD_OVER_FWD + option.recompute
    ring = option.strategy in ("megatron_cz", "metp")
    busiest = _busiest_over_mean(step.segments, p, causal) if ring else 1.0  # the padding's share: ring ranks wait
    expected = sum(F.attention_core_flops_forward(model, n, 1) for n in step.segments) / p * passes * busiest
    assert pack.attention_flops == pytest.approx(expected, rel=1e-12)
    assert pack.attention_flops == pytest.approx(
        whole.attention_flops * sum(n * n for n in step.segments) / 4112**2 * busiest)
    assert 1.0 < busiest < 1.01 if ring else busiest == 1.0
    # keys per kernel call: a ring block holds 2 of the 2p chunks of every document: n/p keys of it
    assert [keys for _, keys in pack.attention_calls] == [max(n // p, 1) if ring else n for n in step.segments]
    # every linear count is the total's: GEMMs, traffic, collectives, kept and transient bytes
    for name in ("gemm_flops", "elementwise_bytes", "collectives", "kept_bytes", "transient_bytes", "ring_steps"):
        assert getattr(pack, name) == getattr(whole, name), name
    mlp_whole = schedule(model, "mlp", option, 4112, 1, p)
    assert schedule(model, "mlp", option, 4112, 1, p, step.segments) == mlp_whole


def test_analytic_time_of_a_pack_charges_each_documents_kernel():
    model, cm = get_model("gpt"), AnalyticCostModel(get_model("gpt"), A100)
    option = StrategyOption("megatron_ts")
    one = cm.sublayer("attention", option, 32768)
    packed = cm.sublayer("attention", option, 32768, segments=(16384, 16384))
    # half the FLOPs, at least as slow per FLOP: shorter kernels run below the long kernel's efficiency
    assert packed.time_s < one.time_s
    attention_s = one.compute_s - cm.sublayer("attention", option, 32768, segments=(1,) * 32768).compute_s
    assert packed.compute_s > one.compute_s - attention_s / 2 * 1.0001
    assert packed.kept_bytes == one.kept_bytes and packed.transient_bytes == one.transient_bytes
    assert model.causal


def test_paper_fit_decomposes_into_fixed_linear_and_sum_of_squares():
    """c + b S + a sum n^2, the ring strategies' a sum n^2 times the busiest rank's share over the mean (the
    fits are non-causal), floored at the longest document alone (BERT's METP fit has b < 0)."""
    from paradyse_lab.costmodel.paper import PaperCostModel

    cm = PaperCostModel(get_model("bert"), A100)
    docs = (16384, 8192, 4096, 4096)
    busiest = _busiest_over_mean(docs, 8, causal=False)  # multiples of 16: every document cut evenly
    assert busiest == 1.0
    for strategy in USABLE:
        fit = cm.shape.fits[strategy]
        squares = sum(n * n for n in docs) * (busiest if strategy in ("megatron_cz", "metp") else 1.0)
        expected = (fit.a * squares + fit.b * 32768 + fit.c) / fit.divisor
        expected = max(expected, fit.per_layer_time_s(16384))  # binds only for metp: b < 0
        assert (expected > fit.per_layer_time_s(16384)) == (strategy != "metp")
        assert cm.layer_time_s(StrategyOption(strategy), 32768, docs) == pytest.approx(expected, rel=1e-12)
        layer = sum(PackedCostModel(cm, PackedStep(docs, 16)).sublayer(k, StrategyOption(strategy), 32768).time_s
                    for k in ("attention", "mlp"))
        assert layer == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("granularity", ["block", "sublayer"])
def test_every_solver_plans_a_packed_step(granularity):
    model = get_model("gpt")
    cm = AnalyticCostModel(model, A100)
    graph = LayerGraph(model, granularity)
    step = PackedStep((131072, 65536, 40000, 20000, 5000, 1), unit=16)  # 261,609 tokens, padding 8 + 15
    problem = step_problem(graph, cm, step, options=ALL_OPTIONS, budget_bytes=60 * 2**30)
    assert step.padding == 23 and not problem.dropped
    times = {}
    for name in ("dp", "ilp", "heuristic", "greedy"):
        sol = get_solver(name).solve(problem)
        assert sol.feasible and problem.is_feasible(list(sol.assignment)), name
        times[name] = problem.time_of(list(sol.assignment))
    assert times["ilp"] == pytest.approx(times["dp"], rel=1e-6)
    assert times["heuristic"] >= times["dp"] * (1 - 1e-9) and times["greedy"] >= times["dp"] * (1 - 1e-9)


def test_packed_steps_refuse_a_batch_and_a_mismatched_length():
    model = get_model("gpt")
    cm = AnalyticCostModel(model, A100)
    with pytest.raises(UserInputError, match="batch must be 1"):
        step_problem(LayerGraph(model), cm, PackedStep((4096,), 16), batch=2)
    with pytest.raises(ValueError, match="seq_len 4096 at batch 1"):
        PackedCostModel(cm, PackedStep((4096,), 16)).sublayer("mlp", StrategyOption("metp"), 8192)
    with pytest.raises(UserInputError, match="at least one document"):
        PackedStep(())


def test_paper_fit_of_many_short_documents_stays_positive():
    from paradyse_lab.costmodel.paper import PaperCostModel

    cm = PaperCostModel(get_model("bert"), A100)
    docs = (512,) * 256  # 131,072 tokens: c + b S alone is negative for METP's fit
    fit = cm.shape.fits["metp"]
    assert fit.c + fit.b * 131072 < 0
    assert cm.layer_time_s(StrategyOption("metp"), 131072, docs) == fit.per_layer_time_s(512)


def test_cost_and_plan_commands_take_a_packed_step(capsys):
    import json

    from paradyse_lab.cli import main

    assert main(["cost", "--model", "gpt", "--documents", "16K,8K,1000", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["documents"] == [16384, 8192, 1000] and data["padding"] == 8 and data["seq_len"] == 25584
    cm = AnalyticCostModel(get_model("gpt"), A100)
    packed = PackedCostModel(cm, PackedStep((16384, 8192, 1000), 16))
    for option, row in data["strategies"].items():
        layer = sum(packed.sublayer(k, StrategyOption.parse(option), 25584).time_s for k in ("attention", "mlp"))
        assert row["time_s_per_layer"] == pytest.approx(layer, rel=1e-12)
    assert main(["plan", "--model", "gpt", "--documents", "128K,64K,1", "--solver", "heuristic"]) == 0
    assert "one packed step of 3 documents, 196609 tokens padded to 196624" in capsys.readouterr().out
