"""The tiled MLP and activation offload as planner options (paradyse_lab/costmodel/techniques.py): their names,
what the cost model counts for them, the host link and host memory of the cluster file, and that the planner
takes them only where a plan needs them. Their runtime (exact against the reference at p = 1..4, bytes kept,
sent and moved to host memory against these counts): tests/runtime/runtime_cases.py `*tiled*`, `*offload*`."""

import json
from dataclasses import replace

import numpy as np
import pytest

from paradyse_lab.cli import main
from paradyse_lab.cluster.files import get_cluster, load_cluster_toml
from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.plan import short_text
from paradyse_lab.core.strategies import USABLE, StrategyOption, options
from paradyse_lab.costmodel import AnalyticCostModel
from paradyse_lab.costmodel.lowering import problem_from_cost_model
from paradyse_lab.costmodel.schedules import schedule
from paradyse_lab.costmodel.techniques import (
    forward_share,
    mlp_chunks,
    mlp_tile_positions,
    offload_exposed_s,
)
from paradyse_lab.errors import UserInputError

LLAMA = get_model("llama3-8b")
H100 = get_cluster("h100-80gb-x8")


def test_option_names_round_trip_and_flags_keep_their_order():
    every = options(recompute=True, tiled=True, offload=True)
    assert len(every) == len(set(every)) == 8 * len(USABLE)
    assert all(StrategyOption.parse(o.name) == o for o in every)
    assert StrategyOption.parse("metp+recompute+tiled+offload") == StrategyOption("metp", True, True, True)
    with pytest.raises(UserInputError, match=r"NAME\[\+recompute\]\[\+tiled\]\[\+headchunk\]\[\+offload\]"):
        StrategyOption.parse("metp+tiled+recompute")
    assert options() == tuple(StrategyOption(s) for s in USABLE)  # no flag: the plain strategies, as before
    assert short_text(["metp+recompute", "ulysses_z+tiled+offload"]) == "ME+r,UZ+t+o"


def test_a_flag_that_changes_nothing_is_not_a_decision_of_its_own():
    tiled, both = StrategyOption("metp", tiled=True), StrategyOption("metp", recompute=True, tiled=True)
    assert tiled.runs(("mlp",)) and not tiled.runs(("attention",)) and tiled.runs(("attention", "mlp"))
    assert not both.runs(("mlp",)) and both.runs(("attention", "mlp"))  # on an MLP alone: `+tiled` itself


def test_alst_chunk_rule():
    assert mlp_tile_positions(4096, 512 * 1024) == 4096  # ceil(n / hidden) chunks of about hidden positions
    assert mlp_tile_positions(96, 48) == 48 and mlp_tile_positions(32, 100) == 25
    assert mlp_chunks(12, 5) == (5, 5, 2) and mlp_chunks(10, 5) == (5, 5)


@pytest.mark.parametrize("strategy", USABLE)
def test_the_tiled_mlp_keeps_its_input_and_sends_what_the_untiled_one_sends(strategy):
    seq, p = 256 * 1024, 8
    plain, rec, tiled = (schedule(LLAMA, "mlp", StrategyOption(strategy, r, t), seq, 1, p)
                         for r, t in ((False, False), (True, False), (False, True)))
    t_h_bytes = seq // p * LLAMA.hidden * LLAMA.dtype_bytes
    assert tiled.kept_bytes == rec.kept_bytes == t_h_bytes
    assert tiled.transient_bytes < plain.transient_bytes < rec.transient_bytes
    sent = {k: sum(c.sent_bytes for c in x.collectives) for k, x in (("plain", plain), ("tiled", tiled))}
    assert sent["tiled"] == sent["plain"]  # no weight gathered twice, no forward communication repeated
    first_gemm = 2.0 * seq * LLAMA.hidden * 2 * LLAMA.ffn_hidden / p  # SwiGLU: gate and up
    assert tiled.gemm_flops == pytest.approx(plain.gemm_flops + (0 if strategy == "metp" else first_gemm))
    if strategy == "megatron_ts":  # each chunk gathers and scatters on its own: 8 chunks of 4096 positions
        assert {c.count for c in tiled.collectives if c.op == "reduce_scatter"} == {8}
    attention = schedule(LLAMA, "attention", StrategyOption(strategy, tiled=True), seq, 1, p)
    assert attention == schedule(LLAMA, "attention", StrategyOption(strategy), seq, 1, p)


def test_offload_moves_the_kept_set_to_host_and_prices_the_copies_it_cannot_hide():
    cm = AnalyticCostModel(LLAMA, H100)
    seq = 128 * 1024
    for option in (StrategyOption("ulysses_z"), StrategyOption("metp", recompute=True)):
        for kind in ("attention", "mlp"):
            base = cm.sublayer(kind, option, seq)
            moved = cm.sublayer(kind, replace(option, offload=True), seq)
            assert (moved.kept_bytes, moved.host_bytes) == (0, base.kept_bytes)
            assert moved.transient_bytes == base.transient_bytes + 2 * base.kept_bytes
            copy_s = base.kept_bytes / H100.host_link_bytes_per_s
            prefetched = option.recompute  # the input alone: prefetched; a whole kept set: not (techniques.py)
            assert schedule(LLAMA, kind, replace(option, offload=True), seq, 1, 8).host_prefetched == prefetched
            assert moved.time_s == pytest.approx(
                base.time_s + offload_exposed_s(base.time_s, copy_s, forward_share(option.recompute), prefetched))


def test_overlap_accounting():
    assert offload_exposed_s(4.0, 1.0, 0.25) == 0.0  # each copy shorter than its phase (1 s forward, 3 s back)
    assert offload_exposed_s(4.0, 2.0, 0.25) == 1.0  # the copy out outlasts the 1 s forward by 1 s
    assert offload_exposed_s(4.0, 5.0, 0.25) == 4.0 + 2.0  # both exposed: max(phase, copy) each way
    assert offload_exposed_s(4.0, 1.0, 0.25, prefetched=False) == 1.0  # out hidden, back waited for
    assert forward_share(False) == 1 / 3 and forward_share(True) == 1 / 4


def test_the_measured_h100_offload_plan_prices_its_copies_back_that_no_prefetch_hides():
    """measurements/h100-2026-11-25: a 64K-token Llama-3.2-1B-shaped plan on one H100 (attention megatron_ts
    keeping its whole set, 1,160 MiB, offloaded; 13 of the MLPs METP, 512 MiB, offloaded) ran 5.29 s per step,
    predicted 3.95 s with every copy hidden. The runtime prefetches a set only when the next sub-layer's is no
    smaller, so neither whole set is sure to come back early: each copy back at a pinned copy's 52.8 GB/s is
    priced exposed (16 x 23.0 ms + 13 x 10.2 ms), the copies out stay hidden behind the forward."""
    from pathlib import Path

    from paradyse_lab.cluster.files import cluster_with_gpus
    from paradyse_lab.costmodel.head_loss import head_cost_models

    root = Path(__file__).resolve().parents[3]
    model = get_model(str(root / "measurements/h100-2026-11-25/llama1b"))
    cm = head_cost_models(AnalyticCostModel(model, cluster_with_gpus(H100, 1), 1))["tiled"]
    ts, me = StrategyOption("megatron_ts"), StrategyOption("metp")
    plan = [ts, ts] * 3 + [ts, me] * 13  # as the train log ran it: TS+o,TS,... ME+o (29 offloaded)
    offloaded = {i for i in range(32) if not (i % 2 == 1 and i < 6)}
    seq = 64 * 1024

    def step_s(offload: bool) -> float:
        cost = cm.fixed(seq)
        return cost.time_s + cost.optimizer_s + sum(
            cm.sublayer(("attention", "mlp")[i % 2], replace(o, offload=offload and i in offloaded), seq).time_s
            for i, o in enumerate(plan))

    copies_back = sum(schedule(model, ("attention", "mlp")[i % 2], plan[i], seq, 1, 1).kept_bytes
                      for i in offloaded) / H100.host_link_bytes_per_s
    assert H100.host_link_bytes_per_s == 52.8e9
    assert step_s(False) == pytest.approx(3.948, abs=0.01)  # what the plan was predicted at
    assert step_s(True) == pytest.approx(step_s(False) + copies_back)
    assert step_s(True) == pytest.approx(4.449, abs=0.01)  # measured 5.29 s: the rest is compute (docs)


def test_cluster_host_link_and_memory(tmp_path):
    assert H100.host_link_bytes_per_s == 52.8e9 and H100.host_memory_bytes == 2 * 2**40  # pinned copies' rate
    assert get_cluster("a100-40gb-x8").host_link_bytes_per_s == 25.1e9
    assert get_cluster("a100-40gb-x8").host_memory_bytes == 2**40
    assert H100.host_budget_bytes == 2**41 // 8
    f = tmp_path / "mine.toml"
    f.write_text('base = "h100-80gb-x8"\nhost_link_gbps = 50\nhost_memory_gib = 1024\n')
    mine = load_cluster_toml(f)
    assert mine.host_link_bytes_per_s == 50e9 and mine.host_memory_bytes == 2**40
    f.write_text('base = "h100-80gb-x8"\nhost_link_gbps = -1\n')
    with pytest.raises(UserInputError, match="host_link_gbps must be a finite number >= 0"):
        load_cluster_toml(f)


def _problem(seq, cluster=H100, granularity="block", **flags):
    return problem_from_cost_model(LayerGraph(LLAMA, granularity), AnalyticCostModel(LLAMA, cluster), seq,
                                   options=options(("ulysses_z", "metp"), **flags))


def test_a_cluster_without_a_host_link_offers_no_offload():
    problem = _problem(64 * 1024, replace(H100, host_link_bytes_per_s=0.0), recompute=True, offload=True)
    assert not any(o.endswith("+offload") for o in problem.options)
    assert "host_link_gbps" in problem.dropped["metp+offload"]


@pytest.mark.parametrize("host_gib", [64, 2048])
def test_every_plan_offered_fits_the_host_memory(host_gib):
    """8 GiB per GPU: only the first layers offload their inputs; 256 GiB: every layer may, and while the share
    holds it a whole kept set too (`lowering.host_limited`)."""
    cluster = replace(H100, host_memory_bytes=host_gib * 2**30)
    problem = _problem(512 * 1024, cluster, recompute=True, offload=True)
    offered = np.where(problem.kept_bytes <= problem.budget_bytes, problem.host_bytes, 0)
    assert offered.max(axis=1).sum() <= cluster.host_budget_bytes  # whatever a plan picks fits
    assert (offered < problem.host_bytes).any()  # and something was left out for it
    recomputed = [problem.options.index(f"{s}+recompute+offload") for s in ("ulysses_z", "metp")]
    layers_offloading = int((offered[:, recomputed] > 0).any(axis=1).sum())
    # 8 GiB: 16 checkpointed layers' 512 MiB inputs (a recomputed, offloaded block moves its input alone)
    assert layers_offloading == (problem.num_decisions if host_gib == 2048 else 16)


def test_short_sequences_get_no_tiling_or_offload():
    """The planner takes the cheapest plan that fits: where the fastest plan fits without the techniques, it is
    the plan with them offered too; where memory binds, a technique may beat the slower strategy that would make
    the plan fit (64K: one layer tiles and offloads instead of running METP), never slower than without; past
    the length that fits without them, they make it fit."""
    from paradyse_lab.solvers import get_solver

    dp = get_solver("dp")
    for seq in (8 * 1024, 16 * 1024, 64 * 1024):
        plain = dp.solve(_problem(seq, recompute=True))
        every = dp.solve(_problem(seq, recompute=True, tiled=True, offload=True))
        assert every.feasible and every.predicted_time_s <= plain.predicted_time_s
        if seq < 64 * 1024:
            assert every.assignment == plain.assignment and every.predicted_time_s == plain.predicted_time_s
            assert not any("+tiled" in n or "+offload" in n for n in every.assignment)
    seq = 128 * 1024
    while dp.solve(_problem(seq, recompute=True)).feasible:  # the first doubling that does not fit without them
        seq *= 2
    long = dp.solve(_problem(seq, recompute=True, tiled=True, offload=True))
    assert long.feasible and any("+tiled" in n or "+offload" in n for n in long.assignment)


def test_cost_shows_the_options_and_plan_max_length_takes_them(capsys):
    common = ["--model", "llama3-8b", "--cluster", "h100-80gb-x8", "--strategies", "ulysses_z,metp", "--format",
              "json", "--cost-model", "analytic"]
    assert main(["cost", *common, "--seq", "256K", "--recompute", "--tiled-mlp", "--offload"]) == 0
    rows = json.loads(capsys.readouterr().out)["strategies"]
    assert {"metp+tiled", "ulysses_z+recompute+tiled+offload"} <= set(rows)
    assert rows["metp+offload"]["host_bytes_per_layer"] == rows["metp"]["kept_bytes_per_layer"] > 0
    assert rows["metp+offload"]["kept_bytes_per_layer"] == 0
    found = {}
    for flags in ((), ("--tiled-mlp", "--offload")):
        assert main(["plan", *common, "--recompute", "--max-length", "--head", "tiled", *flags]) == 0
        found[flags] = json.loads(capsys.readouterr().out)
    before, after = found[()], found[("--tiled-mlp", "--offload")]
    assert after["max_length"] > 2 * before["max_length"] and after["offload"] and after["tiled_mlp"]
    assert 0 < after["memory"]["host_offloaded"] <= H100.host_budget_bytes
    assert "host_offloaded" not in before["memory"]
    assert np.all([n.split("+")[0] in ("ulysses_z", "metp") for n in after["plan"]])


def test_dynamic_policies_offer_them_in_simulate_and_train():
    """`dynamic:SOLVER+tiled+offload` (simulate, train, validate-run: simulator/planner.py) plans with the options
    and charges their plans: a short step gets neither, a step that fits only with them gets them."""
    from paradyse_lab.simulator.planner import build_planner
    from paradyse_lab.simulator.policy_spec import PolicySpec

    spec = PolicySpec.parse("dynamic:dp+offload+tiled", recompute=True)
    assert (spec.tiled, spec.offload, spec.name) == (True, True, "dynamic:dp+recompute+tiled+offload")
    with pytest.raises(UserInputError, match=r"\[\+tiled\]\[\+offload\]"):
        PolicySpec.parse("dynamic:dp+tiles")
    planner = build_planner(spec.name, LLAMA, H100)
    charger = planner.charger()
    short, long = planner.policy.decide(16 * 1024, 1), planner.policy.decide(1024 * 1024, 1)
    assert short.feasible and not any(o.tiled or o.offload for o in short.plan.options)
    assert long.feasible and any(o.tiled for o in long.plan.options) and any(o.offload for o in long.plan.options)
    time_s, peak = charger.charge(long.plan.names, 1024 * 1024, 1, long.head)
    assert time_s == pytest.approx(long.predicted_time_s) and peak <= planner.budget_bytes


@pytest.mark.parametrize("kind", ["paper", "polynomial"])
def test_models_fitted_on_measurements_price_or_refuse_the_options(kind):
    """The paper model charges its fit times the analytic model's ratio to the plain option (as for recompute);
    a learned model, whose profile has no rows of them, refuses them with one line (a plan then leaves them out).
    The refusal is the learned model's own check, the same for every learned kind: the polynomial stands for them
    (the quickest to fit on the bundled profile, about half the forest's CPU)."""
    from paradyse_lab.costmodel.factory import build_cost_model

    gpt, a100 = get_model("gpt"), get_cluster("a100-80gb-x8")
    cm, analytic = build_cost_model(kind, gpt, a100), AnalyticCostModel(gpt, a100)
    option, plain = StrategyOption("metp", recompute=True, tiled=True, offload=True), StrategyOption("metp")
    if kind == "paper":  # its time ratios come from the analytic model with the measured non-causal mask
        timing = AnalyticCostModel(replace(gpt, causal=False), a100)
        ratio = (sum(timing.sublayer(k, option, 65536).time_s for k in ("attention", "mlp"))
                 / sum(timing.sublayer(k, plain, 65536).time_s for k in ("attention", "mlp")))
        assert cm.layer_time_s(option, 65536) == pytest.approx(cm.layer_time_s(plain, 65536) * ratio)
        assert cm.sublayer("mlp", option, 65536).host_bytes == analytic.sublayer("mlp", option, 65536).host_bytes
    else:
        with pytest.raises(UserInputError, match="no rows of the tiled MLP or offload"):
            cm.sublayer("mlp", option, 65536)
        problem = problem_from_cost_model(LayerGraph(gpt), cm, 65536, options=[plain, option])
        assert problem.options == ("metp",) and "no rows" in problem.dropped[option.name]


def test_profile_refuses_options_its_rows_cannot_record(tmp_path, capsys):
    out = tmp_path / "p.csv"
    assert main(["costmodel", "profile", "--model", "gpt2-tiny", "--seqs", "64", "--strategies", "metp+tiled", "--mode",
                 "rank-local", "--p", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "+tiled and +offload are not profile columns" in err and not out.exists()
